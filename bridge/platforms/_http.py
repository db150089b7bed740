"""The `requests.Session` every platform adapter uses when the caller gives none."""

from __future__ import annotations

import functools
import os
import socket
import ssl
from collections.abc import Iterator, Mapping
from typing import Any, cast
from urllib.parse import urlsplit

import requests
import requests.utils
from requests.adapters import HTTPAdapter
from requests.cookies import extract_cookies_to_jar
from requests.utils import select_proxy
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

from bridge.platforms._direct import Pools, send_direct
from bridge.platforms._headers import merge_headers
from bridge.platforms._watchdog import Guard, current

__all__ = [
    "GuardedHTTPConnection",
    "GuardedHTTPSConnection",
    "PlatformSession",
    "causes",
    "connect_failure",
    "guard_pools",
    "new_session",
    "origin",
]

DEFAULT_CONNECTIONS = 10
"""Connections kept per host: requests' own default."""


class PlatformSession(requests.Session):
    """A session that reads the environment once per host, and sends the adapters' plain
    requests straight to its connection pools.

    With `trust_env` on, requests scans `os.environ` for proxies, looks for a netrc file and
    re-parses NO_PROXY on each request; and `Session.request` merges settings, cookies and
    hooks that a platform adapter never sets. Together that is more CPU than the rest of a
    small request (about 0.2 ms of 0.7 on loopback). Here HTTP(S)_PROXY and NO_PROXY are
    resolved once per origin (`proxies_for`), REQUESTS_CA_BUNDLE/CURL_CA_BUNDLE once, and
    netrc not at all, since every adapter sends its own Authorization header.

    `send_plain` sends through the mounted adapter's pools with the same TLS settings,
    proxies and exceptions as `Session.request`; redirects are followed and cookies kept as
    there. The common request (a bytes body, no proxy, no cookie to send) goes straight to
    urllib3 (`bridge.platforms._direct`); others are prepared by requests and handed to the
    adapter. Anything neither can do the same way (auth, hooks or default query parameters
    set on the session, multipart bodies) goes through `Session.request`.
    """

    def __init__(self, *, connections: int = DEFAULT_CONNECTIONS) -> None:
        super().__init__()
        self.trust_env = False
        bundle = os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE")
        if bundle:
            self.verify = bundle
        if connections != DEFAULT_CONNECTIONS:
            adapter = HTTPAdapter(pool_connections=4, pool_maxsize=connections)
            self.mount("http://", adapter)
            self.mount("https://", adapter)
        for mounted in self.adapters.values():
            if isinstance(mounted, HTTPAdapter):
                guard_pools(mounted)  # a run's total time limit can cut its connection
        self._environment: dict[str, dict[str, str]] = {}
        self._pools: Pools = {}
        self._checked_headers: set[tuple[str, str]] = set()

    def proxies_for(self, url: str) -> dict[str, str]:
        """The proxies for `url`: the environment's (read once per origin), then the
        session's own `proxies`, which win."""
        key = origin(url)
        found = self._environment.get(key)
        if found is None:
            found = self._environment[key] = dict(requests.utils.get_environ_proxies(url))
        return {**found, **self.proxies} if self.proxies else found

    @property
    def plain(self) -> bool:
        """True when nothing set on the session needs `Session.request`'s merging."""
        return not (self.auth or self.params or any(self.hooks.values()) or self.trust_env)

    def send_plain(
        self,
        method: str,
        url: str,
        *,
        params: Mapping[str, Any] | None,
        body: bytes | str | None,
        headers: Mapping[str, str],
        timeout: tuple[float, float],
    ) -> requests.Response:
        """Send one request as `Session.request(..., stream=True)` would (see the class)."""
        merged = merge_headers(self.headers, headers)
        textual = all(isinstance(value, str) for value in merged.values())
        sent = cast(dict[str, str], merged)  # (bytes or None values: requests' own handling)
        adapter = self.get_adapter(url)
        proxies = self.proxies_for(url)
        verify = True if self.verify is None else self.verify  # None verifies, as in requests
        # The common case straight to urllib3; the rest as requests prepares it.
        if (
            params is None
            and textual
            and type(adapter) is HTTPAdapter  # a subclass may override `send`
            and not isinstance(body, str)  # http.client would encode it as Latin-1
            and not len(self.cookies)
            and (not proxies or select_proxy(url, proxies) is None)
        ):
            prepared = None
            response = send_direct(
                adapter,
                method,
                url,
                body=body,
                headers=sent,
                timeout=timeout,
                verify=verify,
                cert=self.cert,
                pools=self._pools,
                checked=self._checked_headers,
            )
        else:
            prepared = self._prepare(method, url, params, body, merged)
            response = adapter.send(
                prepared,
                stream=True,
                timeout=timeout,
                verify=verify,
                cert=self.cert,
                proxies=proxies,
            )
        if "set-cookie" in response.headers or response.is_redirect:
            # What `Session.send` does after the adapter, for a complete prepared request.
            prepared = prepared or self._prepare(method, url, params, body, merged)
            extract_cookies_to_jar(self.cookies, prepared, response.raw)  # type: ignore[no-untyped-call]
            if response.is_redirect:
                # Each hop is sent (and checked) by requests itself.
                hops = self.resolve_redirects(
                    response,
                    prepared,
                    stream=True,
                    timeout=timeout,
                    verify=verify,  # type: ignore[arg-type]  # a CA bundle path is fine
                    cert=self.cert,
                    proxies=proxies,
                )
                history = list(hops)
                if history:
                    history.insert(0, response)
                    response = history.pop()
                    response.history = history
        return response

    def _prepare(
        self,
        method: str,
        url: str,
        params: Mapping[str, Any] | None,
        body: bytes | str | None,
        headers: Mapping[str, str | bytes],
    ) -> requests.PreparedRequest:
        prepared = requests.PreparedRequest()
        prepared.prepare(
            method=method,
            url=url,
            headers={k: v for k, v in headers.items() if v is not None},
            data=body,
            params=params,
            # An empty jar would still cost a cookie-policy pass per request.
            cookies=self.cookies if len(self.cookies) else None,
        )
        return prepared


