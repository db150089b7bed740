"""The two requests every conversation makes, answered without FastAPI's per-request work.

``POST /v1/conversations`` and ``POST /v1/conversations/{id}/messages`` (JSON in, JSON out)
are what a client of the daemon sends for each conversation. Through FastAPI each one passes
its exception and exit-stack middleware, the router's match over every route, the solving of
five dependencies and the endpoint wrappers: a profile of the daemon under load
(docs/benchmarks.md) put that at about a quarter of the daemon's CPU. This layer,
inside `RequestContextMiddleware` (so the request id, the Host/Origin gate, the body limit,
the access log and the metrics are the same), answers them by calling the very functions the
routes call (`open_conversation`, `answer_message`).

It answers only what it is sure to answer as the route would: a well-formed JSON body that
validates, a caller the door names and lets converse (when credentials are set), a
conversation id of the right shape, and no
``stream``. Anything else (an invalid body, a missing key, an SSE answer, another route) goes
on to FastAPI untouched, with the body replayed, and gets FastAPI's answer and errors.
Exceptions are mapped by the app's own exception handlers. ``TOOLBRIDGE_FASTPATH=0`` turns the
layer off; tests/daemon/test_fastpath.py sends the same requests, hostile ones and generated
bodies, to a daemon with it and one without and requires the same answers.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import ValidationError
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from bridge.access import AccessError, Permission, Principal
from bridge.daemon.models import CONVERSATION_ID_PATTERN, CreateConversation, SendMessage
from bridge.daemon.routers.conversations import answer_message, open_conversation, router

__all__ = ["FastRoutes"]

PREFIX = "/v1/conversations"
SUFFIX = "/messages"
_ID = re.compile(CONVERSATION_ID_PATTERN)


class FastRoutes:
    """ASGI middleware answering the two per-conversation POSTs itself (see the module)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._routes: dict[str, Any] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        path: str = scope["path"]
        conversation_id = ""
        if path != PREFIX:
            if not (path.startswith(PREFIX + "/") and path.endswith(SUFFIX)):
                await self.app(scope, receive, send)
                return
            conversation_id = path[len(PREFIX) + 1 : -len(SUFFIX)]
            if not _ID.fullmatch(conversation_id):
                await self.app(scope, receive, send)
                return
        headers = Headers(scope=scope)
        principal = _caller(scope, headers)
        if principal is None or not _is_json(headers.get("content-type")):
            await self.app(scope, receive, send)
            return
        body, replay = await _read(receive)
        model = _validated(body, SendMessage if conversation_id else CreateConversation)
        if model is None or (isinstance(model, SendMessage) and model.stream):
            await self.app(scope, replay, send)
            return
        app = scope["app"]
        state = scope.setdefault("state", {})
        caller = None if principal.via == "anonymous" else principal.name
        state["principal"] = principal
        state["api_key_name"] = caller
        scope["route"] = self._route(conversation_id)
        request = Request(scope, replay)
        try:
            if isinstance(model, SendMessage):
                scope["path_params"] = {"conversation_id": conversation_id}
                request_id = str(state.get("request_id", "-"))
                response = await answer_message(
                    request,
                    app.state.service,
                    app.state.grace,
                    conversation_id,
                    model,
                    request_id,
                    caller,
                    principal,
                )
            else:
                assert isinstance(model, CreateConversation)
                response = await open_conversation(app.state.service, model, principal)
        except Exception as exc:
            handler = _handler(app, exc)
            if handler is None:
                raise
            response = await handler(request, exc)
        await response(scope, replay, send)

    def _route(self, conversation_id: str) -> Any:
        """The FastAPI route this request stands for (its path template labels the metrics)."""
        template = PREFIX + ("/{conversation_id}" + SUFFIX if conversation_id else "")
        route = self._routes.get(template)
        if route is None:
            route = next(
                r
                for r in router.routes
                if getattr(r, "path", None) == template and "POST" in getattr(r, "methods", ())
            )
            self._routes[template] = route
        return route


def _caller(scope: Scope, headers: Headers) -> Principal | None:
    """The caller, when the door lets it send (`converse`): the same door as every route's
    (`bridge.daemon.permissions.authorize`). A refused one (no key, a wrong key, without
    `converse`) is for FastAPI's routes to answer, and record."""
    try:
        principal: Principal = scope["app"].state.door.authenticate(headers.get("authorization"))
    except AccessError:
        return None
    return principal if principal.can(Permission.CONVERSE) else None


def _is_json(content_type: str | None) -> bool:
    if content_type is None:
        return False
    kind = content_type.split(";", 1)[0].strip().lower()
    return kind == "application/json"


async def _read(receive: Receive) -> tuple[bytes, Receive]:
    """The whole body and a `receive` that gives it again (then the real one's messages)."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            pending: Message | None = message  # a disconnect: the app must see it
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            pending = None
            break
    body = b"".join(chunks)
    replayed = False

    async def replay() -> Message:
        nonlocal replayed
        if not replayed:
            replayed = True
            if pending is not None:
                return pending
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return body, replay


def _validated(body: bytes, model: type[SendMessage] | type[CreateConversation]) -> Any:
    """The body as `model`, validated from parsed JSON as FastAPI does; None if it is not."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):  # nested too deep: FastAPI says so (400)
        return None
    if not isinstance(data, dict):
        return None
    try:
        return model.model_validate(data)
    except ValidationError:
        return None


def _handler(app: Any, exc: Exception) -> Any:
    """The app's exception handler for `exc` (as Starlette's `ExceptionMiddleware` finds it),
    None for the catch-all one (``Exception``: the server error layer above uses it)."""
    handlers = app.exception_handlers
    for cls in type(exc).__mro__:
        if cls is Exception:
            return None
        if cls in handlers:
            return handlers[cls]
    return None
