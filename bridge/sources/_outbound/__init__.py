"""The outbound gate: every request a tool makes (HTTP manifests, OpenAPI tools, `fetch_url`).

- `parse_target`: a URL is parsed once, the way urllib3 (under requests) parses it, and
  refused when it is spelled so that another parser could read another host (backslashes,
  control characters, whitespace, ``user@``, octal/hex/short IPv4, port 0...). The URL sent is
  rebuilt from the parts that were checked.
- `HostAllowlist`: names match name entries, IP literals match address entries (IPs and
  networks); link-local and metadata addresses only when an entry names them.
- `GatedAdapter`: when a connection opens, the host urllib3 connects to is checked again, a
  name is resolved once and its answers checked, and the socket opens to exactly a checked
  address (no DNS rebinding between check and connect); TLS still verifies the name.
- `Outbound`: one pooled session; redirects followed by hand, each hop checked, at most
  `MAX_REDIRECTS`; secret headers only for the first URL's origin; bounded reads.

Threat model and tests: docs/reliability.md, "The intranet gate".
"""

from __future__ import annotations

from bridge.sources._outbound._allowlist import (
    ALLOW_HOSTS_ENV,
    HostAllowlist,
    Resolver,
    env_allow_hosts,
    host_of,
    system_resolver,
)
from bridge.sources._outbound._errors import HostNotAllowedError, HttpToolError
from bridge.sources._outbound._send import MAX_REDIRECTS, Outbound, Reply
from bridge.sources._outbound._url import Target, parse_target

__all__ = [
    "ALLOW_HOSTS_ENV",
    "MAX_REDIRECTS",
    "HostAllowlist",
    "HostNotAllowedError",
    "HttpToolError",
    "Outbound",
    "Reply",
    "Resolver",
    "Target",
    "env_allow_hosts",
    "host_of",
    "parse_target",
    "system_resolver",
]
