"""Property tests of the SSE event bound: whatever the fragmentation and line endings, events
within `MAX_EVENT_BYTES` are read as they are, and an event that grows past it (an endless
``data:`` line, or endless lines without the blank one) stops the reading with `TooLargeError`
before more than the bound (plus one network read) is held."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bridge.platforms import _sse
from bridge.platforms._sse import TooLargeError, iter_sse_data, iter_sse_events

LIMIT = 256


@pytest.fixture(autouse=True)
def _small_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_sse, "MAX_EVENT_BYTES", LIMIT)


def cut(raw: bytes, cuts: list[int]) -> list[bytes]:
    chunks, start = [], 0
    for size in cuts:
        if start >= len(raw):
            break
        chunks.append(raw[start : start + size])
        start += size
    chunks.append(raw[start:])
    return chunks


texts = st.text(st.characters(codec="utf-8", exclude_characters="\r\n"), max_size=60)


@settings(max_examples=150, deadline=None)
@given(
    datas=st.lists(texts.filter(lambda t: t.strip() and t.strip() != "[DONE]"), max_size=8),
    newline=st.sampled_from(["\n", "\r\n", "\r"]),
    cuts=st.lists(st.integers(min_value=1, max_value=50), max_size=80),
)
def test_events_within_the_bound_are_read_whatever_the_cuts(
    datas: list[str], newline: str, cuts: list[int]
) -> None:
    raw = "".join(f"event: x{newline}data: {d}{newline}{newline}" for d in datas).encode()
    got = list(iter_sse_events(iter(cut(raw, cuts))))
    assert got == [("x", d) for d in datas]


@settings(max_examples=150, deadline=None)
@given(
    head=st.lists(texts.filter(lambda t: t.strip() and t.strip() != "[DONE]"), max_size=3),
    many_lines=st.booleans(),
    newline=st.sampled_from(["\n", "\r\n", "\r"]),
    # At least 2: a 1-byte piece of the many-lines kind is a bare newline, and newlines in a
    # row are blank lines, which end (empty, skipped) events: no longer an endless event.
    piece=st.integers(min_value=2, max_value=64),
)
def test_an_event_past_the_bound_stops_the_reading(
    head: list[str], many_lines: bool, newline: str, piece: int
) -> None:
    before = "".join(f"data: {d}{newline}{newline}" for d in head).encode()
    fed = 0

    def endless() -> Iterator[bytes]:
        nonlocal fed
        yield before
        yield b"data: "
        while True:  # the server never ends the event: only the bound stops the reading
            fed += piece
            yield (b"y" * (piece - 1) + newline.encode()[:1]) if many_lines else b"y" * piece

    got: list[str] = []
    with pytest.raises(TooLargeError) as caught:
        for data in iter_sse_data(endless()):
            got.append(data)
    assert got == head  # what came before the endless event was read
    assert caught.value.limit == LIMIT and caught.value.what == "an event"
    assert fed <= 2 * LIMIT + 2 * piece  # read no further than the bound (and a read or two)
