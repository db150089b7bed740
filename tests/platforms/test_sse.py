"""SSE framing (`bridge.platforms._sse.iter_sse_data`) over in-memory byte chunks.

Parsing only: the bytes are fed as fragments of every size with every line ending, as a
network would deliver them.
"""

from __future__ import annotations

import json

import pytest

from bridge.platforms._sse import DONE, iter_sse_data

FRAGMENT_SIZES = [1, 2, 3, 7, 64, 1000, 100_000]
LINE_ENDINGS = {"lf": b"\n", "cr": b"\r", "crlf": b"\r\n"}


def _split(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


def _stream(lines: list[str], eol: bytes) -> bytes:
    return b"".join(line.encode() + eol for line in lines)


SCENARIO = [
    ": a comment, ignored",
    "event: message",
    "id: 1",
    'data: {"answer": "\u4f60\u597d"}',
    "",
    "data:no-space",
    "",
    "event: ping",
    "",
    "retry: 1000",
    "data: first line",
    "data: second line",
    "",
    "id: 7",
    "",
    "data: last",
    "",
]
EXPECTED = ['{"answer": "\u4f60\u597d"}', "no-space", "first line\nsecond line", "last"]


@pytest.mark.parametrize("size", FRAGMENT_SIZES)
@pytest.mark.parametrize("eol", list(LINE_ENDINGS), ids=list(LINE_ENDINGS))
def test_every_fragment_size_and_line_ending_gives_the_same_events(size: int, eol: str) -> None:
    data = _stream(SCENARIO, LINE_ENDINGS[eol])
    assert list(iter_sse_data(_split(data, size))) == EXPECTED


@pytest.mark.parametrize("size", [1, 2, 5])
def test_crlf_split_between_chunks_is_one_line_end(size: int) -> None:
    # "\r" at the end of one chunk and "\n" at the start of the next must not make two lines,
    # or "data: a" would be dispatched on its own and "data: b" become a second event.
    data = b"data: a\r\ndata: b\r\n\r\n"
    assert list(iter_sse_data(_split(data, size))) == ["a\nb"]


def test_mixed_line_endings_in_one_stream() -> None:
    data = b"data: one\r\n\r\ndata: two\n\ndata: three\r\r"
    assert list(iter_sse_data([data])) == ["one", "two", "three"]


def test_done_sentinel_ends_the_stream() -> None:
    data = b"data: 1\n\ndata: [DONE]\n\ndata: never\n\n"
    assert list(iter_sse_data([data])) == ["1"]
    assert DONE == "[DONE]"


def test_eof_ends_the_stream_and_keeps_an_unterminated_event() -> None:
    assert list(iter_sse_data([b"data: 1\n\ndata: 2"])) == ["1", "2"]
    assert list(iter_sse_data([b"data: 1\n\ndata: 2\n"])) == ["1", "2"]


def test_empty_stream_and_only_comments_yield_nothing() -> None:
    assert list(iter_sse_data([])) == []
    assert list(iter_sse_data([b"", b": keep-alive\n\n", b":\n\n"])) == []


def test_data_less_events_are_skipped() -> None:
    data = b"event: ping\n\nid: 3\n\nretry: 10\n\ndata: real\n\n"
    assert list(iter_sse_data([data])) == ["real"]


def test_empty_data_line_is_skipped() -> None:
    assert list(iter_sse_data([b"data:\n\ndata: x\n\n"])) == ["x"]


@pytest.mark.parametrize("size", [1, 2, 3, 4])
def test_leading_utf8_bom_is_ignored(size: int) -> None:
    data = b"\xef\xbb\xbfdata: x\n\n"
    assert list(iter_sse_data(_split(data, size))) == ["x"]


@pytest.mark.parametrize("size", [1, 2])
def test_multibyte_utf8_split_across_chunks(size: int) -> None:
    text = "\u5317\u4eac\u5929\u6c14 \U0001f600"
    data = f"data: {text}\n\n".encode()
    assert list(iter_sse_data(_split(data, size))) == [text]


def test_invalid_utf8_raises_unicode_decode_error() -> None:
    with pytest.raises(UnicodeDecodeError):
        list(iter_sse_data([b"data: \xff\xfe\n\n"]))


def test_transport_errors_propagate_unchanged() -> None:
    class BoomError(Exception):
        pass

    def chunks() -> object:
        yield b"data: 1\n\n"
        raise BoomError("connection reset")

    seen = []
    with pytest.raises(BoomError):
        for item in iter_sse_data(chunks()):  # type: ignore[arg-type]
            seen.append(item)
    assert seen == ["1"]


def test_events_are_yielded_as_soon_as_they_are_complete() -> None:
    # A streaming consumer must not wait for later network reads to see an event.
    def chunks() -> object:
        yield b"data: first\n\n"
        raise AssertionError("read past the first event before it was consumed")

    assert next(iter_sse_data(chunks())) == "first"  # type: ignore[arg-type]


@pytest.mark.parametrize("size", [1, 1500, 65536])
def test_large_events_in_small_fragments(size: int) -> None:
    payloads = [json.dumps({"i": i, "text": "x" * 50_000}) for i in range(4)]
    data = b"".join(b"data: " + p.encode() + b"\r\n\r\n" for p in payloads)
    assert list(iter_sse_data(_split(data, size))) == payloads


def test_many_small_events_in_one_chunk() -> None:
    data = b"".join(f"data: {i}\n\n".encode() for i in range(10_000))
    assert list(iter_sse_data([data])) == [str(i) for i in range(10_000)]
