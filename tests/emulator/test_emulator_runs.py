"""Runs: event sequences (stream and non-stream) and the per-conversation state machine."""

from __future__ import annotations

import json
import uuid

import pytest

from bridge.emulator import Emulator
from tests.emulator.helpers import (
    WEATHER,
    Api,
    body_events,
    interrupt_calls,
    statuses,
)

WEATHER_QUERY = "What is the weather in Paris in fahrenheit?"
ANSWER_STATUSES = [
    "status/preparing",
    "text/running",
    "text/running",
    "text/done",
    "status/success",
]


def _start(api: Api, stream: bool) -> tuple[str, list[dict[str, object]]]:
    conversation_id = api.create()
    return conversation_id, api.chunks(
        conversation_id, WEATHER_QUERY, stream=stream, tools=[WEATHER]
    )


# --- sequences --------------------------------------------------------------------------------


def test_stream_tool_round_is_preparing_then_interrupt_then_eof(api: Api) -> None:
    conversation_id, chunks = _start(api, stream=True)
    assert statuses(chunks) == ["status/preparing", "contexts/interrupt"]
    assert all(len(c["content"]) == 1 for c in chunks)  # the SDK handler reads the last event
    assert all(c["answer"] == "" and c["is_completion"] is False for c in chunks)
    interrupt = chunks[-1]["content"][0]
    assert interrupt["event_type"] == "Interrupt" and interrupt["event_code"] == 0
    assert interrupt["usage"] is None
    (call,) = interrupt["tool_calls"]
    uuid.UUID(call["id"])
    assert call == {
        "id": call["id"],
        "type": "function",
        "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "fahrenheit"}},
    }
    function_call = interrupt["outputs"]["text"]["function_call"]
    assert function_call["tool_call_id"] == call["id"]
    assert function_call["name"] == "get_weather"
    assert function_call["arguments"] == {"city": "Paris", "unit": "fahrenheit"}
    assert "get_weather" in function_call["thought"]
    assert function_call["usage"]["type"] == "plan"
    assert interrupt["outputs"]["text"]["used_tool"] == []
    for chunk in chunks:
        assert chunk["conversation_id"] == conversation_id
        assert set(chunk) == {
            "request_id",
            "date",
            "answer",
            "conversation_id",
            "message_id",
            "is_completion",
            "content",
        }
    assert len({c["request_id"] for c in chunks}) == 1


def test_stream_answer_round_has_deltas_usage_success_and_an_empty_last_chunk(api: Api) -> None:
    conversation_id, chunks = _start(api, stream=True)
    (call,) = interrupt_calls(chunks)
    answer_chunks = api.submit(conversation_id, {call["id"]: "Sunny, 70F"}, stream=True)
    assert statuses(answer_chunks) == ANSWER_STATUSES
    assert "".join(c["answer"] for c in answer_chunks) == "Sunny, 70F"
    running = [e for e in body_events(answer_chunks) if e["event_status"] == "running"]
    assert [e["outputs"]["text"] for e in running] == ["Sunny, 7", "0F"]
    for event in running:
        usage = event["usage"]
        assert set(usage) == {"prompt_tokens", "completion_tokens", "total_tokens", "name"}
        assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    done = body_events(answer_chunks)[3]
    assert done["usage"]["completion_tokens"] == running[-1]["usage"]["completion_tokens"]
    last = answer_chunks[-1]
    assert last["content"] == [] and last["answer"] == "" and last["is_completion"] is True
    assert {c["message_id"] for c in chunks + answer_chunks} == {chunks[0]["message_id"]}
    event_ids = [int(e["event_id"]) for e in body_events(chunks + answer_chunks)]
    assert event_ids == sorted(event_ids) and len(set(event_ids)) == len(event_ids)


def test_non_stream_returns_one_body_with_every_event_and_the_full_answer(api: Api) -> None:
    conversation_id, (first,) = _start(api, stream=False)
    assert [f"{e['content_type']}/{e['event_status']}" for e in first["content"]] == [
        "status/preparing",
        "contexts/interrupt",
    ]
    assert first["answer"] == "" and first["is_completion"] is False
    call = first["content"][-1]["tool_calls"][-1]  # message.content.events[-1].tool_calls[-1]
    (second,) = api.submit(conversation_id, {call["id"]: "Sunny, 70F"})
    assert second["answer"] == "Sunny, 70F" and second["is_completion"] is True
    assert [
        f"{e['content_type']}/{e['event_status']}" for e in second["content"]
    ] == ANSWER_STATUSES
    assert second["content"][-1]["event_status"] == "success"


def test_query_without_tools_gets_a_plain_answer(api: Api, emu: Emulator) -> None:
    conversation_id = api.create()
    chunks = api.chunks(conversation_id, "tell me a joke", stream=True)
    assert statuses(chunks)[0] == "status/preparing"
    assert statuses(chunks)[-2:] == ["text/done", "status/success"]
    answer = "".join(c["answer"] for c in chunks)
    assert "No tool matched" in answer and "tell me a joke" in answer
    (message,) = emu.conversation(conversation_id).messages
    assert message.answer == answer and message.status == "success" and message.tool_calls == ()


