"""Coze's named SSE events read from any fragmentation and line ending, and `ChatReader`."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from bridge.platforms._sse import iter_sse_events
from bridge.platforms.coze.stream import ChatReader
from bridge.types import Other, RunFinished, TextDelta, ToolCallsRequested

CHAT = {"id": "k1", "conversation_id": "c1", "status": "completed"}
MESSAGE = {"id": "m1", "type": "answer", "content": "你好, world", "content_type": "text"}
EVENTS = [
    ("conversation.chat.created", json.dumps({**CHAT, "status": "created"})),
    ("conversation.message.completed", json.dumps(MESSAGE, ensure_ascii=False)),
    ("conversation.chat.completed", json.dumps(CHAT)),
    ("done", '"[DONE]"'),
]


def encode(newline: str) -> bytes:
    text = "".join(f"event:{name}{newline}data:{data}{newline}{newline}" for name, data in EVENTS)
    return text.encode("utf-8")


@given(
    newline=st.sampled_from(["\n", "\r\n", "\r"]),
    cuts=st.lists(st.integers(min_value=1, max_value=400), max_size=40),
)
def test_named_events_survive_any_fragmentation(newline: str, cuts: list[int]) -> None:
    data = encode(newline)
    points = sorted({c for c in cuts if c < len(data)})
    pieces = [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]
    assert list(iter_sse_events(pieces)) == EVENTS


def test_an_event_without_a_name_is_a_message_and_empty_data_is_skipped() -> None:
    chunks = [b": comment\n\nevent:ping\n\ndata:{}\n\n"]
    assert list(iter_sse_events(chunks)) == [("message", "{}")]


def test_a_completed_answer_without_deltas_is_one_text_delta() -> None:
    reader = ChatReader("L")
    seen = [e for name, data in EVENTS for e in reader.feed(name, data)]
    assert [type(e) for e in seen] == [Other, TextDelta]
    assert isinstance(seen[1], TextDelta) and seen[1].text == "你好, world"
    assert reader.done and isinstance(reader.outcome, RunFinished)
    assert reader.outcome.answer == "你好, world" and reader.outcome.request_id == "L"


def test_deltas_are_not_repeated_by_their_completed_message() -> None:
    reader = ChatReader(None)
    delta = {**MESSAGE, "content": "你好"}
    events = reader.feed("conversation.message.delta", json.dumps(delta))
    events += reader.feed("conversation.message.completed", json.dumps(MESSAGE))
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["你好"]


def test_the_pause_is_held_until_the_stream_ends() -> None:
    chat = {
        **CHAT,
        "status": "requires_action",
        "required_action": {
            "submit_tool_outputs": {
                "tool_calls": [
                    {"id": "x=", "type": "function", "function": {"name": "f", "arguments": ""}}
                ]
            }
        },
    }
    reader = ChatReader("L")
    assert reader.feed("conversation.chat.requires_action", json.dumps(chat)) == []
    assert isinstance(reader.outcome, ToolCallsRequested)
    assert reader.outcome.batch.calls[0].arguments == {}
