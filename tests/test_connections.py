"""`bridge._connections.fit_descriptor_limit`: the open-files limit is raised so the connection
cap fits, or an operator is told which setting to lower (in a child process, whose limits the
test may change)."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from bridge._connections import ConnectionLimits, http_protocol
from tests.support.slow_clients import read_all

SCRIPT = """
import logging, resource, sys
logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(message)s")
soft, hard = (int(x) for x in sys.argv[1:3])
resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
from bridge._connections import ConnectionLimits, fit_descriptor_limit
fit_descriptor_limit(ConnectionLimits(max_connections=int(sys.argv[3])))
print(resource.getrlimit(resource.RLIMIT_NOFILE)[0])
"""


def _fit(soft: int, hard: int, cap: int) -> tuple[int, str]:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(soft), str(hard), str(cap)],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    return int(done.stdout), done.stderr


def test_the_soft_limit_is_raised_to_fit_the_cap() -> None:
    assert _fit(256, 4096, 1000) == (1128, "")


def test_a_cap_over_the_hard_limit_is_named() -> None:
    soft, warning = _fit(256, 512, 1000)
    assert soft == 512
    assert "--max-connections 1000" in warning and "lower --max-connections to about 384" in (
        warning
    )


def test_a_limit_that_fits_is_left_alone() -> None:
    assert _fit(2048, 4096, 1000) == (2048, "")


# --- the guard on each of uvicorn's HTTP/1.1 protocols (in-process server on loopback) -------

H11 = "uvicorn.protocols.http.h11_impl:H11Protocol"
HTTPTOOLS = "uvicorn.protocols.http.httptools_impl:HttpToolsProtocol"


class RecordingApp:
    """Answers 200 with the body it read; records what each request's `receive` gave."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            if message["type"] != "http.request":
                self.seen.append("disconnect")
                return
            body += message.get("body", b"")
            if not message.get("more_body", False):
                break
        self.seen.append(body.decode())
        headers = [(b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})


@contextlib.contextmanager
def bounded_server(
    base: str, app: RecordingApp, limits: ConnectionLimits
) -> Iterator[tuple[str, int]]:
    import uvicorn
    from uvicorn.importer import import_from_string

    protocol = http_protocol(limits, base=import_from_string(base))
    config = uvicorn.Config(app, host="127.0.0.1", port=0, http=protocol, log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "server did not start"
            time.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        yield "127.0.0.1", port
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def _ask(address: tuple[str, int], body: bytes) -> bytes:
    with socket.create_connection(address, timeout=30) as sock:
        sock.sendall(
            b"POST / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        return read_all(sock)


@pytest.mark.parametrize("base", [H11, HTTPTOOLS], ids=["h11", "httptools"])
def test_each_uvicorn_protocol_is_bounded(base: str) -> None:
    if base == HTTPTOOLS:
        pytest.importorskip("httptools")
    app = RecordingApp()
    quick = ConnectionLimits(header_timeout=0.5, body_timeout=0.5, max_connections=5)
    with bounded_server(base, app, quick) as address:
        assert _ask(address, b"hello").endswith(b"\r\n\r\nhello")
        # Headers that never end.
        with socket.create_connection(address, timeout=30) as sock:
            sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")
            assert read_all(sock).startswith(b"HTTP/1.1 408 ")
        # A body that stops: 408, and the app reads a disconnect, not half the body.
        with socket.create_connection(address, timeout=30) as sock:
            sock.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nhalf")
            assert read_all(sock).startswith(b"HTTP/1.1 408 ")
        deadline = time.monotonic() + 30
        while app.seen[-1] != "disconnect" and time.monotonic() < deadline:
            time.sleep(0.01)  # the app's task runs after the answer went out
        assert app.seen[-1] == "disconnect" and "half" not in app.seen
        # A keep-alive connection: the deadline starts again after each answer.
        with socket.create_connection(address, timeout=30) as sock:
            sock.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nok")
            first = b""
            while not first.endswith(b"ok"):
                first += sock.recv(65536)
            sock.sendall(b"GET / HTTP/1.1\r\n")
            assert read_all(sock).startswith(b"HTTP/1.1 408 ")
    # The cap: 5 held (no timeout gets in the way), the 6th gets 503; the app never sees it.
    capped = ConnectionLimits(header_timeout=60, body_timeout=60, max_connections=5)
    with bounded_server(base, app, capped) as address:
        held = [socket.create_connection(address, timeout=30) for _ in range(5)]
        try:
            for sock in held:
                sock.sendall(b"GET / HTTP/1.1\r\n")
            # Accepted in the order they connected, so the held ones are counted first.
            before = len(app.seen)
            with socket.create_connection(address, timeout=30) as extra:
                extra.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
                answer = read_all(extra)
            assert answer.startswith(b"HTTP/1.1 503 "), answer[:100]
            assert len(app.seen) == before
        finally:
            for sock in held:
                sock.close()
