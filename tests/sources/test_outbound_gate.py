"""The outbound gate against the attacks of issue 9, with real loopback servers.

Server A is allowed; B (same address, another port) and E (127.0.0.2, "evil.test") are not,
and record every request they get: a refused call must leave them untouched. Names are mapped
to loopback addresses by an injected resolver (tests have no DNS).
"""

from __future__ import annotations

import ipaddress
import json
import socket
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest
import requests

from bridge.errors import UsageError
from bridge.sources import HostAllowlist, HostNotAllowedError, HttpToolError, HttpToolSource
from bridge.sources import Outbound as OutboundGate
from bridge.sources._http_manifest import HttpManifest
from bridge.sources._outbound._connect import gated
from bridge.sources.openapi import openapi_manifest
from bridge.tools import Dispatcher, Toolbox
from bridge.types import ToolCall, ToolRun
from tests.sources.recording_server import Recorder, recording_server


class Servers:
    def __init__(self, a: Recorder, b: Recorder, e: Recorder) -> None:
        self.a, self.b, self.e = a, b, e

    def forbidden_hits(self) -> int:
        return self.b.count() + self.e.count()


@pytest.fixture(scope="module")
def servers() -> Iterator[Servers]:
    with (
        recording_server("A") as a,
        recording_server("B") as b,
        recording_server("E", "127.0.0.2") as e,
    ):
        yield Servers(a, b, e)


class Names:
    """A resolver: names to loopback addresses; it counts its calls."""

    def __init__(self, table: dict[str, list[str]]) -> None:
        self.table = table
        self.calls: list[str] = []

    def __call__(self, host: str, port: int) -> list[str]:
        self.calls.append(host)
        if host not in self.table:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return self.table[host]


def names() -> Names:
    return Names(
        {
            "allowed.test": ["127.0.0.1"],
            "sub.allowed.test": ["127.0.0.1"],
            "xn--bcher-kva.test": ["127.0.0.1"],
            "evil.test": ["127.0.0.2"],
            "metadata.test": ["169.254.169.254"],
        }
    )


@pytest.fixture
def gate(servers: Servers) -> Iterator[Any]:
    made: list[OutboundGate] = []

    def make(*entries: str, resolver: Any = None, userinfo: bool = False) -> OutboundGate:
        outbound = OutboundGate(
            HostAllowlist(entries, userinfo=userinfo), resolver=resolver or names()
        )
        made.append(outbound)
        return outbound

    yield make
    for outbound in made:
        outbound.close()


def get(outbound: OutboundGate, url: str) -> dict[str, Any]:
    reply = outbound.send("GET", url, timeout=10, max_bytes=100_000)
    assert reply.status == 200, reply.text()
    data: dict[str, Any] = json.loads(reply.text())
    return data


def refused(outbound: OutboundGate, url: str) -> str:
    with pytest.raises(HostNotAllowedError) as caught:
        outbound.send("GET", url, timeout=10, max_bytes=100_000)
    return str(caught.value)


def redirect_to(server: Recorder, location: str) -> str:
    return f"{server.base_url}/redirect?to={quote(location, safe='')}"


def attacks(s: Servers) -> list[str]:
    """The spellings of issue 9 that reached a forbidden host before the gate."""
    a, b, e = s.a.netloc, s.b.netloc, s.e.netloc
    pa = s.a.port
    return [
        f"http://{b}\\@{a}/",
        f"http://evil.test:{s.e.port}\\@allowed.test:{pa}/",
        f"http://evil.test:{s.e.port}\\@sub.allowed.test:{pa}/",
        f"http://{e}\\@allowed.test:{pa}/",
        f"http://169.254.169.254\\@allowed.test:{pa}/",
        f"http://169.254.169.254\\@{a}/",
        f"http://{b}%5C@{a}/",
        f"http://{b}@{a}/",
        f"http://{b}\\\\@{a}/",
        f"http://{b}/\\@{a}/".replace("/\\", "\\/"),
    ]


