"""`Outbound`: a pooled session whose every request and redirect hop goes through the gate.

Before a request: the URL is parsed once (`parse_target`) and its host checked by name or
address (`HostAllowlist.permits`); the URL sent is the one rebuilt from the checked parts.
When a connection opens: the host urllib3 connects to is checked again, names resolved once
and their answers checked, and the socket opened to exactly those addresses (`GatedAdapter`).
Redirects are followed by hand, each hop checked the same way, at most `MAX_REDIRECTS`.
Failures raise `HttpToolError`, whose message is what the model reads.

Each hop is an OpenTelemetry CLIENT span named after its method (`url.full` without userinfo
or query string, `server.address`, `server.port`, `http.response.status_code`, `error.type`;
a redirect hop counts in `http.request.resend_count`), a child of the current span (the tool
call's), and sends its W3C ``traceparent``/``tracestate`` so the intranet service's spans
join the trace. Those headers are not secrets: unlike the credentials they go to every hop.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin

import requests
from opentelemetry.trace import INVALID_SPAN, Span
from requests.structures import CaseInsensitiveDict

from bridge.sources._outbound._allowlist import (
    HostAllowlist,
    Resolver,
    guarded_range,
    system_resolver,
)
from bridge.sources._outbound._connect import GatedAdapter, gated
from bridge.sources._outbound._errors import HostNotAllowedError, HttpToolError
from bridge.sources._outbound._url import IPAddress, Target, UrlError, parse_target, shown
from bridge.tracing import SpanKind, Tracing, inject_span, mark_failed

__all__ = ["MAX_REDIRECTS", "Outbound", "Reply"]

logger = logging.getLogger(__name__)

MAX_REDIRECTS = 5
_REDIRECTS = (301, 302, 303, 307, 308)
_ALLOW_HINT = (
    "Add it to allow_hosts in the manifest, pass --allow-host {target}, or set "
    "TOOLBRIDGE_ALLOW_HOSTS."
)


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
    """One `requests.Session` (connection reuse) guarded by an allowlist: the outbound gate.

    Args:
        allowlist: Where requests may go.
        pool_size: Connections kept per host: calls of a batch run concurrently.
        resolver: How names become addresses (default: the system resolver); each new
            connection resolves once and connects only to the checked answers.
        allow_hint: How the operator allows a host, for refusal messages (``{target}`` is
            replaced by the refused ``host[:port]``).
        tracing: Where the requests' client spans go (default: the global tracer provider).
    """

    def __init__(
        self,
        allowlist: HostAllowlist,
        *,
        pool_size: int = 16,
        resolver: Resolver | None = None,
        allow_hint: str = _ALLOW_HINT,
        tracing: Tracing | None = None,
    ) -> None:
        self.allowlist = allowlist
        self.tracing = tracing if tracing is not None else Tracing()
        self.resolver: Resolver = resolver or system_resolver
        self.allow_hint = allow_hint
        self.session = requests.Session()
        # Direct connections only (a proxy would connect where the gate cannot see), and no
        # ~/.netrc credentials; a custom CA bundle from the environment still applies.
        self.session.trust_env = False
        bundle = os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE")
        if bundle:
            self.session.verify = bundle
        adapter = GatedAdapter(pool_connections=8, pool_maxsize=pool_size)
        self.session.mount("http://", adapter)
        self.session.mount("https://", adapter)

    def close(self) -> None:
        """Close the pooled connections."""
        self.session.close()

    def addresses(self, host: str, port: int) -> list[IPAddress]:
        """The connect-time check (`ConnectPolicy`): the allowed addresses of `host`:`port`."""
        return self.allowlist.addresses(host, port, self.resolver)

    def check(self, url: str) -> Target:
        """Parse `url` and check its host by name or address, without sending anything.

        Raises:
            HostNotAllowedError: The URL is not a plainly spelled http(s) URL, or its host is
                not allowed.
        """
        return self._target(url, None)

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

        `secret_headers` (authentication) are sent only to the origin of `url` (an upgrade
        from http to https on the same host keeps them).

        Raises:
            HostNotAllowedError: The URL, a redirect target, or the address a name resolves
                to is not allowed.
            HttpToolError: The host could not be reached, timed out, or redirected too often.
        """
        first = current = self._target(url, None)
        query = params
        for hop in range(MAX_REDIRECTS + 1):
            sent = dict(headers or {})
            span = self._span(method, current, hop)
            inject_span(span, sent)  # traceparent: to every hop, unlike the secrets
            if _keeps_secrets(first, current):
                sent.update(secret_headers or {})
            try:
                response = self._request(
                    method,
                    current,
                    params=query,
                    headers=sent,
                    cookies=cookies,
                    json_body=json_body if has_body else None,
                    has_body=has_body,
                    timeout=timeout,
                    span=span,
                )
                if span.is_recording():
                    span.set_attribute("http.response.status_code", response.status_code)
                    if response.status_code >= 400:
                        mark_failed(span, str(response.status_code))
                with response:
                    location = response.headers.get("Location")
                    if response.status_code not in _REDIRECTS or not location:
                        body, truncated = _read(response, max_bytes, current, span)
                        return Reply(
                            status=response.status_code,
                            reason=response.reason or "",
                            url=current.url,
                            headers=CaseInsensitiveDict(response.headers),
                            body=body,
                            truncated=truncated,
                            encoding=response.encoding,
                        )
            except HttpToolError:
                raise  # its span is marked where the request failed
            except BaseException as exc:
                mark_failed(span, type(exc).__qualname__)  # its text may name the query
                raise
            finally:
                span.end()
            location = _header_text(location)
            logger.debug("redirect %s from %s to %r", response.status_code, current.url, location)
            current = self._target(urljoin(current.url, location), current)
            query = None  # the Location carries its own query
            if response.status_code == 303 or (
                response.status_code in (301, 302) and method not in ("GET", "HEAD")
            ):
                method, has_body = "GET", False
        raise HttpToolError(
            f"{method} {first.short} was redirected more than {MAX_REDIRECTS} times; gave up"
        )

    def _span(self, method: str, target: Target, hop: int) -> Span:
        """The CLIENT span of one hop (`INVALID_SPAN`, which records nothing, when off)."""
        tracing = self.tracing
        if not tracing.enabled:
            return INVALID_SPAN
        attributes: dict[str, Any] = {
            "http.request.method": method,
            "url.full": target.short,  # no userinfo, no query string
            "server.address": target.host,
            "server.port": target.port,
        }
        if hop:
            attributes["http.request.resend_count"] = hop
        return tracing.start(method, kind=SpanKind.CLIENT, attributes=attributes)

    def _target(self, url: str, previous: Target | None) -> Target:
        how = f"the redirect from {previous.short} to {shown(url)}" if previous else shown(url)
        try:
            target = parse_target(url, userinfo=self.allowlist.userinfo)
        except UrlError as exc:
            raise HostNotAllowedError(f"Refused: {how}: the URL {exc}.") from None
        if self.allowlist.permits(target):
            return target
        if previous is None:
            how = target.short
        else:
            how = f"the redirect from {previous.short} to {target.short}"
        label = target.label
        guard = guarded_range(target.address) if target.address is not None else None
        if guard is not None:
            raise HostNotAllowedError(
                f"Refused: {how} goes to {label}, {guard[1]}; it is reached only when the "
                "allowlist names that address itself, not through a wider network or a host name"
            )
        raise HostNotAllowedError(
            f"Refused: {how} goes to {label}, which is not an allowed host (allowed: "
            f"{self.allowlist}). {self.allow_hint.format(target=label)}"
        )

    def _request(
        self,
        method: str,
        target: Target,
        *,
        params: list[tuple[str, str]] | None,
        headers: dict[str, str],
        cookies: Mapping[str, str] | None,
        json_body: Any,
        has_body: bool,
        timeout: float,
        span: Span,
    ) -> requests.Response:
        try:
            with gated(self):
                return self.session.request(
                    method,
                    target.url,
                    params=params,
                    headers=headers,
                    cookies=dict(cookies) if cookies else None,
                    json=json_body if has_body else None,
                    timeout=(min(timeout, 10.0), timeout),
                    allow_redirects=False,
                    stream=True,
                )
        except HostNotAllowedError:
            mark_failed(span, "HostNotAllowedError", "refused by the outbound gate")
            raise
        except requests.Timeout as exc:
            mark_failed(span, type(exc).__qualname__, "timed out")
            raise HttpToolError(
                f"{method} {target.short} timed out after {timeout:g} seconds"
            ) from None
        except requests.ConnectionError as exc:
            mark_failed(span, type(exc).__qualname__, _words(exc))
            raise HttpToolError(
                f"{method} {target.short} failed: cannot connect ({_reason(exc)})"
            ) from None
        except requests.RequestException as exc:
            mark_failed(span, type(exc).__qualname__, _words(exc))
            raise HttpToolError(
                f"{method} {target.short} failed: {type(exc).__name__}: {_reason(exc)}"
            ) from None


