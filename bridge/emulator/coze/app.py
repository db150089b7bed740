"""The Coze emulator's ASGI app: the v3 chat endpoints on Starlette.

Endpoints: ``POST /v1/conversation/create``, ``POST /v3/chat`` (stream or not),
``POST /v3/chat/submit_tool_outputs``, ``POST /v3/chat/retrieve``, ``GET /v3/chat/message/list``,
``POST /v3/chat/cancel`` and ``GET /v1/bot/get_online_info``. Every answer carries ``x-tt-logid``.

A chat runs the shared planner over the bot's plugin APIs (`bridge.emulator.coze.bot`): a tool
round pauses it in ``requires_action`` (the stream ends with ``done``, the chat waits), an
``ask`` step pauses it with a ``reply_message`` action (the next ``POST /v3/chat`` in the
conversation is the reply), an answer completes it. A non-streamed chat is answered
``in_progress`` at once and reaches its status by the first ``retrieve``, so clients poll as
they must against the real service.

Checks, in order: token (HTTP 401, code 4100), body (4000), bot (4200), conversation and chat
(4200), their state (4016 busy, 4000 wrong outputs, 5000 for a chat started without
``auto_save_history``), then injected faults (`bridge.emulator.faults`; ``runs`` is
``/v3/chat`` and its submissions, ``create`` is ``/v1/conversation/create``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any, ClassVar

from pydantic import ValidationError
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Message, Receive, Scope, Send

from bridge.emulator.base_app import ProtocolApp
from bridge.emulator.coze import wire
from bridge.emulator.coze.bot import SECTION, BotConfig
from bridge.emulator.coze.chats import (
    ChatRecord,
    ReplyError,
    check_outputs,
    numeric_id,
    query_of,
)
from bridge.emulator.coze.files import file_object, read_upload
from bridge.emulator.coze.render import chat_message, render_step
from bridge.emulator.coze.replies import (
    chat_response,
    error_response,
    json_object,
    json_response,
    rejection,
    validate,
)
from bridge.emulator.faults import FaultSpec
from bridge.emulator.planner import (
    CompletedCall,
    Planner,
    RunContext,
)
from bridge.emulator.scenario import Scenario, ScenarioError
from bridge.emulator.state import (
    LOST,
    ActiveRun,
    Conversation,
    FileRecord,
)
from bridge.emulator.toolinfo import tool_info
from bridge.emulator.transport import (
    DroppedConnectionError,
    admit,
)
from bridge.emulator.wire import format_validation_error

__all__ = ["LOGID_HEADER", "ChatRecord", "CozeApp"]

logger = logging.getLogger(__name__)

LOGID_HEADER = "x-tt-logid"
_ACTIVE = frozenset({"created", "in_progress", "requires_action"})


class CozeApp(ProtocolApp):
    """The ASGI app of one Coze emulator (one bot), with its inspectable `state`."""

    SAVED: ClassVar[Mapping[str, Any]] = {
        "chats": dict[str, ChatRecord],
        "files": dict[str, FileRecord],
    }
    """Kept in a state file besides the conversations (`bridge.emulator.saving`)."""

    def __init__(
        self,
        *,
        token: str,
        bot_id: str,
        scenario: Scenario | None,
        bot: BotConfig,
        faults: FaultSpec | None,
    ) -> None:
        self.bot_id = bot_id
        self.bot = bot
        self.tools = tuple(tool_info(p.name, p.description, p.parameters) for p in bot.plugins)
        self.chat_only = False
        """True while the planner only says that the bot has no plugins (none declared yet)."""
        self._own_plugins = bool(bot.plugins)
        self.chats: dict[str, ChatRecord] = {}
        """Every chat by id (read under `state.lock`)."""
        self.files: dict[str, FileRecord] = {}
        """Every uploaded file by id (Coze keeps files per account, not per conversation)."""
        routes = [
            Route("/v1/conversation/create", self._create, methods=["POST"]),
            Route("/v3/chat", self._chat, methods=["POST"]),
            Route("/v3/chat/submit_tool_outputs", self._submit, methods=["POST"]),
            Route("/v3/chat/retrieve", self._retrieve, methods=["POST", "GET"]),
            Route("/v3/chat/message/list", self._messages, methods=["GET", "POST"]),
            Route("/v3/chat/cancel", self._cancel, methods=["POST"]),
            Route("/v1/bot/get_online_info", self._bot_info, methods=["GET"]),
            Route("/v1/files/upload", self._upload, methods=["POST"]),
            Route("/v1/files/retrieve", self._file, methods=["GET"]),
        ]
        super().__init__(
            token=token, scenario=scenario, faults=faults, routes=routes, wrap=_LogIdMiddleware
        )

    def configure(self, sections: Mapping[str, Any]) -> None:
        """Declare the bot's plugins from a scenario's ``coze`` section (the tools of a bridge
        using this emulator), unless the scenario it started with declared its own.

        Raises:
            ScenarioError: the section breaks its format.
        """
        section = sections.get(SECTION)
        if section is None or self._own_plugins:
            return
        try:
            bot = BotConfig.model_validate({**self.bot.model_dump(), **dict(section)})
        except ValidationError as exc:
            raise ScenarioError(f"{SECTION}: {format_validation_error(exc)}") from None
        with self.state.lock:
            self.bot = bot
            self.tools = tuple(tool_info(p.name, p.description, p.parameters) for p in bot.plugins)
            if self.chat_only and bot.plugins:
                self.planner, self.chat_only = Planner(None), False

    # --- endpoints ------------------------------------------------------------------------

    async def _create(self, request: Request) -> Response:
        logid = request.state.request_id
        try:
            header_fault = await self._begin(request)
            req = validate(wire.CreateConversationRequest, await json_object(request))
            if req.bot_id is not None:
                self._check_bot(req.bot_id)
            fault = self._fault(header_fault, None, "create", None)
            if fault is not None and fault.rejects:
                return rejection(logid, fault, stream=False)
            conv = self.state.create_conversation(self.bot_id)
        except ReplyError as reply:
            return error_response(logid, reply)
        data = {
            "id": conv.conversation_id,
            "created_at": int(conv.created_at.timestamp()),
            "meta_data": dict(req.meta_data or {}),
            "last_section_id": numeric_id(),
        }
        return json_response(wire.envelope(data))

    async def _chat(self, request: Request) -> Response:
        logid = request.state.request_id
        try:
            header_fault = await self._begin(request)
            req = validate(wire.ChatRequest, await json_object(request))
            self._check_bot(req.bot_id)
            query = query_of(req.additional_messages)
            self._check_files(req.additional_messages)
            with self.state.lock:
                conv = self._conversation_for(request.query_params.get("conversation_id"))
                run, round_index = self._run_for(conv, query)
                match = run.context.match
                fault = self._fault(
                    header_fault, match.rule.fault_spec if match else None, "runs", round_index
                )
                if fault is not None and fault.rejects:
                    return rejection(logid, fault, stream=req.stream)
                if run.pending_input is not None:
                    run.take_answer(query, numeric_id())
                chat = ChatRecord(
                    chat_id=numeric_id(),
                    conversation_id=conv.conversation_id,
                    bot_id=self.bot_id,
                    created_at=int(time.time()),
                    auto_save_history=req.auto_save_history,
                    run=run,
                )
                conv.active = run
                self.chats[chat.chat_id] = chat
                frames = [
                    wire.sse_frame("conversation.chat.created", chat.to_wire("created")),
                    wire.sse_frame("conversation.chat.in_progress", chat.to_wire("in_progress")),
                ]
                frames += self._advance(conv, chat)
        except ReplyError as reply:
            return error_response(logid, reply)
        return await chat_response(logid, chat, frames, req.stream, fault)

    async def _submit(self, request: Request) -> Response:
        logid = request.state.request_id
        try:
            header_fault = await self._begin(request)
            req = validate(wire.SubmitRequest, await json_object(request))
            with self.state.lock:
                chat, conv = self._chat_of(request.query_params)
                run = chat.run
                check_outputs(chat, req.tool_outputs)
                match = run.context.match
                round_index = run.context.steps_done + 1
                fault = self._fault(
                    header_fault, match.rule.fault_spec if match else None, "runs", round_index
                )
                if fault is not None and fault.rejects:
                    return rejection(logid, fault, stream=req.stream)
                by_id = {o.tool_call_id: o.output for o in req.tool_outputs}
                run.context.rounds.append(
                    [
                        CompletedCall(
                            p.call_id, p.name, p.output_name, p.arguments, by_id[p.call_id]
                        )
                        for p in run.pending
                    ]
                )
                frames = []
                for call in run.pending:
                    conv.accepted_outputs[call.call_id] = (
                        conv.accepted_outputs.get(call.call_id, 0) + 1
                    )
                    message = chat_message(chat, "tool_response", by_id[call.call_id])
                    chat.messages.append(message)
                    frames.append(wire.sse_frame("conversation.message.completed", message))
                run.pending = []
                chat.status, chat.required_action = "in_progress", None
                frames.insert(0, wire.sse_frame("conversation.chat.in_progress", chat.to_wire()))
                frames += self._advance(conv, chat)
        except ReplyError as reply:
            return error_response(logid, reply)
        return await chat_response(logid, chat, frames, req.stream, fault)

    async def _retrieve(self, request: Request) -> Response:
        logid = request.state.request_id
        try:
            await self._begin(request)
            with self.state.lock:
                chat, _ = self._chat_of(request.query_params)
                data = chat.to_wire()
        except ReplyError as reply:
            return error_response(logid, reply)
        return json_response(wire.envelope(data))

    async def _messages(self, request: Request) -> Response:
        logid = request.state.request_id
        try:
            await self._begin(request)
            with self.state.lock:
                chat, _ = self._chat_of(request.query_params)
                data = [dict(m) for m in chat.messages]
        except ReplyError as reply:
            return error_response(logid, reply)
        return json_response(wire.envelope(data))

    async def _cancel(self, request: Request) -> Response:
        logid = request.state.request_id
        try:
            await self._begin(request)
            req = validate(wire.CancelRequest, await json_object(request))
            params = {"conversation_id": req.conversation_id, "chat_id": req.chat_id}
            with self.state.lock:
                chat, conv = self._chat_of(params)
                if chat.status not in _ACTIVE:
                    raise ReplyError(
                        wire.CODE_CANNOT_CANCEL,
                        f"chat {chat.chat_id} is {chat.status} and cannot be canceled; only a "
                        "created, in_progress or requires_action chat can",
                    )
                chat.status, chat.required_action = "canceled", None
                if conv.active is chat.run:
                    conv.active = None
                data = chat.to_wire()
        except ReplyError as reply:
            return error_response(logid, reply)
        return json_response(wire.envelope(data))

    async def _upload(self, request: Request) -> Response:
        logid = request.state.request_id
        try:
            header_fault = await self._begin(request, read_body=False)
            fault = self._fault(header_fault, None, "upload", None)
            if fault is not None and fault.rejects:
                return rejection(logid, fault, stream=False)
            record = await read_upload(request)
            with self.state.lock:
                self.files[record.file_id] = record
        except ReplyError as reply:
            return error_response(logid, reply)
        return json_response(wire.envelope(file_object(record)))

    async def _file(self, request: Request) -> Response:
        logid = request.state.request_id
        try:
            await self._begin(request)
            file_id = request.query_params.get("file_id", "")
            with self.state.lock:
                record = self.files.get(file_id)
            if record is None:
                raise ReplyError(
                    wire.CODE_NOT_FOUND,
                    f"file {file_id!r} not found; upload it with POST /v1/files/upload",
                )
        except ReplyError as reply:
            return error_response(logid, reply)
        return json_response(wire.envelope(file_object(record)))

    def _check_files(self, messages: list[wire.MessageIn]) -> None:
        with self.state.lock:
            unknown = [f for m in messages for f in m.file_ids() if f not in self.files]
        if unknown:
            raise ReplyError(
                wire.CODE_BAD_REQUEST,
                f"file_id(s) {', '.join(unknown)} were not uploaded; upload them with "
                "POST /v1/files/upload first",
            )

    async def _bot_info(self, request: Request) -> Response:
        logid = request.state.request_id
        try:
            await self._begin(request)
            self._check_bot(request.query_params.get("bot_id", ""))
        except ReplyError as reply:
            return error_response(logid, reply)
        apis = [
            {"api_id": f"api-{p.name}", "name": p.name, "description": p.description}
            for p in self.bot.plugins
        ]
        plugins = (
            [
                {
                    "plugin_id": f"plugin-{self.bot.plugin_name}",
                    "name": self.bot.plugin_name,
                    "description": "local plugin (端插件): its APIs run on the client",
                    "icon_url": "",
                    "api_info_list": apis,
                }
            ]
            if apis
            else []
        )
        data = {
            "bot_id": self.bot_id,
            "name": self.bot.bot_name,
            "description": "emulated by toolbridge",
            "version": "1",
            "bot_mode": 0,
            "plugin_info_list": plugins,
        }
        return json_response(wire.envelope(data))

    # --- the run --------------------------------------------------------------------------

    def _advance(self, conv: Conversation, chat: ChatRecord) -> list[bytes]:
        """Take the run's next step; update the chat; return its stream frames (with done)."""
        step = self.planner.next_step(chat.run.context)
        return render_step(
            step,
            conv,
            chat,
            plugin_name=self.bot.plugin_name,
            chunk_chars=self.planner.settings.chunk_chars,
        )

    def _run_for(self, conv: Conversation, query: str) -> tuple[ActiveRun, int]:
        """The run a new chat continues (a question's reply) or starts, and its round."""
        active = conv.active
        if active is not None and active.pending:
            waiting = next((c.chat_id for c in self.chats.values() if c.run is active), "a chat")
            raise ReplyError(
                wire.CODE_BUSY,
                f"conversation {conv.conversation_id} has chat {waiting} waiting for tool "
                f"outputs ({', '.join(p.call_id for p in active.pending)}); submit them with "
                "POST /v3/chat/submit_tool_outputs or cancel the chat before a new one",
            )
        if active is not None and active.pending_input is not None:
            return active, active.context.steps_done + 1
        names = [t.name for t in self.tools]
        context = RunContext(query=query, tools=self.tools, match=self.planner.match(query, names))
        return ActiveRun(message_id=numeric_id(), context=context), 0

    # --- shared checks --------------------------------------------------------------------

    async def _begin(self, request: Request, *, read_body: bool = True) -> FaultSpec | None:
        """Read the body (so the log has it), check the token, parse a fault header."""
        return await admit(
            request,
            self.token,
            unauthorized=_unauthorized,
            bad_request=lambda message: ReplyError(wire.CODE_BAD_REQUEST, message),
            read_body=read_body,
        )

    def _check_bot(self, bot_id: str) -> None:
        if bot_id != self.bot_id:
            raise ReplyError(
                wire.CODE_NOT_FOUND,
                f"bot {bot_id!r} does not exist or is not published as an API; this emulator "
                f"serves bot_id {self.bot_id!r}",
            )

    def _conversation_for(self, conversation_id: str | None) -> Conversation:
        if not conversation_id:
            return self.state.create_conversation(self.bot_id)
        conv = self.state.conversation(conversation_id)
        if conv is None:
            raise ReplyError(
                wire.CODE_NOT_FOUND,
                f"conversation {conversation_id!r} not found: {LOST}; create one with POST "
                "/v1/conversation/create or leave conversation_id out",
            )
        return conv

    def _chat_of(self, params: Mapping[str, str]) -> tuple[ChatRecord, Conversation]:
        conversation_id, chat_id = params.get("conversation_id"), params.get("chat_id")
        missing = [
            n for n, v in (("conversation_id", conversation_id), ("chat_id", chat_id)) if not v
        ]
        if missing:
            raise ReplyError(
                wire.CODE_BAD_REQUEST,
                f"{' and '.join(missing)} missing; expected ?conversation_id=...&chat_id=...",
            )
        chat = self.chats.get(str(chat_id))
        conv = self.state.conversation(str(conversation_id))
        if chat is None or conv is None or chat.conversation_id != conversation_id:
            raise ReplyError(
                wire.CODE_NOT_FOUND,
                f"chat {chat_id!r} not found in conversation {conversation_id!r}",
            )
        return chat, conv

    # --- error pages ----------------------------------------------------------------------

    async def _http_error(self, request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        if exc.status_code == 404:
            msg = (
                f"no endpoint {request.url.path}; the Coze emulator serves "
                "/v1/conversation/create, /v3/chat, /v3/chat/submit_tool_outputs, "
                "/v3/chat/retrieve, /v3/chat/message/list, /v3/chat/cancel and "
                "/v1/bot/get_online_info"
            )
            return error_response(
                request.state.request_id, ReplyError(wire.CODE_NOT_FOUND, msg, 404)
            )
        msg = f"{request.method} {request.url.path}: {exc.detail}"
        reply = ReplyError(wire.CODE_BAD_REQUEST, msg, exc.status_code)
        return error_response(request.state.request_id, reply)

    async def _crash(self, request: Request, exc: Exception) -> Response:
        reply = ReplyError(wire.CODE_SERVER, "connection dropped on purpose", 500)
        if not isinstance(exc, DroppedConnectionError):
            logger.error("Coze emulator bug while serving %s: %r", request.url.path, exc)
            reply = ReplyError(
                wire.CODE_SERVER, f"the emulator failed: {type(exc).__name__}: {exc}", 500
            )
        return error_response(request.state.request_id, reply)


class _LogIdMiddleware:
    """Put the request's id (set by `RecordingMiddleware`) in ``x-tt-logid`` on every answer."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        logid = str(scope["state"]["request_id"]).encode()

        async def send_with_logid(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [*message.get("headers", []), (LOGID_HEADER.encode(), logid)]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_logid)


# --- helpers ------------------------------------------------------------------------------


def _unauthorized(problem: str) -> ReplyError:
    what = "is missing" if problem == "missing" else "does not carry this emulator's token"
    return ReplyError(
        wire.CODE_AUTH,
        f"authentication is invalid: the Authorization header {what}; expected "
        "'Authorization: Bearer <personal access token>'",
        status=401,
    )
