"""Scenario files: regex groups, parallel and chained calls, templates, and bad files."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import bridge.emulator
from bridge.emulator import Emulator, ScenarioError, load_scenario
from bridge.emulator.templates import TemplateError, TemplateSyntaxError, render, render_value
from tests.emulator.helpers import CLOTHES, TIME, WEATHER, Api, body_events, interrupt_calls

SHIPPED = Path(bridge.emulator.__file__).parent / "scenarios" / "weather.yaml"


@pytest.fixture(scope="module")
def weather_emu() -> Iterator[Emulator]:
    """An emulator running the shipped example scenario."""
    with Emulator(scenario=SHIPPED, faults="") as emulator:
        yield emulator


@pytest.fixture
def wapi(weather_emu: Emulator) -> Api:
    return Api(weather_emu.base_url)


def _answer(chunks: list[dict[str, Any]]) -> str:
    return "".join(c["answer"] for c in chunks)


def test_the_shipped_scenario_is_package_data() -> None:
    scenario = load_scenario(SHIPPED)
    assert [r.name for r in scenario.rules] == [
        "compare-two-cities",
        "what-to-wear",
        "weather-zh",
        "slow-hello",
    ]


def test_parallel_calls_arrive_in_one_interrupt(wapi: Api, weather_emu: Emulator) -> None:
    conversation_id = wapi.create()
    chunks = wapi.chunks(conversation_id, "Compare Paris and London", stream=True, tools=[WEATHER])
    first, second = interrupt_calls(chunks)
    assert first["function"] == {
        "name": "get_weather",
        "arguments": {"city": "Paris", "unit": "celsius"},
    }
    assert second["function"]["arguments"] == {"city": "London", "unit": "celsius"}
    interrupt = body_events(chunks)[-1]
    assert interrupt["outputs"]["text"]["function_call"]["thought"].startswith("Two cities")
    assert set(weather_emu.conversation(conversation_id).pending_call_ids) == {
        first["id"],
        second["id"],
    }
    answer = wapi.submit(
        conversation_id,
        {
            first["id"]: json.dumps({"temp": 18, "condition": "sunny"}),
            second["id"]: json.dumps({"temp": 12, "condition": "rain"}),
        },
        stream=True,
    )
    assert _answer(answer) == "Paris: 18°C, sunny. London: 12°C, rain."


def test_chained_calls_use_earlier_outputs_with_schema_types(wapi: Api) -> None:
    conversation_id = wapi.create()
    tools = [WEATHER, CLOTHES]
    chunks = wapi.chunks(conversation_id, "What should I wear in Oslo?", stream=False, tools=tools)
    (weather,) = interrupt_calls(chunks)
    assert weather["function"]["arguments"] == {"city": "Oslo", "unit": "celsius"}
    chunks = wapi.submit(conversation_id, {weather["id"]: '{"temp": "5", "condition": "snow"}'})
    (clothes,) = interrupt_calls(chunks)
    # "5" in the output becomes 5: suggest_clothes.temperature is an integer.
    assert clothes["function"] == {"name": "suggest_clothes", "arguments": {"temperature": 5}}
    used = body_events(chunks)[-1]["outputs"]["text"]["used_tool"]
    assert used == [
        {
            "tool_call_id": weather["id"],
            "name": "get_weather",
            "arguments": {"city": "Oslo", "unit": "celsius"},
            "function_resp": '{"temp": "5", "condition": "snow"}',
        }
    ]
    (body,) = wapi.submit(conversation_id, {clothes["id"]: "a warm coat"})
    assert body["answer"] == "It is 5°C in Oslo: a warm coat"


def test_chinese_rule_and_template(wapi: Api) -> None:
    conversation_id = wapi.create()
    chunks = wapi.chunks(conversation_id, "北京今天天气怎么样？", stream=True, tools=[WEATHER])
    (call,) = interrupt_calls(chunks)
    assert call["function"]["arguments"] == {"city": "北京", "unit": "celsius"}
    answer = wapi.submit(
        conversation_id, {call["id"]: '{"temp": 12, "condition": "晴"}'}, stream=True
    )
    assert _answer(answer) == "北京今天晴，12°C。"
    assert max(len(c["answer"]) for c in answer) <= 8  # settings.chunk_chars
    usage = body_events(answer)[1]["usage"]
    assert usage["name"] == "ERNIE-4.0-8K"


def test_rule_without_steps_answers_directly(wapi: Api) -> None:
    conversation_id = wapi.create()
    chunks = wapi.chunks(conversation_id, "hello there", stream=True)
    assert _answer(chunks).startswith("Hello! Ask me about the weather")


def test_rule_is_skipped_when_its_tools_were_not_sent(wapi: Api) -> None:
    conversation_id = wapi.create()
    # Matches compare-two-cities, but get_weather was not sent: the default planner takes over.
    chunks = wapi.chunks(conversation_id, "time in Paris and London", stream=False, tools=[TIME])
    calls = [(c["function"]["name"], c["function"]["arguments"]) for c in interrupt_calls(chunks)]
    assert calls == [("get_time", {"timezone": "Paris"}), ("get_time", {"timezone": "London"})]


def _run_once(scenario: dict[str, Any], query: str, tools: list[dict[str, Any]]) -> list[Any]:
    with Emulator(scenario=scenario, faults="") as emu:
        api = Api(emu.base_url)
        return api.chunks(api.create(), query, stream=False, tools=tools)


def test_fallback_plain_and_plain_answer_template() -> None:
    scenario = {
        "settings": {
            "fallback": "plain",
            "plain_answer": "I only talk about weather, not {query}.",
        },
        "rules": [{"match": "weather", "answer": "sunny"}],
    }
    (body,) = _run_once(scenario, "time in Tokyo", [TIME])
    assert body["answer"] == "I only talk about weather, not time in Tokyo."


def test_optional_groups_render_empty_and_literals_pass_through() -> None:
    scenario = {
        "rules": [
            {
                "match": r"weather(?: in (?P<city>\w+))?",
                "steps": [
                    {
                        "tool": "get_weather",
                        "arguments": {"city": "{city}", "unit": "celsius", "days": 3, "x": None},
                    }
                ],
            }
        ]
    }
    (body,) = _run_once(scenario, "weather please", [WEATHER])
    (call,) = body["content"][-1]["tool_calls"]
    assert call["function"]["arguments"] == {"city": "", "unit": "celsius", "days": 3, "x": None}


def test_a_template_that_fails_at_run_time_ends_the_run_with_an_error_event() -> None:
    scenario = {
        "rules": [
            {
                "name": "needs-json",
                "match": "weather",
                "steps": [{"tool": "get_weather", "arguments": {"city": "Paris"}}],
                "answer": "{outputs.get_weather.temp}",
            }
        ]
    }
    with Emulator(scenario=scenario, faults="") as emu:
        api = Api(emu.base_url)
        conversation_id = api.create()
        (call,) = interrupt_calls(
            api.chunks(conversation_id, "weather", stream=False, tools=[WEATHER])
        )
        chunks = api.submit(conversation_id, {call["id"]: "not json at all"}, stream=True)
        error = body_events(chunks)[-1]
        assert error["event_status"] == "error" and error["event_code"] != 0
        assert "scenario rule 0 (needs-json): answer" in error["event_message"]
        assert "the output of 'get_weather' is not JSON" in error["event_message"]
        assert chunks[-1]["content"] == [] and chunks[-1]["is_completion"] is True
        snapshot = emu.conversation(conversation_id)
        assert snapshot.pending_call_ids == () and snapshot.messages[-1].status == "error"


def test_scenario_from_a_json_file(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"rules": [{"match": "ping", "answer": "pong"}]}), "utf-8")
    (body,) = _run_once(load_scenario(path).model_dump(), "ping", [])
    assert body["answer"] == "pong"


# --- bad scenario files ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        ("s.yaml", "", "the scenario file is empty"),
        ("s.yaml", "- match: x\n", "the top level is a list; expected a mapping with 'rules'"),
        ("s.yaml", "rules: [\n  {match: x\n", "line 3, column 1: not valid YAML"),
        ("s.json", '{"rules": [}', "line 1, column 12: not valid JSON"),
        ("s.yaml", "rules:\n  - answer: hi\n", "rules[0].match: required field is missing"),
        ("s.yaml", "rules:\n  - match: x\n    anwser: hi\n", "rules[0].anwser: unknown field"),
        ("s.yaml", "settings: {chunk_chars: 0}\n", "settings.chunk_chars: Input should be greater"),
        ("s.yaml", "settings: {fallback: maybe}\n", "settings.fallback: Input should be 'default'"),
        ("s.yaml", "rules:\n  - match: '(unclosed'\n", "rules[0].match: not a valid regular"),
        (
            "s.yaml",
            "rules:\n  - match: 'w'\n    steps:\n      - {tool: 'bad name'}\n",
            "rules[0].steps[0].calls[0].tool: String should match pattern",
        ),
        (
            "s.yaml",
            "rules:\n  - match: '(?P<city>x)'\n    steps:\n"
            "      - {tool: f, arguments: {a: '{town}'}}\n",
            "rules[0].steps[0].calls[0].arguments.a: unknown placeholder {town}; "
            "known names: city, query",
        ),
        (
            "s.yaml",
            "rules:\n  - match: x\n    steps:\n      - {tool: f, arguments: {a: '{outputs.f}'}}\n",
            "arguments.a: {outputs.f} uses the output 'f', which no earlier step produces",
        ),
        (
            "s.yaml",
            "rules:\n  - match: x\n    steps:\n      - calls: [{tool: f}, {tool: f}]\n",
            "rules[0].steps[0].calls[1]: two calls of one step are both named 'f'",
        ),
        (
            "s.yaml",
            "rules:\n  - match: x\n    answer: 'broken {'\n",
            "rules[0].answer: template 'broken {': '{' at position 7 is never closed",
        ),
        (
            "s.yaml",
            "rules:\n  - match: x\n    answer: '{query.len}'\n",
            "rules[0].answer: {query.len}: only outputs.NAME can be followed by a path",
        ),
        (
            "s.yaml",
            "rules:\n  - match: x\n    faults: 'explode=1'\n",
            "rules[0].faults: fault spec 'explode=1': unknown key 'explode'",
        ),
        (
            "s.yaml",
            "settings: {plain_answer: 'about {topic}'}\n",
            "settings.plain_answer: unknown placeholder {topic}",
        ),
    ],
)
def test_bad_scenario_files_name_the_file_and_the_key(
    tmp_path: Path, name: str, text: str, expected: str
) -> None:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    message = str(info.value)
    assert message.startswith(f"{path}: ")
    assert expected in message
    with pytest.raises(ScenarioError):
        Emulator(scenario=path, faults="")


def test_a_missing_scenario_file(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match="scenario file not found"):
        load_scenario(tmp_path / "nope.yaml")


def test_a_scenario_mapping_is_checked_too() -> None:
    with pytest.raises(ScenarioError, match=r"<scenario>: rules\[0\].match: required"):
        load_scenario({"rules": [{}]})


# --- templates --------------------------------------------------------------------------------


def test_template_rendering() -> None:
    values = {"city": "Oslo", "query": "q"}
    outputs = {"w": '{"temp": 5, "days": [{"hi": 7}], "ok": true}', "t": "12:00"}
    assert render_value("{outputs.w.temp}", values, outputs) == 5  # a lone placeholder keeps type
    assert render_value("{outputs.w.days[0]}", values, outputs) == {"hi": 7}
    assert render("{city}: {outputs.w.days[-1].hi}", values, outputs) == "Oslo: 7"
    assert (
        render("{outputs.w.ok} {{literal}} {outputs.t}", values, outputs) == "true {literal} 12:00"
    )
    assert render("{outputs.w.days}", values, outputs) == '[{"hi": 7}]'


@pytest.mark.parametrize(
    ("template", "error", "expected"),
    [
        ("{outputs.x}", TemplateError, "no output named 'x' (outputs: t, w)"),
        ("{outputs.t.key}", TemplateError, "the output of 't' is not JSON"),
        ("{outputs.w.nope}", TemplateError, "key 'nope' not found in dict"),
        ("{outputs.w.days[3]}", TemplateError, "[3] is not an index"),
        ("a } b", TemplateSyntaxError, "closes nothing"),
        ("{9lives}", TemplateSyntaxError, "is not a placeholder"),
        ("{outputs}", TemplateSyntaxError, "needs a tool name or alias"),
        ("{outputs.w.a..b}", TemplateSyntaxError, "cannot read the path"),
    ],
)
def test_template_errors(template: str, error: type[Exception], expected: str) -> None:
    outputs = {"w": '{"temp": 5, "days": []}', "t": "12:00"}
    with pytest.raises(error) as info:
        render(template, {}, outputs)
    assert expected in str(info.value)
