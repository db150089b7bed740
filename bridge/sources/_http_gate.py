"""The Host/Origin gate (`bridge._hosts.HostGate`) as a pure ASGI middleware, for the MCP
endpoint of ``mcp-serve``: the daemon's rules for every bind address.

The MCP SDK's own DNS-rebinding protection is on only when the bind address is spelled exactly
``127.0.0.1``, ``localhost`` or ``::1`` (and then lets pages on any loopback port call it); this
gate replaces it, so ``--host 127.0.0.2``, ``0:0:0:0:0:0:0:1`` or ``0.0.0.0 --allow-remote``
refuse foreign names and foreign pages exactly as the daemon does.

It also reads a request's body before the app runs (up to the SDK's own limit, past which the
SDK answers 413): a client that goes away before the end of its body, or is cut off by the
body timeout (`bridge._connections`), is dropped without the app ever seeing half a body (the
SDK would log a traceback for it).
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

    from bridge._hosts import HostGate, Refusal

__all__ = ["HostGateMiddleware"]

logger = logging.getLogger(__name__)


class HostGateMiddleware:
    """Answers a request the gate refuses (421 wrong Host, 403 cross-origin, 400 two Hosts)
    before the app sees it, and drops one whose client left before the end of its body;
    everything else (and lifespan) passes through.

    Args:
        app: the application.
        gate: the rules.
        max_body_bytes: the most of a body read ahead (the SDK's own limit).
    """

    def __init__(self, app: ASGIApp, *, gate: HostGate, max_body_bytes: int) -> None:
        self.app = app
        self.gate = gate
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        from starlette.datastructures import Headers

        headers = Headers(scope=scope)
        refusal = self.gate.check(headers, scope["method"])
        if refusal is not None:
            logger.warning("refused %s %s: %s", scope["method"], scope["path"][:200], refusal.code)
            await _refuse(send, refusal)
            return
        if "content-length" in headers or "transfer-encoding" in headers:
            replay = await _read_ahead(receive, self.max_body_bytes)
            if replay is None:
                logger.debug("%s %s: the client left before the end of its body", *_line(scope))
                return
            receive = replay
        await self.app(scope, receive, send)


def _line(scope: Scope) -> tuple[str, str]:
    return scope["method"], scope["path"][:200]


async def _read_ahead(receive: Receive, limit: int) -> Receive | None:
    """A `receive` replaying the body read so far (all of it, or the first `limit` bytes and
    then the rest live), or None if the client went away before its end."""
    chunks: list[bytes] = []
    size = 0
    more = True
    while more and size <= limit:
        message = await receive()
        if message["type"] != "http.request":
            return None
        chunk = message.get("body", b"")
        chunks.append(chunk)
        size += len(chunk)
        more = bool(message.get("more_body", False))
    pending: list[Message] = [{"type": "http.request", "body": b"".join(chunks), "more_body": more}]

    async def replay() -> Message:
        if pending:
            return pending.pop()
        return await receive()

    return replay


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
