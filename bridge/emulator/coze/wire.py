"""The emulator's side of the Coze v3 wire: request models, objects, envelopes, SSE frames.

Shapes follow docs/wire/coze.md and the official `cozepy` 0.20.0 models (`Chat`, `Message`,
`ChatEvent`): every JSON answer is the envelope ``{"code": 0, "msg": "", "data": ...}``, an
error is ``{"code": N, "msg": ..., "detail": {"logid": ...}}`` (mostly with HTTP 200), and a
stream is ``event:NAME`` + ``data:JSON`` frames ending with ``event:done`` / ``data:"[DONE]"``.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictStr

from bridge.emulator.wire import encode_json

__all__ = [
    "CODE_AUTH",
    "CODE_BAD_REQUEST",
    "CODE_BUSY",
    "CODE_CANNOT_CANCEL",
    "CODE_NOT_FOUND",
    "CODE_PERMISSION",
    "CODE_RATE_LIMIT",
    "CODE_SERVER",
    "DONE_DATA",
    "CancelRequest",
    "ChatRequest",
    "CreateConversationRequest",
    "MessageIn",
    "SubmitRequest",
    "ToolOutputIn",
    "code_for_status",
    "envelope",
    "error_envelope",
    "sse_frame",
]

# The platform's error codes (coze.cn "错误码"): what a client must tell apart.
CODE_BAD_REQUEST = 4000
CODE_RATE_LIMIT = 4013
CODE_BUSY = 4016
"""The conversation is busy: a chat in it still waits for tool outputs."""
CODE_AUTH = 4100
CODE_PERMISSION = 4101
"""The token lacks a permission (e.g. ``submitToolChat`` for submitting tool outputs)."""
CODE_CANNOT_CANCEL = 4104
"""Only a chat that has not finished can be cancelled (cozepy checks this code)."""
CODE_NOT_FOUND = 4200
CODE_SERVER = 5000

DONE_DATA = '"[DONE]"'
"""The data of the ``done`` frame, a JSON string, as the platform sends it."""

_CODES_BY_STATUS = {
    400: CODE_BAD_REQUEST,
    401: CODE_AUTH,
    403: CODE_PERMISSION,
    404: CODE_NOT_FOUND,
}


def code_for_status(status: int) -> int:
    """The Coze error code that goes with an HTTP error status (injected faults)."""
    if status == 429:
        return CODE_RATE_LIMIT
    return _CODES_BY_STATUS.get(status, CODE_SERVER if status >= 500 else CODE_BAD_REQUEST)


class _Lenient(BaseModel):
    # cozepy dumps every field of its models, unset ones as null: unknown keys are ignored.
    model_config = ConfigDict(extra="ignore")


class MessageIn(_Lenient):
    """One of `additional_messages` (or a conversation's opening messages)."""

    role: Literal["user", "assistant"]
    type: str | None = None
    content: StrictStr
    content_type: Literal["text", "object_string", "card"] = "text"
    meta_data: dict[str, str] | None = None

    def file_ids(self) -> list[str]:
        """The files an ``object_string`` message references (by id)."""
        if self.content_type != "object_string":
            return []
        try:
            items = json.loads(self.content)
        except ValueError:
            return []
        return [
            str(i["file_id"])
            for i in items
            if isinstance(items, list) and isinstance(i, dict) and i.get("file_id")
        ]

    def text(self) -> str:
        """The text of the message; an ``object_string`` message's text items joined."""
        if self.content_type != "object_string":
            return self.content
        try:
            items = json.loads(self.content)
        except ValueError:
            return self.content
        if not isinstance(items, list):
            return self.content
        return " ".join(
            str(i.get("text", "")) for i in items if isinstance(i, dict) and i.get("type") == "text"
        )


class ChatRequest(_Lenient):
    """``POST /v3/chat``."""

    bot_id: StrictStr = Field(min_length=1)
    user_id: StrictStr = Field(min_length=1)
    additional_messages: list[MessageIn] = Field(default_factory=list)
    stream: bool = False
    auto_save_history: bool = True
    custom_variables: dict[str, str] | None = None
    meta_data: dict[str, str] | None = None
    parameters: dict[str, Any] | None = None


class ToolOutputIn(BaseModel):
    """One tool output: the call's opaque id echoed, the output as a string."""

    model_config = ConfigDict(extra="forbid")

    tool_call_id: StrictStr = Field(min_length=1)
    output: StrictStr


class SubmitRequest(_Lenient):
    """``POST /v3/chat/submit_tool_outputs``."""

    tool_outputs: list[ToolOutputIn] = Field(min_length=1)
    stream: bool = False


class CancelRequest(_Lenient):
    """``POST /v3/chat/cancel``."""

    conversation_id: StrictStr = Field(min_length=1)
    chat_id: StrictStr = Field(min_length=1)


class CreateConversationRequest(_Lenient):
    """``POST /v1/conversation/create`` (every field optional)."""

    bot_id: str | None = None
    messages: list[MessageIn] | None = None
    meta_data: dict[str, str] | None = None


def envelope(data: Any) -> dict[str, Any]:
    """A successful JSON answer."""
    return {"code": 0, "msg": "", "data": data}


def error_envelope(code: int, msg: str, logid: str) -> dict[str, Any]:
    """An error answer, as the platform sends it (with HTTP 200 unless a status is faked)."""
    return {"code": code, "msg": msg, "detail": {"logid": logid}}


def sse_frame(event: str, data: Any) -> bytes:
    """One stream frame: ``event:NAME``, ``data:JSON`` (a str is sent as is), a blank line."""
    payload = data.encode() if isinstance(data, str) else encode_json(data)
    return b"event:" + event.encode() + b"\ndata:" + payload + b"\n\n"
