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

import asyncio
import base64
import contextlib
import hmac
import json
import logging
import secrets
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Message, Receive, Scope, Send

from bridge.emulator.coze import wire
from bridge.emulator.coze.bot import BotConfig
from bridge.emulator.faults import HEADER, FaultSpec, FaultSpecError, parse_faults
from bridge.emulator.planner import (
    AnswerStep,
    AskStep,
    CallStep,
    CompletedAsk,
    CompletedCall,
    Planner,
    RunContext,
)
from bridge.emulator.render import estimate_tokens
from bridge.emulator.scenario import Scenario
from bridge.emulator.state import (
    ActiveRun,
    Conversation,
    EmulatorState,
    MessageRecord,
    PendingCall,
    PendingInput,
)
from bridge.emulator.toolinfo import tool_info
from bridge.emulator.transport import (
    BlockResponse,
    DroppedConnectionError,
    RecordingMiddleware,
    install_drop_log_filter,
)
from bridge.emulator.wire import encode_json, format_validation_error

__all__ = ["LOGID_HEADER", "ChatRecord", "CozeApp"]

logger = logging.getLogger(__name__)

LOGID_HEADER = "x-tt-logid"
JSON = "application/json"
SSE = "text/event-stream; charset=utf-8"
_ACTIVE = frozenset({"created", "in_progress", "requires_action"})
_M = TypeVar("_M", bound=BaseModel)


class _ReplyError(Exception):
    """Raised inside a handler to answer with a Coze error at once."""

    def __init__(self, code: int, msg: str, status: int = 200) -> None:
        super().__init__(msg)
        self.code = code
        self.msg = msg
        self.status = status


@dataclass
class ChatRecord:
    """One chat (one user turn) as the emulator keeps it."""

    chat_id: str
    conversation_id: str
    bot_id: str
    created_at: int
    auto_save_history: bool
    run: ActiveRun
    status: str = "created"
    required_action: dict[str, Any] | None = None
    messages: list[dict[str, Any]] = field(default_factory=list)
    usage: dict[str, int] | None = None
    last_error: dict[str, Any] | None = None
    completed_at: int | None = None
    failed_at: int | None = None

    def to_wire(self, status: str | None = None) -> dict[str, Any]:
        """The Chat object (optionally as it looked with an earlier `status`)."""
        shown = status or self.status
        chat: dict[str, Any] = {
            "id": self.chat_id,
            "conversation_id": self.conversation_id,
            "bot_id": self.bot_id,
            "created_at": self.created_at,
            "status": shown,
        }
        if shown == self.status:
            if self.required_action is not None:
                chat["required_action"] = self.required_action
            if self.usage is not None:
                chat["usage"] = self.usage
            if self.last_error is not None:
                chat["last_error"] = self.last_error
            if self.completed_at is not None:
                chat["completed_at"] = self.completed_at
            if self.failed_at is not None:
                chat["failed_at"] = self.failed_at
        return chat


