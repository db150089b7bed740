"""The Responses adapter keeps its connection from one response to the next when the end of a
stream's body has already arrived, and never waits for an end that has not.

The server is a raw HTTP/1.1 keep-alive server writing the chunked encoding itself, so that a
test decides what arrives with the last event: the body's end in the same write (the
connection is reused), a ``[DONE]`` event and the end, extra bytes after the end, or nothing
until the test says so (the connection is closed, the answer not held back).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from responses_fakes import call_item, events, frame, message_item, response

from bridge.platforms._body import _whole_end
from bridge.platforms.openai_responses import OpenAIResponsesPlatform
from bridge.types import RunFinished, ToolCallsRequested, ToolResult

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather of a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
END = b"0\r\n\r\n"


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


class KeepAliveServer:
    """Answers each ``POST /v1/responses`` with the next scripted stream, in chunks; `tail`
    is written with the last event; `hold`, when set, is waited for before the end is
    written. `ports` holds each request's client port (one per connection)."""

    def __init__(self) -> None:
        self.streams: list[list[dict[str, Any]]] = []
        self.tail = END
        self.hold: threading.Event | None = None
        self.ports: list[int] = []
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._httpd.daemon_threads = True

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    @contextmanager
    def running(self) -> Iterator[KeepAliveServer]:
        thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            if self.hold is not None:
                self.hold.set()
            self._httpd.shutdown()
            self._httpd.server_close()
            thread.join(timeout=10)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                server.ports.append(self.client_address[1])
                stream = server.streams.pop(0)
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                *head, last = [_chunk(frame(event).encode()) for event in stream]
                try:
                    for piece in head:
                        self.wfile.write(piece)
                        self.wfile.flush()
                    hold = server.hold
                    if hold is None:
                        self.wfile.write(last + server.tail)  # one write: arrives together
                        self.wfile.flush()
                        return
                    self.wfile.write(last)
                    self.wfile.flush()
                    hold.wait()
                    self.wfile.write(server.tail)
                    self.wfile.flush()
                except OSError:
                    self.close_connection = True  # the client hung up: nothing to reuse

        return Handler


@pytest.fixture
def server() -> Iterator[KeepAliveServer]:
    with KeepAliveServer().running() as running:
        yield running


def _round_trip(server: KeepAliveServer) -> None:
    """A query answered by a call, its output answered by the text: two responses."""
    server.streams = [
        events(response(call_item(1), id="resp_1")),
        events(response(message_item("It is sunny."), id="resp_2")),
    ]
    with OpenAIResponsesPlatform(server.base_url, "m", "sk-test") as platform:
        conv = platform.create_conversation()
        last = list(platform.start(conv, "Weather?", tools=[WEATHER]))[-1]
        assert isinstance(last, ToolCallsRequested)
        batch = last.batch
        results = [ToolResult(call_id=c.call_id, output="sunny") for c in batch.calls]
        done = list(platform.submit(conv, batch, results))[-1]
        assert isinstance(done, RunFinished) and done.answer == "It is sunny."


@pytest.mark.parametrize(
    "tail",
    [END, _chunk(b"data: [DONE]\n\n") + END, b"0\r\nx-trailer: 1\r\n\r\n"],
    ids=["end", "done-event-then-end", "end-with-a-trailer"],
)
def test_the_next_response_reuses_the_connection_when_the_end_has_arrived(
    server: KeepAliveServer, tail: bytes
) -> None:
    server.tail = tail
    _round_trip(server)
    assert len(server.ports) == 2 and server.ports[0] == server.ports[1]


def test_bytes_after_the_end_close_the_connection(server: KeepAliveServer) -> None:
    server.tail = END + b"HTTP/1.1 200 OK\r\n"  # not this response's: the connection is unsafe
    _round_trip(server)
    assert len(server.ports) == 2 and server.ports[0] != server.ports[1]


def test_an_end_that_has_not_arrived_is_not_waited_for(server: KeepAliveServer) -> None:
    """The server holds the body open after the last event until the test is done: the
    answer still comes (were it waited for, the adapter would hang until its idle timeout
    of ten minutes, past the test's own timeout), and the next response takes a new
    connection."""
    server.hold = threading.Event()
    server.streams = [events(response(message_item("hi"), id="resp_1"))] * 2
    with OpenAIResponsesPlatform(server.base_url, "m", "sk-test", idle_timeout=600) as platform:
        conv = platform.create_conversation()
        first = list(platform.start(conv, "hello", tools=[]))[-1]
        second = list(platform.start(conv, "again", tools=[]))[-1]
    server.hold.set()
    assert isinstance(first, RunFinished) and isinstance(second, RunFinished)
    assert len(server.ports) == 2 and server.ports[0] != server.ports[1]


@pytest.mark.parametrize(
    ("rest", "whole"),
    [
        (END, True),
        (_chunk(b"data: [DONE]\n\n") + END, True),
        (b"0;ext=1\r\n\r\n", True),
        (b"0\r\nx-a: 1\r\nx-b: 2\r\n\r\n", True),
        (b"", False),
        (b"0\r\n", False),
        (b"0\r\n\r", False),
        (b"0\r\nx-a: 1\r\n", False),
        (END + b"x", False),
        (b"5\r\nabc", False),
        (b"5\r\nabcdeXY0\r\n\r\n", False),
        (b"zz\r\n\r\n", False),
        (json.dumps({"a": 1}).encode(), False),
    ],
)
def test_only_a_complete_end_counts_as_arrived(rest: bytes, whole: bool) -> None:
    assert _whole_end(rest) is whole
