"""Chats as the Coze emulator keeps them, and the rules a chat's next request must follow."""

from __future__ import annotations

import base64
import secrets
import uuid
from dataclasses import dataclass, field
from typing import Any

from bridge.emulator.coze import wire
from bridge.emulator.planner import RunContext
from bridge.emulator.render import estimate_tokens
from bridge.emulator.state import ActiveRun, MessageRecord
from bridge.emulator.wire import output_problems

__all__ = [
    "ChatRecord",
    "ReplyError",
    "call_id",
    "chat_usage",
    "check_outputs",
    "message_record",
    "numeric_id",
    "query_of",
]


class ReplyError(Exception):
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


def numeric_id() -> str:
    # Coze ids are 19-digit decimal strings; clients must treat them as opaque text.
    return str(7_000_000_000_000_000_000 + secrets.randbelow(10**18))


def call_id() -> str:
    # Opaque, base64 with padding (as in the docs' transcript): clients echo it byte for byte.
    return base64.b64encode(uuid.uuid4().bytes + secrets.token_bytes(2)).decode()


def query_of(messages: list[wire.MessageIn]) -> str:
    for message in reversed(messages):
        if message.role == "user":
            text = message.text().strip()
            if text:
                return text
    raise ReplyError(
        wire.CODE_BAD_REQUEST,
        "additional_messages has no user message with text; expected e.g. "
        '[{"role": "user", "type": "question", "content": "...", "content_type": "text"}]',
    )


def check_outputs(chat: ChatRecord, outputs: list[wire.ToolOutputIn]) -> None:
    run = chat.run
    if chat.status != "requires_action" or (not run.pending and run.pending_input is None):
        raise ReplyError(
            wire.CODE_BAD_REQUEST,
            f"chat {chat.chat_id} is {chat.status}, not requires_action: no tool outputs are "
            "expected",
        )
    if run.pending_input is not None:
        raise ReplyError(
            wire.CODE_BAD_REQUEST,
            f"chat {chat.chat_id} waits for a reply_message (the person's answer to "
            f"{run.pending_input.question!r}): send it as a new user message with POST /v3/chat "
            "in the same conversation, not as a tool output",
        )
    if not chat.auto_save_history:
        raise ReplyError(
            wire.CODE_SERVER,
            f"chat {chat.chat_id} was started with auto_save_history=false, so the platform "
            "kept no history to continue: start chats that call local plugins with "
            "auto_save_history=true",
        )
    expected = [p.call_id for p in run.pending]
    problems = output_problems(expected, [o.tool_call_id for o in outputs])
    if problems:
        raise ReplyError(
            wire.CODE_BAD_REQUEST,
            "tool_outputs must answer every tool call of the chat in one request "
            f"({', '.join(expected)}): " + "; ".join(problems),
        )


def message_record(run: ActiveRun, answer: str, status: str) -> MessageRecord:
    return MessageRecord(
        message_id=run.message_id,
        query=run.query if run.query is not None else run.context.query,
        answer=answer,
        status=status,
        tool_calls=tuple(c for r in run.context.rounds[run.first_round :] for c in r),
    )


def chat_usage(context: RunContext, answer: str) -> dict[str, int]:
    text = context.query + "".join(c.output for r in context.rounds for c in r)
    prompt, completion = max(1, estimate_tokens(text)), estimate_tokens(answer)
    return {"token_count": prompt + completion, "output_count": completion, "input_count": prompt}
