"""OpenAIChatPlatform against a scripted loopback server: quirks, requests sent, every error.

The server (tests/platforms/openai_fakes.py) replays documented shapes fakellm cannot produce
and records each request body, so the messages the adapter sends are asserted exactly.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from openai_fakes import (
    Reply,
    ScriptedServer,
    chunk,
    completion,
    text_stream,
)

from bridge.errors import (
    AuthenticationError,
    BadRequestError,
    ConfigurationError,
    UsageError,
)
from bridge.platforms.base import Platform
from bridge.platforms.openai_chat import OpenAIChatPlatform
from bridge.types import (
    Event,
    Other,
    RunFinished,
    TextDelta,
    ToolBatch,
    ToolCall,
    ToolCallsRequested,
    ToolResult,
)

SECRET = "sk-test-6f1d2c3b4a5e"
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
TIME = {
    "type": "function",
    "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}},
}
DONE = b"data: [DONE]\n\n"


def _run(events: Iterator[Event]) -> list[Event]:
    return list(events)


def _batch(events: list[Event]) -> ToolBatch:
    last = events[-1]
    assert isinstance(last, ToolCallsRequested), events
    return last.batch


def _calls(batch: ToolBatch) -> list[tuple[str, str, str]]:
    return [(c.call_id, c.name, str(c.arguments)) for c in batch.calls]


def _results(batch: ToolBatch, *outputs: str) -> list[ToolResult]:
    return [
        ToolResult(call_id=c.call_id, output=o) for c, o in zip(batch.calls, outputs, strict=True)
    ]


def _tool_delta(**fragment: Any) -> dict[str, Any]:
    return chunk({"tool_calls": [fragment]})


# --- the protocol and the requests sent ---------------------------------------------------------


def test_satisfies_the_platform_protocol(platform: OpenAIChatPlatform) -> None:
    assert isinstance(platform, Platform)
    assert (platform.name, platform.dialect) == ("openai", "openai")


def test_round_trip_sends_the_documented_messages(
    server: ScriptedServer, platform: OpenAIChatPlatform
) -> None:
    server.script(
        Reply(
            stream=[
                chunk({"role": "assistant", "content": ""}),
                _tool_delta(
                    index=0,
                    id="call_a",
                    type="function",
                    function={"name": "get_weather", "arguments": ""},
                ),
                _tool_delta(
                    index=1,
                    id="call_b",
                    type="function",
                    function={"name": "get_weather", "arguments": '{"ci'},
                ),
                _tool_delta(index=0, function={"arguments": '{"city": '}),
                _tool_delta(index=1, function={"arguments": 'ty": "Tokyo"}'}),
                _tool_delta(index=0, function={"arguments": '"Paris"}'}),
                chunk({}, "tool_calls"),
                DONE,
            ],
            headers={"x-request-id": "req-1"},
        ),
        Reply(
            stream=text_stream("Sunny and rainy.", id="chatcmpl-2"),
            headers={"x-request-id": "req-2"},
        ),
    )
    conv = platform.create_conversation(end_user_id="user-1")
    events = _run(
        platform.start(
            conv, "Weather?", tools=[WEATHER, TIME], tool_choice="get_weather", end_user_id="user-1"
        )
    )
    batch = _batch(events)
    assert _calls(batch) == [
        ("call_a", "get_weather", '{"city": "Paris"}'),
        ("call_b", "get_weather", '{"city": "Tokyo"}'),
    ]
    assert batch.resume == {"request_id": "req-1", "completion_id": "chatcmpl-1"}

    # Results given out of order are sent in the order of the calls.
    results = list(reversed(_results(batch, "21 °C", "17 °C")))
    final = _run(platform.submit(conv, batch, results, end_user_id="user-1"))

    assert isinstance(final[-1], RunFinished)
    assert final[-1].answer == "Sunny and rainy."
    assert final[-1].request_id == "req-2"
    assert final[-1].message_id == "chatcmpl-2"
    first, second = server.bodies
    assert first == {
        "model": "m",
        "messages": [{"role": "user", "content": "Weather?"}],
        "tools": [WEATHER, TIME],
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
        "stream": True,
        "stream_options": {"include_usage": True},
        "user": "user-1",
    }
    assistant = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_a",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
            },
            {
                "id": "call_b",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Tokyo"}'},
            },
        ],
    }
    assert second == {
        "model": "m",
        "messages": [
            {"role": "user", "content": "Weather?"},
            assistant,
            {"role": "tool", "tool_call_id": "call_a", "content": "21 °C"},
            {"role": "tool", "tool_call_id": "call_b", "content": "17 °C"},
        ],
        # The forced choice is not sent again: it would force another call forever.
        "tools": [WEATHER, TIME],
        "stream": True,
        "stream_options": {"include_usage": True},
        "user": "user-1",
    }
    assert platform.history(conv)[-1] == {"role": "assistant", "content": "Sunny and rainy."}


@pytest.mark.parametrize("mode", ["auto", "none", "required"])
def test_tool_choice_modes_are_sent_as_strings(
    server: ScriptedServer, platform: OpenAIChatPlatform, mode: str
) -> None:
    server.script(Reply(json=completion("ok")))
    conv = platform.create_conversation()
    _run(platform.start(conv, "hi", tools=[TIME], tool_choice=mode, stream=False))
    assert server.bodies[0]["tool_choice"] == mode


def test_non_stream_request_and_options(server: ScriptedServer) -> None:
    server.script(
        Reply(
            json=completion(
                "Bonjour.", usage={"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
            )
        )
    )
    with OpenAIChatPlatform(
        server.base_url + "/",
        "m",
        system="Answer in French.",
        extra_body={"temperature": 0, "stream_options": {"include_usage": True}},
    ) as platform:
        conv = platform.create_conversation()
        events = _run(platform.start(conv, "Hello", tools=[], stream=False))

    assert [type(e) for e in events] == [TextDelta, RunFinished]
    assert events[-1] == RunFinished(
        answer="Bonjour.",
        usage={"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
        message_id="chatcmpl-1",
        raw={
            "id": "chatcmpl-1",
            "model": "m",
            "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
            "finish_reason": "stop",
        },
    )
    # No tools, no tool_choice and no stream_options (servers reject it when not streaming).
    assert server.bodies == [
        {
            "temperature": 0,
            "model": "m",
            "messages": [
                {"role": "system", "content": "Answer in French."},
                {"role": "user", "content": "Hello"},
            ],
            "stream": False,
        }
    ]
    assert server.requests[0]["headers"]["accept"] == "application/json"
    assert "authorization" not in server.requests[0]["headers"]


def test_non_stream_tool_calls_and_usage_summed_over_the_turn(
    server: ScriptedServer, platform: OpenAIChatPlatform
) -> None:
    calls = [
        {
            "id": "c1",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
        },
        # Some gateways send arguments as an object.
        {
            "id": "c2",
            "type": "function",
            "function": {"name": "get_weather", "arguments": {"city": "東京"}},
        },
    ]
    usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    server.script(
        Reply(json=completion(None, calls, usage=usage)),
        Reply(json=completion("Done.", id="chatcmpl-2", usage=usage)),
    )
    conv = platform.create_conversation()
    batch = _batch(_run(platform.start(conv, "Weather?", tools=[WEATHER], stream=False)))
    assert _calls(batch) == [
        ("c1", "get_weather", '{"city": "Paris"}'),
        ("c2", "get_weather", '{"city": "東京"}'),
    ]
    final = _run(platform.submit(conv, batch, _results(batch, "a", "b"), stream=False))
    assert isinstance(final[-1], RunFinished)
    assert final[-1].usage == {"prompt_tokens": 20, "completion_tokens": 10, "total_tokens": 30}
    assert [m["role"] for m in server.bodies[1]["messages"]] == [
        "user",
        "assistant",
        "tool",
        "tool",
    ]


def test_api_key_is_sent_but_never_shown(
    server: ScriptedServer, caplog: pytest.LogCaptureFixture
) -> None:
    server.script(
        Reply(
            status=401,
            json={
                "error": {
                    "message": f"Incorrect API key provided: {SECRET}",
                    "type": "invalid_request_error",
                    "code": "invalid_api_key",
                }
            },
            headers={"x-request-id": "req-401"},
        )
    )
    caplog.set_level(logging.DEBUG)
    platform = OpenAIChatPlatform(server.base_url, "m", api_key=SECRET)
    conv = platform.create_conversation()
    with pytest.raises(AuthenticationError) as info:
        _run(platform.start(conv, "hi", tools=[]))

    assert server.requests[0]["headers"]["authorization"] == f"Bearer {SECRET}"
    assert len(server.requests) == 1  # 401 is not retried
    error = info.value
    assert error.request_id == "req-401" and error.code == "invalid_api_key"
    assert "Incorrect API key provided" in str(error) and "check the API key" in str(error)
    for text in (str(error), repr(error), error.body or "", repr(platform), caplog.text):
        assert SECRET not in text
    assert "[secure]" in repr(platform)


def test_history_is_unchanged_by_a_failed_turn_and_the_turn_can_be_retried(
    server: ScriptedServer, platform: OpenAIChatPlatform
) -> None:
    server.script(
        Reply(
            status=400, json={"error": {"message": "bad temperature", "type": "BadRequestError"}}
        ),
        Reply(json=completion("Fine.")),
    )
    conv = platform.create_conversation()
    with pytest.raises(BadRequestError):
        _run(platform.start(conv, "hi", tools=[], stream=False))
    assert platform.history(conv) == []

    events = _run(platform.start(conv, "hi", tools=[], stream=False))
    assert isinstance(events[-1], RunFinished)
    assert platform.history(conv) == [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "Fine."},
    ]


def test_nothing_is_sent_until_the_events_are_read(
    server: ScriptedServer, platform: OpenAIChatPlatform
) -> None:
    conv = platform.create_conversation()
    events = platform.start(conv, "hi", tools=[])
    assert server.requests == []
    del events


# --- streamed tool-call quirks ------------------------------------------------------------------


def test_fragments_without_index_follow_ids_like_ollama(
    server: ScriptedServer, platform: OpenAIChatPlatform
) -> None:
    server.script(
        Reply(
            stream=[
                _tool_delta(id="call_1", function={"name": "get_weather", "arguments": '{"city":'}),
                _tool_delta(function={"arguments": ' "Paris"}'}),
                _tool_delta(
                    id="call_2", function={"name": "get_weather", "arguments": '{"city": "Oslo"}'}
                ),
                chunk({}, "tool_calls"),
                DONE,
            ]
        )
    )
    conv = platform.create_conversation()
    batch = _batch(_run(platform.start(conv, "Weather?", tools=[WEATHER])))
    assert _calls(batch) == [
        ("call_1", "get_weather", '{"city": "Paris"}'),
        ("call_2", "get_weather", '{"city": "Oslo"}'),
    ]


def test_whole_calls_without_index_or_id_get_distinct_ids(
    server: ScriptedServer, platform: OpenAIChatPlatform
) -> None:
    # Ollama sends each call whole in one chunk, with neither index nor (sometimes) id, and
    # finish_reason "stop" even though it wants tools.
    server.script(
        Reply(
            stream=[
                _tool_delta(function={"name": "get_weather", "arguments": '{"city": "Paris"}'}),
                _tool_delta(function={"name": "get_time", "arguments": "{}"}),
                chunk({}, "stop"),
                DONE,
            ]
        ),
        Reply(stream=text_stream("Done.")),
    )
    conv = platform.create_conversation()
    batch = _batch(_run(platform.start(conv, "Weather?", tools=[WEATHER, TIME])))
    assert [(c.name, c.arguments) for c in batch.calls] == [
        ("get_weather", '{"city": "Paris"}'),
        ("get_time", "{}"),
    ]
    ids = [c.call_id for c in batch.calls]
    assert len(set(ids)) == 2 and all(i.startswith("call_") for i in ids)

    _run(platform.submit(conv, batch, _results(batch, "sunny", "noon")))
    sent = server.bodies[1]["messages"]
    assert [tc["id"] for tc in sent[1]["tool_calls"]] == ids
    assert [(m["tool_call_id"], m["content"]) for m in sent[2:]] == list(
        zip(ids, ["sunny", "noon"], strict=True)
    )


def test_id_only_in_first_delta_like_llama_cpp(
    server: ScriptedServer, platform: OpenAIChatPlatform
) -> None:
    server.script(
        Reply(
            stream=[
                _tool_delta(index=0, id="abc", type="function", function={"name": "get_weather"}),
                _tool_delta(index=0, function={"arguments": '{"ci'}),
                _tool_delta(index=0, function={"arguments": 'ty": "Rome"}'}),
                chunk({}, "tool_calls"),
                DONE,
            ]
        )
    )
    conv = platform.create_conversation()
    batch = _batch(_run(platform.start(conv, "Weather?", tools=[WEATHER])))
    assert _calls(batch) == [("abc", "get_weather", '{"city": "Rome"}')]


def test_same_index_with_a_new_id_starts_a_new_call(
    server: ScriptedServer, platform: OpenAIChatPlatform
) -> None:
    server.script(
        Reply(
            stream=[
                _tool_delta(index=0, id="a", function={"name": "get_weather", "arguments": "{}"}),
                _tool_delta(index=0, id="b", function={"name": "get_time", "arguments": "{}"}),
                chunk({}, "tool_calls"),
                DONE,
            ]
        )
    )
    conv = platform.create_conversation()
    batch = _batch(_run(platform.start(conv, "x", tools=[WEATHER, TIME])))
    assert _calls(batch) == [("a", "get_weather", "{}"), ("b", "get_time", "{}")]


def test_text_reasoning_and_tool_calls_in_one_answer(
    server: ScriptedServer, platform: OpenAIChatPlatform
) -> None:
    server.script(
        Reply(
            stream=[
                chunk({"reasoning_content": "The user wants weather."}),
                chunk({"content": "Let me check."}),
                _tool_delta(index=0, id="c", function={"name": "get_weather", "arguments": "{}"}),
                chunk({}, "tool_calls"),
                chunk(usage={"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3})
                | {"choices": []},
                DONE,
            ]
        )
    )
    conv = platform.create_conversation()
    events = _run(platform.start(conv, "Weather?", tools=[WEATHER]))
    assert events[:2] == [
        Other(raw={"reasoning": "The user wants weather."}),
        TextDelta(text="Let me check."),
    ]
    assert isinstance(events[2], ToolCallsRequested)
    # Reasoning is not sent back; the text is kept beside the calls.
    assert platform.history(conv)[1]["content"] == "Let me check."


def test_invalid_arguments_are_passed_on_for_the_dispatcher(
    server: ScriptedServer, platform: OpenAIChatPlatform
) -> None:
    server.script(
        Reply(
            stream=[
                _tool_delta(
                    index=0, id="c", function={"name": "get_weather", "arguments": '{"city": '}
                ),
                chunk({}, "tool_calls"),
                DONE,
            ]
        )
    )
    conv = platform.create_conversation()
    call = _batch(_run(platform.start(conv, "x", tools=[WEATHER]))).calls[0]
    assert call == ToolCall(
        call_id="c", name="get_weather", arguments='{"city": ', raw_arguments='{"city": '
    )
    with pytest.raises(ValueError):
        call.arguments_dict()


def test_reused_call_ids_are_made_unique_in_the_conversation(
    server: ScriptedServer, platform: OpenAIChatPlatform
) -> None:
    # A server numbering calls per answer: "call_0" twice in one answer and again next round.
    def call(name: str) -> dict[str, Any]:
        return {"id": "call_0", "type": "function", "function": {"name": name, "arguments": "{}"}}

    server.script(
        Reply(json=completion(None, [call("get_time"), call("get_weather")])),
        Reply(json=completion(None, [call("get_time")], id="chatcmpl-2")),
        Reply(json=completion("Done.", id="chatcmpl-3")),
    )
    conv = platform.create_conversation()
    first = _batch(_run(platform.start(conv, "x", tools=[TIME, WEATHER], stream=False)))
    second = _batch(_run(platform.submit(conv, first, _results(first, "a", "b"), stream=False)))
    _run(platform.submit(conv, second, _results(second, "c"), stream=False))

    ids = [c.call_id for c in first.calls] + [c.call_id for c in second.calls]
    assert ids[0] == "call_0" and len(set(ids)) == 3
    sent = server.bodies[2]["messages"]
    assert [tc["id"] for m in sent if m.get("tool_calls") for tc in m["tool_calls"]] == ids
    assert [m["tool_call_id"] for m in sent if m["role"] == "tool"] == ids


def test_answer_cut_by_length_is_finished_with_a_warning(
    server: ScriptedServer, platform: OpenAIChatPlatform, caplog: pytest.LogCaptureFixture
) -> None:
    server.script(Reply(stream=[chunk({"content": "The answer is"}), chunk({}, "length"), DONE]))
    conv = platform.create_conversation()
    events = _run(platform.start(conv, "hi", tools=[]))
    assert isinstance(events[-1], RunFinished) and events[-1].answer == "The answer is"
    assert events[-1].raw["finish_reason"] == "length"
    assert "ended the answer with finish_reason=length" in caplog.text


def test_server_ignoring_stream_flag_is_read_as_json(
    server: ScriptedServer, platform: OpenAIChatPlatform
) -> None:
    server.script(Reply(json=completion("Plain JSON.")))
    conv = platform.create_conversation()
    events = _run(platform.start(conv, "hi", tools=[], stream=True))
    assert events == [TextDelta(text="Plain JSON."), events[-1]]
    assert isinstance(events[-1], RunFinished) and events[-1].answer == "Plain JSON."


# --- bad input from the caller ------------------------------------------------------------------


def test_unknown_conversation(platform: OpenAIChatPlatform) -> None:
    with pytest.raises(UsageError, match=r"unknown conversation id 'nope'.*create_conversation"):
        platform.start("nope", "hi", tools=[])
    batch = ToolBatch(batch_id="b", calls=())
    with pytest.raises(UsageError, match="unknown conversation id 'nope'"):
        platform.submit("nope", batch, [])
    with pytest.raises(UsageError, match="unknown conversation id 'nope'"):
        platform.history("nope")


@pytest.mark.parametrize("query", ["", "   "])
def test_empty_query(platform: OpenAIChatPlatform, query: str) -> None:
    conv = platform.create_conversation()
    with pytest.raises(UsageError, match="query must be a non-empty string"):
        platform.start(conv, query, tools=[])


@pytest.mark.parametrize(
    ("tools", "tool_choice", "message"),
    [
        ([{"name": "x", "inputSchema": {}}], None, r"tools\[0\] is not an OpenAI function tool"),
        ([WEATHER, {"type": "function", "function": {}}], None, r"tools\[1\] is not an OpenAI"),
        (["get_weather"], None, r"tools\[0\] is not an OpenAI function tool"),
        (
            [WEATHER],
            "get_time",
            "tool_choice 'get_time' names no tool of this request; expected one of get_weather",
        ),
        ([], "get_time", "tool_choice 'get_time' was given but no tools were sent"),
    ],
    ids=["mcp-dialect", "no-name", "not-a-dict", "unknown-choice", "choice-without-tools"],
)
def test_bad_tools_or_tool_choice(
    server: ScriptedServer,
    platform: OpenAIChatPlatform,
    tools: list[Any],
    tool_choice: str | None,
    message: str,
) -> None:
    conv = platform.create_conversation()
    with pytest.raises(UsageError, match=message):
        platform.start(conv, "hi", tools=tools, tool_choice=tool_choice)
    assert server.requests == []


def test_file_ids_upload_and_resume_are_not_supported(
    platform: OpenAIChatPlatform, tmp_path: Any
) -> None:
    conv = platform.create_conversation()
    with pytest.raises(UsageError, match="file_ids are not supported on the openai platform"):
        platform.start(conv, "hi", tools=[], file_ids=["f1"])
    with pytest.raises(UsageError, match="does not upload files"):
        platform.upload_file(conv, tmp_path / "a.txt")
    with pytest.raises(UsageError, match="resume is not supported on the openai platform"):
        platform.resume(conv, "interrupt-1", "yes")


class TestSubmitValidation:
    @pytest.fixture
    def pending(
        self, server: ScriptedServer, platform: OpenAIChatPlatform
    ) -> tuple[str, ToolBatch]:
        calls = [
            {"id": "c1", "type": "function", "function": {"name": "get_time", "arguments": "{}"}},
            {"id": "c2", "type": "function", "function": {"name": "get_time", "arguments": "{}"}},
        ]
        server.script(Reply(json=completion(None, calls)))
        conv = platform.create_conversation()
        batch = _batch(_run(platform.start(conv, "time?", tools=[TIME], stream=False)))
        server.script()
        return conv, batch

    def test_submit_without_pending_calls(self, platform: OpenAIChatPlatform) -> None:
        conv = platform.create_conversation()
        with pytest.raises(UsageError, match="has no tool calls waiting for results"):
            platform.submit(conv, ToolBatch(batch_id="b", calls=()), [])

    def test_wrong_batch(
        self, platform: OpenAIChatPlatform, pending: tuple[str, ToolBatch]
    ) -> None:
        conv, batch = pending
        other = batch.model_copy(update={"batch_id": "other"})
        with pytest.raises(
            UsageError, match=r"batch other is not the one waiting.*expected batch chatcmpl-1"
        ):
            platform.submit(conv, other, _results(batch, "1", "2"))

    @pytest.mark.parametrize(
        ("results", "message"),
        [
            ([("c1", "1")], "no result for call\\(s\\) c2"),
            ([("c1", "1"), ("c2", "2"), ("c3", "3")], "result for unknown call c3"),
            ([("c1", "1"), ("c1", "again"), ("c2", "2")], "two results for call c1"),
        ],
        ids=["missing", "unknown", "duplicate"],
    )
    def test_results_must_answer_each_call_once(
        self,
        server: ScriptedServer,
        platform: OpenAIChatPlatform,
        pending: tuple[str, ToolBatch],
        results: list[tuple[str, str]],
        message: str,
    ) -> None:
        conv, batch = pending
        given = [ToolResult(call_id=c, output=o) for c, o in results]
        with pytest.raises(UsageError, match=message) as info:
            platform.submit(conv, batch, given)
        assert "expected exactly one result for each of c1, c2" in str(info.value)
        assert server.requests == []

    def test_start_while_calls_are_pending(
        self, platform: OpenAIChatPlatform, pending: tuple[str, ToolBatch]
    ) -> None:
        conv, _ = pending
        with pytest.raises(UsageError, match="waiting for the results of tool calls c1, c2"):
            platform.start(conv, "something else", tools=[TIME])

    def test_failed_submit_can_be_sent_again(
        self,
        server: ScriptedServer,
        platform: OpenAIChatPlatform,
        pending: tuple[str, ToolBatch],
    ) -> None:
        conv, batch = pending
        server.script(
            Reply(status=400, json={"error": {"message": "no"}}),
            Reply(json=completion("It is noon.")),
        )
        with pytest.raises(BadRequestError):
            _run(platform.submit(conv, batch, _results(batch, "12:00", "12:00"), stream=False))
        final = _run(platform.submit(conv, batch, _results(batch, "12:00", "12:00"), stream=False))
        assert isinstance(final[-1], RunFinished)
        assert server.bodies[0] == server.bodies[1]
        assert [m["role"] for m in platform.history(conv)] == [
            "user",
            "assistant",
            "tool",
            "tool",
            "assistant",
        ]

    def test_submitted_outputs_are_in_the_exported_history_before_the_answer_is_read(
        self,
        server: ScriptedServer,
        platform: OpenAIChatPlatform,
        pending: tuple[str, ToolBatch],
    ) -> None:
        # What the loop journals when it marks the outputs "submitted": a process that dies
        # before reading the answer leaves a history that goes on from the outputs.
        conv, batch = pending
        server.script(Reply(json=completion("It is noon.")))
        events = platform.submit(conv, batch, _results(batch, "12:00", "12:00"), stream=False)
        exported = platform.export_state(conv)
        assert exported is not None
        other = OpenAIChatPlatform(server.base_url, "m")
        try:
            other.import_state(conv, exported)
            assert [m["role"] for m in other.history(conv)] == ["user", "assistant", "tool", "tool"]
            other.start(conv, "and now?", tools=[], stream=False)  # not refused: nothing pending
        finally:
            other.close()
        assert isinstance(_run(events)[-1], RunFinished)

    def test_forget_drops_the_history(
        self, platform: OpenAIChatPlatform, pending: tuple[str, ToolBatch]
    ) -> None:
        conv, _ = pending
        platform.forget(conv)
        with pytest.raises(UsageError, match="unknown conversation id"):
            platform.history(conv)


# --- configuration --------------------------------------------------------------------------------


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in ("OPENAI_BASE_URL", "OPENAI_MODEL", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_settings_come_from_the_environment(
    clean_env: pytest.MonkeyPatch, server: ScriptedServer
) -> None:
    clean_env.setenv("OPENAI_BASE_URL", server.base_url)
    clean_env.setenv("OPENAI_MODEL", "env-model")
    clean_env.setenv("OPENAI_API_KEY", SECRET)
    server.script(Reply(json=completion("hi")))
    platform = OpenAIChatPlatform()
    assert (platform.base_url, platform.model) == (server.base_url, "env-model")
    _run(platform.start(platform.create_conversation(), "hi", tools=[], stream=False))
    assert server.bodies[0]["model"] == "env-model"
    assert server.requests[0]["headers"]["authorization"] == f"Bearer {SECRET}"
    assert SECRET not in repr(platform)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"model": "m"},
            "no base URL for the OpenAI-compatible server: pass base_url= .*OPENAI_BASE_URL",
        ),
        (
            {"base_url": "http://127.0.0.1:1/v1"},
            "no model for the OpenAI-compatible server: .*OPENAI_MODEL",
        ),
        ({"base_url": "http://127.0.0.1:1/v1", "model": "  "}, "no model"),
        (
            {"base_url": "127.0.0.1:8000/v1", "model": "m"},
            "is not an http\\(s\\) URL; expected e.g. http://127.0.0.1:8000/v1",
        ),
        (
            {"base_url": "http://h:1/v1/chat/completions", "model": "m"},
            "should stop before /chat/completions; expected e.g. http://h:1/v1",
        ),
        (
            {"base_url": "http://h/v1", "model": "m", "connect_timeout": 0},
            "connect_timeout must be a number of seconds > 0, got 0",
        ),
        (
            {"base_url": "http://h/v1", "model": "m", "idle_timeout": "5"},
            "idle_timeout must be a number of seconds > 0, got '5'",
        ),
        (
            {"base_url": "http://h/v1", "model": "m", "max_retries": -1},
            "max_retries must be an integer >= 0, got -1",
        ),
        (
            {"base_url": "http://h/v1", "model": "m", "extra_body": {"messages": []}},
            "extra_body must not set messages",
        ),
        (
            {"base_url": "http://h/v1", "model": "m", "extra_body": {"seed": object()}},
            "extra_body must be JSON-serialisable",
        ),
        (
            {"base_url": "http://h/v1", "model": "m", "extra_body": [("seed", 1)]},
            "extra_body must be a mapping, got list",
        ),
    ],
    ids=[
        "no-url",
        "no-model",
        "blank-model",
        "no-scheme",
        "endpoint-url",
        "connect-timeout",
        "idle-timeout",
        "retries",
        "extra-clash",
        "extra-json",
        "extra-type",
    ],
)
def test_bad_configuration(
    clean_env: pytest.MonkeyPatch, kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigurationError, match=message):
        OpenAIChatPlatform(**kwargs)


def test_factory_builds_the_openai_platform(server: ScriptedServer) -> None:
    from bridge.platforms import create_platform

    platform = create_platform("openai", base_url=server.base_url, model="m", api_key=None)
    assert isinstance(platform, OpenAIChatPlatform)
    assert json.loads(json.dumps(platform.history(platform.create_conversation()))) == []
