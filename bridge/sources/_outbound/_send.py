"""Outbound HTTP for tool sources: a host allowlist, redirects followed by hand, bounded reads.

Every request (and every redirect hop) is checked against the allowlist before a connection is
opened, so an API cannot bounce the bridge to a host nobody allowed. Failures raise
`HttpToolError`, whose message is what the model reads.
"""

from __future__ import annotations

import fnmatch
import logging
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin, urlsplit

import requests
from requests.adapters import HTTPAdapter
from requests.structures import CaseInsensitiveDict

from bridge.errors import redact
from bridge.tools.spec import ToolError

__all__ = [
    "ALLOW_HOSTS_ENV",
    "HostAllowlist",
    "HostNotAllowedError",
    "HttpToolError",
    "Outbound",
    "Reply",
    "env_allow_hosts",
    "host_of",
]

logger = logging.getLogger(__name__)

ALLOW_HOSTS_ENV = "TOOLBRIDGE_ALLOW_HOSTS"
"""Extra allowed hosts for every HTTP source, comma or space separated."""
MAX_REDIRECTS = 5
_REDIRECTS = (301, 302, 303, 307, 308)
_DEFAULT_PORTS = {"http": 80, "https": 443}


class HttpToolError(ToolError):
    """An HTTP tool call failed; the message (never holding a secret) is what the model reads."""

    def __init__(self, message: str) -> None:
        super().__init__(redact(message))


class HostNotAllowedError(HttpToolError):
    """The request, or a redirect, would go to a host that is not on the allowlist."""


def env_allow_hosts() -> list[str]:
    """The hosts listed in the `TOOLBRIDGE_ALLOW_HOSTS` environment variable."""
    raw = os.environ.get(ALLOW_HOSTS_ENV, "")
    return [entry for entry in raw.replace(",", " ").split() if entry]


class HostAllowlist:
    """Hosts a source may reach: ``host`` (any port), ``host:port``, ``*.domain[:port]``."""

    def __init__(self, entries: Iterable[str]) -> None:
        self.entries = tuple(dict.fromkeys(e.strip().lower() for e in entries if e.strip()))

    def __repr__(self) -> str:
        return f"HostAllowlist({list(self.entries)!r})"

    def __str__(self) -> str:
        return ", ".join(self.entries) or "(none)"

    def allows(self, url: str) -> bool:
        """True when `url` is http(s) and its host (and port) match an entry."""
        parts = urlsplit(url)
        if parts.scheme not in _DEFAULT_PORTS or not parts.hostname:
            return False
        host = parts.hostname.lower()
        try:
            port = parts.port or _DEFAULT_PORTS[parts.scheme]
        except ValueError:
            return False
        for entry in self.entries:
            pattern, _, wanted = _split_entry(entry)
            if wanted and wanted != str(port):
                continue
            if pattern == host or (pattern.startswith("*.") and fnmatch.fnmatch(host, pattern)):
                return True
        return False


def _split_entry(entry: str) -> tuple[str, str, str]:
    if entry.startswith("["):  # [::1]:8080
        host, _, rest = entry[1:].partition("]")
        return host, ":", rest.lstrip(":")
    if entry.count(":") == 1:
        return entry.partition(":")
    return entry, "", ""


