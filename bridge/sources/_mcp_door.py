"""The door of `mcp-serve` over HTTP: bearer credentials checked by an `Authenticates` (keys
of a callers file, an identity provider's tokens), through the MCP SDK's own auth pieces.

The SDK's `BearerAuthBackend` hands each bearer token to a `TokenVerifier`; `DoorTokenVerifier`
is that verifier: it asks the door (``authenticate("Bearer <token>")``) and answers with a
`CallerToken`, an `AccessToken` naming the caller (``client_id``: its name, ``scopes``: the
permissions it holds) that keeps the `Principal` for the tool handlers (`caller_of`). A refused
credential is an ``identity`` entry in the audit record and, from the SDK's
`RequireAuthMiddleware`, a 401 with ``WWW-Authenticate: Bearer ... resource_metadata="..."``.
"""

from __future__ import annotations

import logging
from typing import Any

import anyio.to_thread
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from pydantic import PrivateAttr

from bridge.access import AccessError, AuditEvent, Authenticates, Permission, Principal, Records

__all__ = ["CallerToken", "DoorTokenVerifier", "caller_of", "record"]

logger = logging.getLogger(__name__)


class CallerToken(AccessToken):
    """An access token the door accepted, with the caller it names (`principal`)."""

    _principal: Principal = PrivateAttr()

    @property
    def principal(self) -> Principal:
        return self._principal

    @classmethod
    def of(cls, token: str, principal: Principal) -> CallerToken:
        accepted = cls(
            token=token,
            client_id=principal.name,
            scopes=[str(permission) for permission in Permission if principal.can(permission)],
            subject=principal.name,
        )
        accepted._principal = principal
        return accepted


class DoorTokenVerifier:
    """The MCP SDK's `TokenVerifier`, answered by the door.

    Args:
        door: Names the caller of a ``Bearer`` credential.
        audit: Where a refused credential is written (``identity``/``unauthorized``).
    """

    def __init__(self, door: Authenticates, audit: Records | None = None) -> None:
        self.door = door
        self.audit = audit

    async def verify_token(self, token: str) -> AccessToken | None:
        # The door may fetch an identity provider's keys: off the event loop.
        try:
            principal = await anyio.to_thread.run_sync(self.door.authenticate, "Bearer " + token)
        except AccessError as exc:
            logger.info("MCP request refused at the door: %s", exc)
            refused = AuditEvent(kind="identity", outcome=exc.code, detail={"reason": str(exc)})
            try:
                await record(self.audit, refused)
            except Exception:  # refused either way: the 401 goes out
                logger.exception("a refused MCP credential was not recorded")
            return None
        return CallerToken.of(token, principal)


def caller_of(ctx: Any) -> Principal | None:
    """The caller of the request `ctx` answers (the SDK's request context), when the door named
    one: from the HTTP request's authenticated user, else from the SDK's auth context."""
    request = getattr(ctx, "request", None)
    scope = getattr(request, "scope", None)
    user = scope.get("user") if isinstance(scope, dict) else None
    token = user.access_token if isinstance(user, AuthenticatedUser) else get_access_token()
    return token.principal if isinstance(token, CallerToken) else None


async def record(audit: Records | None, event: AuditEvent) -> None:
    """Append `event` to the audit record (a durable write: off the event loop)."""
    if audit is not None:
        await anyio.to_thread.run_sync(audit.record, event)
