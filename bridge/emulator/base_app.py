"""What every emulated protocol's ASGI app shares: `ProtocolApp`.

The token clients must send, the fault spec, the planner and the inspectable `state`, the
protocol's routes on `protocol_app` with its own error pages, and the fault a request gets.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from bridge.emulator.faults import FaultSpec
from bridge.emulator.planner import Planner
from bridge.emulator.scenario import Scenario
from bridge.emulator.state import EmulatorState
from bridge.emulator.transport import protocol_app

__all__ = ["ProtocolApp"]


class ProtocolApp:
    """The ASGI app of one emulated protocol, with its inspectable `state`.

    A subclass gives its routes and implements its error pages (`_http_error` for 404/405...,
    `_crash` for anything raised), in its wire's own error body.
    """

    SAVED: ClassVar[Mapping[str, Any]] = {}
    """Kept in a state file besides the conversations (`bridge.emulator.saving`)."""

    def __init__(
        self,
        *,
        token: str,
        scenario: Scenario | None,
        faults: FaultSpec | None,
        routes: list[Route],
        wrap: Callable[[ASGIApp], ASGIApp] | None = None,
    ) -> None:
        self.token = token.removeprefix("Bearer ").strip()
        self.faults = faults
        self.planner = Planner(scenario)
        self.state = EmulatorState()
        self._asgi = protocol_app(
            routes, state=self.state, http_error=self._http_error, crash=self._crash, wrap=wrap
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """ASGI entry point."""
        await self._asgi(scope, receive, send)

    def _fault(
        self,
        header: FaultSpec | None,
        rule: FaultSpec | None,
        endpoint: str,
        round_index: int | None,
    ) -> FaultSpec | None:
        """The fault that applies to this request, if any (header, then rule, then global)."""
        return self.state.faults.pick(header, rule, self.faults, endpoint, round_index)

    async def _http_error(self, request: Request, exc: Exception) -> Response:
        raise NotImplementedError

    async def _crash(self, request: Request, exc: Exception) -> Response:
        raise NotImplementedError
