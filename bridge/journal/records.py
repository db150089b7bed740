"""The journal's records: what a store writes down and gives back (see `bridge.journal`)."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from bridge.errors import (
    BridgeError,
    UsageError,
    redact,
    redact_data,
    redacts_nothing_in_json,
    valid_text,
)
from bridge.types import ErrorKind, ToolBatch, ToolRun

__all__ = [
    "INTERRUPTED_CODE",
    "INTERRUPTED_MESSAGE",
    "ApprovalDecidedError",
    "ApprovalRecord",
    "ApprovalStatus",
    "CallRecord",
    "CallState",
    "ConversationRecord",
    "DirectCallRecord",
    "JournalUnavailableError",
    "Lease",
    "LeaseHeldError",
    "LeaseLostError",
    "MessageEnd",
    "MessageRecord",
    "MessageStatus",
    "PendingBatch",
    "PlatformConversationRecord",
    "PlatformStateRecord",
    "StateSnapshot",
    "now",
    "redacted_arguments",
    "redacted_state",
    "redacted_state_json",
]

CallState = Literal["received", "started", "finished", "submitting", "submitted"]
MessageStatus = Literal["running", "finished", "failed", "waiting_input"]
ApprovalStatus = Literal["pending", "approved", "rejected", "expired"]

INTERRUPTED_CODE = "interrupted"
INTERRUPTED_MESSAGE = (
    "the bridge restarted while the agent was answering, so the answer was lost (tool outputs "
    "are never sent twice); ask again"
)
"""How a message ends when a restart lost the agent's answer stream."""


def now() -> datetime:
    """The current UTC time (journal timestamps are timezone-aware)."""
    return datetime.now(timezone.utc)


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True)


class ConversationRecord(_Record):
    """A conversation as the journal knows it."""

    conversation_id: str
    end_user_id: str | None = None
    created_at: datetime
    updated_at: datetime
    status: MessageStatus | Literal["new"] = "new"
    """The status of its latest message ("new" before the first one)."""
    messages: int = 0
    platform_conversation_id: str | None = None
    """The platform conversation it continues in now (its own id unless one was replaced)."""
    created_by: str | None = None
    """The caller who created it (its owner); None for one created before callers existed."""

    @property
    def platform_id(self) -> str:
        """The platform's id for this conversation today (its own id unless replaced)."""
        return self.platform_conversation_id or self.conversation_id


class PlatformConversationRecord(_Record):
    """One platform conversation a conversation ran in, and why it was opened."""

    platform_conversation_id: str
    created_at: datetime
    reason: str = ""
    """Empty for the first one; for a replacement, what the old one refused."""


class StateSnapshot(_Record):
    """What a platform adapter needs to continue one platform conversation in another process
    (`bridge.platforms.base.export_state_of`), as written to the journal."""

    platform_conversation_id: str
    platform: str
    """The adapter's name: a state is only given back to the same kind of platform."""
    state: dict[str, Any]
    """JSON values; strings are written with registered secrets masked (`redacted_state`)."""
    writer: str = ""
    """Who wrote it (a `Bridge`'s token): a reader that wrote the latest state holds it already."""

    _json: str | None = PrivateAttr(default=None)
    """The JSON text `state` was read from (`from_json`), None for a snapshot built from a
    dict: a journal writes that text as it is when there is nothing in it to mask."""

    @classmethod
    def from_json(
        cls, text: str, *, platform_conversation_id: str, platform: str, writer: str = ""
    ) -> StateSnapshot:
        """A snapshot of the state `text` holds (written by `json.dumps` with
        ``ensure_ascii=False, allow_nan=False``, as `bridge.platforms.base.export_state_json`
        writes it); the journal need not encode it again."""
        state = json.loads(text)
        if cls is not StateSnapshot or not (
            type(state) is dict
            and type(platform_conversation_id) is str
            and type(platform) is str
            and type(writer) is str
        ):
            snapshot = cls(
                platform_conversation_id=platform_conversation_id,
                platform=platform,
                state=state,
                writer=writer,
            )
            snapshot._json = text
            return snapshot
        # Each value has its field's type already: built as validation would build it, without
        # validating again (the loop makes one per platform round).
        snapshot = object.__new__(cls)
        values = {
            "platform_conversation_id": platform_conversation_id,
            "platform": platform,
            "state": state,
            "writer": writer,
        }
        object.__setattr__(snapshot, "__dict__", values)
        object.__setattr__(snapshot, "__pydantic_fields_set__", set(values))
        object.__setattr__(snapshot, "__pydantic_extra__", None)
        object.__setattr__(snapshot, "__pydantic_private__", {"_json": text})
        return snapshot


