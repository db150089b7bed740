"""The Chat Completions emulator's ASGI app: ``POST /v1/chat/completions`` and
``GET /v1/models`` on Starlette.

Checks run in the real API's order: key (401), body (400, naming the field), model (404),
tools and messages (400: every tool call answered, every tool message answering one), then
faults; only then does anything change. The model served is the emulator's ``app_id``
(``OPENAI_MODEL`` in `client_env`).

Chat Completions keeps nothing server-side, so each request is planned from its own
``messages`` (`bridge.emulator.openai_chat.messages`). For inspection (`Emulator.conversation`)
the emulator still files each run under a conversation: the one whose calls the messages
answer, or a new one for a new question.

Every answer carries ``x-request-id``; errors use OpenAI's body
``{"error": {"message", "type", "param", "code"}}``. Faults are the shared ones
(`bridge.emulator.faults`): ``POST /v1/chat/completions`` is the ``runs`` endpoint and its
round is the number of tool rounds the messages already hold; ``duplicate_interrupt`` has no
meaning here and is ignored.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any, ClassVar

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from bridge.emulator.faults import FaultSpec
from bridge.emulator.matching import choose_tool, tool_info
from bridge.emulator.openai_chat.messages import (
    ChatRequest,
    IssuedCall,
    RunSoFar,
    check_messages,
    check_tools,
    prompt_choice,
    prompt_tools,
    read_run,
    read_text_run,
)
from bridge.emulator.openai_chat.model import ModelConfig
from bridge.emulator.openai_chat.render import Rendered, render_completion
from bridge.emulator.openai_chat.replies import (
    CUT_SHORT,
    body_response,
    rejection,
    stream_response,
)
from bridge.emulator.openai_wire import (
    RequestError,
    begin,
    error_response,
    json_object,
    json_response,
    text_of,
)
from bridge.emulator.planner import AnswerStep, ForcedTool, PlannedCall, Planner, RunContext, Step
from bridge.emulator.scenario import Scenario
from bridge.emulator.state import ActiveRun, EmulatorState, MessageRecord, PendingCall
from bridge.emulator.transport import DroppedConnectionError, protocol_app

__all__ = ["ChatApp"]

logger = logging.getLogger(__name__)


class ChatApp:
    """The ASGI app of one Chat Completions emulator, with its inspectable `state`."""

    SAVED: ClassVar[Mapping[str, Any]] = {
        "_issued": dict[str, IssuedCall],
        "_text_issued": dict[str, tuple[PlannedCall, ...]],
        "_call_conversation": dict[str, str],
    }
    """Kept in a state file besides the conversations (`bridge.emulator.saving`)."""

    def __init__(
        self,
        *,
        token: str,
        model: str,
        scenario: Scenario | None,
        faults: FaultSpec | None,
        traits: ModelConfig | None = None,
    ) -> None:
        self.token = token.removeprefix("Bearer ").strip()
        self.model = model
        self.traits = traits or ModelConfig()
        self.faults = faults
        self.planner = Planner(scenario)
        self.state = EmulatorState()
        self._issued: dict[str, IssuedCall] = {}
        self._text_issued: dict[str, tuple[PlannedCall, ...]] = {}
        """Calls the emulator wrote as text, by the text of the reply that holds them."""
        self._call_conversation: dict[str, str] = {}
        """The emulator conversation of each call id, and of each reply with text calls."""
        routes = [
            Route("/v1/chat/completions", self._create, methods=["POST"]),
            Route("/v1/models", self._models, methods=["GET"]),
        ]
        self._asgi = protocol_app(
            routes, state=self.state, http_error=self._http_error, crash=self._crash
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """ASGI entry point."""
        await self._asgi(scope, receive, send)

    def completion_conversation(self, completion_id: str) -> str:
        """The emulator conversation (`Emulator.conversation`) a completion was filed under.

        Raises:
            KeyError: no completion has this id.
        """
        with self.state.lock:
            for conversation in self.state.conversations_by_id().values():
                active = conversation.active
                if active is not None and active.message_id == completion_id:
                    return conversation.conversation_id
                if any(m.message_id == completion_id for m in conversation.messages):
                    return conversation.conversation_id
        raise KeyError(completion_id)

    # --- endpoints ------------------------------------------------------------------------

    async def _create(self, request: Request) -> Response:
        rid = request.state.request_id
        try:
            header_fault = await self._begin(request)
            req = ChatRequest.parse(await json_object(request))
            if req.model != self.model:
                raise RequestError(
                    404,
                    f"The model `{req.model}` does not exist or you do not have access to it "
                    f"(this emulator serves `{self.model}`).",
                    code="model_not_found",
                )
            if req.tools and not self.traits.native_tools:
                raise RequestError(
                    400,
                    f"The model `{self.model}` has no native tool calls (this emulator's "
                    "scenario says openai.native_tools: false): send no 'tools' and describe "
                    "them in the prompt instead (toolbridge: --tool-protocol text).",
                    param="tools",
                )
            tools = check_tools(req.tools or [])
            check_messages(req.messages)
            with self.state.lock:
                rendered, fault = self._run(req, tools, header_fault)
                if rendered is None:
                    assert fault is not None
                    return rejection(rid, fault, stream=bool(req.stream))
        except RequestError as exc:
            return error_response(rid, exc)
        if fault is not None and fault.stall:
            await asyncio.sleep(fault.stall)
        if req.stream:
            return stream_response(
                rid,
                rendered,
                self.planner.settings.chunk_chars,
                fault,
                include_usage=req.include_usage,
            )
        return body_response(rid, rendered, fault)

    async def _models(self, request: Request) -> Response:
        rid = request.state.request_id
        try:
            await self._begin(request)
        except RequestError as exc:
            return error_response(rid, exc)
        model = {"id": self.model, "object": "model", "created": 0, "owned_by": "emulator"}
        return json_response(rid, {"object": "list", "data": [model]})

    # --- one completion -------------------------------------------------------------------

    def _run(
        self,
        req: ChatRequest,
        tools: list[tuple[str, str, dict[str, Any]]],
        header_fault: FaultSpec | None,
    ) -> tuple[Rendered | None, FaultSpec | None]:
        """Plan and record one completion (caller holds the lock); None when a fault refuses."""
        as_text = False
        choice = req.tool_choice
        if not tools and choice in (None, "auto"):
            described = prompt_tools(req.messages)
            if described:
                tools, as_text = described, True
                choice = prompt_choice(req.messages)
        if as_text:
            run = read_text_run(req.messages, self._text_issued)
        else:
            run = read_run(req.messages, self._issued)
        infos = tuple(tool_info(name, description, params) for name, description, params in tools)
        forced = _forced(choice, infos)
        match = None if forced else self.planner.match(run.query, (t.name for t in infos))
        context = RunContext(
            query=run.query, tools=infos, forced=forced, match=match, rounds=run.rounds
        )
        rule_fault = match.rule.fault_spec if match else None
        fault = self.state.faults.pick(
            header_fault, rule_fault, self.faults, "runs", len(run.rounds)
        )
        if fault is not None and fault.rejects and fault.inband not in CUT_SHORT:
            return None, fault
        step = self._step(choice, context)
        prompt = " ".join(_message_text(message) for message in req.messages)
        rendered = render_completion(step, req, prompt_text=prompt, as_text=as_text)
        self._record(run, context, rendered)
        return rendered, fault

    def _step(self, choice: str | dict[str, Any] | None, context: RunContext) -> Step:
        if choice == "none":
            return AnswerStep(_plain_answer(self.planner, context.query))
        if context.rounds and context.forced is None and context.match is None:
            # Clients send a forced choice with the first request only; the run's later
            # requests continue with the tool it forced (the planner then answers from it).
            first = context.rounds[0][0].name
            if choose_tool(context.query, context.tools) is None and context.tool(first):
                context.forced = ForcedTool(name=first, input={})
        step = self.planner.next_step(context)
        if choice == "required" and not context.rounds and isinstance(step, AnswerStep):
            tool = choose_tool(context.query, context.tools, minimum=0.0) or (
                context.tools[0] if context.tools else None
            )
            if tool is not None:
                context.forced = ForcedTool(name=tool.name, input={})
                step = self.planner.next_step(context)
        return step

    def _record(self, run: RunSoFar, context: RunContext, rendered: Rendered) -> None:
        known = [self._call_conversation[k] for k in run.links if k in self._call_conversation]
        conv = self.state.conversation(known[-1]) if known else None
        if conv is None:
            conv = self.state.create_conversation(self.model)
        for call_id in run.latest:
            conv.accepted_outputs[call_id] = conv.accepted_outputs.get(call_id, 0) + 1
        completion_id = str(rendered.body["id"])
        if rendered.issued or rendered.text_calls:
            pending = [
                PendingCall(call_id, call.name, call.arguments, call.output_name)
                for call_id, call in rendered.issued.items()
            ]
            pending += [
                PendingCall(f"{completion_id}#{n}", call.name, call.arguments, call.output_name)
                for n, call in enumerate(rendered.text_calls)
            ]
            conv.active = ActiveRun(message_id=completion_id, context=context, pending=pending)
        else:
            done = tuple(call for round_ in context.rounds for call in round_)
            conv.messages.append(
                MessageRecord(
                    message_id=completion_id,
                    query=context.query,
                    answer=rendered.answer or "",
                    status="error" if rendered.error is not None else "success",
                    tool_calls=done,
                )
            )
            conv.active = None
        for call_id, call in rendered.issued.items():
            self._issued[call_id] = call
            self._call_conversation[call_id] = conv.conversation_id
        if rendered.text_calls:
            reply = text_of(rendered.body["choices"][0]["message"]["content"])
            self._text_issued[reply] = rendered.text_calls
            self._call_conversation[reply] = conv.conversation_id

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
                "POST /v1/chat/completions and GET /v1/models"
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


# --- helpers ------------------------------------------------------------------------------


def _forced(choice: str | dict[str, Any] | None, tools: tuple[Any, ...]) -> ForcedTool | None:
    if not isinstance(choice, dict):
        return None
    function = choice.get("function")
    name = function.get("name") if isinstance(function, dict) else None
    if choice.get("type") != "function" or not isinstance(name, str):
        raise RequestError(
            400,
            "Invalid value for 'tool_choice': expected 'auto', 'none', 'required' or "
            '{"type": "function", "function": {"name": ...}}.',
            param="tool_choice",
        )
    if name not in {t.name for t in tools}:
        raise RequestError(
            400,
            f"Invalid value for 'tool_choice': no function named '{name}' was specified in "
            "the 'tools' parameter.",
            param="tool_choice",
        )
    return ForcedTool(name=name, input={})


def _plain_answer(planner: Planner, query: str) -> str:
    step = planner.next_step(RunContext(query=query, tools=()))
    return step.text if isinstance(step, AnswerStep) else query


def _message_text(message: Mapping[str, Any]) -> str:
    calls = message.get("tool_calls") or []
    called = " ".join(
        f"{call['function']['name']} {call['function']['arguments']}" for call in calls
    )
    return f"{text_of(message.get('content'))} {called}".strip()
