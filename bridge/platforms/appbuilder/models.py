"""Pydantic models of the AppBuilder v2 conversation API, as it is on the wire.

Requests are strict and serialise exactly like appbuilder-sdk 1.1.5 (key order, `null`s,
`json.dumps` defaults). Responses are tolerant: unknown fields are ignored, `null` stands for
"absent", `tool_calls[].function.arguments` may be an object or a JSON string, and an error
body (top-level `code`/`message`, no content) parses instead of failing.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = [
    "Action",
    "ActionParameters",
    "ConversationResponse",
    "FeedbackRequest",
    "FeedbackResponse",
    "FileUploadResponse",
    "FunctionCall",
    "InterruptEvent",
    "RunChunk",
    "RunEvent",
    "RunRequest",
    "RunResponse",
    "ToolCallItem",
    "ToolChoiceFunction",
    "ToolOutput",
    "Usage",
    "WireToolChoice",
]

FeedbackType = Literal["upvote", "downvote", "cancel"]


# --- requests -----------------------------------------------------------------------------------


class _Request(BaseModel):
    # Field order is wire order; extra keys are a programming error on our side.
    model_config = ConfigDict(extra="forbid")


class ToolOutput(_Request):
    """The output of one tool call, sent back in `tool_outputs`."""

    tool_call_id: str
    output: str


class ToolChoiceFunction(_Request):
    """The component the agent must call (`tool_choice.function`)."""

    name: str
    input: dict[str, Any] = Field(default_factory=dict)


class WireToolChoice(_Request):
    """`{"type": "auto" | "function", "function": {"name", "input"}}`: how AppBuilder writes a
    tool choice (the neutral one is `bridge.types.ToolChoice`)."""

    type: Literal["auto", "function"]
    function: ToolChoiceFunction | None = None

    @classmethod
    def for_function(cls, name: str, arguments: Mapping[str, Any] | None = None) -> WireToolChoice:
        """Force the tool `name`, optionally with fixed input."""
        return cls(
            type="function", function=ToolChoiceFunction(name=name, input=dict(arguments or {}))
        )


class InterruptEvent(_Request):
    """The workflow interrupt being answered (`interrupt_event_id` of a chatflow interrupt)."""

    id: str
    type: str = "chat"


class ActionParameters(_Request):
    """Parameters of a `resume` action."""

    interrupt_event: InterruptEvent


class Action(_Request):
    """A special operation for a run; today only `resume` (answer a workflow question)."""

    action_type: str
    parameters: ActionParameters

    @classmethod
    def resume(cls, interrupt_event_id: str, interrupt_type: str = "chat") -> Action:
        """The action that answers the chatflow interrupt `interrupt_event_id`."""
        return cls(
            action_type="resume",
            parameters=ActionParameters(
                interrupt_event=InterruptEvent(id=interrupt_event_id, type=interrupt_type)
            ),
        )


class RunRequest(_Request):
    """The body of `POST /v2/app/conversation/runs`: all 13 keys, always, in this order."""

    query: str = ""
    stream: bool = False
    conversation_id: str
    file_ids: list[str] = Field(default_factory=list)
    app_id: str
    tools: list[dict[str, Any]] = Field(default_factory=list)
    tool_outputs: list[ToolOutput] | None = None
    tool_choice: WireToolChoice | None = None
    end_user_id: str | None = None
    action: Action | None = None
    mcp_authorization: list[dict[str, Any]] | None = None
    parameters: dict[str, Any] | None = None
    custom_metadata: dict[str, Any] | None = None

    def to_wire(self) -> bytes:
        """The exact bytes appbuilder-sdk 1.1.5 sends (`json.dumps` defaults, ASCII escapes)."""
        return json.dumps(self.model_dump(mode="json")).encode("ascii")


class FeedbackRequest(_Request):
    """The body of `POST /v2/app/conversation/feedback` (nulls are dropped on the wire)."""

    app_id: str
    conversation_id: str
    message_id: str
    type: FeedbackType
    flag: list[str] | None = None
    reason: str | None = None

    def to_wire(self) -> bytes:
        """The JSON body, without the unset optional keys."""
        return json.dumps(self.model_dump(mode="json", exclude_none=True)).encode("ascii")


# --- responses ----------------------------------------------------------------------------------


class _Response(BaseModel):
    """Tolerant base: unknown keys ignored, `null` treated as "not sent" (field default)."""

    model_config = ConfigDict(extra="ignore")

    @model_validator(mode="before")
    @classmethod
    def _drop_nulls(cls, data: Any) -> Any:
        # Most payloads have no nulls: check before copying (this runs for every event).
        if isinstance(data, Mapping) and None in data.values():
            return {key: value for key, value in data.items() if value is not None}
        return data


class Usage(_Response):
    """Token usage of one model call (`name` is the model)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    name: str = ""


