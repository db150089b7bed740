"""One URL, read once the way the HTTP stack reads it, or refused.

requests hands URLs to urllib3's `parse_url`; Python's `urllib.parse` splits some of them
elsewhere (``http://a:1\\@b:2/`` is host ``a`` for urllib3 and ``b`` for `urlsplit`). The gate
parses with urllib3, refuses every spelling on which the two disagree or that is ambiguous
(backslashes, control and invisible characters, whitespace, credentials before ``@``, port 0,
IPv4 addresses in octal/hex/short forms), and sends the URL it rebuilt from the parts it
checked, so nothing downstream can read it differently.
"""

from __future__ import annotations

import ipaddress
import re
import socket
import unicodedata
from dataclasses import dataclass
from urllib.parse import urlsplit

from urllib3.exceptions import LocationParseError
from urllib3.util import parse_url

__all__ = [
    "DEFAULT_PORTS",
    "IPAddress",
    "Target",
    "UrlError",
    "canonical_host",
    "is_unspecified",
    "parse_target",
    "shown",
]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

DEFAULT_PORTS = {"http": 80, "https": 443}
_LABEL = re.compile(r"^[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?$")
# WHATWG (and glibc's inet_aton): a host whose last label is a number is an IPv4 address.
_NUMERIC_LABEL = re.compile(r"^(0x[0-9a-f]*|[0-9]+)$")
_SHOWN = 200
_THIS_NETWORK = ipaddress.IPv4Network("0.0.0.0/8")


class UrlError(ValueError):
    """A URL the gate will not send; the message says what is wrong and how to write it."""


@dataclass(frozen=True)
class Target:
    """Where a request goes, as checked: the URL sent is rebuilt from these parts."""

    scheme: str
    host: str
    """Lowercase ASCII (IDNA) name without a trailing dot, or an IP address in standard form."""
    port: int
    explicit_port: bool
    path: str
    query: str | None
    address: IPAddress | None
    """The address when the host is an IP literal (IPv4-mapped IPv6 read as IPv4)."""
    userinfo: str | None = None

    @property
    def netloc(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}" if self.explicit_port else host

    @property
    def url(self) -> str:
        """The URL that is sent: scheme, host, port, path and query, no fragment."""
        auth = f"{self.userinfo}@" if self.userinfo is not None else ""
        query = f"?{self.query}" if self.query is not None else ""
        return f"{self.scheme}://{auth}{self.netloc}{self.path}{query}"

    @property
    def label(self) -> str:
        """``host`` or ``host:port`` (port only when explicit), as an allowlist entry."""
        return self.netloc

    @property
    def short(self) -> str:
        """The URL without its query (arguments may be long; they are in the call anyway)."""
        return f"{self.scheme}://{self.netloc}{self.path}"


def shown(url: str) -> str:
    """`url` quoted for a message, cut when long."""
    cut = url if len(url) <= _SHOWN else url[: _SHOWN - 3] + "..."
    return repr(cut)


def parse_target(url: str, *, userinfo: bool = False) -> Target:
    """Parse `url` as urllib3 does, refusing anything another parser could read otherwise.

    Args:
        url: An absolute http(s) URL.
        userinfo: Accept ``user:password@`` before the host (the allowlist owner's choice).

    Raises:
        UrlError: The URL is not http(s), has no host, or is spelled ambiguously.
    """
    _check_characters(url)
    try:
        parts = parse_url(url)
    except LocationParseError as exc:
        raise UrlError(
            f"cannot be read as a URL ({exc}); write http(s)://HOST[:PORT]/PATH"
        ) from None
    scheme = (parts.scheme or "").lower()
    if scheme not in DEFAULT_PORTS:
        what = f"its scheme is {scheme!r}" if scheme else "it has no scheme"
        raise UrlError(f"is not an http:// or https:// URL ({what})")
    if parts.auth is not None and not userinfo:
        raise UrlError(
            "has a user name or password before '@' in its host part; credentials in URLs are "
            "not allowed. Remove everything between '//' and '@' (if the '@' belongs to the "
            "path or query, write it as %40)"
        )
    if not parts.host:
        raise UrlError("has no host; write http(s)://HOST[:PORT]/PATH")
    if parts.port == 0:
        raise UrlError("has port 0, which no server listens on; give the real port")
    host, address = canonical_host(parts.host)
    target = Target(
        scheme=scheme,
        host=host,
        port=parts.port or DEFAULT_PORTS[scheme],
        explicit_port=parts.port is not None,
        path=parts.path or "/",
        query=parts.query,
        address=address,
        userinfo=parts.auth if userinfo else None,
    )
    _cross_check(url, target)
    return target


