"""Small HTTP servers for the gate tests: each records every request it gets.

A server answers every path with JSON naming itself, except ``/redirect?to=URL``, which answers
302 with exactly ``URL`` (percent-decoded) as the Location, backslashes and all, as a hostile
server would.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

__all__ = ["Recorder", "Seen", "recording_server"]


@dataclass(frozen=True)
class Seen:
    """One request as the server got it."""

    method: str
    path: str
    host_header: str | None
    authorization: str | None


@dataclass
class Recorder:
    """A running server: where it listens and what it got."""

    name: str
    address: str
    port: int
    seen: list[Seen] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def netloc(self) -> str:
        host = f"[{self.address}]" if ":" in self.address else self.address
        return f"{host}:{self.port}"

    @property
    def base_url(self) -> str:
        return f"http://{self.netloc}"

    def count(self) -> int:
        with self.lock:
            return len(self.seen)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    recorder: Recorder

    def __init__(self, address: str, recorder: Recorder) -> None:
        self.address_family = socket.AF_INET6 if ":" in address else socket.AF_INET
        self.recorder = recorder
        super().__init__((address, 0), _Handler)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        self._answer()

    def do_POST(self) -> None:
        self._answer()

    def do_HEAD(self) -> None:
        self._answer()

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: the recorder keeps what matters."""

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        recorder = self.server.recorder
        with recorder.lock:
            recorder.seen.append(
                Seen(
                    self.command,
                    self.path,
                    self.headers.get("Host"),
                    self.headers.get("Authorization"),
                )
            )
        parts = urlsplit(self.path)
        if parts.path == "/redirect":
            to = parse_qs(parts.query).get("to", ["/"])[0]
            self.send_response_only(302)
            self.send_header("Content-Length", "0")
            # Raw bytes: send_header would refuse what a hostile server sends.
            self._headers_buffer.append(b"Location: " + to.encode("utf-8") + b"\r\n")  # type: ignore[attr-defined]
            self.end_headers()
            return
        body = json.dumps(
            {"server": recorder.name, "path": self.path, "host": self.headers.get("Host")}
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)


@contextmanager
def recording_server(name: str, address: str = "127.0.0.1") -> Iterator[Recorder]:
    """A recording server on `address` and an ephemeral port, stopped when the block ends."""
    recorder = Recorder(name=name, address=address, port=0)
    server = _Server(address, recorder)
    recorder.port = server.server_address[1]
    thread = threading.Thread(
        target=server.serve_forever,
        kwargs={"poll_interval": 0.05},
        name=f"recorder-{name}",
        daemon=True,
    )
    thread.start()
    try:
        yield recorder
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
