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
from collections.abc import Mapping
from typing import Any, ClassVar

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from bridge.emulator.faults import FaultSpec
from bridge.emulator.matching import choose_tool, tool_info
from bridge.emulator.openai_app import OpenAIApp, file_run
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
    error_response,
    json_object,
    text_of,
)
from bridge.emulator.planner import ForcedTool, PlannedCall, RunContext, Step
from bridge.emulator.scenario import Scenario

__all__ = ["ChatApp"]


class ChatApp(OpenAIApp):
    """The ASGI app of one Chat Completions emulator, with its inspectable `state`."""

    SERVES = "POST /v1/chat/completions and GET /v1/models"

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
        routes = [Route("/v1/chat/completions", self._create, methods=["POST"])]
        super().__init__(token=token, model=model, scenario=scenario, faults=faults, routes=routes)
        self.traits = traits or ModelConfig()
        self._issued: dict[str, IssuedCall] = {}
        self._text_issued: dict[str, tuple[PlannedCall, ...]] = {}
        """Calls the emulator wrote as text, by the text of the reply that holds them."""
        self._call_conversation: dict[str, str] = {}
        """The emulator conversation of each call id, and of each reply with text calls."""

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
        fault = self._fault(header_fault, rule_fault, "runs", len(run.rounds))
        if fault is not None and fault.rejects and fault.inband not in CUT_SHORT:
            return None, fault
        step = self._step(choice, context)
        prompt = " ".join(_message_text(message) for message in req.messages)
        rendered = render_completion(step, req, prompt_text=prompt, as_text=as_text)
        self._record(run, context, rendered)
        return rendered, fault

    def _step(self, choice: str | dict[str, Any] | None, context: RunContext) -> Step:
        if choice != "none" and context.rounds and context.forced is None and context.match is None:
            # Clients send a forced choice with the first request only; the run's later
            # requests continue with the tool it forced (the planner then answers from it).
            first = context.rounds[0][0].name
            if choose_tool(context.query, context.tools) is None and context.tool(first):
                context.forced = ForcedTool(name=first, input={})
        return super()._step(choice, context)

    def _record(self, run: RunSoFar, context: RunContext, rendered: Rendered) -> None:
        known = [self._call_conversation[k] for k in run.links if k in self._call_conversation]
        conv = self.state.conversation(known[-1]) if known else None
        if conv is None:
            conv = self.state.create_conversation(self.model)
        for call_id in run.latest:
            conv.accepted_outputs[call_id] = conv.accepted_outputs.get(call_id, 0) + 1
        completion_id = str(rendered.body["id"])
        calls: list[tuple[str, IssuedCall | PlannedCall]] = [
            *rendered.issued.items(),
            *((f"{completion_id}#{n}", call) for n, call in enumerate(rendered.text_calls)),
        ]
        file_run(
            conv,
            completion_id,
            context,
            calls,
            answer=rendered.answer,
            failed=rendered.error is not None,
        )
        for call_id, call in rendered.issued.items():
            self._issued[call_id] = call
            self._call_conversation[call_id] = conv.conversation_id
        if rendered.text_calls:
            reply = text_of(rendered.body["choices"][0]["message"]["content"])
            self._text_issued[reply] = rendered.text_calls
            self._call_conversation[reply] = conv.conversation_id


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


def _message_text(message: Mapping[str, Any]) -> str:
    calls = message.get("tool_calls") or []
    called = " ".join(
        f"{call['function']['name']} {call['function']['arguments']}" for call in calls
    )
    return f"{text_of(message.get('content'))} {called}".strip()
