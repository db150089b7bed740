"""Coze v3 wire models and the reading of its ``{code, msg}`` errors.

Models are lenient (``extra="ignore"``): the platform adds fields over time, and an adapter must
not break on them; only what the loop needs is declared. Error codes are those of the platform's
error-code table that a caller must tell apart (see `error_for_code`).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from bridge.errors import (
    AuthenticationError,
    BadRequestError,
    InBandError,
    NotFoundError,
    PlatformError,
    RateLimitError,
    ServerError,
)

__all__ = [
    "TOKEN_HINT",
    "Chat",
    "ChatError",
    "ChatMessage",
    "ChatToolCall",
    "ChatUsage",
    "ToolCallFunction",
    "classify",
    "error_for_code",
    "usage_dict",
]

TOKEN_HINT = (
    "check the token (--token or COZE_API_TOKEN): a personal access token or OAuth token of "
    "the space that owns the bot"
)
_PERMISSION_HINT = (
    "the token lacks a permission; submitting tool outputs needs submitToolChat (edit the "
    "personal access token's permissions in Coze: chat, submit tool outputs)"
)
_CONVERSATION_HINT = (
    "the platform no longer has this conversation (it expired or was deleted there, or the "
    "emulator serving it lost its state); a new conversation is needed"
)
_BOT_HINT = (
    "check the bot id (--bot-id or COZE_BOT_ID, the number in the bot's URL) and that the bot "
    "is published as an API (Agent As API channel)"
)


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore")


class ToolCallFunction(_Lenient):
    """The plugin API a tool call names, and its arguments as a JSON string."""

    name: str
    arguments: str | None = ""


class ChatToolCall(_Lenient):
    """One entry of `required_action.submit_tool_outputs.tool_calls`."""

    id: str
    type: str = "function"
    """``function`` (run a local plugin API) or ``reply_message`` (a question for the person)."""
    function: ToolCallFunction | None = None


class _SubmitToolOutputs(_Lenient):
    tool_calls: list[ChatToolCall] = Field(default_factory=list)


class _RequiredAction(_Lenient):
    type: str = "submit_tool_outputs"
    submit_tool_outputs: _SubmitToolOutputs | None = None


class ChatUsage(_Lenient):
    """Token counts of a chat."""

    token_count: int = 0
    output_count: int = 0
    input_count: int = 0


class ChatError(_Lenient):
    """Why a chat failed."""

    code: int = 0
    msg: str = ""


class Chat(_Lenient):
    """A chat (one turn of a conversation): the object every chat event and poll carries."""

    id: str
    conversation_id: str
    status: str = ""
    required_action: _RequiredAction | None = None
    usage: ChatUsage | None = None
    last_error: ChatError | None = None

    @property
    def tool_calls(self) -> list[ChatToolCall]:
        """The calls of a `requires_action` chat (empty otherwise)."""
        action = self.required_action
        if action is None or action.submit_tool_outputs is None:
            return []
        return action.submit_tool_outputs.tool_calls


class ChatMessage(_Lenient):
    """A message of a chat (answer, function_call, tool_response, verbose, follow_up...)."""

    id: str | None = None
    role: str = "assistant"
    type: str = ""
    content: str = ""
    content_type: str = "text"
    chat_id: str | None = None


def usage_dict(usage: ChatUsage | None) -> dict[str, Any] | None:
    """Usage in the neutral shape: Coze's counts under the names other platforms use too."""
    if usage is None:
        return None
    return {
        "prompt_tokens": usage.input_count,
        "completion_tokens": usage.output_count,
        "total_tokens": usage.token_count,
    }


def classify(code: int) -> tuple[type[PlatformError], str]:
    """The error class for a Coze error code, and what the operator can do about it.

    4100 is a bad token, 4101 a missing permission (``submitToolChat`` for submitting), 4013
    the rate limit, 4200 an unknown bot or conversation, 4015 a bot not published as an API,
    5000 the platform's own failure (also what a submit gets when the chat was started without
    ``auto_save_history``); other 4xxx codes are bad requests.
    """
    if code == 4100:
        return AuthenticationError, TOKEN_HINT
    if code == 4101:
        return AuthenticationError, _PERMISSION_HINT
    if code in (4013, 4029):
        return RateLimitError, "the platform is rate limiting; slow down and try again"
    if code in (4200, 4015):
        return NotFoundError, _BOT_HINT
    if code == 5000:
        return ServerError, "the platform failed; try again later"
    if 4000 <= code < 5000:
        return BadRequestError, "the platform refused the request"
    return InBandError, "the platform reported an error"


def error_for_code(
    code: int,
    msg: str,
    *,
    where: str,
    request_id: str | None,
    status: int,
    body: str | None = None,
) -> PlatformError:
    """The error for a ``{code, msg}`` answer (usually with HTTP 200), see `classify`."""
    kind, hint = classify(code)
    text = " ".join(msg.split()) or "no message"
    if kind is NotFoundError and "conversation" in text.lower():
        # The bot was found (the conversation was not): the bot id is not what is wrong.
        hint = _CONVERSATION_HINT
    return kind(
        f"{where} answered code {code}: {text}; {hint}",
        request_id=request_id,
        status_code=status,
        code=str(code),
        body=body,
    )
