"""The Responses emulator's ASGI app: ``POST /v1/responses``, ``GET /v1/responses/{id}`` and
``GET /v1/models`` on Starlette.

Checks run in the real API's order: key (401), body (400), model (404), the chain named by
``previous_response_id`` (400 when unknown or created with ``store: false``), the transcript
(every call answered, see `items`), then faults; only then does anything change. The model
served is the emulator's ``app_id`` (``OPENAI_MODEL`` in `client_env`).

Every answer carries ``x-request-id``; errors use OpenAI's body
``{"error": {"message", "type", "param", "code"}}``. Faults are the shared ones
(`bridge.emulator.faults`): ``POST /v1/responses`` is the ``runs`` endpoint and its round is
the number of tool rounds the transcript already holds; ``inband`` becomes an ``error`` event
(stream) or a ``failed`` response, except ``inband=max_output_tokens`` or
``inband=content_filter``, which end the response ``incomplete`` with that reason;
``duplicate_interrupt`` has no meaning here and is ignored.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from bridge.emulator.faults import FaultSpec
from bridge.emulator.matching import tool_info
from bridge.emulator.openai_app import OpenAIApp, file_run
from bridge.emulator.openai_wire import (
    RequestError,
    error_response,
    json_object,
    json_response,
    text_of,
)
from bridge.emulator.planner import ForcedTool, RunContext
from bridge.emulator.responses.items import (
    IssuedCall,
    ResponsesRequest,
    check_chained_outputs,
    check_reasoning,
    check_tools,
    normalise_input,
    read_run,
)
from bridge.emulator.responses.render import Rendered, render_response
from bridge.emulator.responses.replies import (
    INCOMPLETE,
    body_response,
    rejection,
    stream_response,
)
from bridge.emulator.scenario import Scenario

__all__ = ["ResponsesApp"]


@dataclass(frozen=True)
class _Stored:
    """A response as the emulator keeps it: its object, its whole transcript, its chain."""

    body: dict[str, Any]
    items: list[dict[str, Any]]
    conversation_id: str
    stored: bool


class ResponsesApp(OpenAIApp):
    """The ASGI app of one Responses emulator, with its inspectable `state`."""

    SERVES = "POST /v1/responses, GET /v1/responses/{id} and GET /v1/models"

    SAVED: ClassVar[Mapping[str, Any]] = {
        "_responses": dict[str, _Stored],
        "_issued": dict[str, IssuedCall],
        "_call_conversation": dict[str, str],
        "_stored_reasoning": set[str],
    }
    """Kept in a state file besides the conversations (`bridge.emulator.saving`)."""

    def __init__(
        self, *, token: str, model: str, scenario: Scenario | None, faults: FaultSpec | None
    ) -> None:
        routes = [
            Route("/v1/responses", self._create, methods=["POST"]),
            Route("/v1/responses/{response_id}", self._retrieve, methods=["GET"]),
        ]
        super().__init__(token=token, model=model, scenario=scenario, faults=faults, routes=routes)
        self._responses: dict[str, _Stored] = {}
        self._issued: dict[str, IssuedCall] = {}
        self._call_conversation: dict[str, str] = {}
        self._stored_reasoning: set[str] = set()

    def response_conversation(self, response_id: str) -> str:
        """The emulator conversation (`Emulator.conversation`) a response belongs to.

        Raises:
            KeyError: no response has this id.
        """
        with self.state.lock:
            return self._responses[response_id].conversation_id

    # --- endpoints ------------------------------------------------------------------------

    async def _create(self, request: Request) -> Response:
        rid = request.state.request_id
        try:
            header_fault = await self._begin(request)
            req = ResponsesRequest.parse(await json_object(request))
            if req.model != self.model:
                raise RequestError(
                    404,
                    f"The model '{req.model}' does not exist or you do not have access to it "
                    f"(this emulator serves '{self.model}').",
                    param="model",
                    code="model_not_found",
                )
            tools = check_tools(req.tools or [])
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
            return stream_response(rid, rendered, self.planner.settings.chunk_chars, fault)
        return body_response(rid, rendered.body, fault)

    async def _retrieve(self, request: Request) -> Response:
        rid = request.state.request_id
        try:
            await self._begin(request)
            response_id = request.path_params["response_id"]
            with self.state.lock:
                found = self._responses.get(response_id)
            if found is None or not found.stored:
                raise RequestError(404, f"Response with id '{response_id}' not found.")
        except RequestError as exc:
            return error_response(rid, exc)
        return json_response(rid, found.body)

    # --- one response ---------------------------------------------------------------------

    def _run(
        self,
        req: ResponsesRequest,
        tools: list[tuple[str, str, dict[str, Any]]],
        header_fault: FaultSpec | None,
    ) -> tuple[Rendered | None, FaultSpec | None]:
        """Plan and record one response (caller holds the lock); None when a fault refuses it."""
        given = normalise_input(req.input)
        chain = self._chain(req.previous_response_id, given)
        transcript = [*(chain.items if chain else []), *given]
        check_reasoning(given, transcript, self._issued, self._stored_reasoning, store=req.stored)
        run = read_run(transcript, self._issued)
        infos = tuple(tool_info(name, description, params) for name, description, params in tools)
        forced = _forced(req.tool_choice, infos)
        match = None if forced else self.planner.match(run.query, (t.name for t in infos))
        context = RunContext(
            query=run.query, tools=infos, forced=forced, match=match, rounds=run.rounds
        )
        rule_fault = match.rule.fault_spec if match else None
        fault = self._fault(header_fault, rule_fault, "runs", len(run.rounds))
        if fault is not None and fault.rejects and fault.inband not in INCOMPLETE:
            return None, fault
        step = self._step(req.tool_choice, context)
        prompt = " ".join(_item_text(item) for item in transcript)
        raw_tools = [dict(t) for t in req.tools or []]
        rendered = render_response(step, req, prompt_text=prompt, tools=raw_tools)
        self._record(req, chain, given, transcript, run.call_ids, context, rendered)
        return rendered, fault

    def _chain(self, previous: str | None, given: list[dict[str, Any]]) -> _Stored | None:
        if previous is None:
            return None
        found = self._responses.get(previous)
        if found is None or not found.stored:
            why = (
                " It was created with store=false, so it cannot be chained; resend its items "
                "in input instead."
                if found is not None
                else ""
            )
            raise RequestError(
                400,
                f"Previous response with id '{previous}' not found.{why}",
                param="previous_response_id",
                code="previous_response_not_found",
            )
        check_chained_outputs(given)
        return found

    def _record(
        self,
        req: ResponsesRequest,
        chain: _Stored | None,
        given: list[dict[str, Any]],
        transcript: list[dict[str, Any]],
        call_ids: list[str],
        context: RunContext,
        rendered: Rendered,
    ) -> None:
        conversation_id = chain.conversation_id if chain else None
        if conversation_id is None:
            known = [self._call_conversation[c] for c in call_ids if c in self._call_conversation]
            conversation_id = known[-1] if known else None
        conv = self.state.conversation(conversation_id) if conversation_id else None
        if conv is None:
            conv = self.state.create_conversation(self.model)
        # Only the outputs this request delivers count: those of the run's last round (a
        # store=false request also resends the outputs of earlier rounds).
        latest = {call.call_id for call in context.rounds[-1]} if context.rounds else set()
        for item in given:
            call_id = str(item.get("call_id"))
            if item["type"] == "function_call_output" and call_id in latest:
                conv.accepted_outputs[call_id] = conv.accepted_outputs.get(call_id, 0) + 1
        response_id = str(rendered.body["id"])
        file_run(
            conv,
            response_id,
            context,
            rendered.issued.items(),
            answer=rendered.answer,
            failed=rendered.body["status"] == "failed",
        )
        for call_id, call in rendered.issued.items():
            self._issued[call_id] = call
            self._call_conversation[call_id] = conv.conversation_id
        if req.stored:
            self._stored_reasoning.update(
                str(item["id"]) for item in rendered.output if item["type"] == "reasoning"
            )
        self._responses[response_id] = _Stored(
            body=rendered.body,
            items=[*transcript, *rendered.output],
            conversation_id=conv.conversation_id,
            stored=req.stored,
        )


# --- helpers ------------------------------------------------------------------------------


def _forced(choice: str | dict[str, Any] | None, tools: tuple[Any, ...]) -> ForcedTool | None:
    if not isinstance(choice, dict):
        return None
    name = choice.get("name")
    if choice.get("type") != "function" or not isinstance(name, str):
        raise RequestError(
            400,
            "Invalid value for 'tool_choice': expected 'auto', 'none', 'required' or "
            '{"type": "function", "name": ...}.',
            param="tool_choice",
        )
    if name not in {t.name for t in tools}:
        raise RequestError(
            400,
            f"Tool choice '{name}' not found in 'tools' parameter.",
            param="tool_choice",
        )
    return ForcedTool(name=name, input={})


def _item_text(item: Mapping[str, Any]) -> str:
    if item["type"] == "message":
        return text_of(item.get("content"))
    if item["type"] == "function_call":
        return f"{item.get('name', '')} {item.get('arguments', '')}"
    if item["type"] == "function_call_output":
        output = item.get("output")
        return output if isinstance(output, str) else text_of(output)
    return ""
