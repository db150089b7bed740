"""The bodies the HTTP API accepts and returns (they make up /openapi.json)."""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, field_validator

from bridge.errors import UsageError
from bridge.journal.records import (
    ApprovalRecord,
    CallRecord,
    ConversationRecord,
    DirectCallRecord,
    MessageRecord,
    PlatformConversationRecord,
)
from bridge.platforms.base import parse_tool_choice
from bridge.types import ToolChoice, ToolChoiceMode, ToolRun

__all__ = [
    "APPROVAL_ID_PATTERN",
    "CONVERSATION_ID_PATTERN",
    "MAX_NOTE_CHARS",
    "MAX_QUERY_CHARS",
    "ApprovalPage",
    "CallTool",
    "ConversationCreated",
    "ConversationDetail",
    "ConversationPage",
    "ConversationSummary",
    "CreateConversation",
    "DaemonInfo",
    "DecideApproval",
    "DirectCallPage",
    "ErrorBody",
    "ErrorInfo",
    "Health",
    "MessageResult",
    "Readiness",
    "ReloadResult",
    "SendMessage",
    "ToolInfo",
    "ToolList",
    "ToolSource",
    "text_problem",
    "title_of",
]

MAX_QUERY_CHARS = 16_000
CONVERSATION_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$"
_NAME_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"
APPROVAL_ID_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"
MAX_NOTE_CHARS = 2000


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid")


