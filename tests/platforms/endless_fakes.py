"""A loopback server that speaks each platform's wire and streams without end: only ``: ping``
keep-alives, text deltas, tool-call argument fragments or new tool calls (or, mode ``answer``,
a short normal answer). Every stream is capped (a number of frames, a stop flag at teardown), so
a test using it can never hang. Used by the stream-limit tests of the platforms and the daemon.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["CAP", "PIECE", "PING_CAP", "WIRES", "EndlessServer"]

CAP = 50_000
"""Frames a stream sends at most (text: ~1 KiB each, ~50 MiB): far past any bound tests set."""
PING_CAP = 1_000
"""Keep-alives a stream sends at most, one every `PING_EVERY` seconds (~20 s in all)."""
PING_EVERY = 0.02
TRICKLE_CAP = 400
"""Bytes a trickling server (modes ``slowheaders``, ``slowbody``) sends, one at a time."""
TRICKLE_EVERY = 0.05
PIECE = "x" * 1024

Frames = Callable[[int], str] | None
"""Frame number -> one server-sent event (with its blank line); None: the head is the whole
stream (mode ``answer``, a normal run)."""


def _data(payload: dict[str, Any], event: str | None = None) -> str:
    head = f"event:{event}\n" if event else ""
    return f"{head}data:{json.dumps(payload)}\n\n"


# --- each platform's wire: what starts a stream, and the frames of each endless stream ---------


def _openai_frames(mode: str) -> tuple[list[str], Frames]:
    def chunk(delta: dict[str, Any]) -> str:
        return _data(
            {
                "id": "c1",
                "object": "chat.completion.chunk",
                "choices": [{"index": 0, "delta": delta}],
            }
        )

    if mode == "answer":
        done = {
            "id": "c1",
            "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
        }
        return [chunk({"content": "fine"}), _data(done), "data: [DONE]\n\n"], None
    if mode == "text":
        return [], lambda n: chunk({"content": PIECE})
    if mode == "arguments":
        first = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "f"}}
        return [chunk({"tool_calls": [first]})], lambda n: chunk(
            {"tool_calls": [{"index": 0, "function": {"arguments": PIECE}}]}
        )
    return [], lambda n: chunk(
        {
            "tool_calls": [
                {
                    "index": n,
                    "id": f"call_{n}",
                    "type": "function",
                    "function": {"name": "f", "arguments": "{}"},
                }
            ]
        }
    )


def _responses_frames(mode: str) -> tuple[list[str], Frames]:
    created = _data(
        {
            "type": "response.created",
            "response": {"id": "resp_1", "object": "response", "status": "in_progress"},
        }
    )

    def added(n: int) -> str:
        item = {"id": f"fc_{n}", "type": "function_call", "call_id": f"call_{n}", "name": "f"}
        return _data({"type": "response.output_item.added", "output_index": n, "item": item})

    if mode == "text":
        return [created], lambda n: _data(
            {
                "type": "response.output_text.delta",
                "item_id": "msg_1",
                "output_index": 0,
                "content_index": 0,
                "delta": PIECE,
            }
        )
    if mode == "arguments":
        return [created, added(0)], lambda n: _data(
            {
                "type": "response.function_call_arguments.delta",
                "item_id": "fc_0",
                "output_index": 0,
                "delta": PIECE,
            }
        )
    return [created], added


def _appbuilder_frames(mode: str) -> tuple[list[str], Frames]:
    def chunk(answer: str, events: list[dict[str, Any]]) -> str:
        return _data(
            {
                "request_id": "r1",
                "conversation_id": "conv-1",
                "message_id": "m1",
                "answer": answer,
                "is_completion": False,
                "content": events,
            }
        )

    def call(n: int, arguments: str) -> str:
        tool_call = {
            "id": f"call_{n}",
            "type": "function",
            "function": {"name": "f", "arguments": arguments},
        }
        event = {
            "event_code": 0,
            "event_status": "interrupt",
            "event_type": "Interrupt",
            "content_type": "function_call",
            "outputs": {},
            "tool_calls": [tool_call],
        }
        return chunk("", [event])

    if mode == "text":
        return [], lambda n: chunk(PIECE, [])
    if mode == "arguments":
        return [], lambda n: call(n, json.dumps({"text": PIECE}))
    return [], lambda n: call(n, "{}")


def _coze_frames(mode: str) -> tuple[list[str], Frames]:
    chat = {"id": "ch1", "conversation_id": "7001", "bot_id": "1"}
    created = _data({**chat, "status": "created"}, "conversation.chat.created")

    def action(n: int, arguments: str) -> str:
        calls = [
            {
                "id": f"call_{n}",
                "type": "function",
                "function": {"name": "f", "arguments": arguments},
            }
        ]
        required = {"type": "submit_tool_outputs", "submit_tool_outputs": {"tool_calls": calls}}
        return _data(
            {**chat, "status": "requires_action", "required_action": required},
            "conversation.chat.requires_action",
        )

    message = {
        "id": "m1",
        "conversation_id": "7001",
        "chat_id": "ch1",
        "role": "assistant",
        "type": "answer",
        "content": PIECE,
        "content_type": "text",
    }
    if mode == "answer":
        return [
            created,
            _data({**message, "content": "fine"}, "conversation.message.delta"),
            _data({**chat, "status": "completed"}, "conversation.chat.completed"),
            _data({}, "done"),
        ], None
    if mode == "text":
        return [created], lambda n: _data(message, "conversation.message.delta")
    if mode == "arguments":
        return [created], lambda n: action(n, json.dumps({"text": PIECE}))
    return [created], lambda n: action(n, "{}")


WIRES: dict[str, Callable[[str], tuple[list[str], Frames]]] = {
    "appbuilder": _appbuilder_frames,
    "openai": _openai_frames,
    "coze": _coze_frames,
    "responses": _responses_frames,
}
"""Each registry platform's endless streams; a new platform must add its own."""