class CozeApp:
    """The ASGI app of one Coze emulator (one bot), with its inspectable `state`."""

    def __init__(
        self,
        *,
        token: str,
        bot_id: str,
        scenario: Scenario | None,
        bot: BotConfig,
        faults: FaultSpec | None,
    ) -> None:
        self.token = token.removeprefix("Bearer ").strip()
        self.bot_id = bot_id
        self.bot = bot
        self.faults = faults
        self.planner = Planner(scenario)
        self.tools = tuple(tool_info(p.name, p.description, p.parameters) for p in bot.plugins)
        self.state = EmulatorState()
        self.chats: dict[str, ChatRecord] = {}
        """Every chat by id (read under `state.lock`)."""
        routes = [
            Route("/v1/conversation/create", self._create, methods=["POST"]),
            Route("/v3/chat", self._chat, methods=["POST"]),
            Route("/v3/chat/submit_tool_outputs", self._submit, methods=["POST"]),
            Route("/v3/chat/retrieve", self._retrieve, methods=["POST", "GET"]),
            Route("/v3/chat/message/list", self._messages, methods=["GET", "POST"]),
            Route("/v3/chat/cancel", self._cancel, methods=["POST"]),
            Route("/v1/bot/get_online_info", self._bot_info, methods=["GET"]),
        ]
        starlette = Starlette(
            routes=routes,
            exception_handlers={HTTPException: self._http_error, Exception: self._crash},
            lifespan=self._lifespan,
        )
        self._asgi = RecordingMiddleware(_LogIdMiddleware(starlette), self.state)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """ASGI entry point."""
        await self._asgi(scope, receive, send)

    @contextlib.asynccontextmanager
    async def _lifespan(self, _app: Starlette) -> AsyncIterator[None]:
        install_drop_log_filter()
        yield

    # --- endpoints ------------------------------------------------------------------------

    async def _create(self, request: Request) -> Response:
        logid = request.state.request_id
        try:
            header_fault = await self._begin(request)
            req = _validate(wire.CreateConversationRequest, await _json_object(request))
            if req.bot_id is not None:
                self._check_bot(req.bot_id)
            fault = self._fault(header_fault, None, "create", None)
            if fault is not None and fault.rejects:
                return _rejection(logid, fault, stream=False)
            conv = self.state.create_conversation(self.bot_id)
        except _ReplyError as reply:
            return _error(logid, reply)
        data = {
            "id": conv.conversation_id,
            "created_at": int(conv.created_at.timestamp()),
            "meta_data": dict(req.meta_data or {}),
            "last_section_id": _numeric_id(),
        }
        return _json(wire.envelope(data))

    async def _chat(self, request: Request) -> Response:
        logid = request.state.request_id
        try:
            header_fault = await self._begin(request)
            req = _validate(wire.ChatRequest, await _json_object(request))
            self._check_bot(req.bot_id)
            query = _query(req.additional_messages)
            with self.state.lock:
                conv = self._conversation_for(request.query_params.get("conversation_id"))
                run, round_index = self._run_for(conv, query)
                match = run.context.match
                fault = self._fault(
                    header_fault, match.rule.fault_spec if match else None, "runs", round_index
                )
                if fault is not None and fault.rejects:
                    return _rejection(logid, fault, stream=req.stream)
                if run.pending_input is not None:
                    _take_answer(run, query)
                chat = ChatRecord(
                    chat_id=_numeric_id(),
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
        except _ReplyError as reply:
            return _error(logid, reply)
        return await _chat_response(logid, chat, frames, req.stream, fault)

    async def _submit(self, request: Request) -> Response:
        logid = request.state.request_id
        try:
            header_fault = await self._begin(request)
            req = _validate(wire.SubmitRequest, await _json_object(request))
            with self.state.lock:
                chat, conv = self._chat_of(request.query_params)
                run = chat.run
                _check_outputs(chat, req.tool_outputs)
                match = run.context.match
                round_index = run.context.steps_done + 1
                fault = self._fault(
                    header_fault, match.rule.fault_spec if match else None, "runs", round_index
                )
                if fault is not None and fault.rejects:
                    return _rejection(logid, fault, stream=req.stream)
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
                    message = self._message(chat, "tool_response", by_id[call.call_id])
                    chat.messages.append(message)
                    frames.append(wire.sse_frame("conversation.message.completed", message))
                run.pending = []
                chat.status, chat.required_action = "in_progress", None
                frames.insert(0, wire.sse_frame("conversation.chat.in_progress", chat.to_wire()))
                frames += self._advance(conv, chat)
        except _ReplyError as reply:
            return _error(logid, reply)
        return await _chat_response(logid, chat, frames, req.stream, fault)

    async def _retrieve(self, request: Request) -> Response:
        logid = request.state.request_id
        try:
            await self._begin(request)
            with self.state.lock:
                chat, _ = self._chat_of(request.query_params)
                data = chat.to_wire()
        except _ReplyError as reply:
            return _error(logid, reply)
        return _json(wire.envelope(data))

    async def _messages(self, request: Request) -> Response:
        logid = request.state.request_id
        try:
            await self._begin(request)
            with self.state.lock:
                chat, _ = self._chat_of(request.query_params)
                data = [dict(m) for m in chat.messages]
        except _ReplyError as reply:
            return _error(logid, reply)
        return _json(wire.envelope(data))

    async def _cancel(self, request: Request) -> Response:
        logid = request.state.request_id
        try:
            await self._begin(request)
            req = _validate(wire.CancelRequest, await _json_object(request))
            params = {"conversation_id": req.conversation_id, "chat_id": req.chat_id}
            with self.state.lock:
                chat, conv = self._chat_of(params)
                if chat.status not in _ACTIVE:
                    raise _ReplyError(
                        wire.CODE_CANNOT_CANCEL,
                        f"chat {chat.chat_id} is {chat.status} and cannot be canceled; only a "
                        "created, in_progress or requires_action chat can",
                    )
                chat.status, chat.required_action = "canceled", None
                if conv.active is chat.run:
                    conv.active = None
                data = chat.to_wire()
        except _ReplyError as reply:
            return _error(logid, reply)
        return _json(wire.envelope(data))

    async def _bot_info(self, request: Request) -> Response:
        logid = request.state.request_id
        try:
            await self._begin(request)
            self._check_bot(request.query_params.get("bot_id", ""))
        except _ReplyError as reply:
            return _error(logid, reply)
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
        return _json(wire.envelope(data))

    # --- the run --------------------------------------------------------------------------

    def _advance(self, conv: Conversation, chat: ChatRecord) -> list[bytes]:
        """Take the run's next step; update the chat; return its stream frames (with done)."""
        run = chat.run
        step = self.planner.next_step(run.context)
        frames: list[bytes] = []
        if isinstance(step, CallStep):
            run.pending = [
                PendingCall(_call_id(), c.name, c.arguments, c.output_name) for c in step.calls
            ]
            for call in run.pending:
                content = {
                    "name": f"{self.bot.plugin_name}-{call.name}",
                    "arguments": call.arguments,
                    "plugin_id": f"plugin-{self.bot.plugin_name}",
                    "api_id": f"api-{call.name}",
                    "api_name": call.name,
                }
                message = self._message(
                    chat, "function_call", json.dumps(content, ensure_ascii=False)
                )
                chat.messages.append(message)
                frames.append(wire.sse_frame("conversation.message.completed", message))
            tool_calls = [
                {
                    "id": call.call_id,
                    "type": "function",
                    "function": {
                        "name": call.name,
                        # A JSON string; empty (not "{}") when there is nothing, as Coze sends.
                        "arguments": json.dumps(call.arguments, ensure_ascii=False)
                        if call.arguments
                        else "",
                    },
                }
                for call in run.pending
            ]
            self._pause(chat, tool_calls)
            frames.append(wire.sse_frame("conversation.chat.requires_action", chat.to_wire()))
        elif isinstance(step, AskStep):
            question = PendingInput(_call_id(), step.question, step.name)
            run.pending_input = question
            frames += self._answer_frames(chat, step.question)
            conv.messages.append(_record(run, step.question, "human_input"))
            self._pause(chat, [{"id": question.interrupt_id, "type": "reply_message"}])
            frames.append(wire.sse_frame("conversation.chat.requires_action", chat.to_wire()))
        elif isinstance(step, AnswerStep):
            frames += self._answer_frames(chat, step.text)
            chat.status, chat.completed_at = "completed", int(time.time())
            chat.usage = _usage(run.context, step.text)
            conv.messages.append(_record(run, step.text, "success"))
            conv.active = None
            frames.append(wire.sse_frame("conversation.chat.completed", chat.to_wire()))
        else:
            chat.status, chat.failed_at = "failed", int(time.time())
            chat.last_error = {"code": wire.CODE_SERVER, "msg": f"{step.code}: {step.message}"}
            conv.messages.append(_record(run, "", "error"))
            conv.active = None
            frames.append(wire.sse_frame("conversation.chat.failed", chat.to_wire()))
        frames.append(wire.sse_frame("done", wire.DONE_DATA))
        return frames

    def _pause(self, chat: ChatRecord, tool_calls: list[dict[str, Any]]) -> None:
        chat.status = "requires_action"
        chat.required_action = {
            "type": "submit_tool_outputs",
            "submit_tool_outputs": {"tool_calls": tool_calls},
        }

    def _answer_frames(self, chat: ChatRecord, text: str) -> list[bytes]:
        size = self.planner.settings.chunk_chars
        message_id = _numeric_id()
        frames = [
            wire.sse_frame(
                "conversation.message.delta",
                self._message(chat, "answer", text[i : i + size], message_id=message_id),
            )
            for i in range(0, len(text), size)
        ]
        message = self._message(chat, "answer", text, message_id=message_id)
        chat.messages.append(message)
        frames.append(wire.sse_frame("conversation.message.completed", message))
        finish = self._message(
            chat, "verbose", json.dumps({"msg_type": "generate_answer_finish", "data": ""})
        )
        chat.messages.append(finish)
        frames.append(wire.sse_frame("conversation.message.completed", finish))
        return frames

    def _message(
        self, chat: ChatRecord, kind: str, content: str, *, message_id: str | None = None
    ) -> dict[str, Any]:
        return {
            "id": message_id or _numeric_id(),
            "conversation_id": chat.conversation_id,
            "bot_id": chat.bot_id,
            "chat_id": chat.chat_id,
            "role": "assistant",
            "type": kind,
            "content": content,
            "content_type": "text",
            "created_at": int(time.time()),
        }

    def _run_for(self, conv: Conversation, query: str) -> tuple[ActiveRun, int]:
        """The run a new chat continues (a question's reply) or starts, and its round."""
        active = conv.active
        if active is not None and active.pending:
            waiting = next((c.chat_id for c in self.chats.values() if c.run is active), "a chat")
            raise _ReplyError(
                wire.CODE_BUSY,
                f"conversation {conv.conversation_id} has chat {waiting} waiting for tool "
                f"outputs ({', '.join(p.call_id for p in active.pending)}); submit them with "
                "POST /v3/chat/submit_tool_outputs or cancel the chat before a new one",
            )
        if active is not None and active.pending_input is not None:
            return active, active.context.steps_done + 1
        names = [t.name for t in self.tools]
        context = RunContext(query=query, tools=self.tools, match=self.planner.match(query, names))
        return ActiveRun(message_id=_numeric_id(), context=context), 0

    # --- shared checks --------------------------------------------------------------------

    async def _begin(self, request: Request) -> FaultSpec | None:
        """Read the body (so the log has it), check the token, parse a fault header."""
        await request.body()
        auth = request.headers.get("authorization", "")
        scheme, _, value = auth.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            value.strip().encode(), self.token.encode()
        ):
            what = "is missing" if not auth else "does not carry this emulator's token"
            raise _ReplyError(
                wire.CODE_AUTH,
                f"authentication is invalid: the Authorization header {what}; expected "
                "'Authorization: Bearer <personal access token>'",
                status=401,
            )
        text = request.headers.get(HEADER)
        if text is None:
            return None
        try:
            return parse_faults(text)
        except FaultSpecError as exc:
            raise _ReplyError(
                wire.CODE_BAD_REQUEST, f"bad {HEADER} header: {exc.message}"
            ) from None

    def _check_bot(self, bot_id: str) -> None:
        if bot_id != self.bot_id:
            raise _ReplyError(
                wire.CODE_NOT_FOUND,
                f"bot {bot_id!r} does not exist or is not published as an API; this emulator "
                f"serves bot_id {self.bot_id!r}",
            )

    def _conversation_for(self, conversation_id: str | None) -> Conversation:
        if not conversation_id:
            return self.state.create_conversation(self.bot_id)
        conv = self.state.conversation(conversation_id)
        if conv is None:
            raise _ReplyError(
                wire.CODE_NOT_FOUND,
                f"conversation {conversation_id!r} not found; create one with POST "
                "/v1/conversation/create or leave conversation_id out",
            )
        return conv

    def _chat_of(self, params: Mapping[str, str]) -> tuple[ChatRecord, Conversation]:
        conversation_id, chat_id = params.get("conversation_id"), params.get("chat_id")
        missing = [
            n for n, v in (("conversation_id", conversation_id), ("chat_id", chat_id)) if not v
        ]
        if missing:
            raise _ReplyError(
                wire.CODE_BAD_REQUEST,
                f"{' and '.join(missing)} missing; expected ?conversation_id=...&chat_id=...",
            )
        chat = self.chats.get(str(chat_id))
        conv = self.state.conversation(str(conversation_id))
        if chat is None or conv is None or chat.conversation_id != conversation_id:
            raise _ReplyError(
                wire.CODE_NOT_FOUND,
                f"chat {chat_id!r} not found in conversation {conversation_id!r}",
            )
        return chat, conv

    def _fault(
        self,
        header: FaultSpec | None,
        rule: FaultSpec | None,
        endpoint: str,
        round_index: int | None,
    ) -> FaultSpec | None:
        """The fault that applies (header, then rule, then global), as the AppBuilder app."""
        for spec, source, from_header in (
            (header, "header", True),
            (rule, "rule", False),
            (self.faults, "global", False),
        ):
            if spec is None:
                continue
            if spec.applies_to(endpoint, round_index, from_header=from_header) and (
                self.state.faults.take(spec, source)
            ):
                return spec
            return None
        return None

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
            return _error(request.state.request_id, _ReplyError(wire.CODE_NOT_FOUND, msg, 404))
        msg = f"{request.method} {request.url.path}: {exc.detail}"
        reply = _ReplyError(wire.CODE_BAD_REQUEST, msg, exc.status_code)
        return _error(request.state.request_id, reply)

    async def _crash(self, request: Request, exc: Exception) -> Response:
        reply = _ReplyError(wire.CODE_SERVER, "connection dropped on purpose", 500)
        if not isinstance(exc, DroppedConnectionError):
            logger.error("Coze emulator bug while serving %s: %r", request.url.path, exc)
            reply = _ReplyError(
                wire.CODE_SERVER, f"the emulator failed: {type(exc).__name__}: {exc}", 500
            )
        return _error(request.state.request_id, reply)


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