def canonical_host(raw: str) -> tuple[str, IPAddress | None]:
    """A host as urllib3 left it, in canonical form, and its address when it is an IP literal.

    Raises:
        UrlError: An IPv6 zone id, an IPv4 address in a non-standard spelling, or a name
            that is not a valid DNS name.
    """
    host = raw.lower()
    if host.startswith("["):
        inner = host[1:-1] if host.endswith("]") else host[1:]
        if "%" in inner:
            raise UrlError(
                f"names an IPv6 zone ({raw}); zone ids are not allowed, give the address alone"
            )
        try:
            address = ipaddress.IPv6Address(inner)
        except ValueError:
            raise UrlError(f"has {raw}, which is not an IPv6 address") from None
        mapped = address.ipv4_mapped
        if mapped is not None:
            return str(_destination(raw, mapped)), mapped
        return str(_destination(raw, address)), address
    if ":" in host:
        raise UrlError(f"has the IPv6 address {raw} without brackets; write it as [{raw}]")
    name = host[:-1] if host.endswith(".") else host
    if not name or name.startswith(".") or ".." in name:
        raise UrlError(f"has the host {raw!r}, which has an empty label")
    if _NUMERIC_LABEL.match(name.rsplit(".", 1)[-1]):
        return _ipv4(raw, name)
    if len(name) > 253 or not all(_LABEL.match(label) for label in name.split(".")):
        raise UrlError(
            f"has the host {raw!r}, which is not a valid host name (letters, digits, '-' and '_' "
            "in dot-separated labels)"
        )
    return name, None


def _ipv4(raw: str, name: str) -> tuple[str, IPAddress]:
    try:
        address = ipaddress.IPv4Address(name)
    except ValueError:
        address = None
    if address is not None and str(address) == name:
        return name, _destination(raw, address)
    try:
        meaning = socket.inet_ntoa(socket.inet_aton(name))
    except OSError:
        raise UrlError(f"has the host {raw!r}, which is not a valid IPv4 address") from None
    raise UrlError(
        f"has the host {raw!r}, an IPv4 address in a non-standard spelling (it means "
        f"{meaning}); write it as {meaning}"
    )


def is_unspecified(address: IPAddress) -> bool:
    """0.0.0.0/8 or ``::``: no destination; a socket "connected" there reaches this machine."""
    if isinstance(address, ipaddress.IPv4Address):
        return address in _THIS_NETWORK
    return address.is_unspecified


def _destination(raw: str, address: IPAddress) -> IPAddress:
    if is_unspecified(address):
        raise UrlError(
            f"has the host {raw!r}, an unspecified address that reaches this machine rather than "
            "a server; write the server's real address"
        )
    return address


def _check_characters(url: str) -> None:
    for index, char in enumerate(url):
        if char == "\\":
            raise UrlError(
                f"contains a backslash (\\) at position {index}; URL parsers disagree on where "
                "the host of such a URL ends. Use forward slashes (a backslash that belongs to "
                "the path or query is written %5C)"
            )
        category = unicodedata.category(char)
        if char.isspace() or category in ("Zs", "Zl", "Zp"):
            raise UrlError(
                f"contains whitespace (U+{ord(char):04X}) at position {index}; write a space "
                "in a path or query as %20 and remove any other whitespace"
            )
        if category in ("Cc", "Cf", "Cs", "Co", "Cn"):
            raise UrlError(
                f"contains the control or invisible character U+{ord(char):04X} at position "
                f"{index}; remove it (percent-encode it if it belongs to the path or query)"
            )


def _cross_check(url: str, target: Target) -> None:
    """Refuse a URL that Python's own parser reads with another host or port."""
    try:
        other = urlsplit(url)
        other_port = other.port
    except ValueError as exc:
        raise UrlError(f"is read differently by URL parsers ({exc}); write it plainly") from None
    other_host = other.hostname or ""
    try:
        if other_host and not other_host.isascii():
            other_host = parse_url(f"http://{other_host}/").host or ""
        host, _ = canonical_host(f"[{other_host}]" if ":" in other_host else other_host)
    except (UrlError, LocationParseError):
        host = ""
    port = other_port or DEFAULT_PORTS.get(other.scheme.lower(), 0)
    if (host, port) != (target.host, target.port):
        raise UrlError(
            f"is read as host {other.hostname!r} port {port} by one URL parser and as "
            f"{target.host!r} port {target.port} by another; write it so that only one "
            "reading is possible"
        )
