"""The Host/Origin gate: DNS rebinding gets 421, cross-origin browser requests 403.

The rules are checked on `HostGate` directly (a table, and hypothesis for spellings of foreign
names), then through real daemon processes: one on loopback without an API key (the setup the
attack targeted) and the shared one with a key.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bridge._hosts import HostGate, parse_host
from bridge.daemon.settings import SettingsError, load_settings
from bridge.emulator import Emulator
from tests.daemon.conftest import DaemonProcess, executions, start_daemon

LOOPBACK = HostGate.for_server("127.0.0.1")
NAMED = HostGate.for_server("127.0.0.1", ["bridge.corp.example", "proxy.corp.example:8443"])
EVERYWHERE = HostGate.for_server("0.0.0.0", ["bridge.corp.example"])


@pytest.mark.parametrize(
    ("value", "parsed"),
    [
        ("127.0.0.1:8411", ("127.0.0.1", 8411)),
        ("LocalHost.", ("localhost", None)),
        ("[::1]:80", ("::1", 80)),
        ("[0:0::1]", ("::1", None)),
        ("bridge.corp.example:8443", ("bridge.corp.example", 8443)),
        ("::1", None),
        ("[::1", None),
        ("[::1]x", None),
        ("host:99999", None),
        ("host:", None),
        ("a b", None),
        ("evil.example\\@127.0.0.1", None),
        ("", None),
    ],
)
def test_parse_host(value: str, parsed: tuple[str, int | None] | None) -> None:
    assert parse_host(value) == parsed


@pytest.mark.parametrize(
    ("gate", "headers", "status"),
    [
        (LOOPBACK, {"host": "127.0.0.1:8411"}, None),
        (LOOPBACK, {"host": "localhost:8411"}, None),
        (LOOPBACK, {"host": "[::1]:8411"}, None),
        (LOOPBACK, {"host": "127.0.0.1"}, None),
        (LOOPBACK, {}, None),  # HTTP/1.0 without Host: not a browser
        (LOOPBACK, {"host": "evil.example"}, 421),
        (LOOPBACK, {"host": "evil.example:8411"}, 421),
        (LOOPBACK, {"host": "127.0.0.1.evil.example:8411"}, 421),
        (LOOPBACK, {"host": "10.0.0.5:8411"}, 421),
        (LOOPBACK, {"host": "bad host"}, 421),
        (NAMED, {"host": "bridge.corp.example"}, None),
        (NAMED, {"host": "bridge.corp.example:9999"}, None),
        (NAMED, {"host": "proxy.corp.example:8443"}, None),
        (NAMED, {"host": "proxy.corp.example:8444"}, 421),
        (NAMED, {"host": "proxy.corp.example"}, 421),
        (EVERYWHERE, {"host": "10.0.0.5:8411"}, None),  # an IP literal cannot be rebound
        (EVERYWHERE, {"host": "[fd00::5]:8411"}, None),
        (EVERYWHERE, {"host": "bridge.corp.example:8411"}, None),
        (EVERYWHERE, {"host": "evil.example:8411"}, 421),
        # Origin: the daemon's own (the console) passes, any other is refused.
        (LOOPBACK, {"host": "127.0.0.1:8411", "origin": "http://127.0.0.1:8411"}, None),
        (LOOPBACK, {"host": "localhost", "origin": "http://localhost"}, None),
        (LOOPBACK, {"host": "localhost:80", "origin": "http://localhost"}, None),
        (LOOPBACK, {"host": "127.0.0.1:8411", "origin": "http://evil.example"}, 403),
        (LOOPBACK, {"host": "127.0.0.1:8411", "origin": "http://127.0.0.1:3000"}, 403),
        (LOOPBACK, {"host": "127.0.0.1:8411", "origin": "http://localhost:8411"}, 403),
        (LOOPBACK, {"host": "127.0.0.1:8411", "origin": "null"}, 403),
        (LOOPBACK, {"host": "127.0.0.1:8411", "origin": "file://"}, 403),
        (LOOPBACK, {"host": "127.0.0.1:8411", "origin": "http://u@127.0.0.1:8411"}, 403),
        (LOOPBACK, {"origin": "http://127.0.0.1:8411"}, 403),
        (NAMED, {"host": "127.0.0.1:8411", "origin": "https://bridge.corp.example"}, None),
        (NAMED, {"host": "127.0.0.1:8411", "origin": "https://proxy.corp.example:8443"}, None),
        (NAMED, {"host": "127.0.0.1:8411", "origin": "https://proxy.corp.example"}, 403),
        # Sec-Fetch-Site: cross-site is refused, except a link followed to a page.
        (LOOPBACK, {"host": "127.0.0.1:8411", "sec-fetch-site": "cross-site"}, 403),
        (LOOPBACK, {"host": "127.0.0.1:8411", "sec-fetch-site": "same-origin"}, None),
        (LOOPBACK, {"host": "127.0.0.1:8411", "sec-fetch-site": "none"}, None),
        (
            LOOPBACK,
            {
                "host": "127.0.0.1:8411",
                "sec-fetch-site": "cross-site",
                "sec-fetch-mode": "navigate",
            },
            None,
        ),
    ],
)
def test_gate_rules(gate: HostGate, headers: dict[str, str], status: int | None) -> None:
    refusal = gate.check(headers, "GET")
    assert (refusal.status if refusal else None) == status, refusal


def test_a_cross_site_post_navigation_is_refused() -> None:
    headers = {
        "host": "127.0.0.1:8411",
        "sec-fetch-site": "cross-site",
        "sec-fetch-mode": "navigate",
    }
    refusal = LOOPBACK.check(headers, "POST")
    assert refusal is not None and refusal.code == "cross_origin"


_LABEL = st.from_regex(r"[a-z0-9]([a-z0-9-]{0,10}[a-z0-9])?", fullmatch=True)


@settings(max_examples=200, deadline=None)
@given(
    labels=st.lists(_LABEL, min_size=1, max_size=4),
    port=st.none() | st.integers(1, 65535),
    upper=st.booleans(),
    dot=st.booleans(),
)
def test_only_loopback_names_pass_in_any_spelling(
    labels: list[str], port: int | None, upper: bool, dot: bool
) -> None:
    name = ".".join(labels)
    shown = (name.upper() if upper else name) + ("." if dot else "")
    host = shown if port is None else f"{shown}:{port}"
    refusal = LOOPBACK.check({"host": host}, "POST")
    if name in ("localhost", "127.0.0.1"):
        assert refusal is None, host
    else:
        assert refusal is not None and refusal.status == 421, host


def test_server_names_are_checked_when_loaded() -> None:
    assert load_settings({"server_names": ["bridge.corp.example:8443"]}, env={}).server_names
    env = {"TOOLBRIDGE_SERVER_NAMES": "a.example, b.example:81"}
    assert load_settings({}, env=env).server_names == ["a.example", "b.example:81"]
    for bad in ("http://bridge.corp.example", "bridge.corp.example/path", "*.corp.example"):
        with pytest.raises(SettingsError, match=r"not a host name .* \(from --server-name"):
            load_settings({"server_names": [bad]}, env={})


def _raw(url: str, request: bytes) -> tuple[int, bytes]:
    """Send raw bytes (requests would not send a foreign Host); the status and body."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(request)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body


