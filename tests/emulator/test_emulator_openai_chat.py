"""The Chat Completions protocol of the emulator over real HTTP: bodies, streamed chunks with
index-keyed tool-call fragments, the history the client resends, the real API's 400s, auth,
faults, scenarios, the text tool protocol, and toolbridge's own adapter and CLI against it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from typer.testing import CliRunner

from bridge import Bridge, open_platform
from bridge.cli import app
from bridge.emulator import Emulator
from bridge.platforms import create_platform
from bridge.types import RunFinished, ToolCallsRequested, ToolResult

TIMEOUT = 30
WEATHER: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "City name"}},
            "required": ["city"],
            "additionalProperties": False,
        },
        "strict": True,
    },
}
QUESTION = {"role": "user", "content": "What is the weather in Paris?"}


class Client:
    """Raw HTTP to one Chat Completions emulator."""

    def __init__(self, emu: Emulator) -> None:
        env = emu.env()
        self.url = env["OPENAI_BASE_URL"]
        self.model = env["OPENAI_MODEL"]
        self.headers = {"Authorization": f"Bearer {env['OPENAI_API_KEY']}"}
        self.session = requests.Session()

    def post(self, headers: dict[str, str] | None = None, **body: Any) -> requests.Response:
        body.setdefault("model", self.model)
        return self.session.post(
            self.url + "/chat/completions",
            json=body,
            headers={**self.headers, **(headers or {})},
            timeout=TIMEOUT,
        )

    def ok(self, **body: Any) -> dict[str, Any]:
        response = self.post(**body)
        assert response.status_code == 200, response.text
        assert response.headers["x-request-id"]
        data: dict[str, Any] = response.json()
        return data

    def get(self, path: str, **kwargs: Any) -> requests.Response:
        kwargs.setdefault("headers", self.headers)
        return self.session.get(self.url + path, timeout=TIMEOUT, **kwargs)


def error_of(response: requests.Response, status: int) -> dict[str, Any]:
    """Assert OpenAI's error shape; return the error object."""
    assert response.status_code == status, response.text
    assert response.headers["x-request-id"]
    body = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"message", "type", "param", "code"}
    error: dict[str, Any] = body["error"]
    return error


def sse(response: requests.Response) -> list[Any]:
    """The chunks of a stream, asserting OpenAI's framing (``data:`` lines, ``[DONE]`` last)."""
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    text = response.content.decode()
    assert text.endswith("\n\n")
    blocks = text[:-2].split("\n\n")
    assert all(block.startswith("data: ") and "\n" not in block for block in blocks)
    assert blocks[-1] == "data: [DONE]"
    return [json.loads(block.removeprefix("data: ")) for block in blocks[:-1]]


def message_of(body: dict[str, Any]) -> dict[str, Any]:
    (choice,) = body["choices"]
    message: dict[str, Any] = choice["message"]
    return message


def results(message: dict[str, Any], text: str = "sunny, 21 C") -> list[dict[str, Any]]:
    return [
        {"role": "tool", "tool_call_id": call["id"], "content": text}
        for call in message["tool_calls"]
    ]


@pytest.fixture(scope="module")
def emu() -> Iterator[Emulator]:
    with Emulator(protocol="openai", faults="") as emulator:
        yield emulator


@pytest.fixture
def client(emu: Emulator) -> Client:
    emu.clear_requests()
    return Client(emu)


# --- bodies and the history ------------------------------------------------------------------


def test_client_env_names_what_the_openai_package_reads(emu: Emulator) -> None:
    env = emu.env()
    assert env == {
        "OPENAI_BASE_URL": emu.base_url + "/v1",
        "OPENAI_API_KEY": emu.token,
        "OPENAI_MODEL": emu.app_id,
    }


def test_models_lists_the_served_model(client: Client) -> None:
    response = client.get("/models")
    assert response.status_code == 200
    assert [m["id"] for m in response.json()["data"]] == [client.model]