_JSON_ANSWERS = {
    "/v2/app/conversation": {"request_id": "r0", "conversation_id": "conv-1"},
    "/v1/conversation/create": {"code": 0, "msg": "", "data": {"id": "7001"}},
    "/v3/chat/cancel": {"code": 0, "msg": "", "data": {"id": "ch1", "conversation_id": "7001"}},
}
_STREAMS = ("/v2/app/conversation/runs", "/v3/chat", "/v1/chat/completions", "/v1/responses")


class EndlessServer:
    """A loopback server answering each platform's stream request with an endless stream.

    `mode` is ``keepalive`` (only ``: ping`` comments), ``text``, ``arguments`` or ``calls``;
    ``slowheaders`` trickles the response headers of the stream request a byte at a time,
    ``slowbody`` a body that is not an event stream, ``slowjson`` the headers of the JSON
    answers (creating a conversation...); all capped at `TRICKLE_CAP` bytes;
    `sent` counts the frames the last stream sent before the client hung up or the cap.
    """

    def __init__(self, platform: str, mode: str) -> None:
        self.platform = platform
        self.mode = mode
        self.sent = 0
        self.streams = 0
        self.paths: list[str] = []
        """The paths of the requests received, in order."""
        self.stop = threading.Event()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._httpd.daemon_threads = True

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    @contextmanager
    def running(self) -> Iterator[EndlessServer]:
        thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        thread.start()
        try:
            yield self
        finally:
            self.stop.set()
            self._httpd.shutdown()
            self._httpd.server_close()
            thread.join(timeout=10)

    def frames(self) -> Iterator[str]:
        """The frames of one stream, capped."""
        if self.mode == "keepalive":
            head, _ = WIRES[self.platform]("text")
            yield from head[:1]
            for _ in range(PING_CAP):
                if self.stop.wait(PING_EVERY):
                    return
                yield ": ping\n\n"
            return
        head, frame = WIRES[self.platform](self.mode)
        yield from head
        for n in range(CAP if frame is not None else 0):
            if self.stop.is_set():
                return
            yield frame(n)  # type: ignore[misc]

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"  # the body ends when the connection closes

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                path = self.path.split("?", 1)[0]
                server.paths.append(path)
                if server.mode == "slowjson" and path in _JSON_ANSWERS:
                    self._trickle(headers=True)
                    return
                if path in _JSON_ANSWERS:
                    body = json.dumps(_JSON_ANSWERS[path]).encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                if path not in _STREAMS:
                    self.send_error(404)
                    return
                if server.mode in ("slowheaders", "slowbody"):
                    self._trickle(headers=server.mode == "slowheaders")
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                server.streams += 1
                server.sent = 0
                try:
                    for frame in server.frames():
                        self.wfile.write(frame.encode())
                        self.wfile.flush()
                        server.sent += 1
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client stopped reading: what the bounds are for

            def _trickle(self, *, headers: bool) -> None:
                if headers:
                    self.wfile.write(b"HTTP/1.1 200 OK\r\nX-A: ")
                else:
                    self.send_response(200)
                    self.send_header("Content-Type", "text/html")
                    self.end_headers()
                self.wfile.flush()
                server.streams += 1
                server.sent = 0
                try:
                    for _ in range(TRICKLE_CAP):
                        if server.stop.wait(TRICKLE_EVERY):
                            return
                        self.wfile.write(b"a")
                        self.wfile.flush()
                        server.sent += 1
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client hung up: what the run's total time limit is for

        return Handler