ALLOWLISTS = {
    "address": lambda s: [s.a.netloc],
    "name": lambda s: [f"allowed.test:{s.a.port}"],
    "wildcard": lambda s: [f"*.allowed.test:{s.a.port}", f"allowed.test:{s.a.port}"],
}


@pytest.mark.parametrize("kind", sorted(ALLOWLISTS))
def test_the_attack_urls_are_refused_and_reach_nobody(
    servers: Servers, gate: Any, kind: str
) -> None:
    outbound = gate(*ALLOWLISTS[kind](servers))
    before = servers.forbidden_hits()
    for url in attacks(servers):
        message = refused(outbound, url)
        assert message.startswith("Refused: "), message
        assert "Outbound" not in message and "Traceback" not in message
    assert servers.forbidden_hits() == before


@pytest.mark.parametrize("kind", sorted(ALLOWLISTS))
def test_the_attack_urls_are_refused_as_redirects(servers: Servers, gate: Any, kind: str) -> None:
    outbound = gate(*ALLOWLISTS[kind](servers))
    base = servers.a.base_url if kind == "address" else f"http://allowed.test:{servers.a.port}"
    before = servers.forbidden_hits()
    for url in attacks(servers):
        message = refused(outbound, f"{base}/redirect?to={quote(url, safe='')}")
        assert message.startswith(f"Refused: the redirect from {base}/redirect to "), message
    assert servers.forbidden_hits() == before


def test_what_the_model_reads(servers: Servers, gate: Any) -> None:
    outbound = gate(servers.a.netloc)
    a, b = servers.a.netloc, servers.b.netloc
    assert refused(outbound, f"http://{b}\\@{a}/") == (
        f"Refused: 'http://{b}\\\\@{a}/': the URL contains a backslash (\\) at position "
        f"{len('http://') + len(b)}; URL parsers disagree on where the host of such a URL ends. "
        "Use forward slashes (a backslash that belongs to the path or query is written %5C)."
    )
    assert "credentials in URLs are not allowed" in refused(outbound, f"http://u:p@{a}/")
    assert "write it as 127.0.0.1" in refused(outbound, f"http://2130706433:{servers.a.port}/")
    assert "write it as 127.0.0.1" in refused(outbound, f"http://0177.0.0.1:{servers.a.port}/")
    assert "write it as 127.0.0.1" in refused(outbound, f"http://127.1:{servers.a.port}/")
    assert "write a space in a path or query as %20" in refused(outbound, f"http://{a}/a b")
    assert "U+000A" in refused(outbound, f"http://{a}/a\nb")
    assert "U+200B" in refused(outbound, f"http://{a}\u200b/")
    assert "is not an http:// or https:// URL (its scheme is 'ftp')" in refused(
        outbound, f"ftp://{a}/"
    )
    assert "has no host" in refused(outbound, "http:///x")
    assert "port 0" in refused(outbound, "http://127.0.0.1:0/")
    message = refused(outbound, f"{servers.b.base_url}/x")
    assert message == (
        f"Refused: {servers.b.base_url}/x goes to {b}, which is not an allowed host (allowed: "
        f"{a}). Add it to allow_hosts in the manifest, pass --allow-host {b}, or set "
        "TOOLBRIDGE_ALLOW_HOSTS."
    )
    assert get(outbound, f"{servers.a.base_url}/fine")["server"] == "A"


def test_spellings_of_the_allowed_host_reach_it(servers: Servers, gate: Any) -> None:
    pa = servers.a.port
    outbound = gate(f"allowed.test:{pa}", f"bücher.test:{pa}", f"127.0.0.1:{pa}")
    for url in (
        f"http://ALLOWED.Test:{pa}/",
        f"http://allowed.test.:{pa}/",
        f"HTTP://allowed.test:{pa}/",
        f"http://xn--bcher-kva.test:{pa}/",
        f"http://BÜCHER.test:{pa}/",
        f"http://[::ffff:127.0.0.1]:{pa}/",
        f"http://allowed.test:{pa}/#@evil.test",
        f"http://allowed.test:{pa}/?next=@evil.test",
        f"http://allowed.test:{pa}/@evil.test",
    ):
        assert get(outbound, url)["server"] == "A", url
    seen = servers.a.seen[-1]
    assert (seen.path, seen.host_header) == ("/@evil.test", f"allowed.test:{pa}")
    punycode_entry = gate(f"xn--bcher-kva.test:{pa}")
    assert get(punycode_entry, f"http://bücher.test:{pa}/")["server"] == "A"
    assert servers.a.seen[-1].host_header == f"xn--bcher-kva.test:{pa}"


