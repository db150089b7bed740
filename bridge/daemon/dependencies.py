"""What routes share: the service, the settings, the request id, the door, and the caller a
request came from (`PrincipalDep`, and its name, `Caller`), which `bridge.daemon.permissions`
names for every route.

All `async def`: FastAPI runs a plain `def` dependency on a worker thread, a hop that cost
more than these checks themselves under load.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from bridge.access import Principal
from bridge.access.door import Door
from bridge.daemon.permissions import principal_of
from bridge.daemon.service import Service
from bridge.daemon.settings import DaemonSettings
from bridge.daemon.shutdown import GraceClock

__all__ = [
    "Caller",
    "DoorDep",
    "GraceDep",
    "PrincipalDep",
    "RequestId",
    "ServiceDep",
    "caller_name",
    "get_door",
    "get_grace",
    "get_principal",
    "get_service",
    "get_settings",
    "request_id",
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


async def caller_name(request: Request) -> str | None:
    """The name of the caller this request came from (after `authorize`); None when the
    daemon takes requests without credentials."""
    name = getattr(request.state, "api_key_name", None)
    return str(name) if name is not None else None


async def get_principal(request: Request) -> Principal:
    """The caller of this request (`bridge.daemon.permissions.authorize` named it)."""
    return principal_of(request)


async def get_door(request: Request) -> Door:
    """The daemon's door (`bridge.daemon.door`)."""
    door: Door = request.app.state.door
    return door


ServiceDep = Annotated[Service, Depends(get_service)]
GraceDep = Annotated[GraceClock, Depends(get_grace)]
RequestId = Annotated[str, Depends(request_id)]
Caller = Annotated[str | None, Depends(caller_name)]
PrincipalDep = Annotated[Principal, Depends(get_principal)]
DoorDep = Annotated[Door, Depends(get_door)]
