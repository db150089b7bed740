"""A platform adapter's request handed straight to urllib3's connection pool.

`requests.adapters.HTTPAdapter.send`, for the one shape of request an adapter sends thousands
of times (a bytes body or none, no proxy, no cookie to send), without what it redoes on each
call: preparing the URL (parsing, IDNA, quoting: done once per distinct URL here) and the
`PreparedRequest` around the headers. requests' own adapter still picks the pool (TLS
context, CA bundle, client certificate, pool size), header values are checked as requests
checks them, and urllib3's exceptions come out as the `requests.exceptions` that
`HTTPAdapter.send` raises, so `bridge.platforms._transport`'s one table maps both paths alike.
On loopback this is about 0.15 ms less CPU per request than `HTTPAdapter.send`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import cast
from urllib.parse import urlsplit

import requests
from requests.adapters import HTTPAdapter
from requests.exceptions import (
    ConnectionError,
    ConnectTimeout,
    InvalidHeader,
    ProxyError,
    ReadTimeout,
    RetryError,
    SSLError,
)
from requests.structures import CaseInsensitiveDict
from requests.utils import check_header_validity
from urllib3.connectionpool import HTTPConnectionPool
from urllib3.exceptions import (
    ClosedPoolError,
    ConnectTimeoutError,
    MaxRetryError,
    NewConnectionError,
    ProtocolError,
    ReadTimeoutError,
    ResponseError,
)
from urllib3.exceptions import HTTPError as _HTTPError
from urllib3.exceptions import InvalidHeader as _InvalidHeader
from urllib3.exceptions import ProxyError as _ProxyError
from urllib3.exceptions import SSLError as _SSLError
from urllib3.util import Timeout

__all__ = ["Pools", "send_direct"]

_MAX_URLS = 1024
"""Distinct URLs whose preparation is kept (URLs with ids in them are prepared each time once
the table is full)."""
Origin = tuple[str, "str | None", "int | None"]
"""Scheme, host and port: what a connection pool serves."""
_prepared_urls: dict[str, tuple[str, str, Origin]] = {}
Pools = dict[tuple[Origin, object, object], HTTPConnectionPool]
"""The pools `send_direct` used, by origin and TLS settings (one table per session)."""


def send_direct(
    adapter: HTTPAdapter,
    method: str,
    url: str,
    *,
    body: bytes | None,
    headers: Mapping[str, str],
    timeout: tuple[float, float],
    verify: bool | str,
    cert: str | tuple[str, str] | None,
    pools: Pools,
) -> requests.Response:
    """Send one request without a proxy; the response's body is left unread.

    The pool requests' adapter picks for an origin and TLS settings is kept in `pools` and
    asked for again once the adapter's pool manager has closed it.

    Raises:
        requests.exceptions.RequestException: As `HTTPAdapter.send` would raise it.
    """
    full_url, path_url, origin = _prepared(url)
    for item in headers.items():
        check_header_validity(item)  # a newline in a value is refused, as requests does
    sent: CaseInsensitiveDict[str] = CaseInsensitiveDict(headers)
    body = body or None  # requests sends an empty body as none
    if body is not None:
        sent["Content-Length"] = str(len(body))
    elif method not in ("GET", "HEAD") and "Content-Length" not in sent:
        sent["Content-Length"] = "0"
    request = requests.PreparedRequest()
    request.method, request.url, request.headers, request.body = method, full_url, sent, body
    key = (origin, verify, cert)
    pool = pools.get(key)
    if pool is None or pool.pool is None:  # none yet, or closed by the pool manager
        pool = cast(
            HTTPConnectionPool,
            adapter.get_connection_with_tls_context(request, verify, proxies={}, cert=cert),
        )
        adapter.cert_verify(pool, full_url, verify, cert)  # type: ignore[no-untyped-call]
        pools[key] = pool
    try:
        raw = pool.urlopen(
            method=method,
            url=path_url,
            body=body,
            headers=sent,
            redirect=False,
            assert_same_host=False,
            preload_content=False,
            decode_content=False,
            retries=adapter.max_retries,
            timeout=Timeout(connect=timeout[0], read=timeout[1]),
            chunked=False,
        )
    # The translations of `HTTPAdapter.send` (requests 2.32-2.34), in its order.
    except (ProtocolError, OSError) as err:
        raise ConnectionError(err, request=request) from err
    except MaxRetryError as e:
        if isinstance(e.reason, ConnectTimeoutError) and not isinstance(
            e.reason, NewConnectionError
        ):
            raise ConnectTimeout(e, request=request) from e
        if isinstance(e.reason, ResponseError):
            raise RetryError(e, request=request) from e
        if isinstance(e.reason, _ProxyError):
            raise ProxyError(e, request=request) from e
        if isinstance(e.reason, _SSLError):
            raise SSLError(e, request=request) from e
        raise ConnectionError(e, request=request) from e
    except ClosedPoolError as e:
        raise ConnectionError(e, request=request) from e
    except _ProxyError as e:
        raise ProxyError(e) from e
    except (_SSLError, _HTTPError) as e:
        if isinstance(e, _SSLError):
            raise SSLError(e, request=request) from e
        if isinstance(e, ReadTimeoutError):
            raise ReadTimeout(e, request=request) from e
        if isinstance(e, _InvalidHeader):
            raise InvalidHeader(e, request=request) from e
        raise
    return adapter.build_response(request, raw)


def _prepared(url: str) -> tuple[str, str, Origin]:
    """`url` as requests prepares it (scheme and host checked, IDNA, quoting), the path and
    query sent on the request line, and its origin."""
    found = _prepared_urls.get(url)
    if found is None:
        request = requests.PreparedRequest()
        request.prepare_url(url, None)
        assert request.url is not None
        parts = urlsplit(request.url)
        found = (request.url, request.path_url, (parts.scheme, parts.hostname, parts.port))
        if len(_prepared_urls) < _MAX_URLS:
            _prepared_urls[url] = found
    return found
