"""Property tests: SSE framing does not depend on how the bytes are split or which newline
the server uses; tool arguments coerce the same whatever their JSON spelling."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from bridge.platforms._sse import iter_sse_data
from bridge.tools import Toolbox, manifest

payloads = st.lists(
    st.dictionaries(
        st.text(min_size=1, max_size=8),
        st.one_of(st.integers(), st.text(max_size=20), st.booleans()),
        max_size=4,
    ),
    min_size=1,
    max_size=6,
)


@settings(max_examples=150, deadline=None)
@given(
    events=payloads,
    newline=st.sampled_from(["\n", "\r\n", "\r"]),
    space=st.booleans(),
    comments=st.booleans(),
    cuts=st.lists(st.integers(min_value=1, max_value=40), max_size=60),
)
def test_framing_is_independent_of_chunking_and_newlines(
    events: list[dict[str, object]], newline: str, space: bool, comments: bool, cuts: list[int]
) -> None:
    lines: list[str] = []
    for event in events:
        if comments:
            lines.append(": keep-alive")
            lines.append("event: message")
        lines.append(("data: " if space else "data:") + json.dumps(event, ensure_ascii=False))
        lines.append("")
    raw = newline.join(lines).encode("utf-8") + newline.encode()
    chunks, start = [], 0
    for cut in cuts:
        if start >= len(raw):
            break
        chunks.append(raw[start : start + cut])
        start += cut
    chunks.append(raw[start:])
    decoded = [json.loads(data) for data in iter_sse_data(iter(chunks))]
    assert decoded == events


@manifest(description="Add two integers.")
def add(a: int, b: int = 0) -> int:
    return a + b


TOOLBOX = Toolbox([add])


@settings(max_examples=100, deadline=None)
@given(a=st.integers(-(10**12), 10**12), b=st.integers(-(10**6), 10**6), as_text=st.booleans())
def test_numbers_sent_as_text_are_coerced(a: int, b: int, as_text: bool) -> None:
    spec = TOOLBOX.get("add")
    assert spec is not None
    raw = {"a": str(a), "b": str(b)} if as_text else {"a": a, "b": b}
    assert spec.function(**spec.validate(raw)) == a + b


def _sseclient_data(chunks: list[bytes]) -> list[str]:
    """The reference: every event through sseclient-py, as `iter_sse_data` read them before
    its fast paths (one `data:` line; an `event:` line and one `data:` line)."""
    import sseclient

    from bridge.platforms._sse import DONE, _normalise_newlines, _whole_events

    found: list[str] = []
    client = sseclient.SSEClient(_whole_events(_normalise_newlines(chunks)), char_enc="utf-8")
    for event in client.events():
        if not event.data:
            continue
        if event.data.strip() == DONE:
            break
        found.append(event.data)
    return found


SSE_PIECES = st.sampled_from(
    [
        b"data:",
        b"data: ",
        b"data:  ",
        b"data",
        b"event: x",
        b"event:",
        b"event:data:",
        b"id: 7",
        b"retry: 5",
        b": c",
        b":",
        b" ",
        b"\t",
        b"x",
        b"{}",
        b"[DONE]",
        b"\xc3\xa9",
        b"\xef\xbb\xbf",
        b"\xff",
        b"\n",
        b"\r",
        b"\r\n",
        b"\n\n",
    ]
)


@settings(max_examples=400, deadline=None)
@given(
    pieces=st.lists(SSE_PIECES, max_size=40),
    cuts=st.lists(st.integers(min_value=1, max_value=12), max_size=30),
)
def test_single_line_fast_path_reads_what_sseclient_reads(
    pieces: list[bytes], cuts: list[int]
) -> None:
    """Any stream, split anywhere: the same data, or the same error, as sseclient-py alone."""
    raw = b"".join(pieces)
    chunks, start = [], 0
    for cut in cuts:
        chunks.append(raw[start : start + cut])
        start += cut
    chunks.append(raw[start:])
    expected: list[str] | type[BaseException]
    try:
        expected = _sseclient_data(list(chunks))
    except UnicodeDecodeError:
        expected = UnicodeDecodeError
    try:
        got: list[str] | type[BaseException] = list(iter_sse_data(iter(chunks)))
    except UnicodeDecodeError:
        got = UnicodeDecodeError
    assert got == expected