class PlatformStateRecord(StateSnapshot):
    """The latest state journaled for one platform conversation."""

    conversation_id: str
    updated_at: datetime


class MessageRecord(_Record):
    """One user query and how its run ended."""

    message_id: int
    conversation_id: str
    query: str
    status: MessageStatus
    answer: str = ""
    error_code: str | None = None
    error_message: str | None = None
    request_ids: list[str] = Field(default_factory=list)
    rounds: int = 0
    created_at: datetime
    finished_at: datetime | None = None
    interrupt_id: str | None = None
    """With status "waiting_input": the pause to resume, so another process can answer it."""
    platform_settled: bool = True
    """False unless the run ended with an answer or a question (a crash, a lost stream, an
    error of the bridge or of the platform): the platform may still be waiting for something
    (tool outputs it asked for), so a refused next query moves to a new platform conversation."""
    sent_by: str | None = None
    """Who sent the query: the name of the daemon API key it came with (None without keys)."""
    replica: str | None = None
    """The daemon replica that ran it (the last one, after a failover); None outside a daemon."""
    traceparent: str | None = None
    """The W3C ``traceparent`` of its run's span (None when it was not traced): a run resumed
    after a crash, or on another replica, continues that trace."""


class MessageEnd(_Record):
    """How a message's run ended: what `Journal.end_message` writes onto its `MessageRecord`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    status: MessageStatus
    answer: str = ""
    error_code: str | None = None
    error_message: str | None = None
    request_ids: tuple[str, ...] = ()
    rounds: int = 0
    interrupt_id: str | None = None
    """With status "waiting_input": the human-input pause to resume."""
    platform_settled: bool = True
    """The run ended with an answer or a question (see `MessageRecord.platform_settled`)."""


class CallRecord(_Record):
    """One tool call and the furthest state it reached."""

    conversation_id: str
    call_id: str
    message_id: int | None = None
    name: str
    arguments: dict[str, Any] | str
    state: CallState
    output: str | None = None
    error: ErrorKind | None = None
    started_at: datetime | None = None
    duration_ms: float | None = None
    updated_at: datetime
    traceparent: str | None = None
    """The W3C ``traceparent`` of the span of its (last) execution, written when it started
    (None when it was not traced): a run again after a crash links to it."""

    @property
    def done(self) -> bool:
        """True once the call has an output (finished, submitting or submitted)."""
        return self.state in ("finished", "submitting", "submitted")

    def to_run(self) -> ToolRun:
        """The `ToolRun` of a finished call (KeyError-free: callers check `done`)."""
        return ToolRun(
            call_id=self.call_id,
            name=self.name,
            arguments=self.arguments,
            output=self.output or "",
            error=self.error,
            started_at=self.started_at or self.updated_at,
            duration_ms=self.duration_ms or 0.0,
        )


class ApprovalRecord(_Record):
    """A person's decision about one call of a `confirm=True` tool, asked for or taken."""

    approval_id: str
    conversation_id: str
    message_id: int | None = None
    call_id: str
    tool: str
    arguments: dict[str, Any] | str
    """The call's arguments, registered secrets masked."""
    arguments_digest: str
    """SHA-256 of the tool name and the exact arguments: the decision binds these only."""
    requested_by: str | None = None
    """Who sent the message whose run asked (the API key's name; None without keys)."""
    requested_at: datetime
    deadline: datetime
    """Past this, a pending request is expired (rejected) instead of decided."""
    status: ApprovalStatus
    decided_by: str | None = None
    """Who decided (the API key's name, "anonymous" without keys); None when it expired."""
    decided_at: datetime | None = None
    note: str = ""
    """The person's note (the model reads it with a rejection), or why it expired."""


class DirectCallRecord(_Record):
    """One tool call made directly (the daemon's ``POST /v1/tools/{name}/call``), outside any
    conversation: who called what, when, and how it ended."""

    call_id: str
    tool: str
    arguments: dict[str, Any] | str
    """The call's arguments, registered secrets masked."""
    called_by: str | None = None
    """Who called (the API key's name, "anonymous" without keys)."""
    approved_by: str | None = None
    """For a `confirm=True` tool: who approved the call. The caller's ``"confirm": true`` is
    that person's decision, so it is the caller; None for other tools."""
    state: Literal["started", "finished"]
    """"started" is written before the tool runs: a call left so by a crash may have acted."""
    output: str | None = None
    """The tool's output, registered secrets masked (None until it finished)."""
    error: ErrorKind | None = None
    started_at: datetime
    duration_ms: float | None = None
    finished_at: datetime | None = None


