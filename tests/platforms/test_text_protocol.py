"""The text tool protocol end to end: `Bridge` -> OpenAIChatPlatform(tool_protocol="text") ->
a loopback OpenAI-compatible server whose replies are text, and fakellm scripted the same way.

What the server received is asserted: the tools in the system prompt, no `tools` field, the
results as one user message.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from openai_fakes import FAST_RETRIES, FakeLLM, Reply, ScriptedServer, completion, text_stream

from bridge import Bridge
from bridge.errors import RunFailedError, UsageError
from bridge.platforms import create_platform
from bridge.platforms.openai_chat import OpenAIChatPlatform
from bridge.platforms.openai_chat.text_tools import RESULTS_HEADER, tools_prompt
from bridge.types import (
    Event,
    RunFailed,
    RunFinished,
    TextDelta,
    ToolBatch,
    ToolCallsRequested,
    ToolResult,
)

WEATHER_CALLS = {
    "fenced json": '```json\n{"tool": "get_weather", "arguments": {"city": "Paris"}}\n```',
    "bare json": '{"tool": "get_weather", "arguments": {"city": "Paris"}}',
    "name/parameters": '{"name": "get_weather", "parameters": {"city": "Paris"}}',
    "langroid request": '{"request": "get_weather", "city": "Paris"}',
    "hermes tag": (
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    ),
    "code call": 'get_weather(city="Paris")',
    "react": 'Thought: I need the weather.\nAction: get_weather\nAction Input: {"city": "Paris"}',
    "repaired json": "{'tool': 'get_weather', 'arguments': {'city': 'Paris',}",
}


def get_weather(city: str) -> str:
    """Current weather of a city.

    Args:
        city: The city's name.
    """
    return f"{city}: sunny, 21 °C"


def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@pytest.fixture
def text_platform(server: ScriptedServer) -> Iterator[OpenAIChatPlatform]:
    with OpenAIChatPlatform(
        server.base_url, "m", retry_policy=FAST_RETRIES, tool_protocol="text"
    ) as p:
        yield p


def reply(text: str, stream: bool = False) -> Reply:
    return Reply(stream=text_stream(text)) if stream else Reply(json=completion(text))


def assert_text_mode(body: dict[str, Any]) -> None:
    assert "tools" not in body and "tool_choice" not in body
    system = body["messages"][0]
    assert system["role"] == "system"
    assert "## get_weather" in system["content"]
    assert "Current weather of a city." in system["content"]
    assert '"city": {' in system["content"]  # the parameters' JSON Schema
    assert '{"tool": "<tool name>", "arguments": ' in system["content"]


@pytest.mark.parametrize("form", list(WEATHER_CALLS), ids=list(WEATHER_CALLS))
@pytest.mark.parametrize("stream", [False, True], ids=["body", "stream"])
def test_each_call_format_runs_the_tool(
    server: ScriptedServer, text_platform: OpenAIChatPlatform, form: str, stream: bool
) -> None:
    server.script(reply(WEATHER_CALLS[form], stream), reply("It is sunny in Paris, 21 °C.", stream))

    result = Bridge(text_platform, tools=[get_weather], stream=stream).ask("Weather in Paris?")

    assert result.answer.endswith("It is sunny in Paris, 21 °C.")
    assert [(run.name, run.arguments, run.output) for run in result.tool_runs] == [
        ("get_weather", {"city": "Paris"}, "Paris: sunny, 21 °C")
    ]
    first, second = server.bodies
    assert_text_mode(first)
    assert_text_mode(second)
    assert first["messages"][-1] == {"role": "user", "content": "Weather in Paris?"}
    # The model's own words go back as it wrote them, the results as one user message.
    assert second["messages"][-2] == {"role": "assistant", "content": WEATHER_CALLS[form]}
    results = second["messages"][-1]
    call_id = result.tool_runs[0].call_id
    assert results["role"] == "user"
    assert results["content"].startswith(
        f'{RESULTS_HEADER}\n\n[{call_id}] get_weather {{"city": "Paris"}} returned:\n'
        "Paris: sunny, 21 °C\n\n"
    )


def test_several_calls_in_one_reply_are_one_batch(
    server: ScriptedServer, text_platform: OpenAIChatPlatform
) -> None:
    server.script(
        reply(
            "Let me check both.\n"
            '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>\n'
            '<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>\n'
            '```json\n{"tool": "add", "arguments": {"a": 2, "b": 3}}\n```'
        ),
        reply("Paris and Oslo are sunny; 2 + 3 = 5."),
    )
    batches: list[ToolBatch] = []

    def on_event(event: Event) -> None:
        if isinstance(event, ToolCallsRequested):
            batches.append(event.batch)

    result = Bridge(text_platform, tools=[get_weather, add], on_event=on_event).ask("Go")

    assert len(batches) == 1 and len(batches[0].calls) == 3
    assert len({call.call_id for call in batches[0].calls}) == 3
    assert result.rounds == 1
    assert [run.output for run in result.tool_runs] == [
        "Paris: sunny, 21 °C",
        "Oslo: sunny, 21 °C",
        "5",
    ]
    # The text around the calls is part of the answer, as native text before calls is.
    assert result.answer == "Let me check both.Paris and Oslo are sunny; 2 + 3 = 5."
    content = server.bodies[1]["messages"][-1]["content"]
    ids = [call.call_id for call in batches[0].calls]
    assert content.index(ids[0]) < content.index(ids[1]) < content.index(ids[2])
    assert f"[{ids[2]}] add " in content and "returned:\n5" in content


def test_a_reply_without_a_call_is_the_answer(
    server: ScriptedServer, text_platform: OpenAIChatPlatform
) -> None:
    answer = 'Paris is the capital. As JSON: {"name": "Paris", "country": "France"}'
    server.script(reply(answer))

    result = Bridge(text_platform, tools=[get_weather]).ask("Capital of France?")

    assert result.answer == answer
    assert result.tool_runs == [] and len(server.bodies) == 1


def test_a_malformed_call_gets_one_correction_then_runs(
    server: ScriptedServer, text_platform: OpenAIChatPlatform
) -> None:
    bad = '{"tool": "get_wether", "arguments": {"city": "Paris"}}'
    good = '{"tool": "get_weather", "arguments": {"city": "Paris"}}'
    server.script(reply(bad), reply(good), reply("Sunny."))

    result = Bridge(text_platform, tools=[get_weather]).ask("Weather in Paris?")

    assert result.answer == "Sunny."
    assert [run.output for run in result.tool_runs] == ["Paris: sunny, 21 °C"]
    assert len(server.bodies) == 3
    correction = server.bodies[1]["messages"]
    assert correction[-2] == {"role": "assistant", "content": bad}
    assert correction[-1]["role"] == "user"
    assert "'get_wether' is not a tool you can call" in correction[-1]["content"]
    assert "the tools are: get_weather" in correction[-1]["content"]
    assert_text_mode(server.bodies[1])


def test_an_unknown_tool_next_to_a_good_call_is_told_with_the_results(
    server: ScriptedServer, text_platform: OpenAIChatPlatform
) -> None:
    server.script(
        reply('get_weather(city="Paris")\n{"tool": "translate", "arguments": {"text": "x"}}'),
        reply("Sunny."),
    )

    result = Bridge(text_platform, tools=[get_weather]).ask("Weather?")

    assert result.answer == "Sunny." and len(result.tool_runs) == 1
    results = server.bodies[1]["messages"][-1]["content"]
    assert "Not run: 'translate' is not a tool you can call" in results


def test_a_hopeless_model_ends_the_run_after_two_corrections(
    server: ScriptedServer, text_platform: OpenAIChatPlatform
) -> None:
    bad = "<tool_call>get the weather please</tool_call>"
    server.script(reply(bad), reply(bad), reply(bad), reply("never asked"))
    bridge = Bridge(text_platform, tools=[get_weather])
    conversation = bridge.conversation()

    with pytest.raises(RunFailedError) as info:
        conversation.ask("Weather?")

    assert info.value.code == "unreadable_tool_call"
    assert "3 times in a row (2 corrections asked)" in str(info.value)
    assert "a tool-call tag could not be read" in str(info.value)
    assert len(server.bodies) == 3
    # The failed query left the history as it was: the conversation goes on.
    server.script(reply("Hello!"))
    assert conversation.ask("Hi").answer == "Hello!"
    assert [m["role"] for m in server.bodies[0]["messages"]] == ["system", "user"]


def test_the_tools_prompt_joins_the_callers_system_prompt(server: ScriptedServer) -> None:
    server.script(reply("Hi."), reply("Hi again."))
    with OpenAIChatPlatform(
        server.base_url, "m", system="You are terse.", tool_protocol="text"
    ) as platform:
        conversation = platform.create_conversation()
        list(platform.start(conversation, "Hello", tools=[_manifest(get_weather)]))
        list(platform.start(conversation, "Hello again", tools=[]))
        # The history holds the conversation, not the tools prompt (rebuilt per request).
        assert platform.history(conversation)[0] == {"role": "system", "content": "You are terse."}

    first, second = server.bodies
    assert first["messages"][0]["content"].startswith("You are terse.\n\n# Tools\n")
    assert second["messages"][0] == {"role": "system", "content": "You are terse."}
    assert "tools" not in second


def test_examples_and_instructions_are_shown() -> None:
    tool = {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search the wiki.",
            "instructions": "Use it for anything about the company.",
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string"}},
                "required": ["query"],
                "examples": [{"query": "holidays"}],
            },
        },
    }

    prompt = tools_prompt([tool])

    assert "## search\nSearch the wiki.\nUse it for anything about the company.\n" in prompt
    assert (
        'Parameters (JSON Schema): {"type": "object", "properties": {"query": {"type": '
        '"string"}}, "required": ["query"]}\n'
        'Example: {"tool": "search", "arguments": {"query": "holidays"}}'
    ) in prompt


def test_a_forced_tool_choice_is_said_once(
    server: ScriptedServer, text_platform: OpenAIChatPlatform
) -> None:
    server.script(reply('get_weather(city="Rome")'), reply("Sunny."))

    Bridge(text_platform, tools=[get_weather], tool_choice="get_weather").ask("Rome?")

    first, second = (body["messages"][0]["content"] for body in server.bodies)
    assert first.endswith("In your next reply, call the tool get_weather.")
    assert "In your next reply" not in second


def test_tool_choice_none_describes_no_tools(
    server: ScriptedServer, text_platform: OpenAIChatPlatform
) -> None:
    text = '{"tool": "get_weather", "arguments": {"city": "Paris"}}'
    server.script(reply(text))
    conversation = text_platform.create_conversation()

    events = list(
        text_platform.start(conversation, "Hi", tools=[_manifest(get_weather)], tool_choice="none")
    )

    assert events == [TextDelta(text=text), events[-1]]
    assert isinstance(events[-1], RunFinished) and events[-1].answer == text
    assert server.bodies[0]["messages"] == [{"role": "user", "content": "Hi"}]


def test_positional_arguments_reach_the_batch_as_a_tuple(
    server: ScriptedServer, text_platform: OpenAIChatPlatform
) -> None:
    server.script(reply("add(1, 2)"), reply("3."))
    conversation = text_platform.create_conversation()

    events = list(text_platform.start(conversation, "1+2?", tools=[_manifest(add)]))

    assert isinstance(events[-1], ToolCallsRequested)
    (call,) = events[-1].batch.calls
    assert (call.name, call.arguments, call.raw_arguments) == ("add", "(1, 2)", "(1, 2)")
    results = [ToolResult(call_id=call.call_id, output="3")]
    finished = list(text_platform.submit(conversation, events[-1].batch, results))
    assert finished[-1] == RunFinished(
        answer="3.", usage=None, message_id="chatcmpl-1", raw=finished[-1].raw
    )


def test_streamed_text_is_buffered_into_one_delta(
    server: ScriptedServer, text_platform: OpenAIChatPlatform
) -> None:
    server.script(reply("The answer is forty two.", stream=True))
    conversation = text_platform.create_conversation()

    events = list(text_platform.start(conversation, "?", tools=[_manifest(add)], stream=True))

    assert [e for e in events if isinstance(e, TextDelta)] == [
        TextDelta(text="The answer is forty two.")
    ]
    assert server.bodies[0]["stream"] is True


def test_an_in_band_error_is_a_run_failure(
    server: ScriptedServer, text_platform: OpenAIChatPlatform
) -> None:
    server.script(Reply(stream=[{"error": {"message": "model overloaded", "code": "overloaded"}}]))
    conversation = text_platform.create_conversation()

    events = list(text_platform.start(conversation, "?", tools=[_manifest(add)]))

    assert isinstance(events[-1], RunFailed) and events[-1].message == "model overloaded"
    assert text_platform.history(conversation) == []


def test_the_journal_records_text_protocol_calls(
    server: ScriptedServer, text_platform: OpenAIChatPlatform, tmp_path: Path
) -> None:
    from bridge.journal import SQLiteJournal

    server.script(reply('get_weather(city="Paris")'), reply("Sunny."))
    journal = SQLiteJournal(tmp_path / "j.db")
    try:
        result = Bridge(text_platform, tools=[get_weather], journal=journal).ask("Weather?")
        calls = journal.calls(result.conversation_id)
    finally:
        journal.close()

    assert result.answer == "Sunny."
    assert [(c.name, c.arguments, c.state, c.output) for c in calls] == [
        ("get_weather", {"city": "Paris"}, "submitted", "Paris: sunny, 21 °C")
    ]


@pytest.mark.parametrize("bad", ["xml", "", "TEXT", None])
def test_a_bad_tool_protocol_is_refused(bad: Any) -> None:
    with pytest.raises(UsageError, match=r"tool_protocol must be 'native'.*or 'text'"):
        OpenAIChatPlatform("http://127.0.0.1:1/v1", "m", tool_protocol=bad)


def test_create_platform_passes_the_protocol(server: ScriptedServer) -> None:
    platform = create_platform("openai", base_url=server.base_url, model="m", tool_protocol="text")
    assert isinstance(platform, OpenAIChatPlatform) and platform.tool_protocol == "text"
    platform.close()
    with pytest.raises(UsageError, match="--tool-protocol is for --platform openai only"):
        create_platform("appbuilder", app_id="a", token="t", tool_protocol="text")


# --- fakellm: a third-party server scripted with text replies ------------------------------------

FAKELLM_RULES = """\
version: 1
rules:
  - name: answer
    when:
      messages_contain: "textmode-weather"
      previous_message_contains: "check both cities"
    respond:
      content: "Paris is sunny, Tokyo too."
  - name: calls
    when:
      messages_contain: "textmode-weather"
    respond:
      content: |
        I'll check both cities.
        <tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>
        <tool_call>{"name": "get_weather", "arguments": {"city": "Tokyo"}}</tool_call>
"""


@pytest.fixture(scope="module")
def fakellm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeLLM]:
    config = tmp_path_factory.mktemp("fakellm") / "rules.yaml"
    config.write_text(FAKELLM_RULES)
    with FakeLLM(config).running() as server:
        yield server


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "non-stream"])
def test_fakellm_text_replies_drive_the_loop(fakellm: FakeLLM, stream: bool) -> None:
    fakellm.reset()
    with OpenAIChatPlatform(fakellm.base_url, "m", tool_protocol="text") as platform:
        result = Bridge(platform, tools=[get_weather], stream=stream).ask("textmode-weather")

    assert result.answer == "I'll check both cities.Paris is sunny, Tokyo too."
    assert [run.output for run in result.tool_runs] == [
        "Paris: sunny, 21 °C",
        "Tokyo: sunny, 21 °C",
    ]


def _manifest(fn: Any) -> dict[str, Any]:
    from bridge import Manifest

    return json.loads(json.dumps(Manifest.from_function(fn, dialect="openai")))
