"""OpenAIChatPlatform against the third-party fake server `fakellm` (PyPI), on loopback.

fakellm streams tool calls the way OpenAI does (id and name in the first fragment, arguments
split over several more, `finish_reason: tool_calls`). It ignores `tool_choice`, keeps state
per conversation (keyed by the first user message) and honours error statuses only for
non-streamed requests; the scripted server in test_openai_chat.py covers the rest.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from openai_fakes import FAST_RETRIES, FakeLLM

from bridge.errors import AuthenticationError, RateLimitError, ServerError
from bridge.platforms.openai_chat import OpenAIChatPlatform
from bridge.types import (
    Event,
    RunFinished,
    TextDelta,
    ToolBatch,
    ToolCallsRequested,
    ToolResult,
)

RULES = """\
version: 1
rules:
  - name: weather_answer
    when:
      messages_contain: "parallel-weather"
      tool_result_contains: "°C"
    respond:
      content: "Paris is sunny and Tokyo is rainy."
  - name: weather_calls
    when:
      messages_contain: "parallel-weather"
    respond:
      tool_calls:
        - name: get_weather
          arguments: {city: Paris, unit: celsius}
        - name: get_weather
          arguments: {city: Tokyo, unit: celsius}
  - name: time_answer
    when:
      messages_contain: "what time is it"
      tool_result_contains: "12:00"
    respond:
      content: "It is noon."
  - name: time_call
    when:
      messages_contain: "what time is it"
      tools_include: get_time
    respond:
      tool_calls:
        - name: get_time
          arguments: {}
  - name: remembers
    when:
      messages_contain: "what is my name"
      previous_message_contains: "nice to meet you"
    respond:
      content: "Your name is Ada."
  - name: forgot
    when:
      messages_contain: "what is my name"
    respond:
      content: "I do not know your name."
  - name: greet
    when:
      messages_contain: "my name is ada"
    respond:
      content: "Nice to meet you, Ada."
  - name: plain
    when:
      messages_contain: "say hello"
    respond:
      content: "Hello from fakellm, friend."
  - name: unauthorized
    when:
      messages_contain: "trigger-401"
    respond:
      status: 401
      error: "Invalid API key"
  - name: rate_limited
    when:
      messages_contain: "trigger-429"
    respond:
      status: 429
      error: "Slow down"
  - name: broken
    when:
      messages_contain: "trigger-500"
    respond:
      status: 500
      error: "Model crashed"
