"""OpenAIChatPlatform's history survives its process: export_state/import_state (contract b).

A second platform object stands for the restarted process: it knows nothing until it imports
what the first exported, then continues the conversation with the whole history on the wire.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from openai_fakes import FAST_RETRIES, Reply, ScriptedServer, text_stream, tool_call_stream

from bridge.errors import ConversationLostError, UsageError
from bridge.platforms.base import export_state_of, exports_state, import_state_into
from bridge.platforms.openai_chat import OpenAIChatPlatform
from bridge.types import RunFinished, ToolCallsRequested, ToolResult

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


@pytest.fixture
def restarted(server: ScriptedServer) -> Iterator[OpenAIChatPlatform]:
    with OpenAIChatPlatform(server.base_url, "m", retry_policy=FAST_RETRIES) as p:
        yield p


def test_a_pending_batch_is_answered_by_another_process(
    server: ScriptedServer, platform: OpenAIChatPlatform, restarted: OpenAIChatPlatform
) -> None:
    server.script(
        Reply(stream=text_stream("Hello.")),
        Reply(stream=tool_call_stream("call_1", "get_weather", {"city": "Paris"})),
        Reply(stream=text_stream("Sunny in Paris.", id="chatcmpl-3")),
    )
    conv = platform.create_conversation()
    list(platform.start(conv, "Hi", tools=[WEATHER]))
    *_, paused = platform.start(conv, "Weather in Paris?", tools=[WEATHER], tool_choice="required")
    assert isinstance(paused, ToolCallsRequested)
    state = export_state_of(platform, conv)
    assert state is not None
    json.dumps(state)  # journaled as JSON

    assert exports_state(restarted) and not restarted.knows(conv)
    assert import_state_into(restarted, conv, state)
    assert restarted.knows(conv)
    assert restarted.history(conv) == platform.history(conv)
    # The batch as the journal gives it back (a copy, not the object the first process held).
    batch = type(paused.batch).model_validate(paused.batch.model_dump(mode="json"))
    result = ToolResult(call_id="call_1", output="sunny")
    *_, end = restarted.submit(conv, batch, [result])
    assert isinstance(end, RunFinished) and end.answer == "Sunny in Paris."

    sent = server.bodies[-1]
    assert [(m["role"], m.get("content")) for m in sent["messages"]] == [
        ("user", "Hi"),
        ("assistant", "Hello."),
        ("user", "Weather in Paris?"),
        ("assistant", None),
        ("tool", "sunny"),
    ]
    assert sent["messages"][3]["tool_calls"][0]["id"] == "call_1"
    # The turn's tools are sent again with the results; the forced choice is not.
    assert sent["tools"] == [WEATHER] and "tool_choice" not in sent


def test_a_finished_turn_exports_the_history_only(
    server: ScriptedServer, platform: OpenAIChatPlatform
) -> None:
    server.script(Reply(stream=text_stream("Hello.")))
    conv = platform.create_conversation()
    list(platform.start(conv, "Hi", tools=[WEATHER]))
    state = platform.export_state(conv)
    assert state == {
        "version": 1,
        "messages": [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello."},
        ],
        "pending": None,
        "turn_tools": {},
        "turn_usage": None,
        "text_turn": None,
    }


def test_a_system_prompt_travels_with_the_history(
    server: ScriptedServer, restarted: OpenAIChatPlatform
) -> None:
    with OpenAIChatPlatform(server.base_url, "m", system="Be brief.") as first:
        conv = first.create_conversation()
        state = first.export_state(conv)
    assert state is not None
    restarted.import_state(conv, state)
    server.script(Reply(stream=text_stream("Ok.")))
    list(restarted.start(conv, "Hi", tools=[]))
    assert server.bodies[-1]["messages"][0] == {"role": "system", "content": "Be brief."}


def test_an_unknown_conversation_exports_nothing(platform: OpenAIChatPlatform) -> None:
    assert platform.export_state("never-created") is None
    with pytest.raises(ConversationLostError, match="do not survive a restart"):
        platform.start("never-created", "Hi", tools=[])


def test_import_replaces_what_the_process_held(
    server: ScriptedServer, platform: OpenAIChatPlatform
) -> None:
    conv = platform.create_conversation()
    platform.import_state(conv, {"version": 1, "messages": [{"role": "user", "content": "x"}]})
    assert platform.history(conv) == [{"role": "user", "content": "x"}]


def test_imported_state_is_not_shared_with_the_caller(platform: OpenAIChatPlatform) -> None:
    state: dict[str, Any] = {"version": 1, "messages": [{"role": "user", "content": "x"}]}
    platform.import_state("c1", state)
    state["messages"][0]["content"] = "changed"
    assert platform.history("c1") == [{"role": "user", "content": "x"}]


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        ({"messages": "hello"}, "messages: Input should be a valid list"),
        ({"version": 2, "messages": []}, "version: Input should be 1"),
        ({}, "messages: Field required"),
        ({"messages": [], "history": []}, "history: Extra inputs are not permitted"),
        ({"messages": [], "pending": {"calls": []}}, "pending.batch_id: Field required"),
    ],
)
def test_a_state_that_is_not_an_export_is_refused_clearly(
    platform: OpenAIChatPlatform, state: dict[str, Any], expected: str
) -> None:
    with pytest.raises(UsageError) as info:
        platform.import_state("c1", state)
    message = str(info.value)
    assert "cannot continue conversation 'c1' on the openai platform" in message
    assert expected in message
    assert not platform.knows("c1")


def test_the_text_protocol_turn_survives_a_pending_batch(server: ScriptedServer) -> None:
    reply = (
        'Calling it.\n<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>'
    )
    server.script(Reply(stream=text_stream(reply)))
    with (
        OpenAIChatPlatform(server.base_url, "m", tool_protocol="text") as first,
        OpenAIChatPlatform(server.base_url, "m", tool_protocol="text") as second,
    ):
        conv = first.create_conversation()
        *_, paused = first.start(conv, "Weather in Oslo?", tools=[WEATHER])
        assert isinstance(paused, ToolCallsRequested), paused
        state = first.export_state(conv)
        assert state is not None and state["text_turn"]["names"] == ["get_weather"]
        second.import_state(conv, json.loads(json.dumps(state)))
        assert second.export_state(conv) == state
        server.script(Reply(stream=text_stream("Cold in Oslo.")))
        [call] = paused.batch.calls
        *_, end = second.submit(conv, paused.batch, [ToolResult(call_id=call.call_id, output="-3")])
        assert isinstance(end, RunFinished) and end.answer == "Cold in Oslo."
        # The tools prompt of the turn is still described after the restart.
        assert "get_weather" in server.bodies[-1]["messages"][0]["content"]
