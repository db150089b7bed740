"""Properties of the Responses stream assembly (pure, no I/O): however a server cuts and
interleaves the argument deltas of parallel calls, the calls come out whole; any lost or
reordered event is refused."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bridge.errors import ProtocolError
from bridge.platforms.openai_responses.models import function_calls
from bridge.platforms.openai_responses.stream import StreamAssembler

ARGUMENTS = st.dictionaries(
    st.text(min_size=1, max_size=8),
    st.one_of(st.text(max_size=20), st.integers(), st.booleans(), st.none()),
    max_size=4,
)


def _cuts(text: str, points: list[int]) -> list[str]:
    marks = sorted({p % (len(text) + 1) for p in points} | {0, len(text)})
    return [text[a:b] for a, b in itertools.pairwise(marks) if b > a] or [""]


@st.composite
def streams(draw: st.DrawFn) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Events of a response with 1-3 calls whose deltas are cut and interleaved at random."""
    count = draw(st.integers(min_value=1, max_value=3))
    calls = [
        {
            "type": "function_call",
            "id": f"fc_{n}",
            "call_id": f"call_{n}",
            "name": f"tool_{n}",
            "arguments": json.dumps(draw(ARGUMENTS), ensure_ascii=False),
        }
        for n in range(count)
    ]
    events: list[dict[str, Any]] = [{"type": "response.created", "response": {"id": "r"}}]
    for n, call in enumerate(calls):
        added = {**call, "arguments": ""}
        events.append({"type": "response.output_item.added", "output_index": n, "item": added})
    queues = [
        [
            {
                "type": "response.function_call_arguments.delta",
                "output_index": n,
                "item_id": call["id"],
                "delta": piece,
            }
            for piece in _cuts(call["arguments"], draw(st.lists(st.integers(0, 200), max_size=6)))
        ]
        for n, call in enumerate(calls)
    ]
    while any(queues):
        pick = draw(st.sampled_from([q for q in queues if q]))
        events.append(pick.pop(0))
    for n, call in enumerate(calls):
        # Some servers leave the arguments out of the done item: the deltas must be kept.
        done = call if draw(st.booleans()) else {k: v for k, v in call.items() if k != "arguments"}
        events.append({"type": "response.output_item.done", "output_index": n, "item": done})
    events.append({"type": "response.completed", "response": {"id": "r", "status": "completed"}})
    return [{**e, "sequence_number": i} for i, e in enumerate(events)], calls


@settings(max_examples=150, deadline=None)
@given(streams())
def test_cut_and_interleaved_deltas_make_whole_calls(
    case: tuple[list[dict[str, Any]], list[dict[str, Any]]],
) -> None:
    events, calls = case
    assembler = StreamAssembler("test")
    for event in events:
        assembler.feed(event)
    assert assembler.finished and assembler.turn.status == "completed"
    got = function_calls(assembler.turn.output, "test")
    assert [(c.call_id, c.name, c.arguments) for c in got] == [
        (c["call_id"], c["name"], c["arguments"]) for c in calls
    ]


@settings(max_examples=100, deadline=None)
@given(streams(), st.data())
def test_a_lost_event_is_always_refused(
    case: tuple[list[dict[str, Any]], list[dict[str, Any]]], data: st.DataObject
) -> None:
    events, _ = case
    lost = data.draw(st.integers(min_value=1, max_value=len(events) - 2))
    assembler = StreamAssembler("test")
    with pytest.raises(ProtocolError, match="sequence_number"):
        for event in events[:lost] + events[lost + 1 :]:
            assembler.feed(event)
