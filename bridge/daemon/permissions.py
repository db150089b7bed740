"""What each route of the daemon needs: one table, `ROUTE_PERMISSIONS`, read by one
dependency, `authorize`, that every route runs (the app's own dependency).

A route missing from the table is refused (403) for every caller, so a new route cannot be
served unguarded (tests/daemon/test_door_routes.py checks that the table and the app's routes
are the same set). A rule names the permissions of which the caller needs one; `PUBLIC` routes
(health, readiness, the console's static files) take no credentials, as before callers.

What a route shows of the conversations (its caller's own, or all with ``read_all``), of the
tools (the caller's list) and of the events is for the route to filter; this table only says
who may ask at all.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse

from bridge.access import (
    ANONYMOUS,
    AccessError,
    AuditEvent,
    ForbiddenError,
    Permission,
    Principal,
    RateLimitedError,
    Records,
)
from bridge.daemon.errors import error_response

__all__ = [
    "PUBLIC",
    "ROUTE_PERMISSIONS",
    "Rule",
    "authorize",
    "on_access_error",
    "principal_of",
    "record",
]

logger = logging.getLogger(__name__)

C, R, T, A, OBS, ADMIN = (
    Permission.CONVERSE,
    Permission.READ_ALL,
    Permission.CALL_TOOLS,
    Permission.APPROVE,
    Permission.OBSERVE,
    Permission.ADMIN,
)


@dataclass(frozen=True)
class Rule:
    """The permissions of which a caller needs one (``admin`` holds them all); none: public."""

    any_of: tuple[Permission, ...]

    @property
    def public(self) -> bool:
        return not self.any_of

    def __str__(self) -> str:
        return " or ".join(map(str, self.any_of)) or "public"


def needs(*permissions: Permission) -> Rule:
    return Rule(tuple(permissions))


PUBLIC = Rule(())

ROUTE_PERMISSIONS: dict[tuple[str, str], Rule] = {
    # conversations: a caller's own with converse, every one with read_all
    ("POST", "/v1/conversations"): needs(C),
    ("GET", "/v1/conversations"): needs(C, R),
    ("GET", "/v1/conversations/{conversation_id}"): needs(C, R),
    ("POST", "/v1/conversations/{conversation_id}/messages"): needs(C),
    ("GET", "/v1/conversations/{conversation_id}/events"): needs(C, R),
    # the daemon-wide stream: everything with read_all, a caller's own conversations' otherwise
    ("GET", "/v1/events"): needs(C, R),
    # tools: each caller sees its own list
    ("GET", "/v1/tools"): needs(C, R, T),
    ("POST", "/v1/tools/{name}/call"): needs(T),
    ("GET", "/v1/tools/calls"): needs(T, R),
    ("POST", "/v1/tools/reload"): needs(ADMIN),
    # approvals
    ("GET", "/v1/approvals"): needs(A),
    ("GET", "/v1/approvals/{approval_id}"): needs(A),
    ("POST", "/v1/approvals/{approval_id}"): needs(A),
    # observing the daemon
    ("GET", "/v1/info"): needs(OBS),
    ("GET", "/metrics"): needs(OBS),
    # no credentials, as before callers: probes and the console's page and files
    ("GET", "/healthz"): PUBLIC,
    ("HEAD", "/healthz"): PUBLIC,
    ("GET", "/readyz"): PUBLIC,
    ("HEAD", "/readyz"): PUBLIC,
    ("GET", "/"): PUBLIC,
    ("GET", "/console/{name}"): PUBLIC,
}


def principal_of(request: Request) -> Principal:
    """The caller of a request `authorize` let in (`ANONYMOUS` for a public route)."""
    found = getattr(request.state, "principal", None)
    return found if isinstance(found, Principal) else ANONYMOUS


async def record(request: Request, event: AuditEvent) -> None:
    """Append `event` to the audit record, when the daemon keeps one (a refusal that cannot be
    recorded is logged: the refusal stands)."""
    audit: Records | None = getattr(request.app.state, "audit", None)
    if audit is None:
        return
    try:
        await asyncio.to_thread(audit.record, event)
    except Exception:
        logger.exception("the audit record refused a refusal at the door")


async def authorize(request: Request) -> None:
    """The door for every route: who the caller is (401), whether the route's rule lets it in
    (403); the caller is kept in ``request.state.principal`` (and its name, None for the
    anonymous caller, in ``request.state.api_key_name``)."""
    route: Any = request.scope.get("route")
    template = getattr(route, "path", "")
    rule = ROUTE_PERMISSIONS.get((request.method, template))
    if rule is not None and rule.public:
        request.state.principal = ANONYMOUS
        return
    principal = request.app.state.door.authenticate(request.headers.get("authorization"))
    request.state.principal = principal
    request.state.api_key_name = None if principal.via == "anonymous" else principal.name
    if rule is None:
        raise ForbiddenError(f"{request.method} {template} is not open to any caller")
    if not any(principal.can(p) for p in rule.any_of):
        raise ForbiddenError(
            f"the caller {principal.name!r} needs the {rule} permission for "
            f"{request.method} {template}"
        )


async def on_access_error(request: Request, exc: Exception) -> JSONResponse:
    """A refusal at the door: 401, 403 or 429 (with ``Retry-After``) as an `ErrorBody`,
    recorded as an ``identity`` audit event."""
    assert isinstance(exc, AccessError)
    headers: dict[str, str] | None = None
    if exc.status == 401:
        headers = {"WWW-Authenticate": 'Bearer realm="toolbridge"'}
    details: dict[str, Any] | None = None
    if isinstance(exc, RateLimitedError):
        headers = {"Retry-After": str(exc.retry_after)}
        details = {"retry_after": exc.retry_after}
    principal = getattr(request.state, "principal", None)
    outcome = {401: "unauthorized", 429: "rate_limited"}.get(exc.status, "forbidden")
    await record(
        request,
        AuditEvent(
            kind="identity",
            outcome=outcome,
            caller=principal.name if isinstance(principal, Principal) else None,
            via=principal.via if isinstance(principal, Principal) else None,
            detail={"route": f"{request.method} {request.url.path}", "reason": str(exc)},
        ),
    )
    return error_response(request, exc.status, exc.code, str(exc), headers=headers, details=details)
