"""Slow and surplus connections are bounded: headers that never end and bodies that stop get
408 and a close after the (short, set per test) timeouts, connections beyond the cap get 503,
the daemon's file descriptors stay bounded, and a normal client is served throughout.

Real daemon processes on loopback, raw sockets for the slow clients; the daemon's descriptors
are counted in /proc/PID/fd.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bridge.daemon.settings import SettingsError, load_settings
from bridge.emulator import Emulator
from tests.daemon.conftest import API_KEY, DaemonProcess, executions, start_daemon, wait_for
from tests.support.slow_clients import DRIP_SECONDS, SlowClients, open_fds, read_all

SLOW_CLIENTS = 50


def _address(proc: DaemonProcess) -> tuple[str, int]:
    host, port = proc.url.removeprefix("http://").rsplit(":", 1)
    return host, int(port)


@pytest.fixture
def slow_daemon(emulator: Emulator, tools_dir: Path, tmp_path: Path) -> Iterator[DaemonProcess]:
    daemon = start_daemon(
        emulator, tools_dir, tmp_path / "journal.db",
        "--header-timeout", "1", "--body-timeout", "2", "--max-connections", "200",
        api_key=API_KEY,
    )  # fmt: skip
    try:
        yield daemon
    finally:
        daemon.stop()


def test_headers_that_never_end_get_408_and_the_daemon_stays_healthy(
    slow_daemon: DaemonProcess,
) -> None:
    assert slow_daemon.request("GET", "/v1/conversations").status_code == 200
    before = open_fds(slow_daemon.proc.pid)
    slow = SlowClients(_address(slow_daemon), SLOW_CLIENTS)
    answers: list[bytes] = []
    reader = threading.Thread(
        target=lambda: answers.extend(read_all(sock) for sock in slow.sockets), daemon=True
    )
    reader.start()
    try:
        peak = before
        while reader.is_alive():
            # A normal client (with a key) is answered while the slow ones hang on.
            assert slow_daemon.request("GET", "/v1/conversations").status_code == 200
            peak = max(peak, open_fds(slow_daemon.proc.pid))
            reader.join(timeout=0.1)
        assert len(answers) == SLOW_CLIENTS, "a slow client was never closed"
    finally:
        slow.close()
    for answer in answers:
        assert answer.startswith(b"HTTP/1.1 408 "), answer[:200]
        assert b'"request_timeout"' in answer and b"--header-timeout" in answer
    assert peak <= before + SLOW_CLIENTS + 10, (before, peak)
    wait_for(
        lambda: open_fds(slow_daemon.proc.pid) <= before + 2,
        "the slow connections' descriptors to go",
    )
    assert slow_daemon.request("GET", "/v1/conversations").status_code == 200
    assert "Traceback" not in slow_daemon.log


def _message_head(cid: str, length: int) -> bytes:
    return (
        f"POST /v1/conversations/{cid}/messages HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Authorization: Bearer {API_KEY}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {length}\r\n\r\n"
    ).encode()


def test_a_body_that_stops_gets_408_and_is_not_run(
    slow_daemon: DaemonProcess, tools_dir: Path
) -> None:
    (tools_dir / "executions.log").unlink(missing_ok=True)
    cid = slow_daemon.new_conversation()
    body = b'{"query": "charge 7"}'  # valid JSON on its own: half a body must not be parsed
    with socket.create_connection(_address(slow_daemon), timeout=30) as sock:
        sock.sendall(_message_head(cid, len(body) + 40) + body)
        # While this body hangs, others are served.
        assert slow_daemon.request("GET", f"/v1/conversations/{cid}").status_code == 200
        answer = read_all(sock)
    assert answer.startswith(b"HTTP/1.1 408 "), answer[:300]
    assert b'"request_timeout"' in answer and b"--body-timeout" in answer
    assert executions(tools_dir) == [], "the stalled request ran a tool"
    detail = slow_daemon.request("GET", f"/v1/conversations/{cid}").json()
    assert detail["messages"] == [], "the stalled request reached the journal"

    # A body that arrives in pieces, each well within the timeout, is served.
    full = b'{"query": "weather in Paris"}'
    with socket.create_connection(_address(slow_daemon), timeout=60) as sock:
        sock.sendall(_message_head(cid, len(full)) + full[:10])
        for piece in (full[10:20], full[20:]):
            time.sleep(DRIP_SECONDS)
            sock.sendall(piece)
        head = b""
        while b"\r\n\r\n" not in head:
            head += sock.recv(65536)
    assert head.startswith(b"HTTP/1.1 200 "), head[:300]
    assert "Traceback" not in slow_daemon.log


def test_a_client_gone_before_the_end_of_its_body_is_not_run(
    slow_daemon: DaemonProcess, tools_dir: Path
) -> None:
    (tools_dir / "executions.log").unlink(missing_ok=True)
    cid = slow_daemon.new_conversation()
    body = b'{"query": "charge 8"}'
    with socket.create_connection(_address(slow_daemon), timeout=30) as sock:
        sock.sendall(_message_head(cid, len(body) + 40) + body)
    path = f"/v1/conversations/{cid}/messages 499"
    wait_for(lambda: path in slow_daemon.log, "the daemon to see the client go")
    assert executions(tools_dir) == [], "half a body ran a tool"
    detail = slow_daemon.request("GET", f"/v1/conversations/{cid}").json()
    assert detail["messages"] == []
    assert "Traceback" not in slow_daemon.log


def test_headers_over_the_size_bound_get_431(slow_daemon: DaemonProcess) -> None:
    filler = b"".join(f"X-Filler-{i}: {'a' * 1000}\r\n".encode() for i in range(70))
    with socket.create_connection(_address(slow_daemon), timeout=30) as sock:
        sock.sendall(b"GET /v1/conversations HTTP/1.1\r\nHost: 127.0.0.1\r\n" + filler)
        answer = read_all(sock)
    assert answer.startswith((b"HTTP/1.1 431 ", b"HTTP/1.1 400 ")), answer[:200]
    assert slow_daemon.request("GET", "/v1/conversations").status_code == 200


def test_connections_beyond_the_cap_get_503(
    emulator: Emulator, tools_dir: Path, tmp_path: Path
) -> None:
    cap = 20
    daemon = start_daemon(
        emulator, tools_dir, ":memory:",
        "--max-connections", str(cap), "--header-timeout", "5",
        api_key=API_KEY,
    )  # fmt: skip
    held: list[socket.socket] = []
    try:
        before = open_fds(daemon.proc.pid)  # no client connection yet
        for _ in range(cap):
            sock = socket.create_connection(_address(daemon), timeout=30)
            sock.sendall(b"GET /v1/conversations HTTP/1.1\r\n")
            held.append(sock)
        wait_for(
            lambda: open_fds(daemon.proc.pid) >= before + cap, "the daemon to accept the held ones"
        )
        extra = [socket.create_connection(_address(daemon), timeout=30) for _ in range(30)]
        for sock in extra:
            sock.sendall(
                b"GET /v1/conversations HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                + f"Authorization: Bearer {API_KEY}\r\n\r\n".encode()
            )
        refused = [read_all(sock) for sock in extra]
        for sock in extra:
            sock.close()
        for answer in refused:
            assert answer.startswith(b"HTTP/1.1 503 "), answer[:300]
            assert b'"too_many_connections"' in answer and b"--max-connections" in answer
            assert b"retry-after: 1" in answer.lower()
        assert open_fds(daemon.proc.pid) <= before + cap + 5
        assert daemon.request("GET", "/v1/conversations").status_code == 503
        # The held ones time out; then the daemon serves again, as before.
        for sock in held:
            assert read_all(sock).startswith(b"HTTP/1.1 408 ")
        wait_for(
            lambda: daemon.request("GET", "/v1/conversations").status_code == 200,
            "the daemon to serve again",
        )
    finally:
        for sock in held:
            sock.close()
        daemon.stop()


def test_the_limits_are_settings() -> None:
    settings = load_settings({}, env={})
    assert (settings.header_timeout, settings.body_timeout, settings.max_connections) == (
        10.0,
        30.0,
        1000,
    )
    env = {"TOOLBRIDGE_HEADER_TIMEOUT": "2.5", "TOOLBRIDGE_MAX_CONNECTIONS": "50"}
    loaded = load_settings({"body_timeout": 4}, env=env)
    assert (loaded.header_timeout, loaded.body_timeout, loaded.max_connections) == (2.5, 4, 50)
    with pytest.raises(SettingsError, match=r"greater than 0 \(from --header-timeout\)"):
        load_settings({"header_timeout": 0}, env={})
    with pytest.raises(SettingsError, match=r"TOOLBRIDGE_MAX_CONNECTIONS='0'"):
        load_settings({}, env={"TOOLBRIDGE_MAX_CONNECTIONS": "0"})
