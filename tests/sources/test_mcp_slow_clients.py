"""`mcp-serve --transport http` bounds slow and surplus connections as the daemon does:
headers that never end and bodies that stop get 408, connections over the cap 503, and a
normal MCP client is served throughout (a real process on loopback, raw sockets)."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.sources.test_mcp_gate import ACCEPT, INIT, MARKER_TOOLS
from tests.support.mcp_door import McpServe
from tests.support.slow_clients import SlowClients, open_fds, read_all

SLOW_CLIENTS = 20


@pytest.fixture
def limited(tmp_path: Path) -> Iterator[tuple[McpServe, tuple[str, int]]]:
    tools = tmp_path / "marker_tools.py"
    tools.write_text(MARKER_TOOLS, encoding="utf-8")
    with McpServe(
        "--tools", str(tools),
        "--header-timeout", "3", "--body-timeout", "1", "--max-connections", str(SLOW_CLIENTS + 5),
    ) as served:  # fmt: skip
        assert served.url.startswith("http://127.0.0.1:"), (served.url, served.process.poll())
        port = int(served.url.rsplit(":", 1)[1].split("/", 1)[0])
        yield served, ("127.0.0.1", port)


def _initialize(address: tuple[str, int]) -> int:
    response = requests.post(
        f"http://{address[0]}:{address[1]}/mcp",
        data=json.dumps(INIT),
        headers={"Content-Type": "application/json", "Accept": ACCEPT},
        timeout=30,
    )
    return response.status_code


def test_slow_headers_slow_bodies_and_surplus_connections(
    limited: tuple[McpServe, tuple[str, int]],
) -> None:
    served, address = limited
    proc = served.process
    assert _initialize(address) == 200
    before = open_fds(proc.pid)
    slow = SlowClients(address, SLOW_CLIENTS, b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n")
    try:
        assert _initialize(address) == 200  # served while the slow ones hang on
        # Over the cap (the slow ones and a few more): 503 at once, the app never sees them.
        surplus = [socket.create_connection(address, timeout=30) for _ in range(10)]
        for sock in surplus:
            sock.sendall(b"GET /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        answers = [read_all(sock) for sock in surplus]
        for sock in surplus:
            sock.close()
        assert any(a.startswith(b"HTTP/1.1 503 ") for a in answers), [a[:40] for a in answers]
        for answer in answers:
            if answer.startswith(b"HTTP/1.1 503 "):
                assert b'"too_many_connections"' in answer
        timed_out = [read_all(sock) for sock in slow.sockets]
    finally:
        slow.close()
    for answer in timed_out:
        assert answer.startswith(b"HTTP/1.1 408 "), answer[:200]
        assert b"--header-timeout" in answer

    # A body that stops half way.
    body = json.dumps(INIT).encode()
    with socket.create_connection(address, timeout=30) as sock:
        sock.sendall(
            b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            + f"Accept: {ACCEPT}\r\nContent-Length: {len(body) + 10}\r\n\r\n".encode()
            + body
        )
        stalled = read_all(sock)
    assert stalled.startswith(b"HTTP/1.1 408 ") and b"--body-timeout" in stalled, stalled[:300]

    deadline = time.monotonic() + 30
    while open_fds(proc.pid) > before + 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert open_fds(proc.pid) <= before + 2, (before, open_fds(proc.pid))
    assert _initialize(address) == 200
    served.stop()
    errors = served.stderr
    assert "Traceback" not in errors, errors  # the app never saw the stalled request
    assert "closed for slow headers or body" in errors
