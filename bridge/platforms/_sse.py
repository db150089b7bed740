"""Server-Sent Events framing over a streaming `requests` response, via sseclient-py.

Knows no platform: it yields the `data` of each event as text. Tolerates `data:` without a
space, CRLF/CR/LF line endings, `:` comments, `event:`/`id:`/`retry:` lines and data-less
events (skipped). A `[DONE]` sentinel ends the stream, and so does EOF.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import sseclient

__all__ = ["DONE", "iter_sse_data"]

DONE = "[DONE]"


def iter_sse_data(chunks: Iterable[bytes]) -> Iterator[str]:
    """Yield the data of every event in a byte stream, stopping at `[DONE]` or EOF.

    `chunks` is usually ``response.iter_content(chunk_size=None)``; transport errors raised
    while reading it propagate unchanged so the adapter can map them.
    """
    client = sseclient.SSEClient(_normalise_newlines(chunks), char_enc="utf-8")
    for event in client.events():
        data = event.data
        if not data:
            continue  # heartbeats and `event: ping` frames carry no payload
        if data.strip() == DONE:
            return
        yield data


def _normalise_newlines(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """Turn CRLF and lone CR into LF, even when a CRLF pair straddles two chunks."""
    pending_cr = False
    for chunk in chunks:
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
