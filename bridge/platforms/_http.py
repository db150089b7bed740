"""The `requests.Session` every platform adapter uses when the caller gives none."""

from __future__ import annotations

import os
import socket
import ssl
from collections.abc import Iterator
from urllib.parse import urlsplit

import requests
import requests.utils

__all__ = ["causes", "connect_failure", "new_session", "origin"]


def new_session(base_url: str) -> requests.Session:
    """A session that reads the environment once, not on every request.

    With `trust_env` on, requests scans `os.environ` for proxies, looks for a netrc file and
    re-parses NO_PROXY on each request: more CPU than the rest of a small request. The same
    settings are resolved here once for `base_url` (HTTP(S)_PROXY, NO_PROXY and
    REQUESTS_CA_BUNDLE/CURL_CA_BUNDLE are honoured as before); netrc is not, since every
    adapter sends its own Authorization header.
    """
    session = requests.Session()
    session.trust_env = False
    session.proxies.update(requests.utils.get_environ_proxies(base_url))
    bundle = os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE")
    if bundle:
        session.verify = bundle
    return session


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
