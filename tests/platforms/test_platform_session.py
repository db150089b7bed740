"""`PlatformSession`: the adapters' own requests skip `Session.request`, and still behave as
`requests.Session` would (cookies, redirects, proxies from the environment, NO_PROXY,
TLS bundle); whatever the fast path cannot do the same way goes through `Session.request`.

Each behaviour is checked against a plain `requests.Session` (environment trusted) on one real
loopback server, which also plays a forward proxy: a request line in absolute form
(``POST http://host/path``) is a request sent through it.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import requests
from hypothesis import given, settings
from hypothesis import strategies as st
from requests.structures import CaseInsensitiveDict

from bridge.errors import BridgeError, PlatformConnectionError, PlatformStatusError
from bridge.platforms._body import read_body
from bridge.platforms._headers import has_header, header, merge_headers
from bridge.platforms._http import PlatformSession, new_session
from bridge.platforms._transport import ErrorAnswer, Transport
from bridge.platforms.retry import RetryPolicy


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length).decode()
        seen = {
            "method": self.command,
            "target": self.path,
            "cookie": self.headers.get("Cookie"),
            "authorization": self.headers.get("Authorization"),
            "body": body,
            "lengths": self.headers.get_all("Content-Length") or [],
        }
        self.server.seen.append(seen)
        path = self.path.split("://", 1)[-1]
        path = path[path.index("/") :] if "://" in self.path else self.path
        headers: dict[str, str] = {"Content-Type": "application/json"}
        status = 200
        if path.startswith("/set-cookie"):
            headers["Set-Cookie"] = "sid=s3cr3t; Path=/"
        elif path.startswith("/status-500"):
            status = 500
        elif path.startswith("/redirect"):
            status = 307
            headers["Location"] = "/landed"
        data = json.dumps(seen).encode()
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self._answer()

    def do_POST(self) -> None:
        self._answer()


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.seen: list[dict[str, Any]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


@pytest.fixture(scope="module")
def server() -> Iterator[_Server]:
    server = _Server()
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join(timeout=10)


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch, server: _Server) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    server.seen.clear()


def _read_error(answer: ErrorAnswer) -> PlatformStatusError:
    return answer.error()


def _transport(
    session: requests.Session,
    *,
    headers: dict[str, str] | None = None,
    idle_timeout: float = 10,
) -> Transport:
    return Transport(
        label="Test",
        headers={"Authorization": "Bearer t0ken"} if headers is None else headers,
        connect_timeout=5,
        idle_timeout=idle_timeout,
        retry_policy=RetryPolicy(max_retries=0),
        read_status_error=_read_error,
        request_id_header="x-request-id",
        session=session,
    )


def _post(session: requests.Session, url: str, body: dict[str, Any] | None = None) -> Any:
    response = _transport(session).request("POST", url, json=body or {"q": 1}, stream=True)
    with _transport(session).errors(url):
        data = read_body(response)
    response.close()
    return json.loads(data), response


def _both() -> list[requests.Session]:
    """A `PlatformSession` and a plain session (environment trusted) for the same checks."""
    return [new_session(), requests.Session()]


def test_a_platform_session_is_plain_until_something_needs_session_request() -> None:
    session = new_session()
    assert isinstance(session, PlatformSession) and session.plain
    session.auth = ("user", "pass")
    assert not session.plain
    session = new_session()
    session.hooks["response"].append(lambda response, **_: response)
    assert not session.plain
    session = new_session()
    session.params = {"api-version": "1"}
    assert not session.plain


@pytest.mark.parametrize("kind", ["platform", "requests"])
def test_cookies_a_server_sets_are_sent_back(server: _Server, kind: str) -> None:
    session = new_session() if kind == "platform" else requests.Session()
    _post(session, server.url + "/set-cookie")
    seen, _ = _post(session, server.url + "/echo")
    assert seen["cookie"] == "sid=s3cr3t"
    assert seen["authorization"] == "Bearer t0ken"


@pytest.mark.parametrize("kind", ["platform", "requests"])
def test_a_307_is_followed_with_method_and_body(server: _Server, kind: str) -> None:
    session = new_session() if kind == "platform" else requests.Session()
    seen, response = _post(session, server.url + "/redirect", {"query": "hi"})
    assert seen == {
        "method": "POST",
        "target": "/landed",
        "cookie": None,
        "authorization": "Bearer t0ken",
        "body": '{"query": "hi"}',
        "lengths": ["15"],
    }
    assert [r.status_code for r in response.history] == [307]


@pytest.mark.parametrize("kind", ["platform", "requests"])
def test_http_proxy_from_the_environment_is_used(
    server: _Server, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    monkeypatch.setenv("HTTP_PROXY", server.url)
    session = new_session() if kind == "platform" else requests.Session()
    # The name is never resolved here: the proxy gets the whole URL.
    seen, _ = _post(session, "http://platform.invalid/v2/app/conversation")
    assert seen["target"] == "http://platform.invalid/v2/app/conversation"


@pytest.mark.parametrize("kind", ["platform", "requests"])
def test_no_proxy_bypasses_the_proxy(
    server: _Server, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    # A proxy nobody listens on: only a direct connection can succeed.
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    session = new_session() if kind == "platform" else requests.Session()
    seen, _ = _post(session, server.url + "/echo")
    assert seen["target"] == "/echo"


def test_a_dead_proxy_is_named_as_such(server: _Server, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    with pytest.raises(PlatformConnectionError, match="through the proxy"):
        _post(new_session(), "http://platform.invalid/echo")


def test_the_environment_is_read_once_per_host(
    server: _Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = new_session()
    seen, _ = _post(session, server.url + "/echo")
    assert seen["target"] == "/echo"
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    seen, _ = _post(session, server.url + "/echo")
    assert seen["target"] == "/echo"  # as before: a session is configured when first used
    assert session.proxies_for(server.url) == {}


def test_proxies_set_on_the_session_win_over_the_environment(
    server: _Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    session = new_session()
    session.proxies["http"] = server.url
    seen, _ = _post(session, "http://platform.invalid/x")
    assert seen["target"] == "http://platform.invalid/x"


def test_a_session_with_auth_or_hooks_goes_through_session_request(server: _Server) -> None:
    session = new_session()
    session.auth = ("user", "pass")
    called: list[int] = []
    session.hooks["response"].append(lambda response, **_: called.append(response.status_code))
    transport = _transport(session, headers={})
    response = transport.request("POST", server.url + "/echo", json={}, stream=False)
    seen = json.loads(response.content)
    assert seen["authorization"] == "Basic dXNlcjpwYXNz"
    assert called == [200]


def test_a_ca_bundle_from_the_environment_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", "/nonexistent/bundle.pem")
    assert new_session().verify == "/nonexistent/bundle.pem"


def test_connections_size_the_pool() -> None:
    adapter = new_session(connections=64).get_adapter("http://x")
    assert isinstance(adapter, requests.adapters.HTTPAdapter)
    assert adapter._pool_maxsize == 64  # type: ignore[attr-defined]


# --- the direct path fails as requests fails --------------------------------------------------


class _Silent:
    """A loopback server that reads each request and then closes the connection without a
    word (`close=True`) or holds it open without answering."""

    def __init__(self, *, close: bool) -> None:
        self.close = close
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.listener.settimeout(0.1)  # so that `stop` is seen
        self.held: list[socket.socket] = []
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stopping.is_set():
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                continue
            conn.settimeout(10)
            conn.recv(65536)
            if self.close:
                conn.close()
            else:
                self.held.append(conn)

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(timeout=10)
        self.listener.close()
        for conn in self.held:
            conn.close()


def _failure(session: requests.Session, url: str, **options: Any) -> tuple[type, str]:
    transport = _transport(session, **options)
    with pytest.raises(BridgeError) as info:
        response = transport.request("POST", url, json={"q": 1}, stream=False)
        response.close()
    return type(info.value), info.value.message


def _closed_port() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{probe.getsockname()[1]}/x"


@pytest.mark.parametrize(
    "case", ["refused", "closed-unanswered", "idle", "newline-in-header", "tls-to-plain", "500"]
)
def test_the_direct_path_fails_as_session_request_does(server: _Server, case: str) -> None:
    silent = (
        _Silent(close=case == "closed-unanswered")
        if case in ("closed-unanswered", "idle")
        else None
    )
    try:
        options: dict[str, Any] = {}
        if case == "refused":
            url = _closed_port()
        elif silent is not None:
            url = silent.url + "/runs"
            options["idle_timeout"] = 0.5
        elif case == "newline-in-header":
            url = server.url + "/echo"
            options["headers"] = {"X-Extra": "one\r\nInjected: two"}
        elif case == "tls-to-plain":
            url = server.url.replace("http://", "https://") + "/echo"
        else:
            url = server.url + "/status-500"
        direct = new_session()
        ours = _failure(direct, url, **dict(options))
        theirs = _failure(requests.Session(), url, **dict(options))
    finally:
        if silent is not None:
            silent.stop()
    assert ours == theirs
    if case not in ("newline-in-header", "tls-to-plain"):
        assert direct._pools  # the direct path was taken
    assert not any(seen["target"].startswith("http") for seen in server.seen)


@pytest.mark.parametrize("path", ["/a b", "/caf\u00e9", "/q?x=1&y=a b", "/%zz"])
def test_urls_are_sent_as_requests_prepares_them(server: _Server, path: str) -> None:
    seen = [_post(session, server.url + path)[0]["target"] for session in _both()]
    assert seen[0] == seen[1]


header_names = st.sampled_from(["Accept", "accept", "ACCEPT", "X-Id", "x-id", "Content-Type"])
header_layers = st.lists(
    st.lists(st.tuples(header_names, st.one_of(st.none(), st.text(max_size=3)))).map(dict),
    max_size=4,
)


@settings(max_examples=300, deadline=None)
@given(layers=header_layers, wanted=header_names)
def test_headers_merge_as_a_case_insensitive_dict_merges_them(
    layers: list[dict[str, str | None]], wanted: str
) -> None:
    """Same names (the later spelling), same values, same order as requests' own merge."""
    expected: CaseInsensitiveDict[str | None] = CaseInsensitiveDict()
    for layer in layers:
        expected.update(layer)
    merged = merge_headers(*layers)
    assert list(merged.items()) == list(expected.items())
    assert header(merged, wanted) == expected.get(wanted)
    assert has_header(merged, wanted) == (wanted in expected)


@pytest.mark.parametrize("session", _both(), ids=["platform", "requests"])
def test_a_content_length_given_by_the_caller_is_the_bodys_or_kept(
    server: _Server, session: requests.Session
) -> None:
    """A Content-Length header in any case is replaced by the body's length (one header), and
    kept on a POST without a body, on the direct path as in requests."""
    transport = _transport(session, headers={"content-length": "999", "Authorization": "x"})
    response = transport.request("POST", server.url + "/a", data=b'{"q": 1}', stream=False)
    assert response.json()["lengths"] == ["8"]
    transport = _transport(session, headers={"CONTENT-LENGTH": "0"})
    response = transport.request("POST", server.url + "/b", stream=False)
    assert response.json()["lengths"] == ["0"]
    assert [seen["body"] for seen in server.seen] == ['{"q": 1}', ""]
