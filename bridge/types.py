"""The neutral vocabulary every layer speaks.

Platforms turn their wire formats into these events; the loop, the dispatcher, the daemon and
the CLI only ever see these types. This module imports nothing from the rest of `bridge`.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "ErrorKind",
    "Event",
    "EventTally",
    "HumanInputRequested",
    "Other",
    "RunFailed",
    "RunFinished",
    "TextDelta",
    "ToolBatch",
    "ToolCall",
    "ToolCallFinished",
    "ToolCallStarted",
    "ToolCallsRequested",
    "ToolChoice",
    "ToolChoiceMode",
    "ToolResult",
    "ToolRun",
]

ErrorKind = Literal["unknown_tool", "invalid_arguments", "tool_error", "timeout", "rejected"]
"""Why a tool run did not produce a normal output (None on `ToolRun.error` means it did)."""


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)


class ToolCall(_Frozen):
    """One call the agent asked for.

    `arguments` is what the platform sent: usually a dict, sometimes a JSON string (OpenAI-style
    platforms, or a sloppy server). `raw_arguments` keeps the original text when there was one.
    """

    call_id: str
    name: str
    arguments: dict[str, Any] | str = Field(default_factory=dict)
    raw_arguments: str | None = None

    def arguments_dict(self) -> dict[str, Any]:
        """The arguments as a dict; raises `ValueError` when they are not a JSON object."""
        if isinstance(self.arguments, dict):
            return self.arguments
        text = self.arguments.strip()
        if not text:
            return {}
        value = json.loads(text)
        if not isinstance(value, dict):
            raise ValueError(f"expected a JSON object, got {type(value).__name__}")
        return value


class ToolChoice(_Frozen):
    """The tool the agent must call, and optionally the arguments it must call it with.

    AppBuilder sends `input` as the forced call's arguments (`tool_choice.function.input`);
    OpenAI-compatible servers can force a tool but not its arguments.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    name: str = Field(min_length=1)
    input: dict[str, Any] | None = None


ToolChoiceMode = Literal["auto", "none", "required"]
"""A tool choice that names no tool: the agent decides, calls none, or must call one."""


class ToolBatch(_Frozen):
    """One pause of the remote run: every call in it must be answered in a single submission."""

    batch_id: str
    calls: tuple[ToolCall, ...]
    resume: dict[str, Any] = Field(default_factory=dict)
    """Platform ids needed to submit the outputs (JSON-serialisable)."""


class ToolResult(_Frozen):
    """The output sent back to the agent for one call."""

    call_id: str
    output: str
    is_error: bool = False


class ToolRun(_Frozen):
    """The dispatcher's record of one call: what was asked, what came back, how long it took."""

    call_id: str
    name: str
    arguments: dict[str, Any] | str
    output: str
    error: ErrorKind | None = None
    started_at: datetime
    duration_ms: float
    value: Any = Field(default=None, exclude=True, repr=False)
    """The raw Python value the tool returned (after `after`), before it became `output`; None
    when the call did not return. Never serialised: journals and the wire see `output`."""

    def to_result(self) -> ToolResult:
        """The output to submit for this run."""
        return ToolResult(call_id=self.call_id, output=self.output, is_error=self.error is not None)


# --- events a platform emits ------------------------------------------------------------------


class TextDelta(_Frozen):
    """A piece of the answer as it streams in."""

    kind: Literal["text_delta"] = "text_delta"
    text: str


class ToolCallsRequested(_Frozen):
    """The agent paused and wants these tools run."""

    kind: Literal["tool_calls"] = "tool_calls"
    batch: ToolBatch


class HumanInputRequested(_Frozen):
    """A workflow paused for a person's answer (AppBuilder chatflow interrupt)."""

    kind: Literal["human_input"] = "human_input"
    interrupt_id: str
    interrupt_type: str = "chat"
    prompt: str = ""
    request_id: str | None = None
    """The platform's id of the request that paused (for support tickets, like any run's)."""
    raw: Any = None


class RunFinished(_Frozen):
    """The run ended normally."""

    kind: Literal["finished"] = "finished"
    answer: str = ""
    usage: dict[str, Any] | None = None
    message_id: str | None = None
    request_id: str | None = None
    raw: Any = None


class RunFailed(_Frozen):
    """The run ended with an error reported by the platform (event-level or in-band)."""

    kind: Literal["failed"] = "failed"
    code: str
    message: str
    request_id: str | None = None
    raw: Any = None


class Other(_Frozen):
    """Anything else the platform said (status events, references, reasoning...)."""

    kind: Literal["other"] = "other"
    raw: Any = None


# --- events the loop adds for its listeners ------------------------------------------------------


class ToolCallStarted(_Frozen):
    """The loop is about to run one tool call."""

    kind: Literal["tool_call_started"] = "tool_call_started"
    call: ToolCall


class ToolCallFinished(_Frozen):
    """One tool call finished (successfully or not)."""

    kind: Literal["tool_call_finished"] = "tool_call_finished"
    run: ToolRun


Event = (
    TextDelta
    | ToolCallsRequested
    | HumanInputRequested
    | RunFinished
    | RunFailed
    | Other
    | ToolCallStarted
    | ToolCallFinished
)
"""Everything a run can yield: the platform's events and the loop's own."""


class EventTally:
    """What a run's events add up to: answer text, tool runs, request ids, the last word.

    The loop's `Result`, the journal's record of a message and the daemon's HTTP answer are all
    built from the same events by the same rules; this is those rules.
    """

    def __init__(self) -> None:
        self.text: list[str] = []
        self.runs: list[ToolRun] = []
        self.request_ids: list[str] = []
        """Every platform request id seen, in order, once each."""
        self.end: RunFinished | RunFailed | HumanInputRequested | None = None
        """The event the run ended on, if it ended normally."""

    def see(self, event: Event) -> None:
        """Take note of one event."""
        found: object = None
        if isinstance(event, TextDelta):
            self.text.append(event.text)
        elif isinstance(event, ToolCallFinished):
            self.runs.append(event.run)
        elif isinstance(event, ToolCallsRequested):
            found = event.batch.resume.get("request_id")
        elif isinstance(event, RunFinished | RunFailed | HumanInputRequested):
            self.end = event
            found = getattr(event, "request_id", None)
        if isinstance(found, str) and found and found not in self.request_ids:
            self.request_ids.append(found)

    @property
    def answer(self) -> str:
        """The streamed text, or the final event's answer when nothing streamed."""
        text = "".join(self.text)
        if not text and isinstance(self.end, RunFinished):
            return self.end.answer
        return text
