"""What routes share: the service, the settings, the request id, the API key check and the
name of the key a request came with (`Caller`).

All `async def`: FastAPI runs a plain `def` dependency on a worker thread, a hop that cost
more than these checks themselves under load.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from bridge.daemon.errors import ApiError
from bridge.daemon.keys import ApiKeys
from bridge.daemon.service import Service
from bridge.daemon.settings import DaemonSettings
from bridge.daemon.shutdown import GraceClock

__all__ = [
    "Caller",
    "GraceDep",
    "RequestId",
    "ServiceDep",
    "caller_name",
    "get_grace",
    "get_service",
    "get_settings",
    "key_name",
    "request_id",
    "require_api_key",
]


async def get_service(request: Request) -> Service:
    """The daemon's `Service` (made by the app's lifespan)."""
    service: Service = request.app.state.service
    return service


async def get_settings(request: Request) -> DaemonSettings:
    """The daemon's settings."""
    settings: DaemonSettings = request.app.state.settings
    return settings


async def get_grace(request: Request) -> GraceClock:
    """The clock of a shutdown's grace period (fires only during a shutdown)."""
    clock: GraceClock = request.app.state.grace
    return clock


async def request_id(request: Request) -> str:
    """This request's id (also echoed in the `X-Request-Id` response header)."""
    return str(getattr(request.state, "request_id", "-"))


def key_name(keys: ApiKeys | None, authorization: str) -> str | None:
    """The name of the API key an ``Authorization`` header carries (None: the daemon takes no
    keys); one check for every way in (the routes' dependency and `bridge.daemon.fastpath`).

    Each comparison takes the same time whatever the key (`bridge.daemon.keys.ApiKeys`).

    Raises:
        ApiError: 401, the key is missing or unknown.
    """
    if keys is None:
        return None
    scheme, _, given = authorization.partition(" ")
    challenge = {"WWW-Authenticate": 'Bearer realm="toolbridge"'}
    if scheme.lower() != "bearer" or not given.strip():
        raise ApiError(
            401,
            "unauthorized",
            # Phrased so that `redact` leaves it alone (it masks whatever follows "Bearer ").
            "missing API key: send it in the Authorization header, with the scheme Bearer",
            headers=challenge,
        )
    name = keys.identify(given.strip())
    if name is None:
        raise ApiError(401, "unauthorized", "invalid API key", headers=challenge)
    return name


async def require_api_key(request: Request) -> None:
    """Refuse the request unless it carries one of the daemon's API keys (when any is set);
    remember the key's name in ``request.state.api_key_name`` (None without keys)."""
    request.state.api_key_name = None
    keys: ApiKeys | None = request.app.state.api_keys
    request.state.api_key_name = key_name(keys, request.headers.get("authorization", ""))


async def caller_name(request: Request) -> str | None:
    """The name of the API key this request came with (after `require_api_key`); None when
    the daemon takes requests without keys."""
    name = getattr(request.state, "api_key_name", None)
    return str(name) if name is not None else None


ServiceDep = Annotated[Service, Depends(get_service)]
GraceDep = Annotated[GraceClock, Depends(get_grace)]
RequestId = Annotated[str, Depends(request_id)]
Caller = Annotated[str | None, Depends(caller_name)]