def _numeric_id() -> str:
    # Coze ids are 19-digit decimal strings; clients must treat them as opaque text.
    return str(7_000_000_000_000_000_000 + secrets.randbelow(10**18))


def _call_id() -> str:
    # Opaque, base64 with padding (as in the docs' transcript): clients echo it byte for byte.
    return base64.b64encode(uuid.uuid4().bytes + secrets.token_bytes(2)).decode()


def _query(messages: list[wire.MessageIn]) -> str:
    for message in reversed(messages):
        if message.role == "user":
            text = message.text().strip()
            if text:
                return text
    raise _ReplyError(
        wire.CODE_BAD_REQUEST,
        "additional_messages has no user message with text; expected e.g. "
        '[{"role": "user", "type": "question", "content": "...", "content_type": "text"}]',
    )


def _check_outputs(chat: ChatRecord, outputs: list[wire.ToolOutputIn]) -> None:
    run = chat.run
    if chat.status != "requires_action" or (not run.pending and run.pending_input is None):
        raise _ReplyError(
            wire.CODE_BAD_REQUEST,
            f"chat {chat.chat_id} is {chat.status}, not requires_action: no tool outputs are "
            "expected",
        )
    if run.pending_input is not None:
        raise _ReplyError(
            wire.CODE_BAD_REQUEST,
            f"chat {chat.chat_id} waits for a reply_message (the person's answer to "
            f"{run.pending_input.question!r}): send it as a new user message with POST /v3/chat "
            "in the same conversation, not as a tool output",
        )
    if not chat.auto_save_history:
        raise _ReplyError(
            wire.CODE_SERVER,
            f"chat {chat.chat_id} was started with auto_save_history=false, so the platform "
            "kept no history to continue: start chats that call local plugins with "
            "auto_save_history=true",
        )
    expected = [p.call_id for p in run.pending]
    given = [o.tool_call_id for o in outputs]
    problems = []
    unknown = [i for i in given if i not in expected]
    missing = [i for i in expected if i not in given]
    repeated = sorted({i for i in given if given.count(i) > 1})
    if unknown:
        problems.append(f"unknown tool_call_id(s) {', '.join(unknown)}")
    if missing:
        problems.append(f"missing output(s) for tool_call_id(s) {', '.join(missing)}")
    if repeated:
        problems.append(f"repeated tool_call_id(s) {', '.join(repeated)}")
    if problems:
        raise _ReplyError(
            wire.CODE_BAD_REQUEST,
            "tool_outputs must answer every tool call of the chat in one request "
            f"({', '.join(expected)}): " + "; ".join(problems),
        )