def test_dns_rebinding_and_cross_origin_without_an_api_key(
    emulator: Emulator, tools_dir: Path, tmp_path: Path
) -> None:
    (tools_dir / "executions.log").unlink(missing_ok=True)
    daemon = start_daemon(emulator, tools_dir, tmp_path / "journal.db")
    try:
        cid = daemon.new_conversation()
        path = f"/v1/conversations/{cid}/messages"
        body = '{"query": "weather in Paris"}'

        rebound = daemon.request(
            "POST",
            path,
            data=body,
            headers={"Host": "evil.example:80", "Content-Type": "application/json"},
        )
        assert rebound.status_code == 421, rebound.text
        error = rebound.json()["error"]
        assert error["code"] == "host_not_allowed"
        assert "evil.example" in error["message"] and "--server-name" in error["message"]
        assert rebound.headers["x-request-id"] == error["request_id"]

        status, raw = _raw(
            daemon.url,
            b"POST /v1/conversations HTTP/1.1\r\nHost: evil.example\r\n"
            b"Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
        )
        assert status == 421 and b'"host_not_allowed"' in raw

        # Two Host headers: a proxy and the gate could read different ones (RFC 9112: 400).
        status, raw = _raw(
            daemon.url,
            b"POST /v1/conversations HTTP/1.1\r\nHost: localhost\r\nHost: evil.example\r\n"
            b"Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
        )
        assert status == 400 and b'"bad_host"' in raw

        # Two Origin headers, the daemon's own first: only one of them would be judged.
        own = daemon.url.removeprefix("http://").encode()
        status, raw = _raw(
            daemon.url,
            b"POST /v1/conversations HTTP/1.1\r\nHost: " + own
            + b"\r\nOrigin: http://" + own + b"\r\nOrigin: http://evil.example\r\n"
            b"Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
        )  # fmt: skip
        assert status == 400 and b'"bad_origin"' in raw

        foreign = daemon.request(
            "POST", path, data=body,
            headers={"Origin": "http://evil.example", "Content-Type": "application/json"},
        )  # fmt: skip
        assert foreign.status_code == 403, foreign.text
        assert foreign.json()["error"]["code"] == "cross_origin"
        assert "evil.example" in foreign.json()["error"]["message"]

        cross_site = daemon.request(
            "POST", path, data=body,
            headers={"Sec-Fetch-Site": "cross-site", "Content-Type": "text/plain"},
        )  # fmt: skip
        assert cross_site.status_code == 403, cross_site.text

        assert executions(tools_dir) == [], "no refused request ran a tool"
        detail = daemon.request("GET", f"/v1/conversations/{cid}").json()
        assert detail["messages"] == [], "no refused request reached the journal"
        assert (
            daemon.request("GET", "/healthz", headers={"Host": "evil.example"}).status_code == 421
        )

        own = daemon.url  # http://127.0.0.1:PORT: the console's origin
        same = daemon.request(
            "POST", path, data=body,
            headers={"Origin": own, "Sec-Fetch-Site": "same-origin",
                     "Content-Type": "application/json"},
        )  # fmt: skip
        assert same.status_code == 200, same.text
        assert same.json()["answer"] == "Paris: 18 degrees"
        port = own.rsplit(":", 1)[1]
        via_localhost = daemon.request(
            "GET", "/v1/conversations", headers={"Host": f"localhost:{port}"}
        )
        assert via_localhost.status_code == 200, "curl-like clients (no Origin) pass"
    finally:
        daemon.stop()


def test_server_name_lets_a_proxy_name_in(
    emulator: Emulator, tools_dir: Path, tmp_path: Path
) -> None:
    daemon = start_daemon(emulator, tools_dir, ":memory:", "--server-name", "bridge.corp.example")
    try:
        named = daemon.request(
            "GET", "/v1/conversations",
            headers={"Host": "bridge.corp.example", "Origin": "https://bridge.corp.example"},
        )  # fmt: skip
        assert named.status_code == 200, named.text
        other = daemon.request("GET", "/v1/conversations", headers={"Host": "other.corp.example"})
        assert other.status_code == 421
        assert "bridge.corp.example" in other.json()["error"]["message"]
    finally:
        daemon.stop()


def test_the_gate_comes_before_the_api_key(daemon: DaemonProcess) -> None:
    response = daemon.request("GET", "/v1/conversations", headers={"Origin": "http://evil.example"})
    assert response.status_code == 403
    assert daemon.request("GET", "/v1/conversations").status_code == 200