def text_problem(text: str) -> str | None:
    """Why `text` cannot be journaled nor answered (None when it can): a string holding a
    lone surrogate (JSON's ``"\\ud800"`` escape without its pair) is not text UTF-8 can
    encode. The one check of every string a request carries: pydantic makes it for typed
    fields (``query``), `CallTool` for the free-form tool arguments."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        code = ord(text[exc.start])
        return (
            f"holds a lone surrogate (U+{code:04X} at character {exc.start + 1}), which is not "
            "text; expected a string UTF-8 can encode (send a surrogate only as half of a "
            "pair, or the character itself)"
        )
    return None


def _untext(value: Any, where: str) -> str | None:
    """The first value in a JSON value that cannot be journaled and answered as it is, named
    by its path: a string (keys included) that `text_problem` refuses (``arguments.items[2].name
    holds a lone surrogate ...``), or ``NaN``/``Infinity`` (Python's JSON reader takes them;
    JSON has no such numbers, so the journal and the answer would show ``null`` while the tool
    got the number)."""
    stack: list[tuple[Any, str]] = [(value, where)]
    while stack:
        item, path = stack.pop()
        if isinstance(item, str):
            problem = text_problem(item)
            if problem is not None:
                return f"{path} {problem}"
        elif isinstance(item, float) and not math.isfinite(item):
            return (
                f"{path} is {item!r}, which JSON has no number for; expected a finite number "
                "(or a string, if the tool takes one)"
            )
        elif isinstance(item, dict):
            for key, inner in reversed(item.items()):
                name = str(key)
                problem = text_problem(name)
                if problem is not None:
                    return f"a key of {path} {problem}"
                stack.append((inner, f"{path}.{name}"))
        elif isinstance(item, list):
            stack.extend((inner, f"{path}[{i}]") for i, inner in reversed(list(enumerate(item))))
    return None


class ErrorInfo(BaseModel):
    """What went wrong."""

    code: str = Field(description="Stable machine-readable code, e.g. `conversation_busy`.")
    message: str = Field(description="What was wrong and what was expected.")
    request_id: str = Field(description="The daemon's request id (also in `X-Request-Id`).")
    platform_request_id: str | None = Field(
        default=None, description="The agent platform's request id, when it gave one."
    )
    details: dict[str, Any] | None = Field(
        default=None,
        description="Machine-readable specifics, e.g. `field`, `limit` and `actual` of a "
        "`platform_limit` error.",
    )


class ErrorBody(BaseModel):
    """Every error response has this shape."""

    error: ErrorInfo


class CreateConversation(_Request):
    """Open a conversation."""

    end_user_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=128,
        pattern=r"^[^\x00-\x1f]+$",
        description="Who the conversation is for; sent to the platform with every run.",
    )


class ConversationCreated(BaseModel):
    """A new conversation."""

    conversation_id: str
    end_user_id: str | None = None
    created_at: datetime


class SendMessage(_Request):
    """A user message: the query and how to answer it."""

    query: str = Field(min_length=1, max_length=MAX_QUERY_CHARS)
    stream: bool = Field(
        default=False, description="Answer with Server-Sent Events of the run's events."
    )
    tool_choice: ToolChoice | ToolChoiceMode | None = Field(
        default=None,
        description=(
            "Force the agent to call this tool: its name, or {name, input} to fix the call's "
            "arguments too (AppBuilder); auto, none, required are modes."
        ),
        json_schema_extra={"examples": ["get_weather", {"name": "get_weather", "input": {}}]},
    )

    @field_validator("tool_choice", mode="before")
    @classmethod
    def _tool_choice(cls, value: object) -> object:
        # One reading of a tool choice everywhere (Bridge, CLI, API), with its clear errors.
        try:
            choice = parse_tool_choice(value)
        except UsageError as exc:
            raise ValueError(str(exc)) from None
        if isinstance(choice, ToolChoice) and choice.input is not None:
            # The forced call's arguments: what cannot be journaled must not be sent.
            problem = _untext(choice.input, "tool_choice.input")
            if problem is not None:
                raise ValueError(problem)
        return choice


class MessageResult(BaseModel):
    """A finished run (the loop's `Result`)."""

    conversation_id: str
    message_id: int | None
    status: Literal["finished", "waiting_input"]
    answer: str
    rounds: int
    tool_runs: list[ToolRun]
    usage: dict[str, Any] | None = None
    request_ids: list[str] = Field(description="The platform's request ids of this run.")
    human_input_prompt: str | None = Field(
        default=None, description="Set when a workflow asks a question; answer with a message."
    )


TITLE_CHARS = 80


def title_of(messages: list[MessageRecord]) -> str | None:
    """A conversation's title: its first message, on one line, cut to `TITLE_CHARS`."""
    if not messages:
        return None
    text = " ".join(messages[0].query.split())
    return text if len(text) <= TITLE_CHARS else text[: TITLE_CHARS - 1].rstrip() + "…"


class ConversationSummary(ConversationRecord):
    """A conversation in a list: the journal's record and a title."""

    title: str | None = Field(
        default=None, description="Its first message, shortened (None before the first)."
    )


class ConversationPage(BaseModel):
    """One page of conversations, most recently updated first."""

    items: list[ConversationSummary]
    total: int
    limit: int
    offset: int


class ConversationDetail(BaseModel):
    """A conversation with its messages and tool calls."""

    conversation: ConversationRecord
    title: str | None = Field(default=None, description="Its first message, shortened.")
    busy: bool = Field(description="True while a run is in progress.")
    messages: list[MessageRecord]
    tool_calls: list[CallRecord]
    platform_conversations: list[PlatformConversationRecord] = Field(
        default_factory=list,
        description="Every platform conversation it ran in, oldest first: a new one is opened "
        "when an interrupted run left the previous one waiting for calls the bridge never saw.",
    )


class ToolSource(BaseModel):
    """Where a tool comes from."""

    kind: Literal["python", "http", "openapi", "mcp"] = Field(
        description="A Python function, an HTTP tools manifest, an OpenAPI document, or an MCP "
        "server."
    )
    location: str = Field(
        description="The module and function, the manifest file, the document, or the server's "
        "command or URL."
    )


class ToolInfo(BaseModel):
    """One loaded tool."""

    name: str
    description: str
    parameters: dict[str, Any]
    idempotent: bool
    confirm: bool
    read_only: bool = False
    timeout: float | None
    origin: str
    source: ToolSource
    title: str | None = None
    toolkit: str | None = Field(None, description="The toolkit this tool is one API of, if any.")
    toolkit_description: str | None = Field(None, description="That toolkit's own description.")


class CallTool(_Request):
    """Run one tool directly (the console's "try it"), outside any conversation."""

    arguments: dict[str, Any] = Field(default_factory=dict)
    # Strict: "yes", 1 or "on" are not a person's explicit decision to run a confirm tool.
    confirm: StrictBool = Field(
        default=False,
        description="Required (true) for a confirm=True tool: the caller is the person who "
        "decides.",
    )

    @field_validator("arguments")
    @classmethod
    def _text(cls, value: dict[str, Any]) -> dict[str, Any]:
        # Refused before the tool runs: what cannot be journaled and answered must not act.
        problem = _untext(value, "arguments")
        if problem is not None:
            raise ValueError(problem)
        return value


class DirectCallPage(BaseModel):
    """Tool calls made directly (``POST /v1/tools/{name}/call``), newest first."""

    items: list[DirectCallRecord]
    total: int = Field(description="How many the journal holds (the page may hold fewer).")


class DaemonInfo(BaseModel):
    """What this daemon is and whom it talks to (never a token or key)."""

    version: str
    platform: str = Field(description="The adapter: appbuilder or openai.")
    base_url: str | None = Field(description="The platform's URL.")
    app_id: str | None = Field(default=None, description="The AppBuilder app, if any.")
    model: str | None = Field(default=None, description="The model of an OpenAI-compatible server.")
    is_emulator: bool = Field(description="True when the platform is toolbridge's emulator.")
    tools: int
    generation: int
    started_at: datetime
    draining: bool
    in_flight: int
    approvals_pending: int
    auth: bool = Field(description="True when requests need an API key.")


class ToolList(BaseModel):
    """The current toolbox."""

    tools: list[ToolInfo]
    generation: int = Field(description="Goes up by one with every successful reload.")
    loaded_at: datetime
    specs: list[str]
    last_reload_error: str | None = None


class ReloadResult(BaseModel):
    """A successful reload."""

    generation: int
    tools: list[str]


class Health(BaseModel):
    """Liveness."""

    status: Literal["ok"] = "ok"
    replica: str = Field(
        description="This daemon's replica id (`--replica-id`; default host:port), the name "
        "other replicas on a shared journal and the message records know it by."
    )


class Readiness(BaseModel):
    """Readiness: serving, or why not."""

    status: Literal["ready", "draining"]
    tools: int
    in_flight: int
    recovering: int = Field(description="Interrupted messages still being resumed.")


class ApprovalPage(BaseModel):
    """Approvals, newest first."""

    items: list[ApprovalRecord]
    total: int = Field(description="How many match the filters (the page may hold fewer).")


class DecideApproval(_Request):
    """A person's decision about one pending approval."""

    decision: Literal["approve", "reject"]
    note: str = Field(
        default="",
        max_length=MAX_NOTE_CHARS,
        description="Why; with a rejection the model reads it as the tool's output.",
    )
