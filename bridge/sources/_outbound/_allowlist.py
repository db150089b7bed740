"""Which hosts and addresses tools may reach: the operator's allowlist.

Entries (trusted: the operator writes them):

    wiki.example            a host name, any port          wiki.example:8080     one port
    *.docs.example          any subdomain (not docs.example itself)
    10.0.0.5, [fd00::5]     an address (literal IPs in URLs; with :port after, or [v6]:port)
    10.0.0.0/8, [fd00::/8]  a network of addresses

A name in a URL must match a name entry; an IP literal must match an address entry. A name is
resolved once, when the connection is opened, and its answers are checked: addresses that
reach the machine's or the cloud's internals (link-local 169.254.0.0/16 and fe80::/10, metadata
services such as 169.254.169.254, fd00:ec2::254 and 100.100.100.200), also in IPv4-mapped or
NAT64 form, are refused unless an address entry inside that range names them; unspecified
addresses (0.0.0.0/8, ::), which reach this machine, always. Names are never resolved for a
host the allowlist refuses, so a refused URL sends nothing, not even a DNS query.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from urllib3.exceptions import LocationParseError
from urllib3.util import parse_url

from bridge.errors import UsageError
from bridge.sources._outbound._errors import HostNotAllowedError, HttpToolError
from bridge.sources._outbound._url import (
    IPAddress,
    Target,
    UrlError,
    canonical_host,
    is_unspecified,
    parse_target,
)

__all__ = [
    "ALLOW_HOSTS_ENV",
    "HostAllowlist",
    "Resolver",
    "env_allow_hosts",
    "guarded_range",
    "host_of",
    "system_resolver",
]

ALLOW_HOSTS_ENV = "TOOLBRIDGE_ALLOW_HOSTS"
"""Extra allowed hosts for every HTTP source, comma or space separated."""

Resolver = Callable[[str, int], Iterable[str]]
"""``(host, port) -> addresses``: how names become addresses (tests map names to loopback)."""

Network = ipaddress.IPv4Network | ipaddress.IPv6Network

_GUARDED: tuple[tuple[Network, str], ...] = (
    (ipaddress.ip_network("169.254.0.0/16"), "a link-local address (cloud metadata lives here)"),
    (ipaddress.ip_network("fe80::/10"), "an IPv6 link-local address"),
    (ipaddress.ip_network("fd00:ec2::254/128"), "the AWS IPv6 metadata service"),
    (ipaddress.ip_network("100.100.100.200/32"), "the Alibaba Cloud metadata service"),
)

_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_ENTRY_FORMS = (
    "expected host, host:port, *.domain[:port], an IP address (10.0.0.5, [fd00::5]:8080) or a "
    "network (10.0.0.0/8)"
)


def env_allow_hosts() -> list[str]:
    """The hosts listed in the `TOOLBRIDGE_ALLOW_HOSTS` environment variable."""
    raw = os.environ.get(ALLOW_HOSTS_ENV, "")
    return [entry for entry in raw.replace(",", " ").split() if entry]


def system_resolver(host: str, port: int) -> list[str]:
    """The addresses the system resolver gives for `host` (TCP), in its order."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


def host_of(url: str) -> str:
    """``host:port`` of a URL as an allowlist entry (the port only when it is explicit).

    Empty for a URL the gate would refuse to parse (a template such as ``http://{region}.x/``).
    """
    try:
        return parse_target(url).label
    except UrlError:
        return ""


