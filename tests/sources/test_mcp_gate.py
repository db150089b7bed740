"""`toolbridge mcp-serve --transport http` refuses DNS rebinding and cross-origin pages on every
bind address, with the daemon's rules (`bridge._hosts`).

A real `mcp-serve` process per spelling of a loopback (or wildcard) address, driven with real
HTTP: a session is opened with the endpoint's own Host, then a `tools/call` of a tool that
leaves a marker file is sent with a foreign Host (421) and with a foreign Origin (403), and the
marker must not exist; the same call with the endpoint's own name runs the tool.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.support.mcp_door import ROOT, McpServe

MARKER_TOOLS = '''
from pathlib import Path

from bridge.tools import manifest


@manifest()
def touch(path: str) -> str:
    """Create a marker file (the side effect a refused request must not have)."""
    Path(path).write_text("ran", encoding="utf-8")
    return f"touched {Path(path).name}"
'''

INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "gate-test", "version": "1"},
    },
}
ACCEPT = "application/json, text/event-stream"


@dataclass
class Endpoint:
    """A running `mcp-serve`: the URL it printed, where to connect, its port."""

    printed: str
    connect: str  # base URL to connect to (http://host:port)
    port: int
    key: str | None = None  # the caller's key, when the endpoint asks for one

    def post(self, body: dict[str, Any], **headers: str) -> requests.Response:
        if self.key is not None:
            headers = {"Authorization": f"Bearer {self.key}", **headers}
        return requests.post(
            self.connect + "/mcp",
            data=json.dumps(body),
            headers={"Content-Type": "application/json", "Accept": ACCEPT, **headers},
            timeout=30,
        )


def _payload(response: requests.Response) -> dict[str, Any]:
    """The JSON-RPC message of an answer sent as JSON or as one SSE event."""
    if response.headers.get("content-type", "").startswith("application/json"):
        return dict(response.json())
    data = [line[5:].strip() for line in response.text.splitlines() if line.startswith("data:")]
    return dict(json.loads(data[-1]))


@pytest.fixture
def marker_tools(tmp_path: Path) -> Path:
    path = tmp_path / "marker_tools.py"
    path.write_text(MARKER_TOOLS, encoding="utf-8")
    return path


KEY = "gate-test-key-0123456789"


@pytest.fixture
def serve_mcp(marker_tools: Path, tmp_path: Path) -> Iterator[Any]:
    started: list[McpServe] = []
    callers = tmp_path / "callers.toml"
    digest = hashlib.sha256(KEY.encode()).hexdigest()
    callers.write_text(
        f'[callers.gate]\nkey_sha256 = "{digest}"\nroles = ["admin"]\n', encoding="utf-8"
    )

    def start(*args: str, connect_host: str) -> Endpoint:
        args = tuple(str(callers) if arg == CALLERS else arg for arg in args)
        served = McpServe("--tools", str(marker_tools), *args).__enter__()
        started.append(served)
        assert served.url.startswith("http://"), (served.url, served.process.poll())
        port = int(served.url.rsplit(":", 1)[1].split("/", 1)[0])
        shown = f"[{connect_host}]" if ":" in connect_host else connect_host
        key = KEY if "--callers" in args else None
        return Endpoint(printed=served.url, connect=f"http://{shown}:{port}", port=port, key=key)

    try:
        yield start
    finally:
        for served in started:
            served.stop()


CALLERS = "{callers}"  # replaced by a caller file naming KEY (TOML, its SHA-256)
# (mcp-serve arguments, address to connect to, Host values of the endpoint's own, printed URL)
BINDS = [
    pytest.param(["--host", "127.0.0.1"], "127.0.0.1", ["127.0.0.1", "localhost"], id="127.0.0.1"),
    pytest.param(["--host", "127.0.0.2"], "127.0.0.2", ["127.0.0.2", "127.0.0.1"], id="127.0.0.2"),
    pytest.param(["--host", "127.1"], "127.0.0.1", ["127.0.0.1"], id="127.1"),
    pytest.param(["--host", "localhost"], "127.0.0.1", ["localhost", "127.0.0.1"], id="localhost"),
    pytest.param(["--host", "::1"], "::1", ["[::1]", "[0:0:0:0:0:0:0:1]"], id="::1"),
    pytest.param(
        ["--host", "0:0:0:0:0:0:0:1"], "::1", ["[::1]", "localhost"], id="0:0:0:0:0:0:0:1"
    ),
    pytest.param(
        ["--host", "::ffff:127.0.0.1"],
        "127.0.0.1",
        ["127.0.0.1", "[::ffff:127.0.0.1]"],
        id="::ffff:127.0.0.1",
    ),
    pytest.param(
        ["--host", "0.0.0.0", "--allow-remote", "--callers", CALLERS],
        "127.0.0.1",
        ["127.0.0.1", "10.1.2.3", "[::1]"],
        id="0.0.0.0-allow-remote",
    ),
    pytest.param(
        [
            "--host",
            "0.0.0.0",
            "--allow-remote",
            "--callers",
            CALLERS,
            "--server-name",
            "mcp.corp.example",
        ],
        "127.0.0.1",
        ["mcp.corp.example", "127.0.0.1", "10.1.2.3"],
        id="0.0.0.0-allow-remote-server-name",
    ),
]


@pytest.mark.parametrize(("args", "connect_host", "own"), BINDS)
def test_rebinding_and_foreign_origins_are_refused_on_every_bind_address(
    serve_mcp: Any, tmp_path: Path, args: list[str], connect_host: str, own: list[str]
) -> None:
    endpoint: Endpoint = serve_mcp(*args, connect_host=connect_host)
    host_of = {name: f"{name}:{endpoint.port}" for name in own}

    opened = endpoint.post(INIT, Host=host_of[own[0]])
    assert opened.status_code == 200, opened.text
    session = opened.headers["mcp-session-id"]
    endpoint.post(
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        Host=host_of[own[0]],
        **{"Mcp-Session-Id": session},
    )
    marker = tmp_path / "marker.txt"
    call = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "touch", "arguments": {"path": str(marker)}},
    }
    session_header = {"Mcp-Session-Id": session, "MCP-Protocol-Version": "2025-06-18"}

    for foreign in ("evil.example", f"evil.example:{endpoint.port}", "127.0.0.1.evil.example"):
        rebound = endpoint.post(call, Host=foreign, Origin="http://evil.example", **session_header)
        assert rebound.status_code == 421, (foreign, rebound.status_code, rebound.text)
        error = rebound.json()["error"]
        assert error["code"] == "host_not_allowed" and "--server-name" in error["message"]
    for name in own:
        cross = endpoint.post(
            call, Host=host_of[name], Origin="http://evil.example", **session_header
        )
        assert cross.status_code == 403, (name, cross.status_code, cross.text)
        assert cross.json()["error"]["code"] == "cross_origin"
        cross_site = endpoint.post(
            call, Host=host_of[name], **{"Sec-Fetch-Site": "cross-site"}, **session_header
        )
        assert cross_site.status_code == 403, (name, cross_site.text)
    assert not marker.exists(), "a refused request ran the tool"

    for name in own:
        # The endpoint's own origin (a page it served) and clients without Origin pass.
        same = endpoint.post(
            call, Host=host_of[name], Origin=f"http://{host_of[name]}", **session_header
        )
        assert same.status_code == 200, (name, same.status_code, same.text)
        assert _payload(same)["result"]["content"][0]["text"] == "touched marker.txt"
    assert marker.read_text(encoding="utf-8") == "ran"


def test_a_shorthand_address_is_served_and_gated_as_its_dotted_form(serve_mcp: Any) -> None:
    endpoint: Endpoint = serve_mcp("--host", "127.1", connect_host="127.0.0.1")
    assert endpoint.printed.startswith("http://127.0.0.1:")
    # Browsers write 127.1 as 127.0.0.1; a Host spelled 127.1 is not a name the endpoint has.
    odd = endpoint.post(INIT, Host=f"127.1:{endpoint.port}")
    assert odd.status_code == 421, odd.text


def test_a_server_name_lets_its_pages_in(serve_mcp: Any) -> None:
    endpoint: Endpoint = serve_mcp(
        "--server-name", "localhost:6274", "--server-name", "mcp.corp.example",
        connect_host="127.0.0.1",
    )  # fmt: skip
    # A local web client on another port (an inspector) is named with its port.
    inspector = endpoint.post(INIT, Origin="http://localhost:6274")
    assert inspector.status_code == 200, inspector.text
    assert endpoint.post(INIT, Origin="http://localhost:6275").status_code == 403
    named = endpoint.post(INIT, Host="mcp.corp.example", Origin="https://mcp.corp.example")
    assert named.status_code == 200, named.text
    assert endpoint.post(INIT, Host="other.corp.example").status_code == 421


def test_a_bad_server_name_is_a_usage_error(marker_tools: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bridge", "mcp-serve", "--tools", str(marker_tools),
         "--transport", "http", "--port", "0", "--server-name", "http://mcp.corp.example"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "--server-name: server name 'http://mcp.corp.example' is not a host name" in (
        done.stderr
    )