"""

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"type": "string"}},
            "required": ["city"],
        },
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "The current time.",
        "parameters": {"type": "object", "properties": {}},
    },
}


@pytest.fixture(scope="module")
def fakellm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeLLM]:
    config = tmp_path_factory.mktemp("fakellm") / "rules.yaml"
    config.write_text(RULES, encoding="utf-8")
    with FakeLLM(Path(config)).running() as server:
        yield server


@pytest.fixture
def platform(fakellm: FakeLLM) -> Iterator[OpenAIChatPlatform]:
    fakellm.reset()
    with OpenAIChatPlatform(fakellm.base_url, "fake-model", retry_policy=FAST_RETRIES) as p:
        yield p


def _answer_all(batch: ToolBatch, output: str) -> list[ToolResult]:
    return [ToolResult(call_id=call.call_id, output=output) for call in batch.calls]


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "non-stream"])
def test_plain_text_answer(platform: OpenAIChatPlatform, stream: bool) -> None:
    conv = platform.create_conversation()
    events: list[Event] = list(platform.start(conv, "Please say hello", tools=[], stream=stream))

    finished = events[-1]
    assert isinstance(finished, RunFinished)
    assert finished.answer == "Hello from fakellm, friend."
    deltas = [e.text for e in events if isinstance(e, TextDelta)]
    assert "".join(deltas) == finished.answer
    if stream:
        assert len(deltas) > 1  # fakellm streams word by word
    else:
        assert finished.usage is not None and finished.usage["total_tokens"] > 0
    assert platform.history(conv) == [
        {"role": "user", "content": "Please say hello"},
        {"role": "assistant", "content": "Hello from fakellm, friend."},
    ]


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "non-stream"])
def test_parallel_tool_calls_then_answer(platform: OpenAIChatPlatform, stream: bool) -> None:
    conv = platform.create_conversation()
    query = f"parallel-weather in Paris and Tokyo ({stream})"
    events = list(platform.start(conv, query, tools=[WEATHER], stream=stream))

    assert len(events) == 1 and isinstance(events[0], ToolCallsRequested)
    batch = events[0].batch
    assert [c.name for c in batch.calls] == ["get_weather", "get_weather"]
    assert [c.arguments_dict() for c in batch.calls] == [
        {"city": "Paris", "unit": "celsius"},
        {"city": "Tokyo", "unit": "celsius"},
    ]
    for call in batch.calls:
        assert isinstance(call.arguments, str) and call.raw_arguments == call.arguments
    assert len({c.call_id for c in batch.calls}) == 2

    follow_up = list(platform.submit(conv, batch, _answer_all(batch, "21 °C"), stream=stream))

    finished = follow_up[-1]
    assert isinstance(finished, RunFinished)
    assert finished.answer == "Paris is sunny and Tokyo is rainy."
    history = platform.history(conv)
    assert [m["role"] for m in history] == ["user", "assistant", "tool", "tool", "assistant"]
    assert [tc["id"] for tc in history[1]["tool_calls"]] == [c.call_id for c in batch.calls]
    assert [json.loads(tc["function"]["arguments"]) for tc in history[1]["tool_calls"]] == [
        {"city": "Paris", "unit": "celsius"},
        {"city": "Tokyo", "unit": "celsius"},
    ]
    assert [m["tool_call_id"] for m in history[2:4]] == [c.call_id for c in batch.calls]
    if not stream:
        # Usage is summed over the turn's two completions.
        assert finished.usage is not None
        assert finished.usage["total_tokens"] > finished.raw["usage"]["total_tokens"]


def test_forced_tool_choice_round(platform: OpenAIChatPlatform) -> None:
    conv = platform.create_conversation()
    events = list(
        platform.start(conv, "what time is it?", tools=[WEATHER, TIME], tool_choice="get_time")
    )
    assert isinstance(events[-1], ToolCallsRequested)
    batch = events[-1].batch
    assert [(c.name, c.arguments_dict()) for c in batch.calls] == [("get_time", {})]

    follow_up = list(platform.submit(conv, batch, _answer_all(batch, "12:00")))
    assert isinstance(follow_up[-1], RunFinished)
    assert follow_up[-1].answer == "It is noon."


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "non-stream"])
def test_history_grows_across_two_user_turns(platform: OpenAIChatPlatform, stream: bool) -> None:
    conv = platform.create_conversation()
    first = list(platform.start(conv, "Hi, my name is Ada", tools=[], stream=stream))
    assert isinstance(first[-1], RunFinished) and first[-1].answer == "Nice to meet you, Ada."

    second = list(platform.start(conv, "What is my name?", tools=[], stream=stream))

    # fakellm only says the name when the previous reply is part of the messages it got.
    assert isinstance(second[-1], RunFinished) and second[-1].answer == "Your name is Ada."
    assert platform.history(conv) == [
        {"role": "user", "content": "Hi, my name is Ada"},
        {"role": "assistant", "content": "Nice to meet you, Ada."},
        {"role": "user", "content": "What is my name?"},
        {"role": "assistant", "content": "Your name is Ada."},
    ]
    other = platform.create_conversation()
    alone = list(platform.start(other, "What is my name?", tools=[], stream=stream))
    assert isinstance(alone[-1], RunFinished) and alone[-1].answer == "I do not know your name."


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "non-stream"])
def test_bridge_loop_end_to_end(platform: OpenAIChatPlatform, stream: bool) -> None:
    from bridge import Bridge

    seen: list[str] = []

    def get_weather(city: str, unit: str = "celsius") -> str:
        """Weather for a city.

        Args:
            city: The city.
            unit: celsius or fahrenheit.
        """
        seen.append(city)
        return f"{city}: 21 °C"

    result = Bridge(platform, tools=[get_weather], stream=stream).ask("parallel-weather, please")

    assert result.answer == "Paris is sunny and Tokyo is rainy."
    assert result.rounds == 1
    assert sorted(seen) == ["Paris", "Tokyo"]
    assert [run.output for run in result.tool_runs] == ["Paris: 21 °C", "Tokyo: 21 °C"]


def test_error_status_401_from_fakellm(platform: OpenAIChatPlatform) -> None:
    conv = platform.create_conversation()
    with pytest.raises(AuthenticationError) as info:
        list(platform.start(conv, "trigger-401", tools=[], stream=False))
    assert info.value.status_code == 401
    assert "Invalid API key" in str(info.value)
    assert "check the API key" in str(info.value)
    assert info.value.code == "mock_error"
    assert platform.history(conv) == []


def test_error_status_429_from_fakellm_is_retried_then_raised(
    platform: OpenAIChatPlatform,
) -> None:
    conv = platform.create_conversation()
    with pytest.raises(RateLimitError) as info:
        list(platform.start(conv, "trigger-429", tools=[], stream=False))
    assert info.value.status_code == 429
    assert "Slow down" in str(info.value)
    assert "gave up after 3 attempts" in str(info.value)
    assert info.value.retry_after is None  # fakellm sends no Retry-After


def test_error_status_500_from_fakellm_is_retried_then_raised(
    platform: OpenAIChatPlatform,
) -> None:
    conv = platform.create_conversation()
    with pytest.raises(ServerError) as info:
        list(platform.start(conv, "trigger-500", tools=[], stream=False))
    assert info.value.status_code == 500
    assert "Model crashed" in str(info.value)
    assert "gave up after 3 attempts" in str(info.value)


def test_cli_run_with_platform_openai(fakellm: FakeLLM, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from bridge.cli import app

    fakellm.reset()
    tools = tmp_path / "weather_tools.py"
    tools.write_text(
        "def get_weather(city: str, unit: str = 'celsius') -> str:\n"
        "    return f'{city}: 21 °C'\n\n"
        "from bridge import manifest\n"
        "get_weather = manifest(description='Weather for a city.')(get_weather)\n",
        encoding="utf-8",
    )
    args = ["run", "parallel-weather, please", "--tools", str(tools), "--json"]
    args += ["--platform", "openai", "--base-url", fakellm.base_url, "--model", "fake-model"]
    result = CliRunner().invoke(app, args, env={"OPENAI_API_KEY": ""})
    assert result.exit_code == 0, result.output
    body = json.loads(result.stdout)
    assert body["answer"] == "Paris is sunny and Tokyo is rainy."
    assert [run["output"] for run in body["tool_runs"]] == ["Paris: 21 °C", "Tokyo: 21 °C"]
    assert body["tool_runs"][0]["arguments"] == {"city": "Paris", "unit": "celsius"}
    wrong = CliRunner().invoke(app, [*args, "--token", "x"], env={})
    assert wrong.exit_code == 2
    # --json reports even a usage error as JSON.
    error = json.loads(wrong.stdout)["error"]
    assert "--token is for --platform appbuilder" in error["message"]
