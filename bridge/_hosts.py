"""The gate in front of every request to a server of ours (the daemon, ``mcp-serve`` over
HTTP): only its own names, only its own web pages.

A web page on any site can make the user's browser send requests to ``127.0.0.1``. Two things
stop it from using the server:

- DNS rebinding: the page's name (``evil.example``) is made to resolve to ``127.0.0.1``, so
  the browser treats the daemon as same-origin with the attacker's page; but its requests still
  carry ``Host: evil.example``. Only the names the daemon answers to pass (the bound address,
  localhost, ``127.0.0.1``, ``[::1]`` and ``--server-name`` names); others get 421.
- Cross-origin requests: a page elsewhere can still *send* (a form post, a no-cors fetch) even
  if it cannot read the answer. A request whose ``Origin`` is not the daemon's own origin (or a
  ``--server-name``) gets 403, and so does one marked ``Sec-Fetch-Site: cross-site`` (except a
  plain link followed to a GET page). Clients that are not browsers send no ``Origin``: curl,
  SDKs and tools pass.

Pure functions and one frozen value, so the rules are tested without a server. The module
sits at the bottom of the package (it imports only the standard library) because two layers
apply the same rules: the daemon (`bridge.daemon.middleware`) and the MCP endpoint of
``mcp-serve`` (`bridge.sources.mcp_server`), and sources must not import the daemon. Bind
addresses are compared in one canonical spelling (`canonical_address`): ``127.1``,
``0:0:0:0:0:0:0:1`` and ``::ffff:127.0.0.1`` are ``127.0.0.1``, ``::1`` and ``127.0.0.1``.
"""

from __future__ import annotations

import functools
import ipaddress
import re
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = ["HostGate", "Refusal", "canonical_address", "is_loopback", "parse_host"]

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
_WILDCARD_BINDS = frozenset({"0.0.0.0", "::", ""})
_SHORTHAND = re.compile(r"^(0x[0-9a-f]+|[0-9]+)(\.(0x[0-9a-f]+|[0-9]+)){0,3}$")
"""IPv4 in the forms inet_aton also reads (``127.1``, ``0x7f.1``, ``2130706433``)."""
_NAME = re.compile(r"^[a-z0-9_]([a-z0-9_.-]{0,251}[a-z0-9_])?$")
_PORT = re.compile(r"^[0-9]{1,5}$")
_DEFAULT_PORTS = {"http": 80, "https": 443}
_SHOWN = 80
"""Characters of a refused header quoted in the error (it is the client's text)."""


@dataclass(frozen=True)
class Refusal:
    """Why a request is refused: HTTP status, stable code, message."""

    status: int
    code: str
    message: str


@functools.lru_cache(maxsize=1024)
def parse_host(value: str) -> tuple[str, int | None] | None:
    """``host[:port]`` or ``[v6][:port]`` as (lower-case host, port); None if malformed.

    IP literals come back in their canonical form (``::1``, never ``0:0::1``), names without
    a trailing dot, so one spelling of a name cannot pass where another is refused.

    A pure function of its text, remembered for the last 1,024 texts: every request to the
    daemon names its Host, nearly always one of a few, and parsing an address is most of the
    gate's cost.
    """
    text = value.strip().lower()
    if text.startswith("["):
        inside, bracket, rest = text[1:].partition("]")
        if not bracket:
            return None
        try:
            host = _ip_text(ipaddress.IPv6Address(inside))
        except ValueError:
            return None
        port_text = rest[1:] if rest.startswith(":") else (None if not rest else "x")
    else:
        host, colon, port_text_raw = text.partition(":")
        port_text = port_text_raw if colon else None
        host = host.removesuffix(".")
        try:
            host = str(ipaddress.IPv4Address(host))
        except ValueError:
            if not _NAME.fullmatch(host):
                return None
    if port_text is None:
        return host, None
    if not _PORT.fullmatch(port_text) or int(port_text) > 65535:
        return None
    return host, int(port_text)