def _take_answer(run: ActiveRun, answer: str) -> None:
    question = run.pending_input
    assert question is not None
    run.context.answers.append(
        CompletedAsk(question.interrupt_id, question.name, question.question, answer)
    )
    run.pending_input = None
    run.message_id = _numeric_id()
    run.query = answer
    run.first_round = len(run.context.rounds)


def _record(run: ActiveRun, answer: str, status: str) -> MessageRecord:
    return MessageRecord(
        message_id=run.message_id,
        query=run.query if run.query is not None else run.context.query,
        answer=answer,
        status=status,
        tool_calls=tuple(c for r in run.context.rounds[run.first_round :] for c in r),
    )


def _usage(context: RunContext, answer: str) -> dict[str, int]:
    text = context.query + "".join(c.output for r in context.rounds for c in r)
    prompt, completion = max(1, estimate_tokens(text)), estimate_tokens(answer)
    return {"token_count": prompt + completion, "output_count": completion, "input_count": prompt}


async def _json_object(request: Request) -> dict[str, Any]:
    raw = await request.body()
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise _ReplyError(
            wire.CODE_BAD_REQUEST, f"the request body is not valid JSON: {exc}"
        ) from None
    if not isinstance(data, dict):
        raise _ReplyError(
            wire.CODE_BAD_REQUEST,
            f"the request body must be a JSON object, not {type(data).__name__}",
        )
    return data