class ApprovalDecidedError(BridgeError):
    """Only a pending approval can be decided: this one was decided already, or expired."""

    def __init__(self, record: ApprovalRecord) -> None:
        by = f" by {record.decided_by}" if record.decided_by else ""
        when = f" at {record.decided_at.isoformat()}" if record.decided_at else ""
        super().__init__(f"approval {record.approval_id} is already {record.status}{by}{when}")
        self.record = record


class JournalUnavailableError(UsageError):
    """The journal's database could not be reached or refused the statement (a server down,
    restarting, out of connections): nothing was written; the step can be tried again."""


class Lease(_Record):
    """One replica's right to run (and write) a conversation, until it expires.

    `generation` grows by one every time the lease is taken, by anyone: a write checks it, so
    a replica that lost the lease (paused past its expiry, cut off from the database) can no
    longer write what another replica now runs (fencing).
    """

    conversation_id: str
    owner: str
    generation: int


class LeaseHeldError(BridgeError):
    """Another replica holds the conversation's lease (it is running a message there)."""

    def __init__(self, conversation_id: str, owner: str | None, seconds_left: float) -> None:
        if owner is None or seconds_left <= 0:
            gone = f"replica {owner}" if owner else "a replica"
            text = (
                f"conversation {conversation_id} has a message that {gone} left unfinished when "
                "it stopped; another replica is about to take it over and finish it"
            )
        else:
            text = (
                f"conversation {conversation_id} is being answered by replica {owner} (its "
                f"lease runs {seconds_left:.1f} s more unless renewed)"
            )
        super().__init__(text)
        self.conversation_id = conversation_id
        self.owner = owner
        self.seconds_left = seconds_left


class LeaseLostError(BridgeError):
    """This replica no longer holds the lease it wrote under: another one took the
    conversation over (this one paused, or lost the database, for longer than the lease)."""

    def __init__(self, conversation_id: str, held: int | None, owner: str | None) -> None:
        by = f"replica {owner}" if owner else "another replica"
        super().__init__(
            f"conversation {conversation_id}: this replica's lease was taken over by {by}, "
            "which continues the message; nothing more is written from here (if no replica "
            "failed, raise --lease-seconds: this one was paused or cut off from the database "
            "for longer)"
        )
        self.conversation_id = conversation_id
        self.held = held
        self.owner = owner


class PendingBatch(_Record):
    """A message's latest tool batch that the platform has not accepted yet."""

    batch: ToolBatch
    submitting: bool
    """True when its outputs were being posted: they may already have arrived."""


def redacted_arguments(arguments: dict[str, Any] | str) -> dict[str, Any] | str:
    """The arguments with registered secrets masked (JSON round trip keeps the shape), as
    text every store can hold (`valid_text`: a lone surrogate becomes U+FFFD)."""
    if isinstance(arguments, str):
        return redact(valid_text(arguments))
    text = json.dumps(arguments, ensure_ascii=False, default=str)
    masked = redact(valid_text(text))
    if masked == text:
        return arguments
    try:
        value = json.loads(masked)
    except json.JSONDecodeError:
        return masked
    return value if isinstance(value, dict) else masked


def redacted_state_json(snapshot: StateSnapshot) -> str:
    """`snapshot.state` as JSON text with registered secrets masked (`redacted_state`).

    A snapshot read from JSON text (`StateSnapshot.from_json`) whose text holds nothing
    `redact` would mask (`redacts_nothing_in_json`) is that text: the same as masking and
    encoding its state again, without the work.

    Raises:
        TypeError, ValueError: the state is not JSON (as `json.dumps` raises them).
    """
    text = snapshot._json
    if text is not None and redacts_nothing_in_json(text):
        return text
    return json.dumps(redacted_state(snapshot.state), ensure_ascii=False, allow_nan=False)


def redacted_state(state: Any) -> Any:
    """A JSON value with registered secrets masked in every string (keys included).

    String by string rather than on the serialised text: a mask must never eat a quote and
    leave JSON that cannot be read back. Each string goes through `redact_data` (what
    `redact(valid_text(...))` gives, remembering the short strings found clean: a state's keys,
    names and schema are the same at every save).
    """
    if isinstance(state, str):
        return redact_data(state)
    if isinstance(state, dict):
        return {redact_data(str(key)): redacted_state(value) for key, value in state.items()}
    if isinstance(state, list | tuple):
        return [redacted_state(value) for value in state]
    return state
