"""Reading an answer's body: whole but bounded, or streamed in bounded pieces as it arrives.

A leaf under the transport and the run budget (`_limits`), which both read bodies.
"""

from __future__ import annotations

import contextlib
import http.client
import re
import socket
from collections.abc import Iterator

import requests
import urllib3
import urllib3.exceptions

from bridge.platforms._sse import TooLargeError

__all__ = ["MAX_BODY_BYTES", "STREAM_PIECE", "keep_connection", "read_body", "stream_chunks"]

MAX_BODY_BYTES = 32 * 1024 * 1024
"""Bytes of a whole (non-streamed) answer read at most: far above any real answer, and what
keeps a broken or hostile server from filling memory (a stream's events have their own bound,
`_sse.MAX_EVENT_BYTES`)."""


def read_body(response: requests.Response) -> bytes:
    """The whole body of `response`, read at most to `MAX_BODY_BYTES` (read at each call).

    Call it inside `Transport.errors`, which maps a read failure, and `TooLargeError` when the
    body is larger, to a `bridge.errors` error. The body is kept on the response, so that
    `response.content` gives it again without reading.

    Raises:
        TooLargeError: the body is larger than `MAX_BODY_BYTES`.
    """
    if isinstance(response._content, bytes):  # already read (requests keeps it there)
        return response._content
    limit = MAX_BODY_BYTES
    raw = response.raw
    if (
        isinstance(raw, urllib3.HTTPResponse)
        and not response._content_consumed  # type: ignore[attr-defined]
        and raw.length_remaining is not None  # a Content-Length, within the bound
        and raw.length_remaining <= limit
        and "content-encoding" not in raw.headers  # (its decoded size is not known)
    ):
        # One read where `iter_content` takes a generator and two reads, its exceptions
        # raised as `iter_content` raises them.
        with _as_iter_content():
            body = raw.read(decode_content=True)
        response._content_consumed = True  # type: ignore[attr-defined]
        response._content = body
        return body
    data = bytearray()
    for piece in response.iter_content(chunk_size=64 * 1024):
        data += piece
        if len(data) > limit:
            response.close()
            raise TooLargeError("the body", limit)
    body = bytes(data)
    response._content = body  # what `response.content` would have kept
    return body


STREAM_PIECE = 64 * 1024
"""Bytes read at most at once from a stream: one piece of a larger HTTP chunk, or what a body
without chunks (ended by closing the connection, or by a Content-Length) has sent so far."""


def stream_chunks(response: requests.Response) -> Iterator[bytes]:
    """The body of a streamed `response` as it arrives, in pieces of at most `STREAM_PIECE`.

    Unlike ``iter_content(chunk_size=None)``, which reads a body without chunked encoding to
    its end (and a whole HTTP chunk however large it is declared) before giving anything, each
    piece comes as soon as the network delivers it and is bounded, so that a reader can check
    its bounds (time, size) as the stream goes. Read failures are raised as `iter_content`
    raises them; call it inside `Transport.errors`.
    """
    raw = response.raw
    if not isinstance(raw, urllib3.HTTPResponse) or raw.chunked:
        yield from response.iter_content(chunk_size=STREAM_PIECE)
        return
    while True:
        with _as_iter_content():
            piece = raw.read1(STREAM_PIECE)
        if not piece:
            return
        yield piece


@contextlib.contextmanager
def _as_iter_content() -> Iterator[None]:
    """urllib3's errors while reading a body, as `requests.Response.iter_content` raises them."""
    try:
        yield
    except urllib3.exceptions.ProtocolError as e:
        raise requests.exceptions.ChunkedEncodingError(e) from e
    except urllib3.exceptions.DecodeError as e:
        raise requests.exceptions.ContentDecodingError(e) from e
    except urllib3.exceptions.ReadTimeoutError as e:
        raise requests.exceptions.ConnectionError(e) from e
    except urllib3.exceptions.SSLError as e:
        raise requests.exceptions.SSLError(e) from e


def keep_connection(response: requests.Response) -> None:
    """After a stream's last event: when the rest of the body has already arrived, read it, so
    that the connection goes back to its pool for the next request.

    The last event is followed by the end of the body (the chunked encoding's
    ``0\\r\\n\\r\\n``). A response closed before that is read closes its connection, and the
    next request pays for a new one (a TCP or TLS handshake, on both sides). Call this before
    the reading generators are closed (they would close the connection): when the end is
    already in the connection's buffer or socket, it is read here without waiting, and closing
    the response then only releases it; when the end has not arrived, or more than a complete
    end is waiting, nothing is read and the response closes its connection as before. It never
    waits for the server.
    """
    try:
        if _end_arrived(response.raw):
            for _ in response.raw.read_chunked():
                pass  # the end only: urllib3 then puts the connection back in its pool
    except (OSError, ValueError, http.client.HTTPException, urllib3.exceptions.HTTPError):
        pass  # not reusable after all: the response closes it


_CHUNK_SIZE_LINE = re.compile(rb"([0-9A-Fa-f]{1,16})(?:;[^\r\n]*)?\r\n")


def _end_arrived(raw: object) -> bool:
    """True when what is left of a chunked body, between two chunks, has wholly arrived (read
    without waiting) and ends exactly where the body does."""
    if not isinstance(raw, urllib3.HTTPResponse) or not raw.chunked or raw.chunk_left is not None:
        return False
    # http.client's response reads the connection's socket through a buffered reader.
    peek = getattr(getattr(raw._original_response, "fp", None), "peek", None)
    sock = getattr(raw.connection, "sock", None)
    if peek is None or not isinstance(sock, socket.socket) or raw.closed:
        return False  # not the plain sockets of urllib3's own connections: no guessing
    timeout = sock.gettimeout()
    sock.settimeout(0.0)  # a peek into an empty buffer then returns b"" instead of waiting
    try:
        arrived = peek(len(_END))
    finally:
        sock.settimeout(timeout)
    return isinstance(arrived, bytes) and _whole_end(arrived)


_END = b"0\r\n\r\n"


def _whole_end(data: bytes) -> bool:
    """True when `data` is complete chunks, the last chunk (size 0) and the end of the
    trailers, and nothing after them."""
    position = 0
    while True:
        line = _CHUNK_SIZE_LINE.match(data, position)
        if line is None:
            return False
        size = int(line.group(1), 16)
        position = line.end()
        if size == 0:
            break
        position += size
        if data[position : position + 2] != b"\r\n":
            return False
        position += 2
    while True:  # trailer fields, then an empty line
        end = data.find(b"\r\n", position)
        if end < 0:
            return False
        if end == position:
            return end + 2 == len(data)
        position = end + 2
