"""What OpenAI's two emulated APIs (Chat Completions, Responses) share above the wire.

`OpenAIApp` is their ASGI app's scaffolding on `ProtocolApp`: the model, ``GET /v1/models``,
the key check and fault header (`begin`), the error pages, and the planner's step for a
``tool_choice`` of ``none`` or ``required``. `file_run` files an answered request under its
emulator conversation: a pause waiting for calls, or a finished message.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any, ClassVar, Protocol

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from bridge.emulator.base_app import ProtocolApp
from bridge.emulator.faults import FaultSpec
from bridge.emulator.matching import choose_tool
from bridge.emulator.openai_wire import RequestError, begin, error_response, json_response
from bridge.emulator.planner import AnswerStep, ForcedTool, RunContext, Step
from bridge.emulator.scenario import Scenario
from bridge.emulator.state import (
    ActiveRun,
    Conversation,
    MessageRecord,
    PendingCall,
)
from bridge.emulator.transport import DroppedConnectionError

__all__ = ["OpenAIApp", "file_run"]

logger = logging.getLogger(__name__)


class OpenAIApp(ProtocolApp):
    """The ASGI app of one OpenAI emulator, with its inspectable `state`.

    A subclass sets `SERVES` (its endpoints, for the 404 page) and gives its own routes;
    ``GET /v1/models`` is added here.
    """

    SERVES: ClassVar[str]
    """The endpoints served, as the 404 page names them."""

    def __init__(
        self,
        *,
        token: str,
        model: str,
        scenario: Scenario | None,
        faults: FaultSpec | None,
        routes: list[Route],
    ) -> None:
        self.model = model
        routes = [*routes, Route("/v1/models", self._models, methods=["GET"])]
        super().__init__(token=token, scenario=scenario, faults=faults, routes=routes)

    async def _models(self, request: Request) -> Response:
        rid = request.state.request_id
        try:
            await self._begin(request)
        except RequestError as exc:
            return error_response(rid, exc)
        model = {"id": self.model, "object": "model", "created": 0, "owned_by": "emulator"}
        return json_response(rid, {"object": "list", "data": [model]})

    # --- one request ----------------------------------------------------------------------

    def _step(self, choice: str | dict[str, Any] | None, context: RunContext) -> Step:
        """The planner's next step, as ``tool_choice`` ``none`` (an answer) or ``required``
        (a call, on the run's first request) bends it."""
        if choice == "none":
            step = self.planner.next_step(RunContext(query=context.query, tools=()))
            return AnswerStep(step.text if isinstance(step, AnswerStep) else context.query)
        step = self.planner.next_step(context)
        if choice == "required" and not context.rounds and isinstance(step, AnswerStep):
            tool = choose_tool(context.query, context.tools, minimum=0.0) or (
                context.tools[0] if context.tools else None
            )
            if tool is not None:
                context.forced = ForcedTool(name=tool.name, input={})
                step = self.planner.next_step(context)
        return step

    # --- shared checks ----------------------------------------------------------------------

    async def _begin(self, request: Request) -> FaultSpec | None:
        return await begin(request, self.token)

    # --- error pages ----------------------------------------------------------------------

    async def _http_error(self, request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        rid = request.state.request_id
        if exc.status_code == 404:
            message = (
                f"Invalid URL ({request.method} {request.url.path}); the emulator serves "
                f"{self.SERVES}"
            )
        elif exc.status_code == 405:
            message = f"{request.method} is not allowed on {request.url.path}"
        else:
            message = str(exc.detail)
        return error_response(rid, RequestError(exc.status_code, message))

    async def _crash(self, request: Request, exc: Exception) -> Response:
        rid = request.state.request_id
        if isinstance(exc, DroppedConnectionError):
            return error_response(rid, RequestError(500, "connection dropped on purpose"))
        logger.error("emulator bug while serving %s: %r", request.url.path, exc)
        return error_response(
            rid,
            RequestError(
                500, f"the emulator failed: {type(exc).__name__}: {exc}", kind="server_error"
            ),
        )


class _Call(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def arguments(self) -> dict[str, Any]: ...

    @property
    def output_name(self) -> str: ...


def file_run(
    conv: Conversation,
    message_id: str,
    context: RunContext,
    calls: Iterable[tuple[str, _Call]],
    *,
    answer: str | None,
    failed: bool,
) -> None:
    """File an answered request under `conv`: a run paused on `calls` (call id, call), or,
    without calls, a finished message (`failed`: its status is ``error``)."""
    pending = [
        PendingCall(call_id, call.name, call.arguments, call.output_name) for call_id, call in calls
    ]
    if pending:
        conv.active = ActiveRun(message_id=message_id, context=context, pending=pending)
        return
    done = tuple(call for round_ in context.rounds for call in round_)
    conv.messages.append(
        MessageRecord(
            message_id=message_id,
            query=context.query,
            answer=answer or "",
            status="error" if failed else "success",
            tool_calls=done,
        )
    )
    conv.active = None