class _Guarded:
    """What the guarded connections add: attach their socket to the sending thread's guard."""

    sock: Any
    _bridge_guard: Guard | None = None

    def _attach(self) -> None:
        guard = current()
        old = self._bridge_guard
        if old is not None and old is not guard:
            old.detach(self.sock)
        self._bridge_guard = guard
        if guard is not None:
            guard.attach(self.sock)


class GuardedHTTPConnection(_Guarded, HTTPConnection):
    """urllib3's connection, its socket watched by the sending thread's `Guard`."""

    def connect(self) -> None:
        super().connect()
        self._attach()

    def request(self, *args: Any, **kwargs: Any) -> None:
        if self.sock is not None:  # reused: connect() is not called again
            self._attach()
        super().request(*args, **kwargs)


class GuardedHTTPSConnection(_Guarded, HTTPSConnection):
    """urllib3's TLS connection, its socket watched by the sending thread's `Guard`."""

    def connect(self) -> None:
        super().connect()
        self._attach()

    def request(self, *args: Any, **kwargs: Any) -> None:
        if self.sock is not None:
            self._attach()
        super().request(*args, **kwargs)


class _GuardedHTTPPool(HTTPConnectionPool):
    ConnectionCls = GuardedHTTPConnection


class _GuardedHTTPSPool(HTTPSConnectionPool):
    ConnectionCls = GuardedHTTPSConnection


def guard_pools(adapter: HTTPAdapter) -> None:
    """Make the pools `adapter` creates (without a proxy) use the guarded connections."""
    adapter.poolmanager.pool_classes_by_scheme = {
        "http": _GuardedHTTPPool,
        "https": _GuardedHTTPSPool,
    }


def new_session(base_url: str = "", *, connections: int = DEFAULT_CONNECTIONS) -> PlatformSession:
    """A `PlatformSession` keeping up to `connections` connections per host (`base_url`'s
    proxies are looked up at once)."""
    session = PlatformSession(connections=connections)
    if base_url:
        session.proxies_for(base_url)
    return session


@functools.lru_cache(maxsize=1024)
def origin(url: str) -> str:
    """``scheme://host:port`` of `url`: where a connection goes, without path or query."""
    parts = urlsplit(url)
    if not parts.scheme or not parts.hostname:
        return url
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    port = f":{parts.port}" if parts.port is not None else ""
    return f"{parts.scheme}://{host}{port}"


def causes(exc: BaseException) -> Iterator[BaseException]:
    """`exc` and every exception behind it, nearest first: `__cause__`, `__context__`,
    urllib3's `reason` and exception arguments (requests wraps urllib3 wraps the OS error)."""
    seen: set[int] = set()
    todo: list[BaseException] = [exc]
    while todo:
        error = todo.pop(0)
        if id(error) in seen:
            continue
        seen.add(id(error))
        yield error
        nested = [error.__cause__, error.__context__, getattr(error, "reason", None), *error.args]
        todo += [n for n in nested if isinstance(n, BaseException)]


def connect_failure(exc: BaseException) -> str:
    """Why a connection failed, in a few words ("connection refused", "host not found"),
    from the OS error that urllib3 and requests wrap in their own repr-laden messages."""
    for error in causes(exc):
        if isinstance(error, socket.gaierror):
            return "host name not found"
        if isinstance(error, ConnectionRefusedError):
            return "connection refused"
        if isinstance(error, ConnectionResetError):
            return "connection reset"
        if isinstance(error, ssl.SSLError):
            return f"TLS error: {error.reason or error}"
        if isinstance(error, TimeoutError | socket.timeout):
            return "timed out"
        if isinstance(error, OSError) and error.errno is not None and error.strerror:
            return error.strerror.lower()
    text = str(exc) or type(exc).__name__
    return text if len(text) <= 200 else text[:199] + "…"
