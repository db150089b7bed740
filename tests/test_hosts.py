"""The Host/Origin rules shared by the daemon and `mcp-serve` (`bridge._hosts`), as properties
over spellings of bind addresses, Host headers and Origins.

The table of the rules and the real-process checks are in `tests/daemon/test_gate.py` (daemon)
and `tests/sources/test_mcp_gate.py` (mcp-serve on every loopback spelling).
"""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bridge._hosts import HostGate, canonical_address, is_loopback, parse_host

LOOPBACK_V4 = ipaddress.IPv4Network("127.0.0.0/8")


@st.composite
def ipv4_spelling(draw: st.DrawFn, address: ipaddress.IPv4Address) -> str:
    """One of the ways the C library (and so a bind) reads an IPv4 address."""
    value = int(address)
    a, b, c, d = address.packed
    forms = [str(address), str(value), hex(value), f"{a}.{(b << 16) | (c << 8) | d}"]
    forms.append(f"{a}.{b}.{(c << 8) | d}")
    forms.append(f"{hex(a)}.{b}.{c}.{d}")
    forms.append(f"::ffff:{address}")
    forms.append(f"[::ffff:{address}]")
    return draw(st.sampled_from(forms))


@st.composite
def ipv6_spelling(draw: st.DrawFn, address: ipaddress.IPv6Address) -> str:
    forms = [address.compressed, address.exploded, address.exploded.upper()]
    forms.append(":".join(f"{int(group, 16):x}" for group in address.exploded.split(":")))
    shown = draw(st.sampled_from(forms))
    return f"[{shown}]" if draw(st.booleans()) else shown


loopback_v4 = st.integers(int(LOOPBACK_V4[0]), int(LOOPBACK_V4[-1])).map(ipaddress.IPv4Address)
any_v4 = st.ip_addresses(v=4)
any_v6 = st.ip_addresses(v=6)


@settings(max_examples=300, deadline=None)
@given(data=st.data(), address=loopback_v4 | any_v4)
def test_every_spelling_of_an_ipv4_bind_address_gets_one_gate(
    data: st.DataObject, address: ipaddress.IPv4Address
) -> None:
    spelled = data.draw(ipv4_spelling(address))
    assert canonical_address(spelled) == str(address), spelled
    assert HostGate.for_server(spelled) == HostGate.for_server(str(address))
    assert is_loopback(spelled) == address.is_loopback


@settings(max_examples=200, deadline=None)
@given(data=st.data(), address=any_v6)
def test_every_spelling_of_an_ipv6_bind_address_gets_one_gate(
    data: st.DataObject, address: ipaddress.IPv6Address
) -> None:
    spelled = data.draw(ipv6_spelling(address))
    mapped = address.ipv4_mapped
    expected = str(mapped if mapped is not None else address)
    assert canonical_address(spelled) == expected, spelled
    assert HostGate.for_server(spelled) == HostGate.for_server(expected)


_LABEL = st.from_regex(r"[a-z0-9]([a-z0-9-]{0,10}[a-z0-9])?", fullmatch=True)


def _not_an_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return name != "mcp.corp.example"
    return False


_NAMES = (
    st.lists(_LABEL, min_size=1, max_size=4).map(".".join)
    | st.sampled_from(
        ["localhost", "evil.example", "localhost.evil.example", "127.0.0.1.nip.io", "127.1"]
    )
).filter(_not_an_address)
BINDS = ["127.0.0.1", "127.0.0.2", "127.1", "localhost", "::1", "0:0:0:0:0:0:0:1",
         "::ffff:127.0.0.1", "[::1]"]  # fmt: skip


def _host_value(name: str, port: int | None, upper: bool, dot: bool) -> str:
    shown = (name.upper() if upper else name) + ("." if dot else "")
    return shown if port is None else f"{shown}:{port}"


