"""Loopback servers for the OpenAI-compatible adapter's tests.

`ScriptedServer` is a small Starlette app that replays scripted answers (the shapes fakellm
cannot produce: Ollama's index-less fragments, in-stream errors, error statuses, dropped
streams) and records every request so tests can assert what the adapter sent.
`FakeLLM` runs the third-party `fakellm serve` CLI as a subprocess on an ephemeral port.
"""

from __future__ import annotations

import asyncio
import json
import queue
import re
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from bridge._serve import serve_in_thread
from bridge.platforms.retry import RetryPolicy

__all__ = [
    "DROP",
    "FakeLLM",
    "Reply",
    "ScriptedServer",
    "chunk",
    "completion",
    "sse",
    "text_stream",
    "tool_call_stream",
]

DROP = object()
"""Put in `Reply.stream` to cut the connection there (no terminating chunk)."""


class _DroppedError(Exception):
    """Raised inside a streaming body so that uvicorn aborts the connection."""


@dataclass
class Reply:
    """One scripted answer.

    `stream` items: a dict becomes ``data: <json>``; str/bytes are sent as is; a float sleeps
    that many seconds; `DROP` aborts the connection. Otherwise `json` (or raw `body`) is sent.
    """

    status: int = 200
    json: Any = None
    body: bytes | None = None
    stream: list[Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    media_type: str | None = None
    delay: float = 0.0


def sse(payload: Any) -> bytes:
    """One SSE event carrying `payload` as JSON."""
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


def chunk(
    delta: dict[str, Any] | None = None,
    finish_reason: str | None = None,
    *,
    id: str = "chatcmpl-1",
    usage: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A chat.completion.chunk with one choice."""
    payload: dict[str, Any] = {
        "id": id,
        "object": "chat.completion.chunk",
        "model": "m",
        "choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish_reason}],
    }
    if usage is not None:
        payload["usage"] = usage
    return payload


def text_stream(text: str, *, id: str = "chatcmpl-1") -> list[Any]:
    """A whole streamed text answer, word by word, ending with stop and [DONE]."""
    words = text.split(" ")
    pieces = [words[0], *(" " + w for w in words[1:])]
    return [
        chunk({"role": "assistant"}, id=id),
        *(chunk({"content": piece}, id=id) for piece in pieces),
        chunk({}, "stop", id=id),
        b"data: [DONE]\n\n",
    ]


def tool_call_stream(
    call_id: str, name: str, arguments: dict[str, Any], *, id: str = "chatcmpl-1"
) -> list[Any]:
    """A whole streamed answer asking for one call, ending with tool_calls and [DONE]."""
    call = {
        "index": 0,
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }
    return [
        chunk({"role": "assistant", "tool_calls": [call]}, id=id),
        chunk({}, "tool_calls", id=id),
        b"data: [DONE]\n\n",
    ]


def completion(
    content: str | None = None,
    tool_calls: list[dict[str, Any]] | None = None,
    *,
    finish_reason: str | None = None,
    id: str = "chatcmpl-1",
    usage: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A non-streamed chat.completion."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls is not None:
        message["tool_calls"] = tool_calls
    reason = finish_reason or ("tool_calls" if tool_calls else "stop")
    payload: dict[str, Any] = {
        "id": id,
        "object": "chat.completion",
        "model": "m",
        "choices": [{"index": 0, "message": message, "finish_reason": reason}],
    }
    if usage is not None:
        payload["usage"] = usage
    return payload


class ScriptedServer:
    """Replays `replies` in order on POST /v1/chat/completions and records each request."""

    def __init__(self) -> None:
        self.replies: deque[Reply] = deque()
        self.requests: list[dict[str, Any]] = []
        self.base_url = ""
        self.app = Starlette(routes=[Route("/v1/chat/completions", self._handle, methods=["POST"])])

    def script(self, *replies: Reply) -> None:
        """Forget earlier requests and replies; answer the next requests with `replies`."""
        self.replies.clear()
        self.requests.clear()
        self.replies.extend(replies)

    @property
    def bodies(self) -> list[dict[str, Any]]:
        """The JSON bodies received so far."""
        return [r["body"] for r in self.requests]

    async def _handle(self, request: Request) -> Response:
        body = json.loads(await request.body())
        self.requests.append({"body": body, "headers": dict(request.headers)})
        if not self.replies:
            return JSONResponse({"error": {"message": "no scripted reply left"}}, status_code=599)
        reply = self.replies.popleft()
        if reply.delay:
            await asyncio.sleep(reply.delay)
        if reply.stream is not None:
            return StreamingResponse(
                _stream_body(reply.stream),
                status_code=reply.status,
                headers=reply.headers,
                media_type=reply.media_type or "text/event-stream",
            )
        if reply.body is not None:
            return Response(
                reply.body,
                status_code=reply.status,
                headers=reply.headers,
                media_type=reply.media_type or "application/json",
            )
        return JSONResponse(reply.json, status_code=reply.status, headers=reply.headers)

    @contextmanager
    def running(self) -> Iterator[ScriptedServer]:
        """Serve on an ephemeral loopback port for the duration of the block."""
        with serve_in_thread(self.app) as handle:
            self.base_url = handle.base_url + "/v1"
            yield self


async def _stream_body(items: list[Any]) -> Any:
    for item in items:
        if item is DROP:
            raise _DroppedError("scripted connection drop")
        if isinstance(item, float):
            await asyncio.sleep(item)
        elif isinstance(item, dict):
            yield sse(item)
        elif isinstance(item, str):
            yield item.encode()
        else:
            yield item


class FakeLLM:
    """`fakellm serve` in a subprocess on 127.0.0.1, port chosen by the OS."""

    _READY = re.compile(r"Uvicorn running on http://127\.0\.0\.1:(\d+)")

    def __init__(self, config: Path) -> None:
        self.config = config
        self.base_url = ""
        self.log: list[str] = []
        self._process: subprocess.Popen[str] | None = None

    @contextmanager
    def running(self, timeout: float = 30.0) -> Iterator[FakeLLM]:
        """Start the server, wait until it listens, stop it when the block ends."""
        command = [sys.executable, "-m", "fakellm.cli", "serve", "--host", "127.0.0.1"]
        command += ["--port", "0", "--config", str(self.config)]
        process = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        self._process = process
        lines: queue.Queue[str | None] = queue.Queue()
        reader = threading.Thread(target=self._drain, args=(process, lines), daemon=True)
        reader.start()
        try:
            port = self._wait_for_port(lines, timeout)
            self.base_url = f"http://127.0.0.1:{port}/v1"
            yield self
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
            reader.join(timeout=10)

    def reset(self) -> None:
        """Clear fakellm's per-conversation memory (turn counts, tool results seen)."""
        requests.post(self.base_url.removesuffix("/v1") + "/_fakellm/reset", timeout=10)

    def _drain(self, process: subprocess.Popen[str], lines: queue.Queue[str | None]) -> None:
        assert process.stderr is not None
        for line in process.stderr:
            self.log.append(line)
            lines.put(line)
        lines.put(None)

    def _wait_for_port(self, lines: queue.Queue[str | None], timeout: float) -> int:
        while True:
            try:
                line = lines.get(timeout=timeout)
            except queue.Empty:
                log = "".join(self.log)
                raise RuntimeError(f"fakellm did not start in {timeout} s: {log}") from None
            if line is None:
                raise RuntimeError(f"fakellm exited before listening: {''.join(self.log)}")
            match = self._READY.search(line)
            if match:
                return int(match.group(1))


FAST_RETRIES = RetryPolicy(max_retries=2, backoff_base=0.0, jitter=0.0)
"""Retries without waiting, so error tests stay fast."""