def test_a_tool_round_then_an_answer_from_the_resent_history(client: Client, emu: Emulator) -> None:
    first = client.ok(messages=[QUESTION], tools=[WEATHER])
    assert first["object"] == "chat.completion" and first["id"].startswith("chatcmpl-")
    assert first["choices"][0]["finish_reason"] == "tool_calls"
    assistant = message_of(first)
    assert assistant["role"] == "assistant" and assistant["content"] is None
    (call,) = assistant["tool_calls"]
    assert call["id"].startswith("call_") and call["type"] == "function"
    assert call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"]) == {"city": "Paris"}
    conversation = emu.app.completion_conversation(first["id"])  # type: ignore[attr-defined]
    assert emu.conversation(conversation).pending_call_ids == (call["id"],)

    history = [QUESTION, assistant, *results(assistant)]
    second = client.ok(messages=history, tools=[WEATHER])
    assert second["choices"][0]["finish_reason"] == "stop"
    assert message_of(second)["content"] == "sunny, 21 C"
    assert "tool_calls" not in message_of(second)
    assert (
        second["usage"]["total_tokens"]
        == (second["usage"]["prompt_tokens"] + second["usage"]["completion_tokens"])
        > 0
    )
    snapshot = emu.conversation(conversation)
    assert snapshot.pending_call_ids == ()
    assert snapshot.accepted_outputs == {call["id"]: 1}
    assert snapshot.messages[-1].answer == "sunny, 21 C"

    # A new question after the answer starts a new run on the same history.
    third = client.ok(
        messages=[
            *history,
            message_of(second),
            {"role": "user", "content": "And the weather in Oslo?"},
        ],
        tools=[WEATHER],
    )
    (again,) = message_of(third)["tool_calls"]
    assert json.loads(again["function"]["arguments"]) == {"city": "Oslo"}


def test_a_list_in_the_query_is_a_parallel_batch_answered_line_by_line(client: Client) -> None:
    question = {"role": "user", "content": "What is the weather in Paris and Tokyo?"}
    first = message_of(client.ok(messages=[question], tools=[WEATHER]))
    cities = [json.loads(c["function"]["arguments"])["city"] for c in first["tool_calls"]]
    assert cities == ["Paris", "Tokyo"]
    given = [
        {"role": "tool", "tool_call_id": c["id"], "content": f"fine in {city}"}
        for c, city in zip(first["tool_calls"], cities, strict=True)
    ]
    second = client.ok(messages=[question, first, *given], tools=[WEATHER])
    assert message_of(second)["content"] == "Paris: fine in Paris\nTokyo: fine in Tokyo"


def test_a_query_no_tool_matches_gets_a_plain_answer(client: Client) -> None:
    body = client.ok(messages=[{"role": "user", "content": "Tell me a joke"}], tools=[WEATHER])
    assert "plain reply to: Tell me a joke" in message_of(body)["content"]


def test_content_parts_are_read_as_text(client: Client) -> None:
    parts = [{"type": "text", "text": "What is the weather "}, {"type": "text", "text": "in Rome?"}]
    body = client.ok(messages=[{"role": "user", "content": parts}], tools=[WEATHER])
    (call,) = message_of(body)["tool_calls"]
    assert json.loads(call["function"]["arguments"]) == {"city": "Rome"}


# --- the stream -------------------------------------------------------------------------------


def test_the_stream_of_a_tool_round_keys_fragments_by_index(client: Client) -> None:
    question = {"role": "user", "content": "What is the weather in Paris and Tokyo?"}
    chunks = sse(client.post(messages=[question], tools=[WEATHER], stream=True))
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert len({c["id"] for c in chunks}) == 1
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert chunks[-1]["choices"][0] == {
        "index": 0,
        "delta": {},
        "logprobs": None,
        "finish_reason": "tool_calls",
    }
    assert "usage" not in chunks[0], "usage only when stream_options.include_usage"
    fragments = [
        fragment for c in chunks for fragment in c["choices"][0]["delta"].get("tool_calls", [])
    ]
    openings = [f for f in fragments if "id" in f]
    assert [f["index"] for f in openings] == [0, 1]
    assert all(f["function"]["arguments"] == "" and f["type"] == "function" for f in openings)
    assert len(fragments) > 4, "the arguments come in several pieces"
    assembled: dict[int, str] = {}
    for fragment in fragments:
        assert set(fragment) <= {"index", "id", "type", "function"}
        assembled[fragment["index"]] = assembled.get(fragment["index"], "") + fragment[
            "function"
        ].get("arguments", "")
    assert [json.loads(assembled[i]) for i in (0, 1)] == [{"city": "Paris"}, {"city": "Tokyo"}]


