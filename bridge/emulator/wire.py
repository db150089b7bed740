"""The emulator's side of the AppBuilder wire: request models and response builders.

Request bodies are validated with pydantic so that a malformed request gets a 400 naming the
field and what was expected. Responses are plain dicts shaped like docs/wire/appbuilder.md
("The answer"), built here so the rest of the emulator never spells a wire key.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

__all__ = [
    "ERROR_CODES",
    "MAX_QUERY_CHARS",
    "TOOL_NAME_PATTERN",
    "Action",
    "ActionParameters",
    "AppListQuery",
    "CreateConversationRequest",
    "DescribeAppRequest",
    "DescribeAppsRequest",
    "FeedbackRequest",
    "FunctionSpec",
    "InterruptEvent",
    "RunRequest",
    "ToolChoiceFunction",
    "ToolOutputItem",
    "ToolSpec",
    "WireToolChoice",
    "chunk",
    "encode_json",
    "error_body",
    "event",
    "format_validation_error",
    "schema_problems",
    "usage",
]

MAX_QUERY_CHARS = 2000
"""The documented limit on `query` length."""

TOOL_NAME_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"

ERROR_CODES: dict[int, str] = {
    400: "InvalidRequestError",
    401: "PermissionDeniedError",
    403: "PermissionDeniedError",
    404: "NotFoundError",
    405: "MethodNotAllowedError",
    409: "ConflictError",
    413: "RequestTooLargeError",
    429: "TooManyRequestsError",
    500: "InternalServerError",
    502: "BadGatewayError",
    503: "ServiceUnavailableError",
    504: "GatewayTimeoutError",
}
"""Platform error `code` per HTTP status; only 401's `PermissionDeniedError` is documented."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class FunctionSpec(BaseModel):
    """The `function` of a tool: name, description and parameter schema."""

    model_config = ConfigDict(extra="ignore", strict=True)

    name: str = Field(pattern=TOOL_NAME_PATTERN)
    description: str | None = None
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})


class ToolSpec(BaseModel):
    """One entry of `tools`; only `type: function` tools are planned with."""

    model_config = ConfigDict(extra="ignore", strict=True)

    type: str = "function"
    function: FunctionSpec | None = None

    @model_validator(mode="after")
    def _function_needs_spec(self) -> ToolSpec:
        if self.type == "function" and self.function is None:
            raise ValueError("a tool of type 'function' needs a 'function' object")
        return self


class ToolOutputItem(_Strict):
    """One entry of `tool_outputs`: the answer to one pending tool call."""

    tool_call_id: str = Field(min_length=1)
    output: str


class ToolChoiceFunction(_Strict):
    """The tool forced by `tool_choice`."""

    name: str = Field(min_length=1)
    input: dict[str, Any] = Field(default_factory=dict)


class WireToolChoice(_Strict):
    """`tool_choice`: `auto`, or `function` with the tool to call (AppBuilder's wire form of a
    tool choice, as the server reads it; the neutral one is `bridge.types.ToolChoice`)."""

    type: Literal["auto", "function"]
    function: ToolChoiceFunction | None = None

    @model_validator(mode="after")
    def _function_when_forced(self) -> WireToolChoice:
        if self.type == "function" and self.function is None:
            raise ValueError("tool_choice of type 'function' needs 'function': {'name': ...}")
        return self


class InterruptEvent(_Strict):
    """The chatflow interrupt a `resume` answers."""

    id: str = Field(min_length=1)
    """The ``interrupt_event_id`` of the ``chatflow_interrupt`` event."""
    type: Literal["chat"]
    """Always ``chat`` (the SDK: "当前仅chat")."""


class ActionParameters(_Strict):
    """The parameters of a `resume` action."""

    interrupt_event: InterruptEvent


class Action(_Strict):
    """`action`: ``resume`` answers a workflow's question (docs/wire/appbuilder.md)."""

    action_type: Literal["resume"]
    parameters: ActionParameters


class RunRequest(_Strict):
    """The body of `POST /v2/app/conversation/runs` (docs/wire/appbuilder.md, "The run request")."""

    app_id: str = Field(min_length=1)
    conversation_id: str = Field(min_length=1)
    query: str | None = ""
    stream: bool | None = False
    file_ids: list[str] | None = None
    tools: list[ToolSpec] | None = None
    tool_outputs: list[ToolOutputItem] | None = None
    tool_choice: WireToolChoice | None = None
    end_user_id: str | None = Field(default=None, min_length=6, max_length=64)
    action: Action | None = None
    mcp_authorization: list[dict[str, Any]] | None = None
    parameters: dict[str, Any] | None = None
    custom_metadata: dict[str, Any] | None = None

    @field_validator("query")
    @classmethod
    def _query_length(cls, value: str | None) -> str | None:
        if value is not None and len(value) > MAX_QUERY_CHARS:
            raise ValueError(f"query has {len(value)} characters; at most {MAX_QUERY_CHARS}")
        return value

    @model_validator(mode="after")
    def _query_or_outputs(self) -> RunRequest:
        if self.action is not None and self.tool_outputs:
            raise ValueError(
                "action (resume a question) and tool_outputs (answer tool calls) exclude each "
                "other; send one of them"
            )
        if self.action is not None and not self.query:
            raise ValueError("action resume needs the person's reply in query, which is empty")
        if not self.query and not self.tool_outputs:
            raise ValueError("query and tool_outputs cannot both be empty")
        names = [t.function.name for t in self.tools or [] if t.function is not None]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"tool names must be unique in a run; repeated: {duplicates}")
        return self