def _keeps_secrets(origin: Target, current: Target) -> bool:
    """Secrets go to the first URL's origin, or its https upgrade on the default ports."""
    if current.host != origin.host:
        return False
    if (current.scheme, current.port) == (origin.scheme, origin.port):
        return True
    return (origin.scheme, origin.port, current.scheme, current.port) == ("http", 80, "https", 443)


def _header_text(value: str) -> str:
    """A header as sent: http.client decodes bytes as latin-1; servers mostly mean UTF-8."""
    try:
        return value.encode("latin-1").decode("utf-8")
    except UnicodeError:
        return value


def _read(
    response: requests.Response, max_bytes: int, target: Target, span: Span
) -> tuple[bytes, bool]:
    chunks: list[bytes] = []
    size = 0
    try:
        for chunk in response.iter_content(chunk_size=65_536):
            chunks.append(chunk)
            size += len(chunk)
            if size > max_bytes:
                return b"".join(chunks)[:max_bytes], True
    except requests.RequestException as exc:
        mark_failed(span, type(exc).__qualname__, "the response broke off")
        raise HttpToolError(
            f"the response from {target.short} broke off ({_reason(exc)})"
        ) from None
    return b"".join(chunks), False


def _words(exc: BaseException) -> str:
    """The few words of `_reason` when it finds them, else the exception's class."""
    text = str(exc)
    for marker in ("Connection refused", "Name or service not known", "timed out", "reset"):
        if marker in text:
            return marker
    return type(exc).__qualname__


def _reason(exc: BaseException) -> str:
    text = str(exc)
    for marker in ("Connection refused", "Name or service not known", "timed out", "reset"):
        if marker in text:
            return marker
    return text if len(text) <= 200 else text[:197] + "..."