def test_the_stream_of_an_answer_ends_with_usage_when_asked(client: Client) -> None:
    first = message_of(client.ok(messages=[QUESTION], tools=[WEATHER]))
    chunks = sse(
        client.post(
            messages=[QUESTION, first, *results(first)],
            tools=[WEATHER],
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    *body, usage = chunks
    assert usage["choices"] == [] and usage["usage"]["total_tokens"] > 0
    assert all(c["usage"] is None for c in body)
    assert body[-1]["choices"][0]["finish_reason"] == "stop"
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in body)
    assert text == "sunny, 21 C"
    assert len([c for c in body if c["choices"][0]["delta"].get("content")]) > 1


# --- the real API's refusals ------------------------------------------------------------------


def test_every_call_must_be_answered_and_every_result_must_answer_a_call(client: Client) -> None:
    question = {"role": "user", "content": "What is the weather in Paris and Tokyo?"}
    first = message_of(client.ok(messages=[question], tools=[WEATHER]))
    missing = first["tool_calls"][1]["id"]
    error = error_of(
        client.post(messages=[question, first, *results(first)[:1]], tools=[WEATHER]), 400
    )
    assert error["message"].endswith(
        f"The following tool_call_ids did not have response messages: {missing}"
    )
    assert error["param"] == "messages.[1].role"
    stray = {"role": "tool", "tool_call_id": "call_x", "content": "?"}
    error = error_of(client.post(messages=[question, stray], tools=[WEATHER]), 400)
    assert "must be a response to a preceeding message with 'tool_calls'" in error["message"]
    assert error["param"] == "messages.[1].role"


@pytest.mark.parametrize(
    ("body", "param", "expected"),
    [
        ({"messages": None}, "messages", "Missing required parameter: 'messages'."),
        ({"messages": []}, "messages", "Invalid 'messages': empty array."),
        ({"model": None, "messages": [QUESTION]}, "model", "Missing required parameter: 'model'"),
        ({"messages": [{"content": "hi"}]}, "messages[0].role", "'messages[0].role'"),
        ({"messages": [{"role": "robot", "content": "hi"}]}, "messages[0].role", "'robot'"),
        ({"messages": [{"role": "user"}]}, "messages[0].content", "'messages[0].content'"),
        (
            {"messages": [QUESTION, {"role": "tool", "content": "x"}]},
            "messages[1].tool_call_id",
            "Missing required parameter: 'messages[1].tool_call_id'.",
        ),
        ({"messages": [QUESTION], "tool_choice": "always"}, "tool_choice", "'tool_choice'"),
        (
            {"messages": [QUESTION], "tool_choice": "required"},
            "tool_choice",
            "only allowed when 'tools' are specified",
        ),
        (
            {"messages": [QUESTION], "stream_options": {"include_usage": True}},
            "stream_options",
            "only allowed when 'stream' is enabled",
        ),
        ({"input": "hi"}, "input", "'input' belongs to the Responses API"),
        (
            {"messages": [QUESTION], "tools": [{"type": "function", "name": "get_weather"}]},
            "tools[0].function",
            "not the Responses API's flat shape",
        ),
        (
            {
                "messages": [QUESTION],
                "tools": [{"type": "function", "function": {"name": "get weather"}}],
            },
            "tools[0].function.name",
            "string does not match pattern",
        ),
        (
            {
                "messages": [QUESTION],
                "tools": [WEATHER],
                "tool_choice": {"type": "function", "function": {"name": "x"}},
            },
            "tool_choice",
            "no function named 'x'",
        ),
    ],
)
def test_malformed_bodies_are_400_naming_the_field(
    client: Client, body: dict[str, Any], param: str, expected: str
) -> None:
    sent = {k: v for k, v in body.items() if v is not None}
    if body.get("model", "") is None:
        response = client.session.post(
            client.url + "/chat/completions", json=sent, headers=client.headers, timeout=TIMEOUT
        )
    else:
        response = client.post(**sent)
    error = error_of(response, 400)
    assert error["param"] == param
    assert expected in error["message"]
    assert error["type"] == "invalid_request_error"


def test_a_body_that_is_not_json_is_400(client: Client) -> None:
    response = client.session.post(
        client.url + "/chat/completions", data=b"{not json", headers=client.headers, timeout=TIMEOUT
    )
    assert "could not parse the JSON body" in error_of(response, 400)["message"]


def test_an_unknown_model_is_404(client: Client) -> None:
    error = error_of(client.post(model="gpt-nope", messages=[QUESTION]), 404)
    assert error["code"] == "model_not_found"
    assert "gpt-nope" in error["message"] and client.model in error["message"]


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"}])
def test_a_missing_or_wrong_key_is_401(emu: Emulator, headers: dict[str, str]) -> None:
    for method, path, body in [
        ("POST", "/chat/completions", {"model": emu.app_id, "messages": [QUESTION]}),
        ("GET", "/models", None),
    ]:
        response = requests.request(
            method, emu.env()["OPENAI_BASE_URL"] + path, json=body, headers=headers, timeout=TIMEOUT
        )
        error = error_of(response, 401)
        assert "wrong" not in error["message"]


def test_an_unknown_path_is_404_listing_the_endpoints(client: Client) -> None:
    error = error_of(client.get("/responses/resp_1"), 404)
    assert "POST /v1/chat/completions" in error["message"]


def test_tool_choice(client: Client) -> None:
    joke = {"role": "user", "content": "Tell me a joke"}
    forced = client.ok(
        messages=[joke],
        tools=[WEATHER],
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
    )
    assert [c["function"]["name"] for c in message_of(forced)["tool_calls"]] == ["get_weather"]
    none = client.ok(messages=[QUESTION], tools=[WEATHER], tool_choice="none")
    assert "tool_calls" not in message_of(none)
    required = client.ok(messages=[joke], tools=[WEATHER], tool_choice="required")
    assert [c["function"]["name"] for c in message_of(required)["tool_calls"]] == ["get_weather"]


# --- faults -----------------------------------------------------------------------------------


def test_a_429_fault_has_retry_after_and_leaves_nothing_behind(
    client: Client, emu: Emulator
) -> None:
    before = emu.conversation_ids()
    response = client.post(
        messages=[QUESTION], tools=[WEATHER], headers={"X-Emulator-Fault": "status=429"}
    )
    assert response.headers["Retry-After"] == "1"
    assert error_of(response, 429)["type"] == "rate_limit_exceeded"
    assert emu.conversation_ids() == before


def test_an_inband_fault_is_an_error_message_in_the_stream(client: Client) -> None:
    response = client.post(
        messages=[QUESTION],
        tools=[WEATHER],
        stream=True,
        headers={"X-Emulator-Fault": "inband=server_error,inband_after=2,message=boom"},
    )
    assert response.status_code == 200
    blocks = response.content.decode()[:-2].split("\n\n")
    assert len(blocks) == 3 and "[DONE]" not in response.text
    error = json.loads(blocks[-1].removeprefix("data: "))["error"]
    assert error["message"] == "boom" and error["code"] == "server_error"


@pytest.mark.parametrize("stream", [True, False])
def test_a_length_fault_cuts_the_completion_short(client: Client, stream: bool) -> None:
    fault = {"X-Emulator-Fault": "inband=length"}
    response = client.post(messages=[QUESTION], tools=[WEATHER], stream=stream, headers=fault)
    if stream:
        finishes = [c["choices"][0]["finish_reason"] for c in sse(response)]
        assert [f for f in finishes if f] == ["length"]
    else:
        assert response.status_code == 200, response.text
        assert response.json()["choices"][0]["finish_reason"] == "length"


def test_a_drop_fault_cuts_the_stream(client: Client) -> None:
    response = client.session.post(
        client.url + "/chat/completions",
        json={"model": client.model, "messages": [QUESTION], "tools": [WEATHER], "stream": True},
        headers={**client.headers, "X-Emulator-Fault": "drop_after=2"},
        stream=True,
        timeout=TIMEOUT,
    )
    with pytest.raises(requests.exceptions.ChunkedEncodingError):
        response.content  # noqa: B018


# --- scenarios --------------------------------------------------------------------------------


def test_a_scenario_scripts_the_chat_protocol_too() -> None:
    scenario = {
        "rules": [
            {
                "match": r"weather in (?P<city>\w+)",
                "steps": [{"tool": "get_weather", "arguments": {"city": "{city}"}}],
                "answer": "It is {outputs.get_weather} in {city}.",
            }
        ]
    }
    with Emulator(protocol="openai", scenario=scenario, faults="") as emu:
        client = Client(emu)
        question = {"role": "user", "content": "weather in Lima"}
        first = message_of(client.ok(messages=[question], tools=[WEATHER]))
        assert json.loads(first["tool_calls"][0]["function"]["arguments"]) == {"city": "Lima"}
        second = client.ok(messages=[question, first, *results(first, "warm")], tools=[WEATHER])
        assert message_of(second)["content"] == "It is warm in Lima."


# --- toolbridge's adapter, open_platform and the CLI against it -------------------------------


def weather(city: str) -> str:
    """Get the current weather for a city.

    Args:
        city: City name.
    """
    return json.dumps({"city": city, "sky": "sunny"})


@pytest.mark.parametrize("stream", [True, False])
def test_two_tool_rounds_through_the_bridges_own_adapter(emu: Emulator, stream: bool) -> None:
    """The planner retries a call whose output suggests a value: two rounds, then an answer."""
    calls: list[str] = []

    def timezone(city: str) -> str:
        """The time zone of a city.

        Args:
            city: City or zone name.
        """
        calls.append(city)
        if "/" not in city:
            return f"unknown zone {city}; did you mean Asia/{city}?"
        return f"{city}: UTC+9"

    env = emu.env()
    platform = create_platform(
        "openai",
        base_url=env["OPENAI_BASE_URL"],
        model=env["OPENAI_MODEL"],
        api_key=env["OPENAI_API_KEY"],
    )
    emu.clear_requests()
    with Bridge(platform, tools=[timezone], stream=stream) as bridge:
        result = bridge.ask("What is the time zone of Tokyo?")
    assert calls == ["Tokyo", "Asia/Tokyo"]
    assert result.answer == "Asia/Tokyo: UTC+9"
    sent = [r.json for r in emu.requests if r.path == "/v1/chat/completions"]
    assert [len(body["messages"]) for body in sent] == [1, 3, 5]
    last = sent[-1]["messages"]
    assert [m["role"] for m in last] == ["user", "assistant", "tool", "assistant", "tool"]
    assert last[2]["tool_call_id"] == last[1]["tool_calls"][0]["id"]
    assert all(body["stream"] is stream for body in sent)


def test_the_adapters_events_on_the_emulator(emu: Emulator) -> None:
    env = emu.env()
    platform = create_platform(
        "openai",
        base_url=env["OPENAI_BASE_URL"],
        model=env["OPENAI_MODEL"],
        api_key=env["OPENAI_API_KEY"],
    )
    with platform:
        conversation = platform.create_conversation()
        events = list(
            platform.start(conversation, "What is the weather in Paris and Tokyo?", tools=[WEATHER])
        )
        (paused,) = [e for e in events if isinstance(e, ToolCallsRequested)]
        assert [c.arguments for c in paused.batch.calls] == [
            '{"city": "Paris"}',
            '{"city": "Tokyo"}',
        ]
        answers = [ToolResult(call_id=c.call_id, output="warm") for c in paused.batch.calls]
        finished = list(platform.submit(conversation, paused.batch, answers))
    (done,) = [e for e in finished if isinstance(e, RunFinished)]
    assert done.answer == "Paris: warm\nTokyo: warm"
    assert done.usage is not None and done.usage["total_tokens"] > 0


@pytest.mark.parametrize("stream", [True, False])
def test_the_text_tool_protocol_works_against_it(stream: bool) -> None:
    with (
        open_platform("openai", emulator=True, tool_protocol="text") as platform,
        Bridge(platform, tools=[weather], stream=stream) as bridge,
    ):
        conversation = bridge.conversation()
        first = conversation.ask("What is the weather in Paris and Tokyo?")
        second = conversation.ask("What is the weather in Oslo?")
    assert [run.arguments for run in first.tool_runs] == [{"city": "Paris"}, {"city": "Tokyo"}]
    assert first.answer == f"Paris: {weather('Paris')}\nTokyo: {weather('Tokyo')}"
    assert second.answer == weather("Oslo")


def test_the_text_tool_protocol_sends_no_tools_and_gets_calls_as_text() -> None:
    with (
        Emulator(protocol="openai", faults="") as emu,
        create_platform("openai", **_options(emu), tool_protocol="text") as platform,
        Bridge(platform, tools=[weather]) as bridge,
    ):
        assert bridge.ask("What is the weather in Lima?").answer == weather("Lima")
        first, second = (r.json for r in emu.requests)
        (conversation,) = emu.conversation_ids()  # the run's two completions are filed together
        snapshot = emu.conversation(conversation)
        assert [m.answer for m in snapshot.messages] == [weather("Lima")]
        assert snapshot.pending_call_ids == () and len(snapshot.accepted_outputs) == 1
    assert "tools" not in first and "tools" not in second
    assert first["messages"][0]["role"] == "system"
    assert second["messages"][-1]["content"].startswith("Tool results:")
    assert second["messages"][-2]["content"] == (
        '```json\n{"tool": "weather", "arguments": {"city": "Lima"}}\n```'
    )


def _options(emu: Emulator) -> dict[str, Any]:
    env = emu.env()
    return {
        "base_url": env["OPENAI_BASE_URL"],
        "model": env["OPENAI_MODEL"],
        "api_key": env["OPENAI_API_KEY"],
    }


TOOLS = """
from bridge import manifest

@manifest(description="Current weather of a city.")
def get_weather(city: str) -> str:
    return f"{city}: sunny"
"""


@pytest.mark.parametrize("protocol", ["native", "text"])
def test_the_cli_runs_on_the_emulator(tmp_path: Path, protocol: str) -> None:
    tools = tmp_path / "weather_tools.py"
    tools.write_text(TOOLS, encoding="utf-8")
    result = CliRunner().invoke(
        app,
        [
            "run",
            "weather in Paris and Tokyo",
            "-t",
            str(tools),
            "--platform",
            "openai",
            "--emulator",
            "--tool-protocol",
            protocol,
            "--json",
        ],
        env={"OPENAI_BASE_URL": "", "OPENAI_MODEL": "", "OPENAI_API_KEY": ""},
    )
    assert result.exit_code == 0, result.output
    got = json.loads(result.stdout)
    assert [run["arguments"] for run in got["tool_runs"]] == [{"city": "Paris"}, {"city": "Tokyo"}]
    assert got["answer"] == "Paris: Paris: sunny\nTokyo: Tokyo: sunny"


def test_the_emulator_command_speaks_the_protocol() -> None:
    from bridge.emulator.protocols import get_protocol

    protocol = get_protocol("openai")
    assert protocol.title == "OpenAI Chat Completions-compatible"
    assert protocol.client_env("http://h:1", "t", "m")["OPENAI_BASE_URL"] == "http://h:1/v1"


def test_serve_runs_a_conversation_on_the_emulator(tmp_path: Path) -> None:
    """``toolbridge serve --platform openai --emulator``: the daemon's own emulator answers."""
    import os
    import subprocess
    import sys

    tools = tmp_path / "weather_tools.py"
    tools.write_text(TOOLS, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "TOOLBRIDGE_"))}
    env["PYTHONUNBUFFERED"] = "1"
    command = [sys.executable, "-m", "bridge", "serve", "--platform", "openai", "--emulator"]
    command += ["--port", "0", "--db", ":memory:", "--tools", str(tools)]
    daemon = subprocess.Popen(
        command,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert daemon.stdout is not None
        log = []
        for line in daemon.stdout:  # ends when the process does: a failed start fails here
            log.append(line)
            if "listening on http://" in line:
                url = line.split("listening on ", 1)[1].split()[0]
                break
        else:
            raise AssertionError("the daemon did not start:\n" + "".join(log))
        assert "embedded OpenAI-compatible server emulator" in "".join(log)
        cid = requests.post(url + "/v1/conversations", json={}, timeout=TIMEOUT).json()[
            "conversation_id"
        ]
        answer = requests.post(
            url + f"/v1/conversations/{cid}/messages",
            json={"query": "weather in Paris"},
            timeout=60,
        )
        assert answer.status_code == 200, answer.text
        assert answer.json()["answer"] == "Paris: sunny"
    finally:
        daemon.terminate()
        daemon.wait(timeout=30)


def test_a_model_without_native_tools_takes_only_the_text_protocol(tmp_path: Path) -> None:
    scenario = tmp_path / "plain_model.yaml"
    scenario.write_text("openai:\n  native_tools: false\n", encoding="utf-8")
    with Emulator(protocol="openai", scenario=scenario, faults="") as emu:
        client = Client(emu)
        error = error_of(client.post(messages=[QUESTION], tools=[WEATHER]), 400)
        assert error["param"] == "tools" and "--tool-protocol text" in error["message"]
        with (
            create_platform("openai", **_options(emu), tool_protocol="text") as platform,
            Bridge(platform, tools=[weather]) as bridge,
        ):
            assert bridge.ask("What is the weather in Lima?").answer == weather("Lima")
    tools = tmp_path / "weather_tools.py"
    tools.write_text(TOOLS, encoding="utf-8")
    command = ["run", "weather in Paris", "-t", str(tools), "--platform", "openai", "--emulator"]
    command += ["--scenario", str(scenario)]
    native = CliRunner().invoke(app, command)
    assert native.exit_code != 0 and "--tool-protocol text" in native.output
    text = CliRunner().invoke(app, [*command, "--tool-protocol", "text"])
    assert text.exit_code == 0, text.output
    assert "Paris: sunny" in text.stdout


def test_a_bad_openai_section_is_named() -> None:
    from bridge.emulator import ScenarioError

    with pytest.raises(ScenarioError, match="openai: native_tools"):
        Emulator(protocol="openai", scenario={"openai": {"native_tools": "maybe"}})
    with pytest.raises(ScenarioError, match="openai"):
        Emulator(protocol="openai", scenario={"openai": {"tools": []}})


@pytest.mark.parametrize("tool_protocol", ["native", "text"])
def test_the_intranet_example_chains_calls_on_it(
    tool_protocol: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The intranet app's OpenAPI tools, a scripted two-round run whose second call takes an
    argument from the first call's output, over both tool protocols."""
    from bridge._serve import serve_in_thread
    from bridge.loading import load_tools
    from examples.intranet.app import create_app

    key = "intranet-test-key-chat"
    monkeypatch.setenv("INTRANET_KEY", key)
    scenario = {
        "rules": [
            {
                "match": r"ticket for (?P<name>\w+) about (?P<topic>.+)",
                "steps": [
                    {"tool": "search_employees", "arguments": {"q": "{name}"}},
                    {
                        "tool": "create_ticket",
                        "arguments": {
                            "title": "{topic}",
                            "assignee_id": "{outputs.search_employees[0].id}",
                        },
                    },
                ],
                "answer": "Ticket {outputs.create_ticket.id} is assigned to "
                "{outputs.search_employees[0].name}.",
            }
        ]
    }
    with (
        serve_in_thread(create_app(api_key=key)) as intranet,
        load_tools([f"openapi:{intranet.base_url}/openapi.json"]) as toolbox,
        open_platform(
            "openai", emulator=True, scenario=scenario, tool_protocol=tool_protocol
        ) as platform,
        Bridge(platform, toolbox) as bridge,
    ):
        result = bridge.ask("please open a ticket for Chloé about the printer jams")
    assert [run.name for run in result.tool_runs] == ["search_employees", "create_ticket"]
    ticket = json.loads(result.tool_runs[1].output)
    assert ticket["assignee_id"] == 3 and ticket["title"] == "the printer jams"
    assert result.answer == f"Ticket {ticket['id']} is assigned to Chloé Dubois."


@pytest.mark.parametrize("tool_protocol", ["native", "text"])
@pytest.mark.parametrize("choice", ["get_weather", "required"])
def test_a_forced_tool_is_called_then_its_output_answers(
    emu: Emulator, choice: str, tool_protocol: str
) -> None:
    """The client forces the tool in the first request only; the answer comes from its output."""
    with create_platform("openai", **_options(emu), tool_protocol=tool_protocol) as platform:
        conversation = platform.create_conversation()
        events = list(
            platform.start(conversation, "Tell me a joke", tools=[WEATHER], tool_choice=choice)
        )
        (paused,) = [e for e in events if isinstance(e, ToolCallsRequested)]
        assert [c.name for c in paused.batch.calls] == ["get_weather"]
        answers = [ToolResult(call_id=c.call_id, output="calm") for c in paused.batch.calls]
        finished = list(platform.submit(conversation, paused.batch, answers))
    assert [e.answer for e in finished if isinstance(e, RunFinished)] == ["calm"]