def guarded_range(address: IPAddress) -> tuple[Network, str] | None:
    """The guarded range holding `address` (also as mapped or NAT64 IPv4), and what it is."""
    candidates: list[IPAddress] = [address]
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            candidates.append(address.ipv4_mapped)
        if address in _NAT64:
            candidates.append(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
    for candidate in candidates:
        for network, what in _GUARDED:
            if candidate.version == network.version and candidate in network:
                return network, what
    return None


@dataclass(frozen=True)
class _Entry:
    name: str | None = None
    suffix: str | None = None
    """``.docs.example`` for ``*.docs.example``."""
    network: Network | None = None
    port: int | None = None

    def fits(self, port: int) -> bool:
        return self.port is None or self.port == port


class HostAllowlist:
    """Hosts and addresses a source may reach (see the module docstring for the rules).

    Args:
        entries: ``host``, ``host:port``, ``*.domain[:port]``, IP addresses, networks.
        userinfo: Accept URLs with ``user:password@`` before the host (off: such URLs are a
            classic way to hide the real host).

    Raises:
        UsageError: An entry of none of these forms.
    """

    def __init__(self, entries: Iterable[str], *, userinfo: bool = False) -> None:
        self.entries = tuple(dict.fromkeys(e.strip().lower() for e in entries if e.strip()))
        self.userinfo = userinfo
        self._rules = [_parse_entry(entry) for entry in self.entries]

    def __repr__(self) -> str:
        return f"HostAllowlist({list(self.entries)!r})"

    def __str__(self) -> str:
        return ", ".join(self.entries) or "(none)"

    def allows(self, url: str) -> bool:
        """True when `url` is a plainly spelled http(s) URL whose host (and port) is allowed.

        Names are not resolved here; `addresses` checks their answers when connecting.
        """
        try:
            target = parse_target(url, userinfo=self.userinfo)
        except UrlError:
            return False
        return self.permits(target)

    def permits(self, target: Target) -> bool:
        """The name-level decision for a parsed target (no DNS)."""
        if target.address is not None:
            return self._address_allowed(target.address, target.port)
        return self._name_allowed(target.host, target.port)

    def addresses(self, host: str, port: int, resolver: Resolver) -> list[IPAddress]:
        """The addresses a connection to `host`:`port` may use, in the resolver's order.

        This is the check at connect time, on the host urllib3 is about to connect to: an IP
        literal is checked as is; a name must be allowed, is resolved once, and its guarded
        answers are dropped unless named explicitly.

        Raises:
            HostNotAllowedError: The host, or every address it resolves to, is not allowed.
            HttpToolError: The name does not resolve.
        """
        try:
            name, address = canonical_host(f"[{host}]" if ":" in host else host)
        except UrlError as exc:
            raise HostNotAllowedError(f"Refused: the host {host!r} {exc}") from None
        if address is not None:
            if not self._address_allowed(address, port):
                raise HostNotAllowedError(self._address_refusal(address, port))
            return [address]
        if not self._name_allowed(name, port):
            raise HostNotAllowedError(
                f"Refused: {name}:{port} is not an allowed host (allowed: {self})"
            )
        try:
            answers = list(dict.fromkeys(resolver(name, port)))
        except OSError as exc:
            raise HttpToolError(f"cannot resolve the host name {name} ({exc})") from None
        usable: list[IPAddress] = []
        refused: list[str] = []
        for answer in answers:
            try:
                address = _connectable(ipaddress.ip_address(answer.split("%", 1)[0]))
            except ValueError:
                refused.append(f"{answer!r} (not an address)")
                continue
            guard = guarded_range(address)
            if is_unspecified(address):
                refused.append(f"{address} (unspecified: it reaches this machine)")
            elif guard is None or self._names_explicitly(address, port, guard[0]):
                usable.append(address)
            else:
                refused.append(f"{address} ({guard[1]})")
        if not usable:
            found = "; ".join(refused) or "no address"
            raise HostNotAllowedError(
                f"Refused: {name} resolves to {found}, which is never reached through an allowed "
                "host name; if that is really meant, the operator must add the address itself "
                "to the allowlist"
            )
        return usable

    def _name_allowed(self, name: str, port: int) -> bool:
        for rule in self._rules:
            if not rule.fits(port):
                continue
            if rule.name == name or (rule.suffix is not None and name.endswith(rule.suffix)):
                return True
        return False

    def _address_allowed(self, address: IPAddress, port: int) -> bool:
        guard = guarded_range(address)
        if guard is not None:
            return self._names_explicitly(address, port, guard[0])
        return any(
            rule.network is not None
            and rule.fits(port)
            and address.version == rule.network.version
            and address in rule.network
            for rule in self._rules
        )

    def _names_explicitly(self, address: IPAddress, port: int, guard: Network) -> bool:
        """An address entry inside the guarded range covers `address` (0.0.0.0/0 does not)."""
        for rule in self._rules:
            network = rule.network
            if network is None or not rule.fits(port) or network.version != address.version:
                continue
            if address in network and _inside(network, guard):
                return True
        return False

    def _address_refusal(self, address: IPAddress, port: int) -> str:
        guard = guarded_range(address)
        shown = f"[{address}]" if address.version == 6 else str(address)
        if guard is not None:
            return (
                f"Refused: {shown} is {guard[1]}; it is reached only when the allowlist names "
                f"that address itself (e.g. {shown}), not through a wider network or a host name"
            )
        return f"Refused: {shown}:{port} is not an allowed address (allowed: {self})"


def _inside(network: Network, guard: Network) -> bool:
    if isinstance(network, ipaddress.IPv4Network) and isinstance(guard, ipaddress.IPv4Network):
        return network.subnet_of(guard)
    if isinstance(network, ipaddress.IPv6Network) and isinstance(guard, ipaddress.IPv6Network):
        return network.subnet_of(guard)
    return False


def _connectable(address: IPAddress) -> IPAddress:
    """IPv4-mapped IPv6 connects to the IPv4 address: check and connect to that."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _parse_entry(entry: str) -> _Entry:
    host, port = _split_port(entry)
    if "/" in host:
        try:
            network = ipaddress.ip_network(host, strict=False)
        except ValueError:
            raise UsageError(
                f"allowlist entry {entry!r}: {host!r} is not a network; {_ENTRY_FORMS}"
            ) from None
        return _Entry(network=network, port=port)
    if ":" in host:
        try:
            address = _connectable(ipaddress.ip_address(host))
        except ValueError:
            raise UsageError(
                f"allowlist entry {entry!r}: {host!r} is not an IPv6 address; {_ENTRY_FORMS}"
            ) from None
        return _Entry(network=ipaddress.ip_network(address), port=port)
    wildcard = host.startswith("*.")
    try:
        ascii_host = parse_url(f"http://{host[2:] if wildcard else host}/").host or ""
        name, literal = canonical_host(ascii_host)
    except (LocationParseError, UrlError) as exc:
        raise UsageError(f"allowlist entry {entry!r}: {exc}; {_ENTRY_FORMS}") from None
    if literal is not None:
        if wildcard:
            raise UsageError(
                f"allowlist entry {entry!r}: a wildcard needs a domain; {_ENTRY_FORMS}"
            )
        return _Entry(network=ipaddress.ip_network(literal), port=port)
    if wildcard:
        return _Entry(suffix="." + name, port=port)
    return _Entry(name=name, port=port)


def _split_port(entry: str) -> tuple[str, int | None]:
    if entry.startswith("["):  # [::1]:8080, [fd00::/8]
        host, _, rest = entry[1:].partition("]")
        port_text = rest[1:] if rest.startswith(":") else rest
        if rest and not rest.startswith(":"):
            raise UsageError(f"allowlist entry {entry!r}: {_ENTRY_FORMS}")
    elif entry.count(":") == 1:
        host, _, port_text = entry.partition(":")
    else:  # a name, IPv4, or a bare IPv6 address or network
        return entry, None
    if not port_text:
        return host, None
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise UsageError(
            f"allowlist entry {entry!r}: the port {port_text!r} is not a number from 1 to 65535"
        )
    return host, int(port_text)
