"""manifests/http_fetch.py: GET of allowlisted URLs (HTML reduced to text, size limits); other
hosts, redirects to them, other schemes, binary content and an empty allowlist are refused."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from bridge._serve import ServerHandle, serve_in_thread
from bridge.tools import Toolbox
from tests.manifests.conftest import Call, loaded
from tests.sources.echo_app import EchoState, create_echo_app


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