def _validate(model: type[_M], data: dict[str, Any]) -> _M:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise _ReplyError(
            wire.CODE_BAD_REQUEST, f"invalid request body: {format_validation_error(exc)}"
        ) from None


def _json(body: Any, status: int = 200) -> Response:
    return Response(encode_json(body), status_code=status, media_type=JSON)


def _error(logid: str, reply: _ReplyError) -> Response:
    return _json(wire.error_envelope(reply.code, reply.msg, logid), reply.status)


def _rejection(logid: str, fault: FaultSpec, *, stream: bool) -> Response:
    """A fault that refuses the request before it is processed (a stream's too: as JSON)."""
    if fault.status is not None:
        headers = {}
        retry_after = fault.retry_after if fault.retry_after is not None else None
        if retry_after is None and fault.status == 429:
            retry_after = 1
        if retry_after is not None:
            headers["Retry-After"] = f"{retry_after:g}"
        msg = fault.message or f"emulated fault: HTTP {fault.status}"
        body = encode_json(wire.error_envelope(wire.code_for_status(fault.status), msg, logid))
        return BlockResponse(
            [body],
            status_code=fault.status,
            media_type=JSON,
            headers=headers,
            delay=fault.delay,
            drop_after=fault.drop_after,
        )
    body = encode_json(_inband(logid, fault))
    return BlockResponse([body], media_type=JSON)


