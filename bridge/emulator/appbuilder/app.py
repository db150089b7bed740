"""The AppBuilder emulator's ASGI app: the conversation and console endpoints on Starlette.

Its answers are built in `replies`, a run's checks and state changes are in `runs`, uploads in
`files`, the chunks of a step in `render`, the app's components and console in `components`
and `console`.

Every request is checked in the same order: token (401), request body (400), app (404),
conversation (404), conversation state (400), then injected faults, and only then does the
conversation change. A conversation's state allows one kind of next run: a new query when
nothing is pending, ``tool_outputs`` for exactly the pending tool calls, or, when a scenario's
``ask`` step is waiting, the reply as ``query`` with ``action`` resume naming the pending
``interrupt_event_id`` (or as a plain ``query``, see `runs.paused_run`); anything else is a 400
that names what is pending and the id expected.

Every answer carries `X-Appbuilder-Request-Id` and, in its body, `request_id`; errors use the
platform's body ``{"request_id", "code", "message"}``.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from bridge.emulator.appbuilder import console, wire
from bridge.emulator.appbuilder.components import (
    ComponentCall,
    ComponentError,
    call_component,
    component_events,
)
from bridge.emulator.appbuilder.files import file_record, read_form
from bridge.emulator.appbuilder.render import render_step
from bridge.emulator.appbuilder.replies import (
    ReplyError,
    error,
    json_object,
    json_reply,
    rejection,
    run_response,
    validate,
)
from bridge.emulator.appbuilder.runs import (
    asking,
    check_files,
    check_tools,
    forced_tool,
    paused_run,
    pending_run,
    take_outputs,
)
from bridge.emulator.base_app import ProtocolApp
from bridge.emulator.faults import FaultSpec, parse_faults
from bridge.emulator.matching import ToolInfo, tool_info
from bridge.emulator.planner import AnswerStep, RunContext, Step
from bridge.emulator.scenario import App, Scenario, load_scenario
from bridge.emulator.state import LOST, ActiveRun, Conversation, MessageRecord
from bridge.emulator.transport import DroppedConnectionError, admit

__all__ = ["EmulatorApp", "client_env", "create_app"]

logger = logging.getLogger(__name__)

PREFIX = wire.PREFIX
APP_PATH = wire.APP_PATH
APPS_PATH = wire.APPS_PATH
CONSOLE_ACTIONS = ("DescribeApps", "DescribeApp")


class EmulatorApp(ProtocolApp):
    """The ASGI app of one emulator, with its configuration and inspectable `state`."""

    def __init__(
        self,
        *,
        token: str,
        app_id: str,
        scenario: Scenario | None,
        faults: FaultSpec | None,
    ) -> None:
        self.app_id = app_id
        self.scenario = scenario
        self.app = scenario.app if scenario is not None else App()
        self.updated = int(time.time())
        """The app's ``updateTime`` on the console: when this emulator started, in seconds."""
        routes = [
            Route(PREFIX, self._create, methods=["POST"]),
            Route(f"{PREFIX}/runs", self._runs, methods=["POST"]),
            Route(f"{PREFIX}/file/upload", self._upload, methods=["POST"]),
            Route(f"{PREFIX}/feedback", self._feedback, methods=["POST"]),
            Route(APP_PATH, self._console, methods=["POST"]),
            Route(APPS_PATH, self._app_list, methods=["GET"]),
        ]
        super().__init__(token=token, scenario=scenario, faults=faults, routes=routes)

    # --- endpoints ------------------------------------------------------------------------

    async def _create(self, request: Request) -> Response:
        rid = request.state.request_id
        try:
            header_fault = await self._begin(request)
            req = validate(wire.CreateConversationRequest, await json_object(request))
            self._check_app(req.app_id)
            fault = self._fault(header_fault, None, "create", None)
            if fault is not None and fault.rejects:
                return rejection(rid, fault, stream=False)
            conv = self.state.create_conversation(self.app_id)
        except ReplyError as reply:
            return error(rid, reply.status, reply.message)
        return json_reply(rid, {"request_id": rid, "conversation_id": conv.conversation_id}, fault)

    async def _runs(self, request: Request) -> Response:
        rid = request.state.request_id
        try:
            header_fault = await self._begin(request)
            req = validate(wire.RunRequest, await json_object(request))
            self._check_app(req.app_id)
            check_tools(req)
            with self.state.lock:
                conv = self._conversation(req.conversation_id)
                check_files(conv, req.file_ids or [])
                component = None
                if req.tool_outputs:
                    run = pending_run(conv, req.tool_outputs)
                    round_index = run.context.steps_done + 1
                    match = run.context.match
                elif req.action is not None or asking(conv):
                    run = paused_run(conv, req.action)
                    round_index = run.context.steps_done + 1
                    match = run.context.match
                else:
                    run = None
                    context, component = self._new_context(conv, req)
                    round_index, match = 0, context.match
                rule_fault = match.rule.fault_spec if match else None
                fault = self._fault(header_fault, rule_fault, "runs", round_index)
                if fault is not None and fault.rejects:
                    return rejection(rid, fault, stream=bool(req.stream))
                if run is None:
                    run = ActiveRun(message_id=str(uuid.uuid4()), context=context)
                    conv.active = run
                elif req.tool_outputs:
                    take_outputs(run, req.tool_outputs)
                    for output in req.tool_outputs:
                        accepted = conv.accepted_outputs.get(output.tool_call_id, 0)
                        conv.accepted_outputs[output.tool_call_id] = accepted + 1
                else:
                    run.take_answer(req.query or "", str(uuid.uuid4()))
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
        except ReplyError as reply:
            return error(rid, reply.status, reply.message)
        logger.debug("run %s round %d: %s", conv.conversation_id, round_index, rendered.status)
        if fault is not None and fault.stall:
            await asyncio.sleep(fault.stall)
        return run_response(rid, rendered.chunks, bool(req.stream), fault)

    async def _upload(self, request: Request) -> Response:
        rid = request.state.request_id
        try:
            header_fault = await self._begin(request, read_body=False)
            fields = await read_form(request)
            app_id, conversation_id = fields.get("app_id"), fields.get("conversation_id")
            pairs = (("app_id", app_id), ("conversation_id", conversation_id))
            missing = [name for name, value in pairs if not value]
            if missing:
                raise ReplyError(400, f"multipart field(s) {', '.join(missing)} missing or empty")
            self._check_app(str(app_id))
            upload, url = fields.get("file"), fields.get("file_url")
            if (upload is None) == (url is None):
                raise ReplyError(
                    400,
                    "send exactly one of the multipart fields 'file' (a file part) or "
                    "'file_url' (an http(s) URL)",
                )
            with self.state.lock:
                conv = self._conversation(str(conversation_id))
            fault = self._fault(header_fault, None, "upload", None)
            if fault is not None and fault.rejects:
                return rejection(rid, fault, stream=False)
            record = await file_record(upload, url)
            with self.state.lock:
                conv.files[record.file_id] = record
        except ReplyError as reply:
            return error(rid, reply.status, reply.message)
        body = {"request_id": rid, "id": record.file_id, "conversation_id": conv.conversation_id}
        return json_reply(rid, body, fault)

    async def _feedback(self, request: Request) -> Response:
        rid = request.state.request_id
        try:
            header_fault = await self._begin(request)
            req = validate(wire.FeedbackRequest, await json_object(request))
            self._check_app(req.app_id)
            with self.state.lock:
                conv = self._conversation(req.conversation_id)
                known = [m.message_id for m in conv.messages]
                if conv.active is not None:
                    known.append(conv.active.message_id)
                if req.message_id not in known:
                    raise ReplyError(
                        404,
                        f"message {req.message_id!r} not found in conversation "
                        f"{conv.conversation_id!r}; use a message_id returned by a run",
                    )
                fault = self._fault(header_fault, None, "feedback", None)
                if fault is not None and fault.rejects:
                    return rejection(rid, fault, stream=False)
                conv.feedback.append(req.model_dump(exclude_none=True))
        except ReplyError as reply:
            return error(rid, reply.status, reply.message)
        return json_reply(rid, {"request_id": rid}, fault)

    async def _console(self, request: Request) -> Response:
        rid = request.state.request_id
        try:
            header_fault = await self._begin(request)
            action = request.query_params.get("Action")
            if action not in CONSOLE_ACTIONS:
                raise ReplyError(
                    400,
                    f"unknown or missing Action {action!r} on POST {APP_PATH}; expected "
                    f"?Action={' or ?Action='.join(CONSOLE_ACTIONS)}",
                )
            data = await json_object(request)
            if action == "DescribeApps":
                listing = validate(wire.DescribeAppsRequest, data)
                body = console.describe_apps(
                    rid,
                    self.app_id,
                    self.app,
                    self.updated,
                    max_keys=listing.maxKeys,
                    marker=listing.marker,
                )
            else:
                self._check_app(validate(wire.DescribeAppRequest, data).id)
                body = console.describe_app(rid, self.app_id, self.app)
            # Console requests take header faults and on=any ones (no endpoint of their own).
            fault = self._fault(header_fault, None, "console", None)
            if fault is not None and fault.rejects:
                return rejection(rid, fault, stream=False)
        except ReplyError as reply:
            return error(rid, reply.status, reply.message)
        return json_reply(rid, body, fault)

    async def _app_list(self, request: Request) -> Response:
        rid = request.state.request_id
        try:
            header_fault = await self._begin(request)
            query = validate(wire.AppListQuery, dict(request.query_params))
            fault = self._fault(header_fault, None, "console", None)
            if fault is not None and fault.rejects:
                return rejection(rid, fault, stream=False)
        except ReplyError as reply:
            return error(rid, reply.status, reply.message)
        body = console.app_list(
            rid, self.app_id, self.app, self.updated, after=query.after, before=query.before
        )
        return json_reply(rid, body, fault)

    # --- shared checks ----------------------------------------------------------------------

    async def _begin(self, request: Request, *, read_body: bool = True) -> FaultSpec | None:
        """Read the body (so the log has it), check the token, parse a fault header."""
        return await admit(
            request,
            self.token,
            unauthorized=_unauthorized,
            bad_request=lambda message: ReplyError(400, message),
            read_body=read_body,
        )

    def _check_app(self, app_id: str) -> None:
        if app_id != self.app_id:
            raise ReplyError(
                404, f"app {app_id!r} not found; this emulator serves app_id {self.app_id!r}"
            )

    def _conversation(self, conversation_id: str) -> Conversation:
        conv = self.state.conversation(conversation_id)
        if conv is None:
            raise ReplyError(
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
            raise ReplyError(
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
        forced = None if component else forced_tool(req.tool_choice, tools, self.app)
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
            raise ReplyError(400, str(exc)) from None

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
        return error(rid, exc.status_code, message)

    async def _crash(self, request: Request, exc: Exception) -> Response:
        rid = request.state.request_id
        if isinstance(exc, DroppedConnectionError):
            # Starlette asks for an error page even after the response started; nothing is
            # sent then, and a planned drop is not a bug.
            return error(rid, 500, "connection dropped on purpose")
        logger.error("emulator bug while serving %s: %r", request.url.path, exc)
        return error(rid, 500, f"the emulator failed: {type(exc).__name__}: {exc}")


def _unauthorized(problem: str) -> ReplyError:
    what = "is missing" if problem == "missing" else "does not carry this emulator's token"
    return ReplyError(
        401,
        f"没有权限 (permission denied): the Authorization header {what}; "
        "expected 'Authorization: Bearer <token>'",
    )


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
