"""The check at connect time: a socket only ever opens to an address the allowlist allows.

`GatedAdapter` is a requests adapter whose urllib3 connections do not resolve names
themselves: each new connection asks the policy in force (set by `gated(...)` around the
request, in this thread) for the addresses of the host urllib3 is connecting to, which
resolves the name once and checks every answer, then connects to one of exactly those
addresses. TLS still verifies the certificate against the name (SNI and hostname checks use
the URL's host), and the Host header is the URL's. A connection opened outside `gated` is
refused, so the adapter fails closed.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import socket
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any, Protocol

from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.exceptions import ConnectTimeoutError, NewConnectionError
from urllib3.util.connection import create_connection

from bridge.sources._outbound._errors import HostNotAllowedError
from bridge.sources._outbound._url import IPAddress

__all__ = ["ConnectPolicy", "GatedAdapter", "gated"]

logger = logging.getLogger(__name__)


class ConnectPolicy(Protocol):
    """Decides where a connection to ``host:port`` may go."""

    def addresses(self, host: str, port: int) -> list[IPAddress]:
        """The checked addresses to try, in order; raises when none is allowed."""
        ...


_POLICY: ContextVar[ConnectPolicy | None] = ContextVar("toolbridge_outbound_policy", default=None)


@contextlib.contextmanager
def gated(policy: ConnectPolicy) -> Iterator[None]:
    """Connections opened in this block (this thread or task) follow `policy`."""
    token = _POLICY.set(policy)
    try:
        yield
    finally:
        _POLICY.reset(token)


def _open(conn: HTTPConnection) -> socket.socket:
    policy = _POLICY.get()
    if policy is None:
        raise HostNotAllowedError(
            f"Refused: a connection to {conn.host}:{conn.port} was opened outside the outbound "
            "gate; send requests through bridge.sources.Outbound"
        )
    host = conn.host
    port = conn.port if conn.port is not None else (443 if conn.scheme == "https" else 80)
    failures: list[str] = []
    for address in policy.addresses(host, port):
        try:
            sock = create_connection(
                (str(address), port),
                conn.timeout,
                source_address=conn.source_address,
                socket_options=conn.socket_options,
            )
        except TimeoutError as exc:
            raise ConnectTimeoutError(
                conn, f"Connection to {host} timed out. (connect timeout={conn.timeout})"
            ) from exc
        except OSError as exc:
            failures.append(f"{address}: {exc}")
            continue
        peer = _peer(sock)
        if peer != address:
            # Not expected from a numeric address; checked so that no path can skip the rule.
            sock.close()
            raise HostNotAllowedError(
                f"Refused: the connection to {host} reached {peer}, not the checked {address}"
            )
        logger.debug("connected to %s (%s) port %s", host, address, port)
        return sock
    raise NewConnectionError(
        conn, f"Failed to establish a new connection: {'; '.join(failures) or 'no address'}"
    )


def _peer(sock: socket.socket) -> IPAddress | None:
    try:
        raw = str(sock.getpeername()[0]).split("%", 1)[0]
        address = ipaddress.ip_address(raw)
    except (OSError, ValueError):
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


class _GatedHTTPConnection(HTTPConnection):
    def _new_conn(self) -> socket.socket:
        return _open(self)


class _GatedHTTPSConnection(HTTPSConnection):
    def _new_conn(self) -> socket.socket:
        return _open(self)


class _GatedHTTPPool(HTTPConnectionPool):
    ConnectionCls = _GatedHTTPConnection


class _GatedHTTPSPool(HTTPSConnectionPool):
    ConnectionCls = _GatedHTTPSConnection


class GatedAdapter(HTTPAdapter):
    """An `HTTPAdapter` whose connections open only to addresses the policy in force allows."""

    def init_poolmanager(
        self, connections: int, maxsize: int, block: bool = False, **pool_kwargs: Any
    ) -> None:
        super().init_poolmanager(connections, maxsize, block, **pool_kwargs)
        self.poolmanager.pool_classes_by_scheme = {
            "http": _GatedHTTPPool,
            "https": _GatedHTTPSPool,
        }

    def proxy_manager_for(self, proxy: str, **proxy_kwargs: Any) -> Any:
        # Through a proxy the proxy connects, and the gate could not see where: never use one.
        raise HostNotAllowedError(
            "Refused: requests through an HTTP proxy are not supported by the outbound gate "
            f"(proxy {proxy.split('@')[-1]})"
        )