@settings(max_examples=400, deadline=None)
@given(
    bind=st.sampled_from(BINDS),
    name=_NAMES,
    port=st.none() | st.integers(1, 65535),
    upper=st.booleans(),
    dot=st.booleans(),
    origin=st.booleans(),
)
def test_a_name_passes_only_if_it_is_localhost_whatever_the_bind_spelling(
    bind: str, name: str, port: int | None, upper: bool, dot: bool, origin: bool
) -> None:
    """DNS rebinding needs a name: on loopback, the only name that passes is localhost."""
    gate = HostGate.for_server(bind)
    headers = {"host": _host_value(name, port, upper, dot)}
    if origin:
        headers["origin"] = "http://evil.example"
    refusal = gate.check(headers, "POST")
    if name == "localhost" and not origin:
        assert refusal is None, headers
    elif name == "localhost":
        assert refusal is not None and refusal.status == 403, headers
    else:
        assert refusal is not None and refusal.status == 421, headers


@settings(max_examples=400, deadline=None)
@given(bind=st.sampled_from(BINDS), address=loopback_v4 | any_v4 | any_v6, data=st.data())
def test_an_ip_literal_passes_only_if_it_is_loopback_or_the_bound_address(
    bind: str, address: ipaddress.IPv4Address | ipaddress.IPv6Address, data: st.DataObject
) -> None:
    gate = HostGate.for_server(bind)
    if address.version == 4:
        shown = str(address)
    else:
        shown = "[" + data.draw(st.sampled_from([address.compressed, address.exploded])) + "]"
    port = data.draw(st.none() | st.integers(1, 65535))
    host = shown if port is None else f"{shown}:{port}"
    mapped = getattr(address, "ipv4_mapped", None)
    value = str(mapped if mapped is not None else address)
    allowed = value in {"127.0.0.1", "::1", canonical_address(bind)}
    refusal = gate.check({"host": host}, "GET")
    assert (refusal is None) == allowed, (bind, host, refusal)
    # The page of the address itself (same origin) passes with it; any other origin does not.
    if allowed:
        assert gate.check({"host": host, "origin": f"http://{host}"}, "POST") is None
        other = f"http://{shown}:{(port or 80) % 65535 + 1}"
        refused = gate.check({"host": host, "origin": other}, "POST")
        assert refused is not None and refused.status == 403, (host, other)


@settings(max_examples=300, deadline=None)
@given(
    bind=st.sampled_from([*BINDS, "0.0.0.0", "::"]),
    scheme=st.sampled_from(["http", "https", "HTTP", "ftp", "file", "null", "chrome-extension"]),
    name=_NAMES,
    port=st.none() | st.integers(1, 65535),
)
def test_a_foreign_origin_is_refused_in_any_spelling(
    bind: str, scheme: str, name: str, port: int | None
) -> None:
    gate = HostGate.for_server(bind, ["mcp.corp.example"])
    origin = "null" if scheme == "null" else f"{scheme}://{_host_value(name, port, False, False)}"
    refusal = gate.check({"host": "127.0.0.1:8420", "origin": origin}, "POST")
    assert refusal is not None and refusal.status == 403, origin


@pytest.mark.parametrize(
    ("spelled", "canonical"),
    [
        ("127.1", "127.0.0.1"),
        ("127.0.1", "127.0.0.1"),
        ("0x7f.1", "127.0.0.1"),
        ("2130706433", "127.0.0.1"),
        ("0:0:0:0:0:0:0:1", "::1"),
        ("[::1]", "::1"),
        ("::FFFF:127.0.0.1", "127.0.0.1"),
        ("LocalHost.", "localhost"),
        ("0.0.0.0", "0.0.0.0"),
        ("999.1", "999.1"),  # not an address: no name matches it either
        ("bridge.corp.example", "bridge.corp.example"),
    ],
)
def test_canonical_address(spelled: str, canonical: str) -> None:
    assert canonical_address(spelled) == canonical


def test_mapped_and_shorthand_hosts() -> None:
    assert parse_host("[::ffff:127.0.0.1]:80") == ("127.0.0.1", 80)
    assert parse_host("127.1:80") == ("127.1", 80)  # a name; no gate lists it
    gate = HostGate.for_server("127.1")
    assert gate.check({"host": "127.1:80"}, "GET") is not None
    assert gate.check({"host": "[::ffff:7f00:1]:80"}, "GET") is None
    assert is_loopback("127.1") and is_loopback("::ffff:127.0.0.1") and is_loopback("LOCALHOST")
    assert not is_loopback("0.0.0.0") and not is_loopback("localhost.evil.example")
