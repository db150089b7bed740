"""The Host/Origin gate (`bridge._hosts.HostGate`) as a pure ASGI middleware, for the MCP
endpoint of ``mcp-serve``: the daemon's rules for every bind address.

The MCP SDK's own DNS-rebinding protection is on only when the bind address is spelled exactly
``127.0.0.1``, ``localhost`` or ``::1`` (and then lets pages on any loopback port call it); this
gate replaces it, so ``--host 127.0.0.2``, ``0:0:0:0:0:0:0:1`` or ``0.0.0.0 --allow-remote``
refuse foreign names and foreign pages exactly as the daemon does.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Receive, Scope, Send

    from bridge._hosts import HostGate, Refusal

__all__ = ["HostGateMiddleware"]

logger = logging.getLogger(__name__)


class HostGateMiddleware:
    """Answers a request the gate refuses (421 wrong Host, 403 cross-origin, 400 two Hosts)
    before the app sees it; everything else (and lifespan) passes through.

    Args:
        app: the application.
        gate: the rules.
    """

    def __init__(self, app: ASGIApp, *, gate: HostGate) -> None:
        self.app = app
        self.gate = gate

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        from starlette.datastructures import Headers

        refusal = self.gate.check(Headers(scope=scope), scope["method"])
        if refusal is None:
            await self.app(scope, receive, send)
            return
        logger.warning("refused %s %s: %s", scope["method"], scope["path"][:200], refusal.code)
        await _refuse(send, refusal)


async def _refuse(send: Send, refusal: Refusal) -> None:
    """The refusal as JSON; the connection is closed after it (its body may be unread)."""
    body = json.dumps({"error": {"code": refusal.code, "message": refusal.message}}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),
    ]
    await send({"type": "http.response.start", "status": refusal.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
