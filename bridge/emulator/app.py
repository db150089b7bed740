"""The emulator's ASGI app: the AppBuilder conversation and console endpoints on Starlette.

Every request is checked in the same order: token (401), request body (400), app (404),
conversation (404), conversation state (400), then injected faults, and only then does the
conversation change. A conversation's state allows one kind of next run: a new query when
nothing is pending, ``tool_outputs`` for exactly the pending tool calls, or, when a scenario's
``ask`` step is waiting, the reply as ``query`` with ``action`` resume naming the pending
``interrupt_event_id`` (or as a plain ``query``, see `_paused_run`); anything else is a 400
that names what is pending and the id expected.

Every answer carries `X-Appbuilder-Request-Id` and, in its body, `request_id`; errors use the
platform's body ``{"request_id", "code", "message"}``.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel, ValidationError
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from bridge.emulator import console, wire
from bridge.emulator.components import (
    ComponentCall,
    ComponentError,
    call_component,
    component_events,
)
from bridge.emulator.faults import HEADER, FaultSpec, FaultSpecError, header_faults, parse_faults
from bridge.emulator.matching import ToolInfo, tool_info
from bridge.emulator.planner import (
    AnswerStep,
    CompletedAsk,
    CompletedCall,
    ForcedTool,
    Planner,
    RunContext,
    Step,
)
from bridge.emulator.render import merge_chunks, render_step
from bridge.emulator.scenario import App, Scenario, load_scenario
from bridge.emulator.state import (
    LOST,
    ActiveRun,
    Conversation,
    EmulatorState,
    FileRecord,
    MessageRecord,
    PendingInput,
)
from bridge.emulator.transport import (
    BlockResponse,
    DroppedConnectionError,
    bearer_problem,
    protocol_app,
    sse_block,
)

__all__ = ["EmulatorApp", "client_env", "create_app"]

logger = logging.getLogger(__name__)

PREFIX = "/v2/app/conversation"
APP_PATH = "/v2/app"
APPS_PATH = "/v2/apps"
CONSOLE_ACTIONS = ("DescribeApps", "DescribeApp")
JSON = "application/json"
SSE = "text/event-stream; charset=utf-8"
MAX_UPLOAD_BYTES = 50 * 1024 * 1024

_M = TypeVar("_M", bound=BaseModel)


class _ReplyError(Exception):
    """Raised inside a handler to answer with an error body at once."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class EmulatorApp:
    """The ASGI app of one emulator, with its configuration and inspectable `state`."""

    SAVED: ClassVar[Mapping[str, Any]] = {}
    """Kept in a state file besides the conversations (`bridge.emulator.saving`): nothing."""

    def __init__(
        self,
        *,
        token: str,
        app_id: str,
        scenario: Scenario | None,
        faults: FaultSpec | None,
    ) -> None:
        self.token = token.removeprefix("Bearer ").strip()
        self.app_id = app_id
        self.scenario = scenario
        self.faults = faults
        self.planner = Planner(scenario)
        self.app = scenario.app if scenario is not None else App()
        self.updated = int(time.time())
        """The app's ``updateTime`` on the console: when this emulator started, in seconds."""
        self.state = EmulatorState()
        routes = [
            Route(PREFIX, self._create, methods=["POST"]),
            Route(f"{PREFIX}/runs", self._runs, methods=["POST"]),
            Route(f"{PREFIX}/file/upload", self._upload, methods=["POST"]),
            Route(f"{PREFIX}/feedback", self._feedback, methods=["POST"]),
            Route(APP_PATH, self._console, methods=["POST"]),
            Route(APPS_PATH, self._app_list, methods=["GET"]),
        ]
        self._asgi = protocol_app(
            routes, state=self.state, http_error=self._http_error, crash=self._crash
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """ASGI entry point."""
        await self._asgi(scope, receive, send)

    # --- endpoints ------------------------------------------------------------------------

    async def _create(self, request: Request) -> Response:
        rid = request.state.request_id
        try:
            header_fault = await self._begin(request)
            req = _validate(wire.CreateConversationRequest, await _json_object(request))
            self._check_app(req.app_id)
            fault = self._fault(header_fault, None, "create", None)
            if fault is not None and fault.rejects:
                return self._rejection(rid, fault, stream=False)
            conv = self.state.create_conversation(self.app_id)
        except _ReplyError as reply:
            return _error(rid, reply.status, reply.message)
        return _json(rid, {"request_id": rid, "conversation_id": conv.conversation_id}, fault)

    async def _runs(self, request: Request) -> Response:
        rid = request.state.request_id
        try:
            header_fault = await self._begin(request)
            req = _validate(wire.RunRequest, await _json_object(request))
            self._check_app(req.app_id)
            _check_tools(req)
            with self.state.lock:
                conv = self._conversation(req.conversation_id)
                _check_files(conv, req.file_ids or [])
                component = None
                if req.tool_outputs:
                    run = _pending_run(conv, req.tool_outputs)
                    round_index = run.context.steps_done + 1
                    match = run.context.match
                elif req.action is not None or _asking(conv):
                    run = _paused_run(conv, req.action)
                    round_index = run.context.steps_done + 1
                    match = run.context.match
                else:
                    run = None
                    context, component = self._new_context(conv, req)
                    round_index, match = 0, context.match
                rule_fault = match.rule.fault_spec if match else None
                fault = self._fault(header_fault, rule_fault, "runs", round_index)
                if fault is not None and fault.rejects:
                    return self._rejection(rid, fault, stream=bool(req.stream))
                if run is None:
                    run = ActiveRun(message_id=str(uuid.uuid4()), context=context)
                    conv.active = run
                elif req.tool_outputs:
                    _take_outputs(run, req.tool_outputs)
                    for output in req.tool_outputs:
                        accepted = conv.accepted_outputs.get(output.tool_call_id, 0)
                        conv.accepted_outputs[output.tool_call_id] = accepted + 1
                else:
                    _take_answer(run, req.query or "")
                if component is not None:
                    step: Step = AnswerStep(component.output)
                    before = component_events(component, conv.next_event_id)
                else:
                    step, before = self.planner.next_step(run.context), None
                rendered = render_step(
                    step,
                    conv=conv,
                    run=run.context,
                    message_id=run.message_id,
                    request_id=rid,
                    model=self.planner.settings.model,
                    chunk_chars=self.planner.settings.chunk_chars,
                    before=before,
                )
                if rendered.pending:
                    run.pending = rendered.pending
                else:
                    conv.messages.append(
                        MessageRecord(
                            message_id=run.message_id,
                            query=run.query if run.query is not None else run.context.query,
                            answer=rendered.answer,
                            status=rendered.status,
                            tool_calls=tuple(
                                c for r in run.context.rounds[run.first_round :] for c in r
                            ),
                        )
                    )
                    if rendered.question is not None:
                        run.pending_input = rendered.question
                    else:
                        conv.active = None
        except _ReplyError as reply:
            return _error(rid, reply.status, reply.message)
        logger.debug("run %s round %d: %s", conv.conversation_id, round_index, rendered.status)
        if fault is not None and fault.stall:
            await asyncio.sleep(fault.stall)
        return _run_response(rid, rendered.chunks, bool(req.stream), fault)

    async def _upload(self, request: Request) -> Response:
        rid = request.state.request_id
        try:
            header_fault = await self._begin(request, read_body=False)
            fields = await _form(request)
            app_id, conversation_id = fields.get("app_id"), fields.get("conversation_id")
            pairs = (("app_id", app_id), ("conversation_id", conversation_id))
            missing = [name for name, value in pairs if not value]
            if missing:
                raise _ReplyError(400, f"multipart field(s) {', '.join(missing)} missing or empty")
            self._check_app(str(app_id))
            upload, url = fields.get("file"), fields.get("file_url")
            if (upload is None) == (url is None):
                raise _ReplyError(
                    400,
                    "send exactly one of the multipart fields 'file' (a file part) or "
                    "'file_url' (an http(s) URL)",
                )
            with self.state.lock:
                conv = self._conversation(str(conversation_id))
            fault = self._fault(header_fault, None, "upload", None)
            if fault is not None and fault.rejects:
                return self._rejection(rid, fault, stream=False)
            record = await _file_record(upload, url)
            with self.state.lock:
                conv.files[record.file_id] = record
        except _ReplyError as reply:
            return _error(rid, reply.status, reply.message)
        body = {"request_id": rid, "id": record.file_id, "conversation_id": conv.conversation_id}
        return _json(rid, body, fault)

    async def _feedback(self, request: Request) -> Response:
        rid = request.state.request_id
        try:
            header_fault = await self._begin(request)
            req = _validate(wire.FeedbackRequest, await _json_object(request))
            self._check_app(req.app_id)
            with self.state.lock:
                conv = self._conversation(req.conversation_id)
                known = [m.message_id for m in conv.messages]
                if conv.active is not None:
                    known.append(conv.active.message_id)
                if req.message_id not in known:
                    raise _ReplyError(
                        404,
                        f"message {req.message_id!r} not found in conversation "
                        f"{conv.conversation_id!r}; use a message_id returned by a run",
                    )
                fault = self._fault(header_fault, None, "feedback", None)
                if fault is not None and fault.rejects:
                    return self._rejection(rid, fault, stream=False)
                conv.feedback.append(req.model_dump(exclude_none=True))
        except _ReplyError as reply:
            return _error(rid, reply.status, reply.message)
        return _json(rid, {"request_id": rid}, fault)

    async def _console(self, request: Request) -> Response:
        rid = request.state.request_id
        try:
            header_fault = await self._begin(request)
            action = request.query_params.get("Action")
            if action not in CONSOLE_ACTIONS:
                raise _ReplyError(
                    400,
                    f"unknown or missing Action {action!r} on POST {APP_PATH}; expected "
                    f"?Action={' or ?Action='.join(CONSOLE_ACTIONS)}",
                )
            data = await _json_object(request)
            if action == "DescribeApps":
                listing = _validate(wire.DescribeAppsRequest, data)
                body = console.describe_apps(
                    rid,
                    self.app_id,
                    self.app,
                    self.updated,
                    max_keys=listing.maxKeys,
                    marker=listing.marker,
                )
            else:
                self._check_app(_validate(wire.DescribeAppRequest, data).id)
                body = console.describe_app(rid, self.app_id, self.app)
            # Console requests take header faults and on=any ones (no endpoint of their own).
            fault = self._fault(header_fault, None, "console", None)
            if fault is not None and fault.rejects:
                return self._rejection(rid, fault, stream=False)
        except _ReplyError as reply:
            return _error(rid, reply.status, reply.message)
        return _json(rid, body, fault)

    async def _app_list(self, request: Request) -> Response:
        rid = request.state.request_id
        try:
            header_fault = await self._begin(request)
            query = _validate(wire.AppListQuery, dict(request.query_params))
            fault = self._fault(header_fault, None, "console", None)
            if fault is not None and fault.rejects:
                return self._rejection(rid, fault, stream=False)
        except _ReplyError as reply:
            return _error(rid, reply.status, reply.message)
        body = console.app_list(
            rid, self.app_id, self.app, self.updated, after=query.after, before=query.before
        )
        return _json(rid, body, fault)

    # --- shared checks ----------------------------------------------------------------------

    async def _begin(self, request: Request, *, read_body: bool = True) -> FaultSpec | None:
        """Read the body (so the log has it), check the token, parse a fault header."""
        if read_body:
            await request.body()
        problem = bearer_problem(request.headers, self.token)
        if problem is not None:
            what = "is missing" if problem == "missing" else "does not carry this emulator's token"
            raise _ReplyError(
                401,
                f"没有权限 (permission denied): the Authorization header {what}; "
                "expected 'Authorization: Bearer <token>'",
            )
        try:
            return header_faults(request.headers)
        except FaultSpecError as exc:
            raise _ReplyError(400, f"bad {HEADER} header: {exc.message}") from None

    def _check_app(self, app_id: str) -> None:
        if app_id != self.app_id:
            raise _ReplyError(
                404, f"app {app_id!r} not found; this emulator serves app_id {self.app_id!r}"
            )

    def _conversation(self, conversation_id: str) -> Conversation:
        conv = self.state.conversation(conversation_id)
        if conv is None:
            raise _ReplyError(
                404,
                f"conversation {conversation_id!r} not found: {LOST}; create one with POST "
                f"{PREFIX}",
            )
        return conv

    def _new_context(
        self, conv: Conversation, req: wire.RunRequest
    ) -> tuple[RunContext, ComponentCall | None]:
        """The new run's context, and the component run when ``tool_choice`` names one."""
        if conv.active is not None and conv.active.pending:
            ids = ", ".join(p.call_id for p in conv.active.pending)
            raise _ReplyError(
                400,
                f"conversation {conv.conversation_id!r} is waiting for tool outputs for "
                f"tool_call_id(s) {ids}; submit tool_outputs for them before a new query",
            )
        tools = tuple(
            tool_info(t.function.name, t.function.description, t.function.parameters)
            for t in req.tools or []
            if t.function is not None
        )
        query = req.query or ""
        component = self._component(req.tool_choice, tools, query)
        forced = None if component else _forced_tool(req.tool_choice, tools, self.app)
        match = None if forced or component else self.planner.match(query, (t.name for t in tools))
        return RunContext(query=query, tools=tools, forced=forced, match=match), component

    def _component(
        self, choice: wire.WireToolChoice | None, tools: tuple[ToolInfo, ...], query: str
    ) -> ComponentCall | None:
        """The app's component a ``tool_choice`` names (a tool of the run wins a name clash)."""
        if choice is None or choice.type != "function" or choice.function is None:
            return None
        name = choice.function.name
        component = self.app.component(name)
        if component is None or any(t.name == name for t in tools):
            return None
        try:
            return call_component(component, choice.function.input, query)
        except ComponentError as exc:
            raise _ReplyError(400, str(exc)) from None

    def _fault(
        self,
        header: FaultSpec | None,
        rule: FaultSpec | None,
        endpoint: str,
        round_index: int | None,
    ) -> FaultSpec | None:
        """The fault that applies to this request, if any (header, then rule, then global)."""
        return self.state.faults.pick(header, rule, self.faults, endpoint, round_index)

    def _rejection(self, rid: str, fault: FaultSpec, *, stream: bool) -> Response:
        """The response of a fault that refuses the request before it is processed."""
        if fault.status is not None:
            headers = {}
            retry_after = fault.retry_after
            if retry_after is None and fault.status == 429:
                retry_after = 1
            if retry_after is not None:
                headers["Retry-After"] = _seconds(retry_after)
            message = fault.message or f"emulated fault: HTTP {fault.status}"
            body = wire.encode_json(wire.error_body(rid, fault.status, message))
            return BlockResponse(
                [body],
                status_code=fault.status,
                media_type=JSON,
                headers=headers,
                delay=fault.delay,
                drop_after=fault.drop_after,
            )
        inband = _inband_body(rid, fault)
        if stream and fault.json_error_on_stream:
            inband["content"] = None  # what AppBuilder sends when a workflow node fails
        payload = wire.encode_json(inband)
        if stream and not fault.json_error_on_stream:
            return BlockResponse([sse_block(payload)], media_type=SSE, length=False)
        return BlockResponse([payload], media_type=JSON)

    # --- error pages ----------------------------------------------------------------------

    async def _http_error(self, request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        rid = request.state.request_id
        if exc.status_code == 404:
            message = (
                f"no endpoint {request.url.path}; the emulator serves POST {PREFIX}, "
                f"{PREFIX}/runs, {PREFIX}/file/upload, {PREFIX}/feedback, "
                f"{APP_PATH}?Action=DescribeApps|DescribeApp and GET {APPS_PATH}"
            )
        elif exc.status_code == 405:
            allowed = "GET" if request.url.path == APPS_PATH else "POST"
            message = f"{request.method} is not allowed on {request.url.path}; use {allowed}"
        else:
            message = str(exc.detail)
        return _error(rid, exc.status_code, message)

    async def _crash(self, request: Request, exc: Exception) -> Response:
        rid = request.state.request_id
        if isinstance(exc, DroppedConnectionError):
            # Starlette asks for an error page even after the response started; nothing is
            # sent then, and a planned drop is not a bug.
            return _error(rid, 500, "connection dropped on purpose")
        logger.error("emulator bug while serving %s: %r", request.url.path, exc)
        return _error(rid, 500, f"the emulator failed: {type(exc).__name__}: {exc}")


# --- helpers ------------------------------------------------------------------------------


async def _json_object(request: Request) -> dict[str, Any]:
    raw = await request.body()
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise _ReplyError(400, f"the request body is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise _ReplyError(400, f"the request body must be a JSON object, not {type(data).__name__}")
    return data


def _validate(model: type[_M], data: dict[str, Any]) -> _M:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise _ReplyError(
            400, f"invalid request body: {wire.format_validation_error(exc)}"
        ) from None


def _check_tools(req: wire.RunRequest) -> None:
    problems = []
    for i, tool in enumerate(req.tools or []):
        if tool.function is not None:
            problems += wire.schema_problems(
                tool.function.parameters, f"tools[{i}].function.parameters"
            )
    if problems:
        raise _ReplyError(400, "invalid tool manifest: " + "; ".join(problems))


def _check_files(conv: Conversation, file_ids: list[str]) -> None:
    unknown = [f for f in file_ids if f not in conv.files]
    if unknown:
        raise _ReplyError(
            400,
            f"file_ids {unknown} were not uploaded to conversation {conv.conversation_id!r}; "
            f"upload them with POST {PREFIX}/file/upload first",
        )


def _forced_tool(
    choice: wire.WireToolChoice | None, tools: tuple[ToolInfo, ...], app: App
) -> ForcedTool | None:
    if choice is None or choice.type != "function" or choice.function is None:
        return None
    name = choice.function.name
    if name not in {t.name for t in tools}:
        sent = ", ".join(t.name for t in tools) or "none"
        own = (
            ", ".join(c.code for c in app.components)
            or "none (declare them in the scenario's app.components)"
        )
        raise _ReplyError(
            400,
            f"tool_choice names {name!r}, which is neither a tool of this run (tools: {sent}) "
            f"nor a component of the app (components: {own})",
        )
    return ForcedTool(name=name, input=dict(choice.function.input))


def _pending_run(conv: Conversation, outputs: list[wire.ToolOutputItem]) -> ActiveRun:
    run = conv.active
    if run is not None and run.pending_input is not None:
        raise _ReplyError(
            400,
            f"conversation {conv.conversation_id!r} is waiting for the person's reply to "
            f"{_waiting_for(run.pending_input)}, not for tool outputs",
        )
    if run is None or not run.pending:
        raise _ReplyError(
            400,
            f"conversation {conv.conversation_id!r} has no pending tool calls, so tool_outputs "
            "were not expected; send a query instead",
        )
    expected = [p.call_id for p in run.pending]
    given = [o.tool_call_id for o in outputs]
    repeated = sorted({i for i in given if given.count(i) > 1})
    unknown = [i for i in given if i not in expected]
    missing = [i for i in expected if i not in given]
    problems = []
    if unknown:
        problems.append(f"unknown tool_call_id(s) {', '.join(unknown)}")
    if missing:
        problems.append(f"missing output(s) for tool_call_id(s) {', '.join(missing)}")
    if repeated:
        problems.append(f"repeated tool_call_id(s) {', '.join(repeated)}")
    if problems:
        raise _ReplyError(
            400,
            "tool_outputs must answer exactly the pending tool calls "
            f"({', '.join(expected)}): " + "; ".join(problems),
        )
    return run


def _asking(conv: Conversation) -> bool:
    """Whether a question of the conversation waits for the person's reply."""
    return conv.active is not None and conv.active.pending_input is not None


def _paused_run(conv: Conversation, action: wire.Action | None) -> ActiveRun:
    """The run whose question `action` resumes; 400 unless it names the pending interrupt.

    A query without `action` while a question waits is its reply: the SDK's event handler reads
    only the last event of a non-stream response (``status/success``), so it never sees the
    ``chatflow_interrupt`` and sends the reply as a plain query, and the platform goes on.
    """
    run = conv.active
    if action is None:
        assert run is not None and run.pending_input is not None
        logger.debug(
            "conversation %s: a query without action answers the pending question %s",
            conv.conversation_id,
            run.pending_input.interrupt_id,
        )
        return run
    given = action.parameters.interrupt_event.id
    if run is None or run.pending_input is None:
        if run is not None and run.pending:
            ids = ", ".join(p.call_id for p in run.pending)
            raise _ReplyError(
                400,
                f"conversation {conv.conversation_id!r} is waiting for tool outputs for "
                f"tool_call_id(s) {ids}, not for a reply; action resume (interrupt_event_id "
                f"{given!r}) was not expected, submit tool_outputs instead",
            )
        raise _ReplyError(
            400,
            f"conversation {conv.conversation_id!r} has no pending question, so action resume "
            f"(interrupt_event_id {given!r}) was not expected; send the query without action",
        )
    expected = run.pending_input.interrupt_id
    if given != expected:
        raise _ReplyError(
            400,
            f"action.parameters.interrupt_event.id {given!r} is not the pending interrupt of "
            f"conversation {conv.conversation_id!r}; expected {expected!r} (the "
            "interrupt_event_id of its last chatflow_interrupt event)",
        )
    return run


def _take_answer(run: ActiveRun, answer: str) -> None:
    """Record the person's reply; the run goes on as a new message whose query is the reply."""
    question = run.pending_input
    assert question is not None
    run.context.answers.append(
        CompletedAsk(question.interrupt_id, question.name, question.question, answer)
    )
    run.pending_input = None
    run.message_id = str(uuid.uuid4())
    run.query = answer
    run.first_round = len(run.context.rounds)


def _take_outputs(run: ActiveRun, outputs: list[wire.ToolOutputItem]) -> None:
    by_id = {o.tool_call_id: o.output for o in outputs}
    run.context.rounds.append(
        [
            CompletedCall(p.call_id, p.name, p.output_name, p.arguments, by_id[p.call_id])
            for p in run.pending
        ]
    )
    run.pending = []


def _waiting_for(question: PendingInput) -> str:
    """How 400 messages describe a pending question and the resume it needs."""
    action = json.dumps(
        {
            "action_type": "resume",
            "parameters": {"interrupt_event": {"id": question.interrupt_id, "type": "chat"}},
        }
    )
    return (
        f"the question {question.question!r} (interrupt_event_id {question.interrupt_id}); "
        f"send the reply as query with action {action}"
    )


_FORM_TYPES = ("multipart/form-data", "application/x-www-form-urlencoded")


async def _form(request: Request) -> dict[str, Any]:
    # The SDK's async client builds its form with aiohttp, which sends a form without a file
    # part (a file_url upload) urlencoded, and the platform accepts it.
    if not any(kind in request.headers.get("content-type", "") for kind in _FORM_TYPES):
        raise _ReplyError(
            400,
            "the upload must be multipart/form-data (or application/x-www-form-urlencoded for "
            "a file_url) with app_id, conversation_id and file or file_url",
        )
    try:
        form = await request.form(max_part_size=MAX_UPLOAD_BYTES)
    except Exception as exc:  # the multipart parser has no public error base class
        raise _ReplyError(400, f"cannot read the multipart body: {exc}") from None
    fields: dict[str, Any] = {}
    summary: dict[str, Any] = {}
    for key, value in form.multi_items():
        fields[key] = value
        if isinstance(value, UploadFile):
            summary[key] = {"filename": value.filename, "size": value.size}
        else:
            summary[key] = value
    request.state.form = summary
    return fields


async def _file_record(upload: Any, url: Any) -> FileRecord:
    file_id = str(uuid.uuid4())
    if isinstance(upload, UploadFile):
        data = await upload.read()
        name = Path(upload.filename).name if upload.filename else None
        return FileRecord(file_id, name, None, len(data), hashlib.sha256(data).hexdigest())
    if isinstance(upload, str):
        raise _ReplyError(400, "the multipart field 'file' must be a file part (with a filename)")
    text = str(url).strip()
    if not text.startswith(("http://", "https://")):
        raise _ReplyError(400, f"file_url must be an http(s) URL, got {text[:100]!r}")
    return FileRecord(file_id, None, text, 0, None)


def _inband_body(rid: str, fault: FaultSpec) -> dict[str, Any]:
    code: Any = fault.inband or "ServiceError"
    if isinstance(code, str) and code.lstrip("-").isdigit():
        code = int(code)
    message = fault.message or "emulated in-band error"
    return {"request_id": rid, "code": code, "message": message, "content": []}


def _seconds(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def _error(rid: str, status: int, message: str) -> Response:
    body = wire.encode_json(wire.error_body(rid, status, message))
    return Response(body, status_code=status, media_type=JSON)


def _json(rid: str, body: Mapping[str, Any], fault: FaultSpec | None) -> Response:
    payload = wire.encode_json(body)
    if fault is None:
        return Response(payload, media_type=JSON)
    if fault.malformed is not None:
        payload = payload[:-1] + b", not JSON"
    if fault.inband is not None:
        payload = wire.encode_json(_inband_body(rid, fault))
    return BlockResponse([payload], media_type=JSON, delay=fault.delay, drop_after=fault.drop_after)


def _run_response(
    rid: str, chunks: list[dict[str, Any]], stream: bool, fault: FaultSpec | None
) -> Response:
    if fault is not None and fault.duplicate_interrupt:
        chunks = _duplicate_interrupts(chunks)
    if not stream:
        body = merge_chunks(chunks)
        if fault is None:
            return Response(wire.encode_json(body), media_type=JSON)
        payload = wire.encode_json(body)
        if fault.inband is not None:
            payload = wire.encode_json(_inband_body(rid, fault))
        elif fault.malformed is not None:
            payload = payload[:-1] + b", not JSON"
        delay = fault.delay * len(body["content"])
        return BlockResponse([payload], media_type=JSON, delay=delay, drop_after=fault.drop_after)
    blocks = [sse_block(wire.encode_json(c)) for c in chunks]
    if fault is None:
        return BlockResponse(blocks, media_type=SSE, length=False)
    if fault.malformed is not None:
        at = min(fault.malformed, len(blocks))
        blocks.insert(at, sse_block(b'{"request_id": "' + rid.encode() + b'", this is not JSON'))
    if fault.inband is not None:
        blocks = [
            *blocks[: fault.inband_after],
            sse_block(wire.encode_json(_inband_body(rid, fault))),
        ]
    return BlockResponse(
        blocks, media_type=SSE, length=False, delay=fault.delay, drop_after=fault.drop_after
    )


def _duplicate_interrupts(chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for c in chunks:
        out.append(c)
        if any(
            e.get("event_status") == "interrupt" or e.get("content_type") == "chatflow_interrupt"
            for e in c["content"]
        ):
            out.append(c)
    return out


def create_app(
    *,
    token: str = "emulator-token",
    app_id: str = "emulator-app",
    scenario: str | Path | Mapping[str, Any] | Scenario | None = None,
    faults: str | FaultSpec | None = None,
) -> EmulatorApp:
    """Build the emulator's ASGI app.

    Args:
        token: the token clients must send as ``Authorization: Bearer <token>``.
        app_id: the one app id the emulator serves.
        scenario: a scenario file, mapping or `Scenario`; None for the default planner only.
        faults: a fault spec applied to every matching request (see `bridge.emulator.faults`).

    Raises:
        ScenarioError: the scenario cannot be loaded.
        FaultSpecError: the fault spec cannot be parsed.
    """
    loaded = load_scenario(scenario) if scenario is not None else None
    spec = parse_faults(faults) if isinstance(faults, str) else faults
    return EmulatorApp(token=token, app_id=app_id, scenario=loaded, faults=spec)


def client_env(base_url: str, token: str, app_id: str) -> dict[str, str]:
    """The environment variables the toolbridge client and the official SDK read."""
    return {"GATEWAY_URL_V2": base_url, "APPBUILDER_TOKEN": token, "APPBUILDER_APP_ID": app_id}
