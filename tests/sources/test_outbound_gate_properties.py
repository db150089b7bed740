"""Property tests of the outbound gate: generated URL spellings never reach a forbidden server.

Spellings are built from pieces that have fooled URL checks before (userinfo, ``\\``, ``%5C``,
``@`` in path/query/fragment, IDN, mixed case, trailing dots, IPv6 literals, decimal/octal/hex
IPv4, ports) around server A (allowed: by address, by name, by wildcard, by IDN name) and the
forbidden servers B (A's address, another port) and E (127.0.0.2, "evil.test"). Each is sent
through `Outbound`: it is refused with a message, or it reached A. The parse the gate accepts
is also the parse urllib3 and requests make of the URL it sends.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator

import pytest
import requests
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from urllib3.util import parse_url

from bridge.sources import HostAllowlist, HttpToolError, Outbound
from bridge.sources._outbound import parse_target
from bridge.sources._outbound._url import UrlError
from tests.sources.recording_server import Recorder, recording_server

PORTS: dict[str, int] = {}
"""Filled by the servers fixture: the hypothesis strategies read ports at draw time."""


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[Recorder, Recorder, Recorder]]:
    with (
        recording_server("A") as a,
        recording_server("B") as b,
        recording_server("E", "127.0.0.2") as e,
    ):
        PORTS.update(A=a.port, B=b.port, E=e.port)
        yield a, b, e


TABLE = {
    "allowed.test": ["127.0.0.1"],
    "sub.allowed.test": ["127.0.0.1"],
    "xn--bcher-kva.test": ["127.0.0.1"],
    "evil.test": ["127.0.0.2"],
    "sub.evil.test": ["127.0.0.2"],
    "rebind.test": ["169.254.169.254", "127.0.0.2"],
}


def resolve(host: str, port: int) -> list[str]:
    if host not in TABLE:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
    return TABLE[host]


@pytest.fixture(scope="module")
def outbound(servers: tuple[Recorder, Recorder, Recorder]) -> Iterator[Outbound]:
    port = PORTS["A"]
    allowlist = HostAllowlist(
        [
            f"127.0.0.1:{port}",
            f"allowed.test:{port}",
            f"*.allowed.test:{port}",
            f"bücher.test:{port}",
        ]
    )
    gate = Outbound(allowlist, resolver=resolve)
    yield gate
    gate.close()


HOSTS = st.sampled_from(
    [
        "127.0.0.1",
        "allowed.test",
        "127.0.0.1",
        "allowed.test",
        "127.0.0.1",
        "127.0.0.2",
        "allowed.test",
        "ALLOWED.Test",
        "allowed.test.",
        "sub.allowed.test",
        "evil.test",
        "EVIL.test.",
        "sub.evil.test",
        "evil.test.allowed.test",
        "allowed.test.evil.test",
        "rebind.test",
        "xn--bcher-kva.test",
        "bücher.test",
        "BÜCHER.TEST",
        "2130706433",
        "2130706434",
        "0177.0.0.1",
        "0x7f.0.0.1",
        "127.1",
        "127.0.1",
        "[::1]",
        "[::ffff:127.0.0.1]",
        "[::ffff:7f00:2]",
        "[::ffff:169.254.169.254]",
        "169.254.169.254",
        "0.0.0.0",
        "localhost",
        "",
    ]
)
PORT_KEYS = st.sampled_from(["A", "A", "A", "B", "E", "none", "empty", "zero", "80", "0A"])
SEPARATORS = st.sampled_from(
    [
        "\\",
        "%5C",
        "%5c",
        "@",
        "%40",
        "\\@",
        "/@",
        "?@",
        "#@",
        ":",
        "/",
        "\\\\",
        "%2F",
        "",
        " ",
        "\t",
    ]
)


def port_text(key: str) -> str:
    if key in PORTS:
        return f":{PORTS[key]}"
    return {"none": "", "empty": ":", "zero": ":0", "80": ":80", "0A": f":0{PORTS['A']}"}[key]


def weighted(common: list[str], rare: list[str]) -> st.SearchStrategy[str]:
    """Mostly plain pieces (a rare one about one time in six), so that many URLs get through
    and are checked where they land."""
    return st.sampled_from(common * max(1, -(-5 * len(rare) // len(common))) + rare)


@st.composite
def authorities(draw: st.DrawFn) -> str:
    host = draw(HOSTS) + port_text(draw(PORT_KEYS))
    if draw(st.integers(0, 3)) == 0:
        user = draw(st.sampled_from(["user", "user:pw", "", ":"]))
        host = f"{user}@{host}"
    if draw(st.integers(0, 2)) == 0:
        other = draw(HOSTS) + port_text(draw(PORT_KEYS))
        separator = draw(SEPARATORS)
        host = f"{host}{separator}{other}" if draw(st.booleans()) else f"{other}{separator}{host}"
    return host


@st.composite
def urls(draw: st.DrawFn) -> str:
    scheme = draw(weighted(["http", "HTTP", "Http"], ["https", "ftp", "", "javascript"]))
    slashes = draw(weighted(["//"], ["/", "\\\\", "/\\", "///", "//\\"]))
    authority = draw(authorities())
    path = draw(
        weighted(
            ["/", "", "/x", "/@evil.test/", "/%5C@evil.test", "/../x", "/é", "/a%20b"],
            ["/a\\b", "/a b", "/\\evil.test"],
        )
    )
    query = draw(weighted(["", "?q=1", "?@evil.test", "?next=http://evil.test/", "?a=%40"], []))
    fragment = draw(weighted(["", "#f", "#@evil.test"], ["#\\@evil.test", "#a b"]))
    return f"{scheme}:{slashes}{authority}{path}{query}{fragment}"


def forbidden_hits(servers: tuple[Recorder, Recorder, Recorder]) -> int:
    return servers[1].count() + servers[2].count()


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(url=urls())
def test_a_request_is_refused_or_reaches_the_allowed_server(
    servers: tuple[Recorder, Recorder, Recorder], outbound: Outbound, url: str
) -> None:
    before = forbidden_hits(servers)
    try:
        reply = outbound.send("GET", url, timeout=5, max_bytes=10_000)
    except HttpToolError as exc:
        assert str(exc), "a refusal says why"
    else:
        assert json.loads(reply.text())["server"] == "A", url
    assert forbidden_hits(servers) == before, f"{url!r} reached a forbidden server"


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(location=urls())
def test_a_redirect_is_refused_or_reaches_the_allowed_server(
    servers: tuple[Recorder, Recorder, Recorder], outbound: Outbound, location: str
) -> None:
    from urllib.parse import quote

    before = forbidden_hits(servers)
    start = f"{servers[0].base_url}/redirect?to={quote(location, safe='')}"
    try:
        reply = outbound.send("GET", start, timeout=5, max_bytes=10_000)
    except HttpToolError as exc:
        assert str(exc)
    else:
        assert json.loads(reply.text())["server"] == "A", location
    assert forbidden_hits(servers) == before, f"{location!r} reached a forbidden server"


TOKENS = st.sampled_from(
    [
        "http:",
        "https:",
        "//",
        "/",
        "\\",
        "@",
        ":",
        "%5C",
        "%40",
        "%2e",
        "?",
        "#",
        ".",
        "[",
        "]",
        "a",
        "A",
        "é",
        "ü",
        "1",
        "0x",
        "127.0.0.1",
        "::1",
        "allowed.test",
        "evil.test",
        "8080",
        " ",
        "\t",
        "\x00",
        "\u200b",
        "\uff0e",
        "。",
    ]
)


@settings(max_examples=300, deadline=None)
@given(
    url=st.one_of(
        urls(),
        st.lists(TOKENS, min_size=1, max_size=14).map("".join),
        st.text(max_size=40).map(lambda tail: "http://" + tail),
    )
)
def test_what_the_gate_accepts_urllib3_and_requests_read_the_same(url: str) -> None:
    if not PORTS:
        PORTS.update(A=8001, B=8002, E=8003)
    try:
        target = parse_target(url)
    except UrlError as exc:
        assert str(exc)
        return
    for parsed in (parse_url(url), parse_url(target.url)):
        assert parsed.scheme == target.scheme
        assert (parsed.port or (443 if target.scheme == "https" else 80)) == target.port
        host = (parsed.host or "").strip("[]").rstrip(".")
        assert host == target.host or parse_target(f"http://{parsed.host}/").host == target.host
    sent = requests.Request("GET", target.url).prepare().url or ""
    again = parse_url(sent)
    assert (again.host or "").strip("[]") == target.host
    assert (again.port or (443 if target.scheme == "https" else 80)) == target.port
    assert again.auth is None
    assert parse_target(target.url) == target, "the URL sent parses to the same target"