class FunctionCall(_Response):
    """The function part of a tool call.

    `arguments` is a dict when the server sent an object, or a JSON string that decodes to
    one; otherwise it keeps the string as sent. `raw_arguments` holds the original text
    whenever the server sent a string (it is not part of the wire format).
    """

    name: str = ""
    arguments: dict[str, Any] | str = Field(default_factory=dict)
    raw_arguments: str | None = Field(default=None, exclude=True)

    @model_validator(mode="before")
    @classmethod
    def _decode_arguments(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        data = dict(data)
        arguments = data.get("arguments")
        if isinstance(arguments, str):
            data["raw_arguments"] = arguments
            try:
                decoded = json.loads(arguments) if arguments.strip() else {}
            except ValueError:
                decoded = None  # keep the text; the dispatcher reports it to the agent
            if isinstance(decoded, dict):
                data["arguments"] = decoded
        elif arguments is not None and not isinstance(arguments, Mapping):
            # A bare number/list: keep it inspectable as JSON text rather than failing the run.
            data["arguments"] = json.dumps(arguments, ensure_ascii=False)
            data["raw_arguments"] = data["arguments"]
        return data


class ToolCallItem(_Response):
    """One entry of an event's `tool_calls`: `{"id", "type": "function", "function"}`."""

    id: str = ""
    type: str = "function"
    function: FunctionCall = Field(default_factory=FunctionCall)


class RunEvent(_Response):
    """One element of `content`: a step of the agent's run."""

    event_code: int | str = 0
    event_message: str = ""
    event_type: str = ""
    event_id: str = ""
    event_status: str = ""
    content_type: str = ""
    outputs: dict[str, Any] = Field(default_factory=dict)
    usage: Usage | None = None
    tool_calls: list[ToolCallItem] | None = None

    @model_validator(mode="before")
    @classmethod
    def _wrap_outputs(cls, data: Any) -> Any:
        if isinstance(data, Mapping):
            outputs = data.get("outputs")
            if outputs is not None and not isinstance(outputs, Mapping):
                # Seen from sloppy servers: a bare string; keep it where text usually lives.
                return {**data, "outputs": {"text": outputs}}
        return data

    @property
    def failed(self) -> bool:
        """True for `event_status == "error"` or a non-zero `event_code`."""
        return self.event_status == "error" or str(self.event_code).strip() not in ("", "0")

    @property
    def is_interrupt(self) -> bool:
        """True when the run paused at this event (tool calls or a workflow question)."""
        return self.event_status == "interrupt" or self.event_type.lower() == "interrupt"


class RunResponse(_Response):
    """A non-stream run body, and also each SSE payload of a stream (then `answer` is a delta).

    `code`/`message` are only present on error bodies ("in-band errors", HTTP 200).
    """

    request_id: str = ""
    date: str = ""
    answer: str = ""
    conversation_id: str = ""
    message_id: str = ""
    is_completion: bool | None = False
    content: list[RunEvent] = Field(default_factory=list)
    code: int | str | None = None
    message: str | None = None
    http_request_id: str | None = Field(default=None, exclude=True)
    """`X-Appbuilder-Request-Id` of the HTTP response that carried this (set by the client)."""

    @property
    def is_error(self) -> bool:
        """True for an in-band error: a non-zero top-level `code` and no events."""
        return _is_error_code(self.code) and not self.content


RunChunk = RunResponse
"""One payload of a streamed run (same shape as a non-stream body)."""


class ConversationResponse(_Response):
    """Answer of `POST /v2/app/conversation`."""

    request_id: str = ""
    conversation_id: str = ""
    code: int | str | None = None
    message: str | None = None


class FileUploadResponse(_Response):
    """Answer of `POST /v2/app/conversation/file/upload` (`id` is the file id)."""

    request_id: str = ""
    id: str = ""
    conversation_id: str = ""
    code: int | str | None = None
    message: str | None = None


class FeedbackResponse(_Response):
    """Answer of `POST /v2/app/conversation/feedback`."""

    request_id: str = ""
    code: int | str | None = None
    message: str | None = None


def _is_error_code(code: int | str | None) -> bool:
    return code is not None and str(code).strip() not in ("", "0")