def _ip_text(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str:
    """An address's canonical text; an IPv4-mapped IPv6 address is its IPv4 address."""
    mapped = getattr(address, "ipv4_mapped", None)
    return str(mapped if mapped is not None else address)


def canonical_address(host: str) -> str:
    """A bind address or name in the one spelling the gate compares (that of `parse_host`).

    IP literals come back canonical (brackets dropped, ``0:0:0:0:0:0:0:1`` as ``::1``, an
    IPv4-mapped address as its IPv4 address) and so do the IPv4 shorthands the C library
    binds (``127.1``, ``0x7f.0.0.1``, ``2130706433`` are ``127.0.0.1``); names are lower-case
    without a trailing dot. So ``--host 127.1`` serves and is gated as ``127.0.0.1``.
    """
    bare = host.strip().lower().removeprefix("[").removesuffix("]").removesuffix(".")
    try:
        return _ip_text(ipaddress.ip_address(bare))
    except ValueError:
        pass
    if _SHORTHAND.fullmatch(bare):
        try:
            return socket.inet_ntoa(socket.inet_aton(bare))
        except OSError:
            return bare  # out of range: not an address, and no name matches it either
    return bare


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and every spelling of a loopback address (127.0.0.0/8, ::1)."""
    bare = canonical_address(host)
    if bare == "localhost":
        return True
    try:
        return ipaddress.ip_address(bare).is_loopback
    except ValueError:
        return False


def _show(value: str) -> str:
    return value if len(value) <= _SHOWN else value[:_SHOWN] + "..."


@dataclass(frozen=True)
class HostGate:
    """The names a server answers to, and the check every request goes through.

    Attributes:
        names: host names and IP literals accepted with any port.
        named_ports: (host, port) pairs accepted with that port only (``--server-name h:p``).
        extra: the ``--server-name`` entries (with ports) whose pages may also call the API.
        any_ip: bound to every address (``0.0.0.0``/``::``): any IP literal is accepted, since
            DNS rebinding needs a name; names still have to be listed.
        server: what the refusals call the server ("daemon", "MCP endpoint").
    """

    names: frozenset[str]
    named_ports: frozenset[tuple[str, int]]
    extra: frozenset[tuple[str, int | None]]
    any_ip: bool
    server: str = "daemon"

    @classmethod
    def for_server(
        cls, bind_host: str, server_names: Iterable[str] = (), *, server: str = "daemon"
    ) -> HostGate:
        """The gate of a server bound to `bind_host` that also answers to `server_names`.

        Every spelling of a bind address gets the same gate (`canonical_address`); a wildcard
        (``0.0.0.0``, ``::``) accepts IP literals but still only the listed names.

        Raises:
            ValueError: a server name is not ``host`` or ``host:port``.
        """
        bound = canonical_address(bind_host)
        names = {*LOOPBACK_NAMES}
        any_ip = bound in {canonical_address(w) for w in _WILDCARD_BINDS}
        if not any_ip:
            names.add(bound)
        extra: set[tuple[str, int | None]] = set()
        for entry in server_names:
            parsed = parse_host(entry)
            if parsed is None:
                raise ValueError(
                    f"server name {entry!r} is not a host name or address with an optional "
                    "port (e.g. bridge.intranet.example or bridge.intranet.example:8443); "
                    "no scheme, path or wildcard"
                )
            extra.add(parsed)
        return cls(
            names=frozenset(names | {h for h, p in extra if p is None}),
            named_ports=frozenset((h, p) for h, p in extra if p is not None),
            extra=frozenset(extra),
            any_ip=any_ip,
            server=server,
        )

    def host_allowed(self, host: str, port: int | None) -> bool:
        """True if a request for `host` (and `port`) is meant for this server."""
        if host in self.names or (port is not None and (host, port) in self.named_ports):
            return True
        if self.any_ip:
            try:
                ipaddress.ip_address(host)
            except ValueError:
                return False
            return True
        return False

    def check(self, headers: Mapping[str, str], method: str) -> Refusal | None:
        """None if the request may go on, else why not (421 wrong Host, 403 cross-origin).

        Args:
            headers: the request headers (names lower-case, as Starlette's `Headers`).
            method: the HTTP method.
        """
        getlist = getattr(headers, "getlist", None)
        if getlist is not None and len(getlist("host")) > 1:
            # RFC 9112 §3.2: servers must answer 400; proxies and the gate may read different ones.
            return Refusal(
                400,
                "bad_host",
                "the request has more than one Host header; send exactly one",
            )
        if getlist is not None and len(getlist("origin")) > 1:
            # A browser sends one; with two, the gate would judge one and another reader
            # (a proxy, the app) might act on the other.
            return Refusal(
                400,
                "bad_origin",
                "the request has more than one Origin header; send at most one",
            )
        raw_host = headers.get("host")
        host = parse_host(raw_host) if raw_host is not None else None
        if raw_host is not None and (host is None or not self.host_allowed(*host)):
            return Refusal(
                421,
                "host_not_allowed",
                f"this {self.server} does not answer to the Host {_show(raw_host)!r}: it "
                f"answers to "
                f"{self._described()}; add a name it is reached by with --server-name. (Other "
                "names are refused so that a web page cannot reach it by DNS rebinding.)",
            )
        origin = headers.get("origin")
        if origin is not None and not self._origin_allowed(origin, host):
            return Refusal(
                403,
                "cross_origin",
                f"cross-origin request from {_show(origin)!r} refused: only pages served by "
                f"this {self.server} (its own origin) may call it from a browser; a site of "
                "yours that should, can be named with --server-name. Clients other than "
                "browsers send no Origin header.",
            )
        navigation = headers.get("sec-fetch-mode") == "navigate" and method in ("GET", "HEAD")
        if headers.get("sec-fetch-site") == "cross-site" and not navigation:
            return Refusal(
                403,
                "cross_origin",
                "cross-site browser request refused (Sec-Fetch-Site: cross-site): only pages "
                f"served by this {self.server} (its own origin) may call it from a browser.",
            )
        return None

    def _origin_allowed(self, origin: str, host: tuple[str, int | None] | None) -> bool:
        scheme, sep, rest = origin.strip().lower().partition("://")
        default = _DEFAULT_PORTS.get(scheme)
        if not sep or default is None or "/" in rest or "@" in rest:
            return False  # "null" (sandboxed pages, file:) and anything not a web origin
        parsed = parse_host(rest)
        if parsed is None:
            return False
        name, port = parsed[0], parsed[1] if parsed[1] is not None else default
        if host is not None and (name, port) == (host[0], host[1] or default):
            return True  # same origin: the console
        return (name, None) in self.extra or (name, port) in self.extra

    def _described(self) -> str:
        shown = sorted(f"[{n}]" if ":" in n else n for n in self.names)
        shown += sorted(f"[{h}]:{p}" if ":" in h else f"{h}:{p}" for h, p in self.named_ports)
        if self.any_ip:
            shown.append("any IP address")
        return ", ".join(shown)
