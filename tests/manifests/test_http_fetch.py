"""manifests/http_fetch.py: GET of allowlisted URLs (HTML reduced to text, size limits); other
hosts, redirects to them, other schemes, binary content and an empty allowlist are refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from urllib.parse import quote

import pytest

from bridge._serve import ServerHandle, serve_in_thread
from bridge.tools import Toolbox
from tests.manifests.conftest import MANIFESTS, Call, loaded
from tests.sources.echo_app import EchoState, create_echo_app
from tests.sources.recording_server import Recorder, recording_server


@pytest.fixture(scope="module")
def state() -> EchoState:
    return EchoState()


@pytest.fixture(scope="module")
def server(state: EchoState) -> Iterator[ServerHandle]:
    with serve_in_thread(create_echo_app(state)) as handle:
        yield handle


@pytest.fixture(scope="module")
def box() -> Toolbox:
    return loaded("http_fetch.py")


@pytest.fixture
def call(
    box: Toolbox,
    call_in: Callable[[Toolbox], Call],
    server: ServerHandle,
    monkeypatch: pytest.MonkeyPatch,
) -> Call:
    monkeypatch.setenv("TOOLBRIDGE_FETCH_ALLOW", f"example.invalid, 127.0.0.1:{server.port}")
    monkeypatch.delenv("TOOLBRIDGE_FETCH_MAX_BYTES", raising=False)
    return call_in(box)


def test_fetch_text_and_html(server: ServerHandle, call: Call) -> None:
    assert call("fetch_url", {"url": f"{server.base_url}/text"}).output == "plain words"
    page = call("fetch_url", {"url": f"{server.base_url}/page"})
    assert page.error is None, page.output
    assert page.output == "VPN\nVPN setup\nInstall the client, then sign in.\nCall IT if it fails."


def test_size_limits(server: ServerHandle, call: Call, monkeypatch: pytest.MonkeyPatch) -> None:
    cut = call("fetch_url", {"url": f"{server.base_url}/big?n=5000", "max_chars": 100})
    assert cut.output == "x" * 100 + "\n[cut at 100 of 5000 characters]"
    monkeypatch.setenv("TOOLBRIDGE_FETCH_MAX_BYTES", "2000")
    capped = call("fetch_url", {"url": f"{server.base_url}/big?n=50000", "max_chars": 100000})
    assert capped.output == "x" * 2000 + "\n[only the first 2000 bytes were read]"


@pytest.mark.parametrize(
    ("url", "message"),
    [
        (
            "http://localhost:{port}/text",
            "HostNotAllowedError: Refused: http://localhost:{port}/text goes to localhost:{port},"
            " which is not an allowed host",
        ),
        (
            "{base}/redirect?to=http://localhost:{port}/text",
            "HostNotAllowedError: Refused: the redirect from {base}/redirect to "
            "http://localhost:{port}/text goes to localhost:{port}",
        ),
        ("file:///etc/passwd", "ValueError: refused: 'file:///etc/passwd' is not an http://"),
        ("ftp://example.invalid/x", "ValueError: refused: 'ftp://example.invalid/x' is not an"),
        ("{base}/binary", "ValueError: refused: {base}/binary is image/png, not text"),
        ("{base}/status/500", "HttpToolError: HTTP 500 Internal Server Error from {base}/status"),
    ],
)
def test_refusals(
    server: ServerHandle, state: EchoState, call: Call, url: str, message: str
) -> None:
    values = {"port": server.port, "base": server.base_url}
    before = state.hits["/text"]
    result = call("fetch_url", {"url": url.format(**values)})
    assert result.error == "tool_error"
    assert result.output.startswith(message.format(**values)), result.output
    assert state.hits["/text"] == before, "a refused host is never contacted"


def test_no_allowlist(call: Call, server: ServerHandle, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TOOLBRIDGE_FETCH_ALLOW")
    result = call("fetch_url", {"url": f"{server.base_url}/text"})
    assert result.error == "tool_error"
    assert result.output.startswith(
        "PermissionError: refused: no host is allowed; set TOOLBRIDGE_FETCH_ALLOW"
    )
    bad = call("fetch_url", {"url": f"{server.base_url}/text", "max_chars": 5})
    assert bad.output == "ValueError: max_chars: expected 100 to 100000 (got 5)"


# --- issue 9: URLs that parsers read differently never reach another host ----------------------


@pytest.fixture(scope="module")
def recorders() -> Iterator[tuple[Recorder, Recorder]]:
    with recording_server("A") as a, recording_server("B") as b:
        yield a, b


@pytest.fixture
def fetch(
    box: Toolbox,
    call_in: Callable[[Toolbox], Call],
    recorders: tuple[Recorder, Recorder],
    monkeypatch: pytest.MonkeyPatch,
) -> Call:
    monkeypatch.setenv("TOOLBRIDGE_FETCH_ALLOW", recorders[0].netloc)
    monkeypatch.delenv("TOOLBRIDGE_FETCH_MAX_BYTES", raising=False)
    return call_in(box)


def attack_urls(a: Recorder, b: Recorder) -> list[str]:
    return [
        f"http://{b.netloc}\\@{a.netloc}/",
        f"http://{b.netloc}%5C@{a.netloc}/",
        f"http://169.254.169.254\\@{a.netloc}/",
        f"http://{b.netloc}\\\\@{a.netloc}/",
    ]


def test_the_backslash_attack_is_refused(fetch: Call, recorders: tuple[Recorder, Recorder]) -> None:
    a, b = recorders
    for url in attack_urls(a, b):
        result = fetch("fetch_url", {"url": url})
        assert result.error == "tool_error"
        assert result.output.startswith(f"HostNotAllowedError: Refused: {url!r}: the URL "), (
            result.output
        )
    assert b.count() == 0
    assert json.loads(fetch("fetch_url", {"url": f"{a.base_url}/ok"}).output)["server"] == "A"


def test_the_backslash_attack_through_a_redirect_is_refused(
    fetch: Call, recorders: tuple[Recorder, Recorder]
) -> None:
    a, b = recorders
    for url in attack_urls(a, b):
        start = f"{a.base_url}/redirect?to={quote(url, safe='')}"
        result = fetch("fetch_url", {"url": start})
        assert result.output.startswith(
            f"HostNotAllowedError: Refused: the redirect from {a.base_url}/redirect to {url!r}"
        ), result.output
    assert b.count() == 0


def test_the_issue_reproduction_through_toolbridge_call(
    recorders: tuple[Recorder, Recorder],
) -> None:
    """As reported: `toolbridge call manifests/http_fetch.py fetch_url ...` in a real process."""
    a, b = recorders
    env = {**os.environ, "TOOLBRIDGE_FETCH_ALLOW": a.netloc}
    url = f"http://{b.netloc}\\@{a.netloc}/"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bridge",
            "call",
            str(MANIFESTS / "http_fetch.py"),
            "fetch_url",
            json.dumps({"url": url}),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0, done.stdout
    assert "contains a backslash" in done.stderr
    assert b.count() == 0