def test_ipv6_literals(gate: Any) -> None:
    with recording_server("V6", "::1") as v6, recording_server("V6B", "::1") as other:
        outbound = gate(f"[::1]:{v6.port}")
        assert get(outbound, f"http://[::1]:{v6.port}/x")["server"] == "V6"
        assert get(outbound, f"http://[0:0::1]:{v6.port}/x")["server"] == "V6"
        refused(outbound, f"http://[::1]:{other.port}/")
        refused(outbound, f"http://[::1]:{other.port}\\@[::1]:{v6.port}/")
        assert "zone" in refused(outbound, f"http://[fe80::1%25lo]:{v6.port}/")
        assert other.count() == 0


def test_link_local_and_metadata_addresses_need_an_explicit_entry(
    servers: Servers, gate: Any
) -> None:
    pa = servers.a.port
    wide = gate("0.0.0.0/0", "[::/0]", "metadata.test", f"allowed.test:{pa}")
    for url in (
        "http://169.254.169.254/latest/meta-data/",
        "http://[::ffff:169.254.169.254]/",
        "http://[fd00:ec2::254]/",
        "http://[64:ff9b::a9fe:a9fe]/",
        "http://[fe80::1]/",
        "http://100.100.100.200/latest/meta-data/",
    ):
        message = refused(wide, url)
        assert "it is reached only when the allowlist names that address itself" in message, url
    assert "resolves to 169.254.169.254 (a link-local address" in refused(
        wide, "http://metadata.test/"
    )
    assert "unspecified address" in refused(wide, f"http://0.0.0.0:{pa}/")

    for answer in ("169.254.169.254", "::ffff:169.254.169.254", "fd00:ec2::254", "0.0.0.0"):
        rebound = gate(f"allowed.test:{pa}", resolver=Names({"allowed.test": [answer]}))
        assert "which is never reached through an allowed host name" in refused(
            rebound, f"http://allowed.test:{pa}/"
        )
    # A good answer next to a guarded one: the connection uses the good one.
    mixed = gate(
        f"allowed.test:{pa}", resolver=Names({"allowed.test": ["169.254.169.254", "127.0.0.1"]})
    )
    assert get(mixed, f"http://allowed.test:{pa}/")["server"] == "A"

    named = HostAllowlist(["169.254.169.254", "metadata.test", "[fd00:ec2::254]"])
    assert named.allows("http://169.254.169.254/latest/meta-data/")
    assert named.allows("http://[fd00:ec2::254]/")
    metadata = ipaddress.ip_address("169.254.169.254")
    assert named.addresses("metadata.test", 80, names()) == [metadata]
    assert HostAllowlist(["169.254.0.0/16"]).allows("http://169.254.1.2/")


def test_each_connection_resolves_once_and_connects_to_the_checked_answer(
    servers: Servers, gate: Any
) -> None:
    pa = servers.a.port

    class Rebinding(Names):
        def __call__(self, host: str, port: int) -> list[str]:
            self.calls.append(host)
            return ["127.0.0.1"] if len(self.calls) == 1 else ["169.254.169.254"]

    resolver = Rebinding({})
    outbound = gate(f"allowed.test:{pa}", resolver=resolver)
    assert get(outbound, f"http://allowed.test:{pa}/one")["server"] == "A"
    assert get(outbound, f"http://allowed.test:{pa}/two")["server"] == "A"  # pooled connection
    assert resolver.calls == ["allowed.test"], "one resolution, used for the check and the connect"
    outbound.close()  # the next request needs a new connection: the answer is now evil
    assert "169.254.169.254" in refused(outbound, f"http://allowed.test:{pa}/three")

    class ToE(Names):
        def __call__(self, host: str, port: int) -> list[str]:
            self.calls.append(host)
            return ["127.0.0.1"] if len(self.calls) == 1 else [servers.e.address]

    # Names are resolved by the gate only: urllib3 never asks the system (which knows no
    # allowed.test), and the answer checked is the address connected to.
    to_e = gate(f"allowed.test:{pa}", f"127.0.0.1:{pa}", resolver=ToE({}))
    before = servers.forbidden_hits()
    assert get(to_e, f"http://allowed.test:{pa}/")["server"] == "A"
    assert servers.forbidden_hits() == before


