"""A scriptable, recording AppBuilder look-alike for client tests, plus payload builders.

`FakeAppBuilder` is a raw ASGI app: each request is recorded byte for byte (method, path,
headers in order, body) and answered with the next scripted `Reply`, which can stream chunks,
drop the connection after N chunks, or go silent. Served on loopback by
`bridge._serve.serve_in_thread` (see conftest.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from bridge.platforms.appbuilder import RetryPolicy

TOKEN = "bce-v3/ALTAK-test/0123456789abcdef"
"""A token shaped like a real one; tests check that it never leaks."""

NO_WAIT = RetryPolicy(max_retries=3, backoff_base=0.0, jitter=0.0)
"""Retries without sleeping, so fault tests stay fast."""

__all__ = [
    "NO_WAIT",
    "TOKEN",
    "FakeAppBuilder",
    "Recorded",
    "Reply",
    "chunk",
    "error_event",
    "final_chunk",
    "interrupt_event",
    "json_reply",
    "sse",
    "sse_reply",
    "status_event",
    "text_event",
    "tool_call",
]


@dataclass
class Reply:
    """One scripted answer."""

    status: int = 200
    body: bytes = b""
    chunks: Sequence[bytes] = ()
    """When set, sent as separate body messages (chunked transfer) instead of `body`."""
    headers: dict[str, str] = field(default_factory=dict)
    content_type: str = "application/json"
    drop_after: int | None = None
    """Abort the connection after sending this many chunks (no terminating chunk)."""
    hang_after: int | None = None
    """Stop sending after this many chunks and wait until the client goes away."""
    hang_before_start: bool = False
    """Send nothing at all (not even the status) until the client goes away."""


@dataclass
class Recorded:
    """One request as the server saw it."""

    method: str
    path: str
    query: str
    headers: list[tuple[str, str]]
    body: bytes

    def header(self, name: str) -> str | None:
        """The value of header `name` (case-insensitive), or None."""
        name = name.lower()
        for key, value in self.headers:
            if key == name:
                return value
        return None

    def json(self) -> Any:
        """The body decoded as JSON."""
        return json.loads(self.body)


class FakeAppBuilder:
    """ASGI app answering with scripted replies and recording every request."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._replies: deque[Reply] = deque()
        self.requests: list[Recorded] = []

    def push(self, *replies: Reply) -> None:
        """Queue replies, answered in order (one per request)."""
        with self._lock:
            self._replies.extend(replies)

    def reset(self) -> None:
        """Forget scripted replies and recorded requests."""
        with self._lock:
            self._replies.clear()
            self.requests.clear()

    @property
    def pending(self) -> int:
        """Scripted replies not used yet."""
        with self._lock:
            return len(self._replies)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        body = bytearray()
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        recorded = Recorded(
            method=scope["method"],
            path=scope["path"],
            query=scope["query_string"].decode("latin-1"),
            headers=[(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope["headers"]],
            body=bytes(body),
        )
        with self._lock:
            self.requests.append(recorded)
            reply = self._replies.popleft() if self._replies else None
        if reply is None:
            reply = json_reply({"code": "NoScript", "message": "no scripted reply"}, status=599)
        if reply.hang_before_start:
            await _wait_for_disconnect(receive)
            return
        headers = [(b"content-type", reply.content_type.encode())]
        headers += [(k.lower().encode(), v.encode()) for k, v in reply.headers.items()]
        await send({"type": "http.response.start", "status": reply.status, "headers": headers})
        if not reply.chunks:
            await send({"type": "http.response.body", "body": reply.body})
            return
        for index, piece in enumerate(reply.chunks):
            if reply.drop_after is not None and index >= reply.drop_after:
                return  # uvicorn closes the connection without the terminating chunk
            if reply.hang_after is not None and index >= reply.hang_after:
                await _wait_for_disconnect(receive)
                return
            await send({"type": "http.response.body", "body": piece, "more_body": True})
        if reply.hang_after is not None and reply.hang_after >= len(reply.chunks):
            await _wait_for_disconnect(receive)
            return
        if reply.drop_after is not None and reply.drop_after >= len(reply.chunks):
            return
        await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _wait_for_disconnect(receive: Any) -> None:
    async def until_gone() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass

    # Bounded so that a client that never leaves cannot keep the server from stopping.
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(until_gone(), timeout=30)


# --- payload builders -----------------------------------------------------------------------------


def json_reply(payload: Any, *, status: int = 200, headers: dict[str, str] | None = None) -> Reply:
    """A JSON body reply."""
    body = json.dumps(payload, ensure_ascii=False).encode()
    return Reply(status=status, body=body, headers=dict(headers or {}))


def sse(payload: Any) -> bytes:
    """One SSE event `data: {json}` followed by its blank line."""
    return b"data: " + json.dumps(payload, ensure_ascii=False).encode() + b"\n\n"


def sse_reply(*payloads: Any, headers: dict[str, str] | None = None, **options: Any) -> Reply:
    """A streamed reply: one network chunk per payload (bytes are sent as they are)."""
    pieces = [p if isinstance(p, bytes) else sse(p) for p in payloads]
    return Reply(
        chunks=pieces, content_type="text/event-stream", headers=dict(headers or {}), **options
    )


def chunk(
    answer: str = "",
    content: Sequence[dict[str, Any]] = (),
    *,
    message_id: str = "m1",
    request_id: str = "req-1",
    is_completion: bool = False,
    **extra: Any,
) -> dict[str, Any]:
    """A run body / stream payload."""
    return {
        "request_id": request_id,
        "date": "2024-09-23T08:05:00Z",
        "answer": answer,
        "conversation_id": "conv-1",
        "message_id": message_id,
        "is_completion": is_completion,
        "content": list(content),
        **extra,
    }


def final_chunk(**options: Any) -> dict[str, Any]:
    """The last chunk of a run: no events."""
    return chunk(is_completion=True, **options)


def text_event(
    text: str, *, status: str = "running", usage: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A ChatAgent text event."""
    return {
        "event_code": 0,
        "event_message": "",
        "event_type": "ChatAgent",
        "event_id": "7",
        "event_status": status,
        "content_type": "text",
        "outputs": {"text": text},
        "usage": usage,
    }


def status_event(status: str, *, event_type: str = "ChatAgent") -> dict[str, Any]:
    """A status event (`preparing`, `success`...)."""
    return {
        "event_code": 0,
        "event_message": "",
        "event_type": event_type,
        "event_id": "9",
        "event_status": status,
        "content_type": "status",
        "outputs": {},
    }


def error_event(code: int = 500, message: str = "component failed") -> dict[str, Any]:
    """An event reporting a failure."""
    return {
        "event_code": code,
        "event_message": message,
        "event_type": "CodeNode",
        "event_id": "5",
        "event_status": "error",
        "content_type": "text",
        "outputs": {},
    }


def tool_call(call_id: str, name: str, arguments: Any) -> dict[str, Any]:
    """One `tool_calls` entry (arguments as given: object or JSON string)."""
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def interrupt_event(*calls: dict[str, Any]) -> dict[str, Any]:
    """A tool-call interrupt event as in docs/wire/appbuilder.md ("The answer")."""
    first = calls[0]["function"] if calls else {"name": "", "arguments": {}}
    return {
        "event_code": 0,
        "event_message": "",
        "event_type": "Interrupt",
        "event_id": "3",
        "event_status": "interrupt",
        "content_type": "contexts",
        "outputs": {
            "text": {
                "function_call": {
                    "thought": "I need a tool",
                    "name": first["name"],
                    "arguments": first["arguments"],
                    "tool_call_id": calls[0]["id"] if calls else "",
                },
                "used_tool": [],
            }
        },
        "usage": None,
        "tool_calls": list(calls),
    }
