"""Ready-made tool: GET a web page or API URL, on allowlisted hosts only, with size limits.

    export TOOLBRIDGE_FETCH_ALLOW="wiki.intranet.example, *.docs.example:443"
    toolbridge run "what does the wiki say about VPN setup?" --tools manifests/http_fetch.py

Tool: `fetch_url`. Only http(s) URLs whose host is on `TOOLBRIDGE_FETCH_ALLOW` (``host``,
``host:port``, ``*.domain``, IP addresses or networks such as ``10.0.0.0/8``, comma separated)
are fetched, redirects included, through the outbound gate (`bridge.sources.Outbound`: the host
checked is the host connected to; ambiguous URLs and link-local/metadata addresses are
refused); everything else is refused with a message that says how to allow it. HTML is
reduced to its text; binary content is refused; at most `TOOLBRIDGE_FETCH_MAX_BYTES` (default
1000000) bytes are read.
"""

from __future__ import annotations

import os
import re
from functools import lru_cache
from html.parser import HTMLParser

from bridge.sources import HostAllowlist, HttpToolError, Outbound
from bridge.tools import manifest

__all__ = ["ALLOW_ENV", "MAX_BYTES_ENV", "fetch_url"]

ALLOW_ENV = "TOOLBRIDGE_FETCH_ALLOW"
MAX_BYTES_ENV = "TOOLBRIDGE_FETCH_MAX_BYTES"
TIMEOUT = 20.0
_ALLOW_HINT = f"The operator can add {{target}} to {ALLOW_ENV} where toolbridge runs."
_TEXTUAL = re.compile(r"^(text/|application/([\w.+-]*\+)?(json|xml|javascript)\b)")


@lru_cache(maxsize=8)
def _outbound(entries: tuple[str, ...]) -> Outbound:
    # One pooled session per allowlist: connections are reused across calls.
    return Outbound(HostAllowlist(entries), allow_hint=_ALLOW_HINT)


class _Text(HTMLParser):
    """The visible text of an HTML page (scripts, styles and tags dropped)."""

    _SKIP = frozenset(("script", "style", "noscript", "template", "svg"))
    _BREAK = frozenset(
        ("p", "br", "div", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "section")
    )

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._hidden = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self._SKIP:
            self._hidden += 1
        elif tag in self._BREAK:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in self._SKIP and self._hidden:
            self._hidden -= 1

    def handle_data(self, data: str) -> None:
        if not self._hidden:
            self.parts.append(data)

    def text(self) -> str:
        lines = (" ".join(line.split()) for line in "".join(self.parts).splitlines())
        return "\n".join(line for line in lines if line)


def _max_bytes() -> int:
    raw = os.environ.get(MAX_BYTES_ENV, "1000000")
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{MAX_BYTES_ENV} must be a number of bytes (got {raw!r})") from None
    return max(1_000, value)


@manifest(timeout=60, idempotent=True)
def fetch_url(url: str, max_chars: int = 20_000) -> str:
    """Fetch a web page or API response by URL (GET) and return its text.

    Args:
        url: An http:// or https:// URL on an allowed host.
        max_chars: Most characters to return (100-100000).
    """
    if not 100 <= max_chars <= 100_000:
        raise ValueError(f"max_chars: expected 100 to 100000 (got {max_chars})")
    url = url.strip()
    # Only for a friendlier message: the gate (Outbound) parses the URL and decides.
    if url.split(":", 1)[0].lower() not in ("http", "https"):
        raise ValueError(f"refused: {url!r} is not an http:// or https:// URL")
    entries = tuple(
        entry for entry in os.environ.get(ALLOW_ENV, "").replace(",", " ").split() if entry
    )
    if not entries:
        raise PermissionError(
            f"refused: no host is allowed; set {ALLOW_ENV} (e.g. 'wiki.example, *.docs.example') "
            "where toolbridge runs"
        )
    reply = _outbound(entries).send(
        "GET", url, timeout=TIMEOUT, max_bytes=_max_bytes(), headers={"Accept": "*/*"}
    )
    kind = reply.headers.get("Content-Type", "").split(";")[0].strip().lower()
    if not 200 <= reply.status < 300:
        snippet = " ".join(reply.text().split())[:300]
        raise HttpToolError(f"HTTP {reply.status} {reply.reason} from {url}: {snippet}")
    if kind and not _TEXTUAL.match(kind):
        raise ValueError(f"refused: {url} is {kind}, not text; only text, HTML, JSON and XML")
    text = reply.text()
    if kind == "text/html" or (not kind and "<html" in text[:1000].lower()):
        parser = _Text()
        parser.feed(text)
        text = parser.text()
    note = f"\n[only the first {len(reply.body)} bytes were read]" if reply.truncated else ""
    if len(text) > max_chars:
        note = f"\n[cut at {max_chars} of {len(text)} characters]" + note
        text = text[:max_chars]
    return text + note