class CreateConversationRequest(BaseModel):
    """The body of `POST /v2/app/conversation`."""

    model_config = ConfigDict(extra="ignore", strict=True)

    app_id: str = Field(min_length=1)


class FeedbackRequest(_Strict):
    """The body of `POST /v2/app/conversation/feedback`."""

    app_id: str = Field(min_length=1)
    conversation_id: str = Field(min_length=1)
    message_id: str = Field(min_length=1)
    type: Literal["upvote", "downvote", "cancel"]
    flag: list[str] | None = None
    reason: str | None = None


class DescribeAppsRequest(BaseModel):
    """The body of `POST /v2/app?Action=DescribeApps` (as SDK 1.1.5 sends it)."""

    model_config = ConfigDict(extra="ignore", strict=True)

    maxKeys: int = Field(default=10, ge=1, le=100)  # noqa: N815 (the wire's spelling)
    marker: str | None = None
    """An app id: the page starts after it."""


class DescribeAppRequest(BaseModel):
    """The body of `POST /v2/app?Action=DescribeApp`."""

    model_config = ConfigDict(extra="ignore", strict=True)

    id: str = Field(min_length=1)


class AppListQuery(BaseModel):
    """The query string of `GET /v2/apps` (deprecated by the platform, still in the SDK)."""

    model_config = ConfigDict(extra="ignore")

    limit: int = Field(default=10, ge=1, le=100)
    after: str = ""
    """An app id: the page starts after it."""
    before: str = ""
    """An app id: the page ends before it."""


def format_validation_error(exc: ValidationError) -> str:
    """One line per problem, `field.path: what was wrong`, joined with '; '."""
    parts = []
    for err in exc.errors(include_url=False):
        loc = _format_loc(err.get("loc", ()))
        # A validator's own message reads better without pydantic's prefix.
        msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
        if err.get("type") == "extra_forbidden":
            msg = "unknown field (not part of the AppBuilder API)"
        elif err.get("type") == "missing":
            msg = "required field is missing"
        parts.append(f"{loc}: {msg}" if loc else msg)
    return "; ".join(parts)


def _format_loc(loc: tuple[Any, ...] | list[Any]) -> str:
    text = ""
    for item in loc:
        if isinstance(item, int):
            text += f"[{item}]"
        else:
            text += f".{item}" if text else str(item)
    return text


def schema_problems(schema: Any, path: str) -> list[str]:
    """Places where a tool's parameter schema breaks AppBuilder's documented rules.

    Every `object` needs `properties` and every `array` needs `items`; anything else is left to
    the planner. Python-type-string manifests of the official SDK (`"type": "str"`) pass.
    """
    problems: list[str] = []
    if isinstance(schema, dict):
        kind = schema.get("type")
        if kind == "object" and not isinstance(schema.get("properties"), dict):
            problems.append(f"{path}: an object schema needs 'properties'")
        if kind == "array" and not isinstance(schema.get("items"), dict):
            problems.append(f"{path}: an array schema needs 'items'")
        for key, sub in schema.items():
            if key == "properties" and isinstance(sub, dict):
                for name, prop in sub.items():
                    problems.extend(schema_problems(prop, f"{path}.properties.{name}"))
            elif key in ("items", "additionalProperties") and isinstance(sub, dict):
                problems.extend(schema_problems(sub, f"{path}.{key}"))
            elif key in ("anyOf", "oneOf", "allOf") and isinstance(sub, list):
                for i, option in enumerate(sub):
                    problems.extend(schema_problems(option, f"{path}.{key}[{i}]"))
    return problems


def error_body(
    request_id: str, status: int, message: str, code: str | None = None
) -> dict[str, Any]:
    """The platform's error body: `{"request_id", "code", "message"}`."""
    return {
        "request_id": request_id,
        "code": code or ERROR_CODES.get(status, "EmulatorError"),
        "message": message,
    }


def usage(prompt_tokens: int, completion_tokens: int, model: str) -> dict[str, Any]:
    """A usage object as carried by text events."""
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "name": model,
    }


def event(
    *,
    event_id: str,
    event_type: str,
    status: str,
    content_type: str,
    outputs: dict[str, Any],
    usage: dict[str, Any] | None = None,
    tool_calls: list[dict[str, Any]] | None = None,
    code: int = 0,
    message: str = "",
) -> dict[str, Any]:
    """One entry of a chunk's `content`, keys in the platform's order."""
    body: dict[str, Any] = {
        "event_code": code,
        "event_message": message,
        "event_type": event_type,
        "event_id": event_id,
        "event_status": status,
        "content_type": content_type,
        "outputs": outputs,
        "usage": usage,
    }
    if tool_calls is not None:
        body["tool_calls"] = tool_calls
    return body


def chunk(
    *,
    request_id: str,
    conversation_id: str,
    message_id: str,
    answer: str,
    content: list[dict[str, Any]],
    is_completion: bool = False,
) -> dict[str, Any]:
    """A whole response body (non-stream) or one SSE payload (stream)."""
    return {
        "request_id": request_id,
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "answer": answer,
        "conversation_id": conversation_id,
        "message_id": message_id,
        "is_completion": is_completion,
        "content": content,
    }


def encode_json(value: Any) -> bytes:
    """Compact UTF-8 JSON, non-ASCII kept as is (as the platform sends it)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