def test_the_connection_layer_refuses_on_its_own(servers: Servers, gate: Any) -> None:
    """Even a request that skipped the URL check cannot open a socket to a refused host."""
    outbound = gate(servers.a.netloc)
    before = servers.forbidden_hits()
    with pytest.raises(HostNotAllowedError, match="outside the outbound gate"):
        outbound.session.get(f"{servers.e.base_url}/", timeout=5)
    with gated(outbound), pytest.raises(HostNotAllowedError, match="not an allowed address"):
        outbound.session.get(f"{servers.b.base_url}/", timeout=5)
    with gated(outbound):
        response = outbound.session.get(f"{servers.a.base_url}/direct", timeout=5)
        assert response.json()["server"] == "A"
    assert servers.forbidden_hits() == before
    with pytest.raises(HostNotAllowedError, match="HTTP proxy"):
        outbound.session.get(
            f"{servers.a.base_url}/", proxies={"http": servers.b.base_url}, timeout=5
        )
    assert servers.forbidden_hits() == before


def test_environment_proxies_are_not_used(
    servers: Servers, gate: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTP_PROXY", servers.b.base_url)
    monkeypatch.setenv("http_proxy", servers.b.base_url)
    before = servers.forbidden_hits()
    assert get(gate(servers.a.netloc), f"{servers.a.base_url}/p")["server"] == "A"
    assert servers.forbidden_hits() == before


def test_userinfo_only_when_the_allowlist_owner_allows_it(servers: Servers, gate: Any) -> None:
    url = f"http://user:pw@{servers.a.netloc}/u"
    refused(gate(servers.a.netloc), url)
    assert get(gate(servers.a.netloc, userinfo=True), url)["server"] == "A"
    assert servers.a.seen[-1].authorization == "Basic dXNlcjpwdw=="
    # Allowed userinfo still cannot hide another host.
    refused(
        gate(servers.a.netloc, userinfo=True), f"http://{servers.b.netloc}\\@{servers.a.netloc}/"
    )


def test_too_many_redirects_and_relative_hops(servers: Servers, gate: Any) -> None:
    outbound = gate(servers.a.netloc)
    hops = "/fine"
    for _ in range(5):
        hops = f"/redirect?to={quote(hops, safe='')}"
    assert get(outbound, servers.a.base_url + hops)["path"] == "/fine"
    with pytest.raises(HttpToolError, match="redirected more than 5 times"):
        outbound.send(
            "GET",
            f"{servers.a.base_url}/redirect?to={quote(hops, safe='')}",
            timeout=5,
            max_bytes=1000,
        )
    before = servers.forbidden_hits()
    for location in (f"//{servers.b.netloc}/", f"\\\\{servers.b.netloc}/", "/\\evil.test/"):
        refused(outbound, redirect_to(servers.a, location))
    assert servers.forbidden_hits() == before


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("a.test:99999", "the port '99999' is not a number from 1 to 65535"),
        ("a.test:http", "the port 'http' is not a number"),
        ("10.0.0.0/33", "'10.0.0.0/33' is not a network"),
        ("0177.0.0.1", "non-standard spelling (it means 127.0.0.1)"),
        ("*.", "has an empty label"),
        ("[::1]x", "expected host, host:port"),
        ("a b.test", "contains invalid character ' '"),
        ("a..test", "has an empty label"),
    ],
)
def test_bad_allowlist_entries(entry: str, message: str) -> None:
    with pytest.raises(UsageError, match="allowlist entry") as caught:
        HostAllowlist([entry])
    assert message in str(caught.value)


