"""A scripted Coze server on loopback: replays answers in order, records every request.

It speaks what the real service can send and the emulator does not (a stream of only
``done``, a ``requires_action`` with empty or invalid arguments, an ``error`` event, HTTP 200
``{code, msg}`` errors...), so each quirk of docs/wire/coze.md has a test.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from bridge._serve import serve_in_thread
from bridge.platforms.retry import RetryPolicy

__all__ = [
    "DROP",
    "FAST",
    "TOKEN",
    "CozeServer",
    "Reply",
    "answer_stream",
    "chat",
    "frame",
    "message",
    "ok",
    "tool_chat",
]

TOKEN = "pat_test_token_0123456789"
FAST = RetryPolicy(max_retries=2)
DROP = object()
"""In `Reply.stream`: cut the connection there."""


class _DroppedError(Exception):
    pass


@dataclass
class Reply:
    """One scripted answer: a JSON body, raw bytes, or a stream of frames (bytes, DROP)."""

    json: Any = None
    stream: list[Any] | None = None
    body: bytes | None = None
    """Sent as is (with `application/json`) instead of `json`: what JSON cannot express."""
    status: int = 200
    headers: dict[str, str] = field(default_factory=lambda: {"x-tt-logid": "LOGID-1"})


def frame(event: str, data: Any) -> bytes:
    """One ``event:``/``data:`` frame (a str is sent as is)."""
    text = data if isinstance(data, str) else json.dumps(data)
    return f"event:{event}\ndata:{text}\n\n".encode()


def ok(data: Any) -> Reply:
    """A successful JSON envelope."""
    return Reply(json={"code": 0, "msg": "", "data": data})


def chat(status: str, **extra: Any) -> dict[str, Any]:
    """A Chat object of conversation c1, chat k1."""
    return {"id": "k1", "conversation_id": "c1", "bot_id": "b1", "status": status, **extra}


def tool_chat(*calls: tuple[str, str, str | None]) -> dict[str, Any]:
    """A requires_action Chat with (id, name, arguments) calls."""
    return chat(
        "requires_action",
        required_action={
            "type": "submit_tool_outputs",
            "submit_tool_outputs": {
                "tool_calls": [
                    {"id": i, "type": "function", "function": {"name": n, "arguments": a}}
                    for i, n, a in calls
                ]
            },
        },
    )


def message(kind: str, content: str, id: str = "m1") -> dict[str, Any]:
    """A Message of chat k1."""
    return {
        "id": id,
        "conversation_id": "c1",
        "chat_id": "k1",
        "role": "assistant",
        "type": kind,
        "content": content,
        "content_type": "text",
    }


def answer_stream(*pieces: str, usage: dict[str, int] | None = None) -> list[Any]:
    """A whole answer: in_progress, deltas, completed message, completed chat, done."""
    used = usage or {"token_count": 7, "output_count": 3, "input_count": 4}
    return [
        frame("conversation.chat.in_progress", chat("in_progress")),
        *(frame("conversation.message.delta", message("answer", p)) for p in pieces),
        frame("conversation.message.completed", message("answer", "".join(pieces))),
        frame("conversation.chat.completed", chat("completed", usage=used)),
        frame("done", '"[DONE]"'),
    ]


class CozeServer:
    """Answers every request with the next scripted `Reply`, whatever its path."""

    def __init__(self) -> None:
        self.replies: deque[Reply] = deque()
        self.requests: list[dict[str, Any]] = []
        self.base_url = ""
        route = Route("/{path:path}", self._handle, methods=["GET", "POST"])
        self.app = Starlette(routes=[route])

    def script(self, *replies: Reply) -> None:
        """Forget earlier requests; answer the next ones with `replies`."""
        self.replies.clear()
        self.requests.clear()
        self.replies.extend(replies)

    @property
    def paths(self) -> list[str]:
        """``METHOD /path`` of each request received."""
        return [f"{r['method']} {r['path']}" for r in self.requests]

    async def _handle(self, request: Request) -> Response:
        body: Any = None
        if "multipart/" in request.headers.get("content-type", ""):
            form = await request.form()
            body = {
                key: (value.filename, len(await value.read()))
                if isinstance(value, UploadFile)
                else value
                for key, value in form.multi_items()
            }
        else:
            raw = await request.body()
            body = json.loads(raw) if raw else None
        self.requests.append(
            {
                "method": request.method,
                "path": request.url.path,
                "params": dict(request.query_params),
                "body": body,
                "headers": dict(request.headers),
                "client": (request.client.host, request.client.port) if request.client else None,
            }
        )
        if not self.replies:
            body = json.dumps({"code": 4999, "msg": "no scripted reply left"})
            return Response(body, status_code=599, media_type="application/json")
        reply = self.replies.popleft()
        if reply.stream is not None:
            return StreamingResponse(
                _stream(reply.stream),
                status_code=reply.status,
                headers=reply.headers,
                media_type="text/event-stream",
            )
        if reply.body is not None:
            return Response(
                reply.body,
                status_code=reply.status,
                headers=reply.headers,
                media_type="application/json",
            )
        return Response(
            json.dumps(reply.json, ensure_ascii=False),
            status_code=reply.status,
            headers=reply.headers,
            media_type="application/json",
        )

    @contextmanager
    def running(self) -> Iterator[CozeServer]:
        """Serve on an ephemeral loopback port for the duration of the block."""
        with serve_in_thread(self.app) as handle:
            self.base_url = handle.base_url
            yield self


async def _stream(items: list[Any]) -> Any:
    for item in items:
        if item is DROP:
            raise _DroppedError("scripted connection drop")
        if isinstance(item, float):
            await asyncio.sleep(item)
        else:
            yield item