def _inband(logid: str, fault: FaultSpec) -> dict[str, Any]:
    code = fault.inband or ""
    number = int(code) if code.lstrip("-").isdigit() else wire.CODE_SERVER
    return wire.error_envelope(number, fault.message or "emulated in-band error", logid)


async def _chat_response(
    logid: str, chat: ChatRecord, frames: list[bytes], stream: bool, fault: FaultSpec | None
) -> Response:
    if fault is not None and fault.stall:
        await asyncio.sleep(fault.stall)
    if not stream:
        # The chat is answered as it was when the request arrived; retrieve shows the rest.
        body = encode_json(wire.envelope(chat.to_wire("in_progress")))
        if fault is None:
            return Response(body, media_type=JSON)
        if fault.inband is not None:
            body = encode_json(_inband(logid, fault))
        elif fault.malformed is not None:
            body = body[:-1] + b", not JSON"
        return BlockResponse(
            [body], media_type=JSON, delay=fault.delay, drop_after=fault.drop_after
        )
    if fault is None:
        return BlockResponse(frames, media_type=SSE, length=False)
    if fault.duplicate_interrupt:
        frames = [
            f
            for frame in frames
            for f in (
                [frame, frame] if frame.startswith(b"event:conversation.chat.requires") else [frame]
            )
        ]
    if fault.malformed is not None:
        at = min(fault.malformed, len(frames))
        frames.insert(at, b"event:conversation.message.delta\ndata:{this is not JSON\n\n")
    if fault.inband is not None:
        error = _inband(logid, fault)
        frames = [
            *frames[: fault.inband_after],
            wire.sse_frame("error", {"code": error["code"], "msg": error["msg"]}),
            wire.sse_frame("done", wire.DONE_DATA),
        ]
    return BlockResponse(
        frames, media_type=SSE, length=False, delay=fault.delay, drop_after=fault.drop_after
    )
