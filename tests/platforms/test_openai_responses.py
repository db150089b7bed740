"""The Responses adapter against scripted loopback servers: every quirk of
docs/wire/openai-responses.md (outputs for every call, call_id not id, store=false resends for
servers that lose chained items, fragments, sequence gaps, failed/incomplete, 4xx/5xx), state
export and settings."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from openai_fakes import DROP, FAST_RETRIES
from responses_fakes import (
    Reply,
    ResponsesServer,
    call_item,
    events,
    message_item,
    response,
    stream_reply,
)

from bridge.errors import (
    AuthenticationError,
    BadRequestError,
    ConfigurationError,
    ConversationLostError,
    NotFoundError,
    ProtocolError,
    RateLimitError,
    ServerError,
    StreamInterruptedError,
    UsageError,
)
from bridge.platforms.base import export_state_json
from bridge.platforms.openai_responses import OpenAIResponsesPlatform
from bridge.types import (
    Event,
    RunFailed,
    RunFinished,
    TextDelta,
    ToolBatch,
    ToolCallsRequested,
    ToolResult,
)

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather of a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
FREE_FORM = {
    "type": "function",
    "function": {
        "name": "save",
        "description": "Save any record",
        "parameters": {
            "type": "object",
            "properties": {"record": {"type": "object", "additionalProperties": True}},
            "required": ["record"],
        },
    },
}


@pytest.fixture(scope="module")
def module_server() -> Iterator[ResponsesServer]:
    with ResponsesServer().running() as server:
        yield server


@pytest.fixture
def server(module_server: ResponsesServer) -> ResponsesServer:
    module_server.script()
    return module_server


@pytest.fixture
def platform(server: ResponsesServer) -> Iterator[OpenAIResponsesPlatform]:
    with OpenAIResponsesPlatform(server.base_url, "m", "sk-test", retry_policy=FAST_RETRIES) as p:
        yield p


def run(events_: Iterator[Event]) -> list[Event]:
    return list(events_)


def batch_of(got: list[Event]) -> ToolBatch:
    last = got[-1]
    assert isinstance(last, ToolCallsRequested), got
    return last.batch


def answer(batch: ToolBatch, text: str = "sunny") -> list[ToolResult]:
    return [ToolResult(call_id=c.call_id, output=f"{text} {c.call_id}") for c in batch.calls]


# --- the round trip ---------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [True, False])
def test_calls_are_answered_by_call_id_with_previous_response_id(
    server: ResponsesServer, platform: OpenAIResponsesPlatform, stream: bool
) -> None:
    first = response(call_item(1), call_item(2, arguments='{"city": "Oslo"}'), id="resp_1")
    final = response(message_item("It is sunny."), id="resp_2")
    if stream:
        server.script(stream_reply(events(first)), stream_reply(events(final)))
    else:
        server.script(Reply(json=first), Reply(json=final))
    conv = platform.create_conversation()
    batch = batch_of(run(platform.start(conv, "Weather?", tools=[WEATHER], stream=stream)))
    assert batch.batch_id == "resp_1"
    assert [(c.call_id, c.name, c.arguments_dict()) for c in batch.calls] == [
        ("call_1", "get_weather", {"city": "Paris"}),
        ("call_2", "get_weather", {"city": "Oslo"}),
    ]
    got = run(platform.submit(conv, batch, answer(batch), stream=stream))
    done = got[-1]
    assert isinstance(done, RunFinished) and done.answer == "It is sunny."
    assert done.message_id == "resp_2" and done.usage is not None
    if stream:
        assert "".join(e.text for e in got if isinstance(e, TextDelta)) == "It is sunny."
    first_body, second_body = server.bodies
    assert first_body["input"] == [{"type": "message", "role": "user", "content": "Weather?"}]
    assert "previous_response_id" not in first_body and first_body["stream"] is stream
    assert second_body["previous_response_id"] == "resp_1"
    assert second_body["input"] == [
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny call_1"},
        {"type": "function_call_output", "call_id": "call_2", "output": "sunny call_2"},
    ]
    assert second_body["tools"] == first_body["tools"]
    assert server.requests[0]["headers"]["authorization"] == "Bearer sk-test"
    assert platform.previous_response_id(conv) == "resp_2"


def test_tools_go_out_flat_and_strict_when_every_tool_fits(
    server: ResponsesServer, platform: OpenAIResponsesPlatform
) -> None:
    server.script(
        Reply(json=response(message_item("ok"))), Reply(json=response(message_item("ok")))
    )
    conv = platform.create_conversation()
    run(platform.start(conv, "hi", tools=[WEATHER], stream=False))
    (tool,) = server.bodies[0]["tools"]
    assert tool == {
        "type": "function",
        "name": "get_weather",
        "description": "Weather of a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
            "additionalProperties": False,
        },
        "strict": True,
    }
    run(platform.start(conv, "hi", tools=[WEATHER, FREE_FORM], stream=False))
    tools = server.bodies[1]["tools"]
    assert [t["strict"] for t in tools] == [False, False]
    assert tools[1]["parameters"] == FREE_FORM["function"]["parameters"]  # type: ignore[index]


def test_every_call_must_be_answered(
    server: ResponsesServer, platform: OpenAIResponsesPlatform
) -> None:
    refusal = _openai_error("No tool output found for function call call_2.", "invalid_request")
    server.script(Reply(json=response(call_item(1), call_item(2))), Reply(status=400, json=refusal))
    conv = platform.create_conversation()
    batch = batch_of(run(platform.start(conv, "Weather?", tools=[WEATHER], stream=False)))
    with pytest.raises(UsageError, match=r"no result for call\(s\) call_2"):
        platform.submit(conv, batch, answer(batch)[:1])
    assert len(server.bodies) == 1
    # A new question while calls are unanswered goes to the server, which refuses it: raised
    # at the call, before anything is iterated, so the loop can start a new conversation.
    with pytest.raises(BadRequestError, match="No tool output found for function call call_2"):
        platform.start(conv, "again", tools=[WEATHER])
    assert server.bodies[1]["previous_response_id"] == "resp_1"


def test_the_request_is_sent_at_the_call_and_read_as_iterated(
    server: ResponsesServer, platform: OpenAIResponsesPlatform
) -> None:
    server.script(stream_reply(events(response(message_item("hello there")))))
    conv = platform.create_conversation()
    events_ = platform.start(conv, "hi", tools=[])
    assert len(server.bodies) == 1
    assert platform.previous_response_id(conv) is None
    assert isinstance(run(events_)[-1], RunFinished)
    assert platform.previous_response_id(conv) == "resp_1"


def test_outputs_never_carry_the_items_id(
    server: ResponsesServer, platform: OpenAIResponsesPlatform
) -> None:
    server.script(Reply(json=response(call_item(7))), Reply(json=response(message_item("ok"))))
    conv = platform.create_conversation()
    batch = batch_of(run(platform.start(conv, "Weather?", tools=[WEATHER], stream=False)))
    run(platform.submit(conv, batch, answer(batch), stream=False))
    (output,) = server.bodies[1]["input"]
    assert output["call_id"] == "call_7" and "id" not in output


def test_a_call_without_call_id_is_a_protocol_error(
    server: ResponsesServer, platform: OpenAIResponsesPlatform
) -> None:
    item = {k: v for k, v in call_item(1).items() if k != "call_id"}
    server.script(Reply(json=response(item)))
    conv = platform.create_conversation()
    with pytest.raises(ProtocolError, match="lacks its call_id or name"):
        run(platform.start(conv, "Weather?", tools=[WEATHER], stream=False))


def test_empty_arguments_are_an_empty_object(
    server: ResponsesServer, platform: OpenAIResponsesPlatform
) -> None:
    server.script(stream_reply(events(response(call_item(1, arguments="")))))
    conv = platform.create_conversation()
    batch = batch_of(run(platform.start(conv, "Weather?", tools=[WEATHER])))
    assert batch.calls[0].arguments_dict() == {}


# --- store=false: every item resent (vLLM loses items chained by previous_response_id) ------


def test_store_false_resends_the_whole_transcript_with_encrypted_reasoning(
    server: ResponsesServer,
) -> None:
    reasoning = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "blob"}
    first = response(reasoning, call_item(1), id="resp_1", store=False)
    server.script(
        stream_reply(events(first)),
        stream_reply(events(response(message_item("sunny"), id="resp_2"))),
        Reply(json=response(message_item("bye"), id="resp_3")),
    )
    with OpenAIResponsesPlatform(
        server.base_url, "m", store=False, retry_policy=FAST_RETRIES
    ) as platform:
        conv = platform.create_conversation()
        batch = batch_of(run(platform.start(conv, "Weather?", tools=[WEATHER])))
        run(platform.submit(conv, batch, answer(batch)))
        run(platform.start(conv, "Thanks", tools=[WEATHER], stream=False))
    question = {"type": "message", "role": "user", "content": "Weather?"}
    output = {"type": "function_call_output", "call_id": "call_1", "output": "sunny call_1"}
    for body in server.bodies:
        assert body["store"] is False and "previous_response_id" not in body
        assert body["include"] == ["reasoning.encrypted_content"]
    assert server.bodies[0]["input"] == [question]
    assert server.bodies[1]["input"] == [question, reasoning, call_item(1), output]
    assert server.bodies[2]["input"] == [
        question,
        reasoning,
        call_item(1),
        output,
        message_item("sunny"),
        {"type": "message", "role": "user", "content": "Thanks"},
    ]


def test_the_transcript_and_the_state_given_out_are_copies(server: ResponsesServer) -> None:
    server.script(stream_reply(events(response(call_item(1), id="resp_1", store=False))))
    with OpenAIResponsesPlatform(
        server.base_url, "m", store=False, retry_policy=FAST_RETRIES
    ) as platform:
        conv = platform.create_conversation()
        run(platform.start(conv, "Weather?", tools=[WEATHER]))
        items, state = platform.items(conv), platform.export_state(conv)
        assert state is not None and state["items"] == items
        kept = json.dumps(state)
        items[0]["content"] = "changed"
        state["items"][1]["arguments"] = "{}"
        state["turn_tools"]["tools"][0]["parameters"]["required"].append("country")
        assert json.dumps(platform.export_state(conv)) == kept
        assert platform.items(conv)[0]["content"] == "Weather?"


@pytest.mark.parametrize("store", [True, False])
def test_the_state_as_json_text_is_the_exported_state_written_out(
    server: ResponsesServer, store: bool
) -> None:
    server.script(stream_reply(events(response(call_item(1), id="resp_1", store=store))))
    with OpenAIResponsesPlatform(
        server.base_url, "m", store=store, retry_policy=FAST_RETRIES
    ) as platform:
        conv = platform.create_conversation()
        run(platform.start(conv, "Weather? \u00e9\U0001f600", tools=[WEATHER]))
        state = platform.export_state(conv)
        assert state is not None and state["pending"] is not None
        text = json.dumps(state, ensure_ascii=False, allow_nan=False)
        assert platform.export_state_json(conv) == text
        assert export_state_json(platform, conv) == text


# --- the stream -------------------------------------------------------------------------------


def test_argument_fragments_are_joined_by_item(
    server: ResponsesServer, platform: OpenAIResponsesPlatform
) -> None:
    final = response(
        call_item(1, arguments='{"city": "北京"}'), call_item(2, arguments='{"city": "上海"}')
    )
    stream = events(final, pieces=7)
    # Interleave the two calls' deltas: they are told apart by item_id, not by order.
    deltas = [e for e in stream if e["type"] == "response.function_call_arguments.delta"]
    others = [e for e in stream if e["type"] != "response.function_call_arguments.delta"]
    first_done = next(i for i, e in enumerate(others) if e["type"].endswith("arguments.done"))
    reordered = others[:first_done] + deltas + others[first_done:]
    # Both items must be announced before the interleaved deltas.
    added = [e for e in others if e["type"] == "response.output_item.added"]
    body = [e for e in reordered if e not in added]
    body = body[:2] + added + body[2:]
    numbered = [{**e, "sequence_number": n} for n, e in enumerate(body)]
    # The final event carries no output, as some servers send it: the assembled items count.
    numbered[-1] = {**numbered[-1], "response": {**final, "output": []}}
    server.script(stream_reply(numbered))
    conv = platform.create_conversation()
    batch = batch_of(run(platform.start(conv, "天气", tools=[WEATHER])))
    assert [c.arguments_dict() for c in batch.calls] == [{"city": "北京"}, {"city": "上海"}]


def test_a_sequence_gap_is_a_protocol_error(
    server: ResponsesServer, platform: OpenAIResponsesPlatform
) -> None:
    stream = events(response(call_item(1)))
    del stream[3]  # a lost arguments delta
    server.script(stream_reply(stream))
    conv = platform.create_conversation()
    with pytest.raises(
        ProtocolError, match=r"sequence_number 4 after 2: 1 event\(s\) before it are missing"
    ):
        run(platform.start(conv, "Weather?", tools=[WEATHER]))
    assert platform.previous_response_id(conv) is None


def test_reordered_or_repeated_events_are_a_protocol_error(
    server: ResponsesServer, platform: OpenAIResponsesPlatform
) -> None:
    stream = events(response(call_item(1)))
    swapped = [*stream[:3], stream[4], stream[3], *stream[5:]]
    repeated = [*stream[:4], stream[3], *stream[4:]]
    server.script(stream_reply(swapped), stream_reply(repeated))
    conv = platform.create_conversation()
    with pytest.raises(ProtocolError, match="missing or out of order"):
        run(platform.start(conv, "Weather?", tools=[WEATHER]))
    with pytest.raises(ProtocolError, match="sequence_number 3 after 3: it arrived out of order"):
        run(platform.start(conv, "Weather?", tools=[WEATHER]))


def test_a_server_that_numbers_no_event_is_not_checked(
    server: ResponsesServer, platform: OpenAIResponsesPlatform
) -> None:
    stream = [
        {k: v for k, v in e.items() if k != "sequence_number"}
        for e in events(response(message_item("plain")))
    ]
    server.script(stream_reply(stream))
    conv = platform.create_conversation()
    got = run(platform.start(conv, "hi", tools=[]))
    assert isinstance(got[-1], RunFinished) and got[-1].answer == "plain"


def test_a_delta_for_an_unannounced_item_is_a_protocol_error(
    server: ResponsesServer, platform: OpenAIResponsesPlatform
) -> None:
    stream = [
        e for e in events(response(call_item(1))) if e["type"] != "response.output_item.added"
    ]
    server.script(stream_reply([{**e, "sequence_number": n} for n, e in enumerate(stream)]))
    conv = platform.create_conversation()
    with pytest.raises(ProtocolError, match=r"before its response\.output_item\.added"):
        run(platform.start(conv, "Weather?", tools=[WEATHER]))


def test_a_stream_that_stops_early_is_interrupted(
    server: ResponsesServer, platform: OpenAIResponsesPlatform
) -> None:
    stream = events(response(message_item("long answer here")))
    server.script(stream_reply(stream[:-1]), stream_reply([*stream[:4], DROP]))
    conv = platform.create_conversation()
    with pytest.raises(StreamInterruptedError, match="ended before the response did"):
        run(platform.start(conv, "hi", tools=[]))
    with pytest.raises(StreamInterruptedError) as caught:
        run(platform.start(conv, "hi", tools=[]))
    assert any(isinstance(e, TextDelta) for e in caught.value.received)


def test_a_json_answer_to_a_stream_request_is_read_as_a_body(
    server: ResponsesServer, platform: OpenAIResponsesPlatform
) -> None:
    server.script(Reply(json=response(message_item("no stream here"))))
    conv = platform.create_conversation()
    got = run(platform.start(conv, "hi", tools=[]))
    assert isinstance(got[-1], RunFinished) and got[-1].answer == "no stream here"


# --- failed, incomplete, error events ---------------------------------------------------------


def test_failed_incomplete_and_error_events_end_the_run_without_moving_the_chain(
    server: ResponsesServer, platform: OpenAIResponsesPlatform
) -> None:
    failed = response(
        status="failed", error={"code": "server_error", "message": "model crashed"}, id="r_f"
    )
    incomplete = response(
        call_item(1, arguments='{"ci'),
        status="incomplete",
        incomplete_details={"reason": "max_output_tokens"},
        id="r_i",
    )
    error_event = {
        "type": "error",
        "code": "rate_limit",
        "message": "slow down",
        "sequence_number": 0,
    }
    server.script(
        stream_reply(events(failed)),
        Reply(json=incomplete),
        stream_reply([error_event]),
        Reply(json=response(message_item("fine"), id="r_ok")),
    )
    conv = platform.create_conversation()
    got = run(platform.start(conv, "hi", tools=[WEATHER]))
    assert got[-1] == RunFailed(
        code="server_error",
        message="model crashed",
        request_id=None,
        raw=got[-1].raw,  # type: ignore[union-attr]
    )
    got = run(platform.start(conv, "hi", tools=[WEATHER], stream=False))
    assert isinstance(got[-1], RunFailed) and got[-1].code == "incomplete"
    assert "max_output_tokens" in got[-1].message
    got = run(platform.start(conv, "hi", tools=[WEATHER]))
    assert isinstance(got[-1], RunFailed) and (got[-1].code, got[-1].message) == (
        "rate_limit",
        "slow down",
    )
    assert platform.previous_response_id(conv) is None
    run(platform.start(conv, "hi", tools=[WEATHER], stream=False))
    assert "previous_response_id" not in server.bodies[-1]
    assert platform.previous_response_id(conv) == "r_ok"


# --- HTTP errors ------------------------------------------------------------------------------


def _openai_error(message: str, kind: str, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def test_http_errors_are_mapped_with_the_servers_message(
    server: ResponsesServer, platform: OpenAIResponsesPlatform
) -> None:
    server.script(
        Reply(
            status=400,
            json=_openai_error(
                "No tool output found for function call call_9.", "invalid_request_error"
            ),
            headers={"x-request-id": "req_400"},
        ),
        Reply(
            status=401,
            json=_openai_error(
                "Incorrect API key provided", "invalid_request_error", "invalid_api_key"
            ),
        ),
    )
    conv = platform.create_conversation()
    with pytest.raises(BadRequestError) as bad:
        run(platform.start(conv, "hi", tools=[]))
    assert "No tool output found for function call call_9." in bad.value.message
    assert bad.value.request_id == "req_400"
    with pytest.raises(AuthenticationError) as auth:
        run(platform.start(conv, "hi", tools=[]))
    assert auth.value.code == "invalid_api_key" and "API key" in auth.value.message
    assert "sk-test" not in auth.value.message


def test_429_and_5xx_are_retried_before_any_byte_then_given_up(
    server: ResponsesServer, platform: OpenAIResponsesPlatform
) -> None:
    busy = Reply(
        status=429,
        json=_openai_error("slow down", "rate_limit_exceeded"),
        headers={"Retry-After": "0"},
    )
    down = Reply(status=500, json=_openai_error("boom", "server_error"))
    server.script(busy, Reply(json=response(message_item("ok"))), down, down, down)
    conv = platform.create_conversation()
    got = run(platform.start(conv, "hi", tools=[], stream=False))
    assert isinstance(got[-1], RunFinished) and len(server.bodies) == 2
    with pytest.raises(ServerError, match="gave up after 3 attempts"):
        run(platform.start(conv, "hi", tools=[], stream=False))
    server.script(Reply(status=429, json=_openai_error("quota", "insufficient_quota")))
    with (
        OpenAIResponsesPlatform(server.base_url, "m", max_retries=0) as once,
        pytest.raises(RateLimitError),
    ):
        run(once.start(once.create_conversation(), "hi", tools=[]))


# --- tool choice ------------------------------------------------------------------------------


def test_tool_choice_is_mapped_and_not_forced_again_with_the_outputs(
    server: ResponsesServer, platform: OpenAIResponsesPlatform
) -> None:
    server.script(Reply(json=response(call_item(1))), Reply(json=response(message_item("ok"))))
    conv = platform.create_conversation()
    batch = batch_of(
        run(platform.start(conv, "hi", tools=[WEATHER], tool_choice="get_weather", stream=False))
    )
    run(platform.submit(conv, batch, answer(batch), stream=False))
    assert server.bodies[0]["tool_choice"] == {"type": "function", "name": "get_weather"}
    assert "tool_choice" not in server.bodies[1]
    with pytest.raises(UsageError, match="can force a tool but not its arguments"):
        platform.start(
            conv, "hi", tools=[WEATHER], tool_choice={"name": "get_weather", "input": {"city": "x"}}
        )
    with pytest.raises(UsageError, match="names no tool of this request"):
        platform.start(conv, "hi", tools=[WEATHER], tool_choice="nope")


# --- state across a restart -------------------------------------------------------------------


@pytest.mark.parametrize("store", [True, False])
def test_exported_state_continues_in_another_platform(server: ResponsesServer, store: bool) -> None:
    reasoning = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "blob"}
    server.script(
        Reply(json=response(reasoning, call_item(1), id="resp_1")),
        Reply(json=response(message_item("sunny"), id="resp_2")),
    )
    with OpenAIResponsesPlatform(
        server.base_url, "m", store=store, retry_policy=FAST_RETRIES
    ) as before:
        conv = before.create_conversation()
        batch = batch_of(run(before.start(conv, "Weather?", tools=[WEATHER], stream=False)))
        state = before.export_state(conv)
    assert state is not None
    state = json.loads(json.dumps(state))  # what a journal stores
    assert "sk-" not in json.dumps(state)
    with OpenAIResponsesPlatform(
        server.base_url, "m", store=store, retry_policy=FAST_RETRIES
    ) as after:
        assert not after.knows(conv)
        with pytest.raises(ConversationLostError, match="import_state"):
            after.submit(conv, batch, answer(batch))
        after.import_state(conv, state)
        assert after.knows(conv)
        got = run(after.submit(conv, batch, answer(batch), stream=False))
    assert isinstance(got[-1], RunFinished) and got[-1].answer == "sunny"
    body = server.bodies[1]
    assert body["tools"] == server.bodies[0]["tools"]
    if store:
        assert body["previous_response_id"] == "resp_1"
    else:
        assert [item["type"] for item in body["input"]] == [
            "message",
            "reasoning",
            "function_call",
            "function_call_output",
        ]


def test_import_refuses_a_foreign_state_or_the_other_store_setting(server: ResponsesServer) -> None:
    with OpenAIResponsesPlatform(server.base_url, "m") as platform:
        with pytest.raises(UsageError, match="expected a dict written by export_state"):
            platform.import_state("c", {"messages": []})
        with pytest.raises(UsageError, match="configure the same store setting"):
            platform.import_state("c", {"version": 1, "store": False})
        with pytest.raises(UsageError, match="'items' of type str; expected list"):
            platform.import_state("c", {"version": 1, "store": True, "items": "x"})
        with pytest.raises(UsageError, match="cannot import the state of conversation c"):
            platform.import_state("c", {"version": 1, "store": True, "pending": {"calls": 1}})
        assert not platform.knows("c")


# --- settings ---------------------------------------------------------------------------------


def test_settings_are_checked_and_the_key_never_shown(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_BASE_URL", "OPENAI_MODEL", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ConfigurationError, match="OPENAI_BASE_URL"):
        OpenAIResponsesPlatform(model="m")
    with pytest.raises(ConfigurationError, match="OPENAI_MODEL"):
        OpenAIResponsesPlatform("http://127.0.0.1:1/v1")
    with pytest.raises(ConfigurationError, match="should stop before /responses"):
        OpenAIResponsesPlatform("http://127.0.0.1:1/v1/responses", "m")
    with pytest.raises(ConfigurationError, match="must not set previous_response_id"):
        OpenAIResponsesPlatform(
            "http://127.0.0.1:1/v1", "m", extra_body={"previous_response_id": "x"}
        )
    with pytest.raises(ConfigurationError, match="extra_body must be JSON-serialisable"):
        OpenAIResponsesPlatform("http://127.0.0.1:1/v1", "m", extra_body={"seed": object()})
    with pytest.raises(ConfigurationError, match="store must be True or False"):
        OpenAIResponsesPlatform("http://127.0.0.1:1/v1", "m", store="no")  # type: ignore[arg-type]
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:1/v1")
    monkeypatch.setenv("OPENAI_MODEL", "m")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-value")
    with OpenAIResponsesPlatform() as platform:
        assert "sk-secret-value" not in repr(platform)
        with pytest.raises(UsageError, match="does not upload files"):
            platform.upload_file("c", "x.txt")
        with pytest.raises(UsageError, match="never pauses for human input"):
            platform.resume("c", "i", "yes")


def test_check_makes_a_tiny_response_where_models_are_not_listed() -> None:
    bare = ResponsesServer(models=False)
    with bare.running():
        bare.script(Reply(json=response(message_item("pong"))))
        with OpenAIResponsesPlatform(bare.base_url, "m", retry_policy=FAST_RETRIES) as platform:
            assert "answered a tiny response for model 'm'" in platform.check()
        (body,) = bare.bodies
        assert (body["input"], body["max_output_tokens"], body["store"]) == ("ping", 16, False)
        bare.script(Reply(status=404, json=_openai_error("no such model", "invalid_request")))
        with (
            OpenAIResponsesPlatform(bare.base_url, "m", retry_policy=FAST_RETRIES) as platform,
            pytest.raises(NotFoundError, match="no such model"),
        ):
            platform.check()


def test_check_lists_the_model(server: ResponsesServer, platform: OpenAIResponsesPlatform) -> None:
    assert platform.check().endswith("serves model 'm'")
    with (
        OpenAIResponsesPlatform(server.base_url, "other") as wrong,
        pytest.raises(ConfigurationError, match="it serves: m"),
    ):
        wrong.check()


# --- call ids reused by the server ------------------------------------------------------------


def test_a_call_id_the_server_reuses_runs_again_and_goes_back_under_its_own_id(
    server: ResponsesServer, platform: OpenAIResponsesPlatform
) -> None:
    """Servers that number calls per response ("call_0" every round) get a new run each time."""
    from bridge.bridge import Bridge

    def get_weather(city: str) -> str:
        """Weather.

        Args:
            city: City name.
        """
        return f"sunny in {city}"

    reused = {**call_item(0), "call_id": "call_0"}
    server.script(
        Reply(json=response(reused, id="resp_1")),
        Reply(json=response(message_item("first"), id="resp_2")),
        Reply(json=response({**reused, "arguments": '{"city": "Oslo"}'}, id="resp_3")),
        Reply(json=response(message_item("second"), id="resp_4")),
    )
    with Bridge(platform, tools=[get_weather], stream=False) as bridge:
        conv = bridge.conversation()
        first = conv.ask("Weather in Paris?")
        second = conv.ask("Weather in Oslo?")
    assert [run.output for run in (*first.tool_runs, *second.tool_runs)] == [
        "sunny in Paris",
        "sunny in Oslo",
    ]
    assert second.tool_runs[0].call_id != "call_0"
    outputs = [server.bodies[1]["input"][0], server.bodies[3]["input"][0]]
    assert [(o["call_id"], o["output"]) for o in outputs] == [
        ("call_0", "sunny in Paris"),
        ("call_0", "sunny in Oslo"),
    ]
