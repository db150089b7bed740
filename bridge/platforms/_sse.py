"""Server-Sent Events framing over a streaming `requests` response, via sseclient-py.

Knows no platform: it yields the `data` of each event as text. Tolerates `data:` without a
space, CRLF/CR/LF line endings (also split across chunks), a leading UTF-8 BOM, `:` comments,
`event:`/`id:`/`retry:` lines and data-less events (skipped). A `[DONE]` sentinel ends the
stream, and so does EOF (an event cut off by EOF without its blank line is still delivered).

Bytes that are not UTF-8 raise `UnicodeDecodeError`, and an event that grows past
`MAX_EVENT_BYTES` without its blank line raises `TooLargeError`; the adapter maps both. The
bound is what keeps a broken or hostile server (one endless ``data:`` line) from filling memory.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import sseclient

__all__ = ["DONE", "MAX_EVENT_BYTES", "TooLargeError", "iter_sse_data", "iter_sse_events"]

DONE = "[DONE]"
MAX_EVENT_BYTES = 32 * 1024 * 1024
"""Bytes one event may reach before its end: far above any real answer chunk or tool call."""
_BOM = b"\xef\xbb\xbf"


class TooLargeError(Exception):
    """An answer (one stream event, or a whole body) is larger than its bound."""

    def __init__(self, what: str, limit: int) -> None:
        super().__init__(f"{what} is larger than {limit} bytes")
        self.what = what
        """What grew too large ("an event", "the body")."""
        self.limit = limit


def iter_sse_data(chunks: Iterable[bytes]) -> Iterator[str]:
    """Yield the data of every event in a byte stream, stopping at `[DONE]` or EOF.

    `chunks` is usually a response's `RunBudget.chunks` (`_transport.stream_chunks`); errors
    raised while reading it propagate unchanged so the adapter can map them.
    """
    for data in _event_data(_whole_events(_normalise_newlines(chunks))):
        if not data:
            continue  # heartbeats and `event: ping` frames carry no payload
        if data.strip() == DONE:
            return
        yield data


def iter_sse_events(chunks: Iterable[bytes]) -> Iterator[tuple[str, str]]:
    """Yield ``(event name, data)`` of every event with data, until EOF.

    For protocols that name their events (Coze's ``event:conversation.chat.completed``); the
    name is ``message`` when an event has no ``event:`` line. No sentinel is interpreted: the
    caller decides what ends its stream.
    """
    client = sseclient.SSEClient(_whole_events(_normalise_newlines(chunks)), char_enc="utf-8")
    for event in client.events():
        if event.data:
            yield event.event or "message", event.data


def _event_data(pieces: Iterable[bytes]) -> Iterator[str]:
    """The data of each event in LF-only `pieces` that end on event boundaries (the last one
    may be an event cut off by EOF), as sseclient-py reads it.

    An event that is one ``data:`` line, what most platforms send for each chunk, or an
    ``event:`` line and one ``data:`` line (the Responses API's shape), is read here (one
    decode, one slice); any other event (more lines, comments, ``id:`` fields, stray blank
    lines) is handed to sseclient-py whole. Both read the same text
    (`tests/platforms/test_sse_properties.py` compares them on generated streams).
    """
    for piece in pieces:
        for block in piece.split(b"\n\n"):
            if not block:
                continue
            if block.startswith(b"data:") and b"\n" not in block:
                value = block.decode("utf-8")[5:]  # the whole line, as sseclient decodes it
                yield value[1:] if value.startswith(" ") else value
                continue
            if block.startswith(b"event:"):
                end = block.find(b"\n")
                if block.startswith(b"data:", end + 1) and block.find(b"\n", end + 1) < 0:
                    block[:end].decode("utf-8")  # as sseclient decodes it: bad UTF-8 fails
                    value = block[end + 1 :].decode("utf-8")[5:]
                    yield value[1:] if value.startswith(" ") else value
                    continue
            for event in sseclient.SSEClient(iter([block + b"\n\n"]), char_enc="utf-8").events():
                yield event.data


def _normalise_newlines(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """Turn CRLF and lone CR into LF, even when a CRLF pair straddles two chunks."""
    pending_cr = False
    first = True
    stream = iter(chunks)
    for chunk in stream:
        if not chunk:
            continue
        if first:
            # The BOM may itself be split; wait for three bytes before deciding.
            if len(chunk) < len(_BOM) and _BOM.startswith(chunk):
                head = bytearray(chunk)
                for more in stream:
                    head += more
                    if len(head) >= len(_BOM) or not _BOM.startswith(bytes(head)):
                        break
                chunk = bytes(head)
            first = False
            if chunk.startswith(_BOM):
                chunk = chunk[len(_BOM) :]
            if not chunk:
                continue
        if pending_cr:
            chunk = b"\r" + chunk
            pending_cr = False
        if chunk.endswith(b"\r"):
            chunk = chunk[:-1]
            pending_cr = True
        yield chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    if pending_cr:
        yield b"\n"


def _whole_events(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """Regroup LF-only bytes so that each piece ends on an event boundary (a blank line).

    sseclient-py stitches fragments with `bytes +=` per line, which is quadratic when a large
    event arrives in many small network reads; handing it whole events keeps parsing linear.
    Only the unfinished event is held, so `MAX_EVENT_BYTES` (read at each call, so tests can
    lower it) bounds the memory a stream takes, however long it runs.
    """
    limit = MAX_EVENT_BYTES
    buffer = bytearray()
    for chunk in chunks:
        start = max(len(buffer) - 1, 0)  # a boundary may straddle the old and new bytes
        buffer += chunk
        end = buffer.rfind(b"\n\n", start)
        if end < 0:
            if len(buffer) > limit:
                raise TooLargeError("an event", limit)
            continue
        # Whole events before `end` go to the parser; what follows is an event still arriving.
        if len(buffer) - end - 2 > limit:
            raise TooLargeError("an event", limit)
        yield bytes(buffer[: end + 2])
        del buffer[: end + 2]
    if buffer:
        yield bytes(buffer)