def test_the_body_keeps_non_ascii_text_readable(api: Api) -> None:
    conversation_id = api.create()
    response = api.run(conversation_id, "讲个笑话", stream=False)
    assert "讲个笑话" in response.content.decode("utf-8")
    assert "\\u" not in response.text


# --- state machine ----------------------------------------------------------------------------


def test_pending_calls_are_visible_then_cleared(api: Api, emu: Emulator) -> None:
    conversation_id, chunks = _start(api, stream=False)
    (call,) = interrupt_calls(chunks)
    snapshot = emu.conversation(conversation_id)
    assert snapshot.pending_call_ids == (call["id"],)
    assert snapshot.pending_calls[0].arguments == {"city": "Paris", "unit": "fahrenheit"}
    api.submit(conversation_id, {call["id"]: "Sunny"})
    snapshot = emu.conversation(conversation_id)
    assert snapshot.pending_call_ids == ()
    (message,) = snapshot.messages
    assert message.query == WEATHER_QUERY and message.answer == "Sunny"
    assert [(c.name, c.output) for c in message.tool_calls] == [("get_weather", "Sunny")]


def test_outputs_for_unknown_ids_are_400_naming_them(api: Api, emu: Emulator) -> None:
    conversation_id, chunks = _start(api, stream=False)
    (call,) = interrupt_calls(chunks)
    outputs = [
        {"tool_call_id": call["id"], "output": "x"},
        {"tool_call_id": "made-up", "output": "y"},
    ]
    response = api.run(conversation_id, tool_outputs=outputs)
    assert response.status_code == 400
    message = response.json()["message"]
    assert "unknown tool_call_id(s) made-up" in message and call["id"] in message
    assert emu.conversation(conversation_id).pending_call_ids == (call["id"],)  # unchanged


def test_outputs_missing_a_pending_id_are_400_naming_it(api: Api) -> None:
    conversation_id = api.create()
    query = "weather in Paris"
    chunks = api.chunks(conversation_id, query, stream=False, tools=[WEATHER])
    (call,) = interrupt_calls(chunks)
    response = api.run(conversation_id, tool_outputs=[{"tool_call_id": "other", "output": "x"}])
    message = response.json()["message"]
    assert response.status_code == 400
    assert f"missing output(s) for tool_call_id(s) {call['id']}" in message
    assert "unknown tool_call_id(s) other" in message


def test_repeated_output_ids_are_400(api: Api) -> None:
    conversation_id, chunks = _start(api, stream=False)
    (call,) = interrupt_calls(chunks)
    twice = [{"tool_call_id": call["id"], "output": "x"}] * 2
    response = api.run(conversation_id, tool_outputs=twice)
    assert response.status_code == 400
    assert f"repeated tool_call_id(s) {call['id']}" in response.json()["message"]


def test_outputs_without_a_pending_interrupt_are_400(api: Api) -> None:
    conversation_id = api.create()
    response = api.run(conversation_id, tool_outputs=[{"tool_call_id": "a", "output": "x"}])
    assert response.status_code == 400
    assert "has no pending tool calls" in response.json()["message"]


def test_a_new_query_while_calls_are_pending_is_400(api: Api) -> None:
    conversation_id, chunks = _start(api, stream=False)
    (call,) = interrupt_calls(chunks)
    response = api.run(conversation_id, "something else")
    assert response.status_code == 400
    message = response.json()["message"]
    assert "is waiting for tool outputs" in message and call["id"] in message
    api.submit(conversation_id, {call["id"]: "done"})
    assert api.run(conversation_id, "something else").status_code == 200


def test_outputs_cannot_be_submitted_twice(api: Api) -> None:
    conversation_id, chunks = _start(api, stream=False)
    (call,) = interrupt_calls(chunks)
    api.submit(conversation_id, {call["id"]: "Sunny"})
    response = api.run(conversation_id, tool_outputs=[{"tool_call_id": call["id"], "output": "x"}])
    assert response.status_code == 400
    assert "no pending tool calls" in response.json()["message"]


def test_conversations_are_independent(api: Api, emu: Emulator) -> None:
    first, chunks = _start(api, stream=False)
    second = api.create()
    assert api.run(second, "another question").status_code == 200
    assert emu.conversation(first).pending_call_ids == (interrupt_calls(chunks)[0]["id"],)
    with pytest.raises(KeyError, match="no conversation 'nope'"):
        emu.conversation("nope")


def test_recorded_run_bodies_are_exactly_what_was_sent(api: Api, emu: Emulator) -> None:
    conversation_id = api.create()
    api.run(conversation_id, "北京天气?", tools=[WEATHER])
    recorded = emu.requests[-1]
    assert recorded.path == "/v2/app/conversation/runs"
    assert recorded.json == api.run_body(conversation_id, "北京天气?", tools=[WEATHER])
    assert list(recorded.json) == list(api.run_body(conversation_id))  # key order kept
    assert json.dumps(recorded.json)  # plain JSON values