def host_of(url: str) -> str:
    """``host:port`` of a URL as an allowlist entry (the port only when it is explicit)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    return f"{host}:{parts.port}" if parts.port else host


@dataclass(frozen=True)
class Reply:
    """A finished response: status, headers and at most `max_bytes` of the body."""

    status: int
    reason: str
    url: str
    headers: Mapping[str, str]
    """Case-insensitive, as HTTP header names are."""
    body: bytes
    truncated: bool
    encoding: str | None

    def text(self) -> str:
        """The body decoded (undecodable bytes replaced)."""
        return self.body.decode(self.encoding or "utf-8", errors="replace")


class Outbound:
    """One `requests.Session` (connection reuse) guarded by an allowlist.

    Args:
        allowlist: Where requests may go.
        pool_size: Connections kept per host: calls of a batch run concurrently.
    """

    def __init__(self, allowlist: HostAllowlist, *, pool_size: int = 16) -> None:
        self.allowlist = allowlist
        self.session = requests.Session()
        adapter = HTTPAdapter(pool_connections=8, pool_maxsize=pool_size)
        self.session.mount("http://", adapter)
        self.session.mount("https://", adapter)

    def close(self) -> None:
        """Close the pooled connections."""
        self.session.close()

    def send(
        self,
        method: str,
        url: str,
        *,
        params: list[tuple[str, str]] | None = None,
        headers: Mapping[str, str] | None = None,
        secret_headers: Mapping[str, str] | None = None,
        cookies: Mapping[str, str] | None = None,
        json_body: Any = None,
        has_body: bool = False,
        timeout: float,
        max_bytes: int,
    ) -> Reply:
        """Send one request, following up to 5 redirects to allowed hosts.

        `secret_headers` (authentication) are dropped when a redirect leaves the original host.

        Raises:
            HostNotAllowedError: The URL or a redirect target is not allowed.
            HttpToolError: The host could not be reached, timed out, or redirected too often.
        """
        current = url
        origin = urlsplit(url).netloc.lower()
        query = params
        previous: str | None = None
        for _hop in range(MAX_REDIRECTS + 1):
            self._check(current, previous)
            sent = dict(headers or {})
            if urlsplit(current).netloc.lower() == origin:
                sent.update(secret_headers or {})
            response = self._request(
                method,
                current,
                params=query,
                headers=sent,
                cookies=cookies,
                json_body=json_body if has_body else None,
                has_body=has_body,
                timeout=timeout,
            )
            with response:
                location = response.headers.get("Location")
                if response.status_code not in _REDIRECTS or not location:
                    body, truncated = _read(response, max_bytes)
                    return Reply(
                        status=response.status_code,
                        reason=response.reason or "",
                        url=current,
                        headers=CaseInsensitiveDict(response.headers),
                        body=body,
                        truncated=truncated,
                        encoding=response.encoding,
                    )
            logger.debug("redirect %s from %s to %s", response.status_code, current, location)
            previous, current = current, urljoin(current, location)
            query = None  # the Location carries its own query
            if response.status_code == 303 or (
                response.status_code in (301, 302) and method not in ("GET", "HEAD")
            ):
                method, has_body = "GET", False
        raise HttpToolError(
            f"{method} {_short(url)} was redirected more than {MAX_REDIRECTS} times; gave up"
        )

    def _check(self, url: str, first: str | None) -> None:
        if self.allowlist.allows(url):
            return
        target = host_of(url) or url
        how = f"the redirect from {_short(first)} to {_short(url)}" if first else _short(url)
        raise HostNotAllowedError(
            f"Refused: {how} goes to {target}, which is not an allowed host (allowed: "
            f"{self.allowlist}). Add it to allow_hosts in the manifest, pass --allow-host "
            f"{target}, or set TOOLBRIDGE_ALLOW_HOSTS."
        )

    def _request(
        self,
        method: str,
        url: str,
        *,
        params: list[tuple[str, str]] | None,
        headers: dict[str, str],
        cookies: Mapping[str, str] | None,
        json_body: Any,
        has_body: bool,
        timeout: float,
    ) -> requests.Response:
        try:
            return self.session.request(
                method,
                url,
                params=params,
                headers=headers,
                cookies=dict(cookies) if cookies else None,
                json=json_body if has_body else None,
                timeout=(min(timeout, 10.0), timeout),
                allow_redirects=False,
                stream=True,
            )
        except requests.Timeout:
            raise HttpToolError(
                f"{method} {_short(url)} timed out after {timeout:g} seconds"
            ) from None
        except requests.ConnectionError as exc:
            raise HttpToolError(
                f"{method} {_short(url)} failed: cannot connect ({_reason(exc)})"
            ) from None
        except requests.RequestException as exc:
            raise HttpToolError(
                f"{method} {_short(url)} failed: {type(exc).__name__}: {_reason(exc)}"
            ) from None


def _read(response: requests.Response, max_bytes: int) -> tuple[bytes, bool]:
    chunks: list[bytes] = []
    size = 0
    try:
        for chunk in response.iter_content(chunk_size=65_536):
            chunks.append(chunk)
            size += len(chunk)
            if size > max_bytes:
                return b"".join(chunks)[:max_bytes], True
    except requests.RequestException as exc:
        raise HttpToolError(
            f"the response from {_short(response.url)} broke off ({_reason(exc)})"
        ) from None
    return b"".join(chunks), False


def _short(url: str | None) -> str:
    """The URL without its query string (arguments may be long; they are in the call anyway)."""
    if not url:
        return ""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}{parts.path}"


def _reason(exc: BaseException) -> str:
    text = str(exc)
    for marker in ("Connection refused", "Name or service not known", "timed out", "reset"):
        if marker in text:
            return marker
    return text if len(text) <= 200 else text[:197] + "..."
