"""What routes share: the service, the settings, the request id and the API key check.

All `async def`: FastAPI runs a plain `def` dependency on a worker thread, a hop that cost
more than these checks themselves under load.
"""

from __future__ import annotations

import hmac
from typing import Annotated

from fastapi import Depends, Request

from bridge.daemon.errors import ApiError
from bridge.daemon.service import Service
from bridge.daemon.settings import DaemonSettings
from bridge.daemon.shutdown import GraceClock

__all__ = [
    "GraceDep",
    "RequestId",
    "ServiceDep",
    "get_grace",
    "get_service",
    "get_settings",
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


async def require_api_key(request: Request) -> None:
    """Refuse the request unless it carries the daemon's API key (when one is set).

    The comparison takes the same time whatever the key (`hmac.compare_digest`).
    """
    settings: DaemonSettings = request.app.state.settings
    if settings.api_key is None:
        return
    header = request.headers.get("authorization", "")
    scheme, _, given = header.partition(" ")
    challenge = {"WWW-Authenticate": 'Bearer realm="toolbridge"'}
    if scheme.lower() != "bearer" or not given.strip():
        raise ApiError(
            401,
            "unauthorized",
            # Phrased so that `redact` leaves it alone (it masks whatever follows "Bearer ").
            "missing API key: send it in the Authorization header, with the scheme Bearer",
            headers=challenge,
        )
    expected = settings.api_key.get_secret_value().encode()
    if not hmac.compare_digest(given.strip().encode(), expected):
        raise ApiError(401, "unauthorized", "invalid API key", headers=challenge)


ServiceDep = Annotated[Service, Depends(get_service)]
GraceDep = Annotated[GraceClock, Depends(get_grace)]
RequestId = Annotated[str, Depends(request_id)]