# --- through the tools that make requests ------------------------------------------------------


def run(box: Toolbox, name: str, arguments: dict[str, Any]) -> ToolRun:
    with Dispatcher(box) as dispatcher:
        [result] = dispatcher.run([ToolCall(call_id="g1", name=name, arguments=arguments)])
    return result


REDIRECT_TOOL = {
    "name": "go",
    "url": "/redirect",
    "parameters": {
        "type": "object",
        "properties": {"to": {"type": "string"}},
        "required": ["to"],
    },
    "locations": {"to": "query"},
}


def test_a_declarative_http_tool_refuses_the_attack_redirects(servers: Servers) -> None:
    manifest = HttpManifest.model_validate(
        {"base_url": servers.a.base_url, "tools": [REDIRECT_TOOL]}
    )
    with Toolbox() as box:
        box.add_source(HttpToolSource(manifest, origin="test"))
        before = servers.forbidden_hits()
        for url in attacks(servers):
            result = run(box, "go", {"to": url})
            assert result.error == "tool_error", result.output
            assert result.output.startswith("HostNotAllowedError: Refused: the redirect from ")
        assert servers.forbidden_hits() == before
        assert json.loads(run(box, "go", {"to": "/fine"}).output)["server"] == "A"


def test_an_openapi_tool_refuses_the_attack_redirects(servers: Servers) -> None:
    document = {
        "openapi": "3.1.0",
        "info": {"title": "redirector", "version": "1"},
        "servers": [{"url": servers.a.base_url}],
        "paths": {
            "/redirect": {
                "get": {
                    "operationId": "go",
                    "parameters": [
                        {
                            "name": "to",
                            "in": "query",
                            "required": True,
                            "schema": {"type": "string"},
                        }
                    ],
                    "responses": {"200": {"description": "ok"}},
                }
            }
        },
    }
    manifest, _ = openapi_manifest(document, source="redirector.json")
    with Toolbox() as box:
        box.add_source(HttpToolSource(manifest, origin="openapi:redirector.json"))
        before = servers.forbidden_hits()
        for url in attacks(servers):
            result = run(box, "go", {"to": url})
            assert result.output.startswith("HostNotAllowedError: Refused: the redirect from ")
        assert servers.forbidden_hits() == before
        assert json.loads(run(box, "go", {"to": "/fine"}).output)["server"] == "A"


def test_requests_alone_would_have_gone_to_b(servers: Servers) -> None:
    """The reason for the gate: the URL check of old (urlsplit) and the connection disagree."""
    from urllib.parse import urlsplit

    url = f"http://{servers.b.netloc}\\@{servers.a.netloc}/"
    assert urlsplit(url).port == servers.a.port
    before = servers.b.count()
    requests.get(url, timeout=5)
    assert servers.b.count() == before + 1


def test_secret_headers_stay_with_the_first_origin(servers: Servers, gate: Any) -> None:
    from bridge.sources._outbound._send import _keeps_secrets

    pa = servers.a.port
    outbound = gate(servers.a.netloc, f"allowed.test:{pa}")
    secret = {"Authorization": "Bearer gate-test-secret-1"}
    for location, kept in (("/same", True), (f"http://allowed.test:{pa}/other", False)):
        outbound.send(
            "GET",
            redirect_to(servers.a, location),
            secret_headers=secret,
            timeout=5,
            max_bytes=1000,
        )
        assert (servers.a.seen[-1].authorization is not None) is kept, location
    anywhere = gate("allowed.test")
    first = anywhere.check("http://allowed.test/")
    assert _keeps_secrets(first, anywhere.check("https://allowed.test/"))
    assert not _keeps_secrets(anywhere.check("https://allowed.test/"), first)
    assert not _keeps_secrets(first, anywhere.check("http://allowed.test:8080/"))
