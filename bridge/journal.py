"""The journal: what the loop writes down before each step, so a crash loses nothing.

    conversation ── message (a user query: running -> finished | failed | waiting_input)
                      └── tool call   received -> started -> finished(output)
                                        -> submitting -> submitted

Each state is written at the moment that makes recovery exact: a call is `received` when its
batch arrives, `started` right before its function may run (one call at a time, as each
really starts), `finished` with its output as soon as it returns, `submitting` before the
outputs are posted and `submitted` once the platform accepted them. After a crash (even
`kill -9`) the journal therefore says, for every call, what may have happened:

- `submitted`: the platform has its output; nothing is sent again;
- `submitting`: it ran; its output may or may not have reached the platform, so recovery posts
  the recorded output again, and a platform answer that the calls are no longer pending
  counts as delivered (the platform validates call ids, so it never accepts an output twice);
- `finished`: it ran; its recorded output is sent, it never runs twice;
- `started`: it may have run; it runs again only if its tool is `idempotent=True`, otherwise
  it gets an output saying it was interrupted by a restart (see `Ledger.plan`);
- `received`: it never ran; it simply runs.

A conversation's platform side can be lost with a crash (the agent may have asked for calls
in a stream nobody read, or a failed run left its calls pending): a message whose run did not
end with an answer or a question is recorded as not `platform_settled`, and the next message
may then continue in a new platform conversation (`Journal.replace_platform_conversation`);
the journal keeps that history.

A platform that keeps a conversation's state in the process (Chat Completions' history) has it
journaled too, the latest per platform conversation (`StateSnapshot`, `save_platform_state`):
with the batch that it has pending (in the same transaction as "received") and when a run ends
or pauses for a person, so that recovery and another process on the same journal continue
with it (`bridge.conversation`).

`Journal` is the interface (another store can replace SQLite later); `MemoryJournal` (in
`bridge._journal_memory`) is the library default, `SQLiteJournal` (in `bridge._journal_sqlite`)
the durable one; both are importable from here. `Ledger` is one
conversation's view, used by `bridge.conversation`. Text written to a journal goes through
`bridge.errors.redact`, so registered secrets (tokens, API keys) are never stored.

Approvals: a call of a `confirm=True` tool that waits for a person is an `ApprovalRecord`,
pending -> approved | rejected | expired, bound to its call id and a hash of its exact arguments
(`bridge.tools.approval.arguments_digest`). Only a pending one can be decided
(`ApprovalDecidedError` otherwise), so a decision is taken once, and a restarted process finds
the same record for the same call and arguments (`find_approval`), never for other arguments.
"""

from __future__ import annotations

import json
import logging
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from bridge.errors import BridgeError, RunInterruptedError, redact
from bridge.types import (
    ErrorKind,
    EventTally,
    HumanInputRequested,
    RunFailed,
    ToolBatch,
    ToolCall,
    ToolRun,
)

if TYPE_CHECKING:
    from bridge._journal_memory import MemoryJournal
    from bridge._journal_sqlite import SQLiteJournal
    from bridge.tools.toolbox import Toolbox
    from bridge.types import Event

__all__ = [
    "INTERRUPTED_CODE",
    "INTERRUPTED_MESSAGE",
    "INTERRUPTED_OUTPUT",
    "ApprovalDecidedError",
    "ApprovalRecord",
    "ApprovalStatus",
    "CallRecord",
    "CallState",
    "ConversationRecord",
    "Journal",
    "Ledger",
    "MemoryJournal",
    "MessageRecord",
    "MessageStatus",
    "MessageTrail",
    "PendingBatch",
    "PlatformConversationRecord",
    "PlatformStateRecord",
    "SQLiteJournal",
    "StateSnapshot",
    "now",
    "redacted_arguments",
    "redacted_state",
]

logger = logging.getLogger(__name__)

CallState = Literal["received", "started", "finished", "submitting", "submitted"]
MessageStatus = Literal["running", "finished", "failed", "waiting_input"]
ApprovalStatus = Literal["pending", "approved", "rejected", "expired"]

INTERRUPTED_OUTPUT = (
    "The tool call {name!r} was interrupted by a restart of the bridge and was not run again: "
    "the tool is not marked idempotent, so running it twice could repeat its effect. Whether "
    "it completed is unknown."
)
"""The output a non-idempotent call gets when a crash interrupted it."""

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


class ApprovalDecidedError(BridgeError):
    """Only a pending approval can be decided: this one was decided already, or expired."""

    def __init__(self, record: ApprovalRecord) -> None:
        by = f" by {record.decided_by}" if record.decided_by else ""
        when = f" at {record.decided_at.isoformat()}" if record.decided_at else ""
        super().__init__(f"approval {record.approval_id} is already {record.status}{by}{when}")
        self.record = record


class PendingBatch(_Record):
    """A message's latest tool batch that the platform has not accepted yet."""

    batch: ToolBatch
    submitting: bool
    """True when its outputs were being posted: they may already have arrived."""


class Journal(ABC):
    """Where conversations, messages and tool-call states are written down.

    Implementations must be safe to call from several threads and must make each write durable
    before returning (that is what lets the loop write a state *before* its step).
    """

    # --- conversations and messages -------------------------------------------------------------

    @abstractmethod
    def add_conversation(self, conversation_id: str, *, end_user_id: str | None = None) -> None:
        """Record a conversation (nothing happens if it is known already)."""

    @abstractmethod
    def get_conversation(self, conversation_id: str) -> ConversationRecord | None:
        """One conversation, or None."""

    @abstractmethod
    def list_conversations(
        self, *, limit: int = 50, offset: int = 0
    ) -> tuple[list[ConversationRecord], int]:
        """A page of conversations, most recently updated first, and the total count."""

    @abstractmethod
    def begin_message(self, conversation_id: str, query: str, *, sent_by: str | None = None) -> int:
        """Record a query whose run starts now (status "running"); returns its message id.

        `sent_by`: who sent it (the daemon's API key name), for attribution.
        """

    @abstractmethod
    def end_message(
        self,
        message_id: int,
        *,
        status: MessageStatus,
        answer: str = "",
        error_code: str | None = None,
        error_message: str | None = None,
        request_ids: Sequence[str] = (),
        rounds: int = 0,
        interrupt_id: str | None = None,
        platform_settled: bool = True,
    ) -> None:
        """Record how a message's run ended (`interrupt_id`: the human-input pause, if any;
        `platform_settled`: the run ended with an answer or a question, see `MessageRecord`)."""

    @abstractmethod
    def messages(self, conversation_id: str) -> list[MessageRecord]:
        """Every message of a conversation, oldest first."""

    @abstractmethod
    def unfinished_messages(self) -> list[MessageRecord]:
        """Messages still "running": after a restart, the ones a crash interrupted."""

    # --- tool calls -------------------------------------------------------------------------------

    @abstractmethod
    def receive(
        self,
        conversation_id: str,
        batch: ToolBatch,
        *,
        message_id: int | None,
        state: StateSnapshot | None = None,
    ) -> None:
        """Record a batch and its calls as "received" (calls seen before keep their state).

        `state`: the platform's state with this batch pending, written in the same
        transaction (see `save_platform_state`), so that a process which finds the batch in
        the journal also finds what the platform needs to take its outputs.
        """

    @abstractmethod
    def start(self, conversation_id: str, call_ids: Sequence[str]) -> None:
        """Mark calls "started": written before any of them may run."""

    @abstractmethod
    def finish(self, conversation_id: str, run: ToolRun) -> None:
        """Record a call's outcome ("finished")."""

    @abstractmethod
    def submitting(self, conversation_id: str, batch: ToolBatch) -> None:
        """Mark a batch's outputs "submitting": written before they are posted."""

    @abstractmethod
    def submit(self, conversation_id: str, batch: ToolBatch) -> None:
        """Mark a batch's outputs "submitted": written once the platform accepted them."""

    @abstractmethod
    def get_call(self, conversation_id: str, call_id: str) -> CallRecord | None:
        """One call's record, or None."""

    @abstractmethod
    def calls(self, conversation_id: str) -> list[CallRecord]:
        """Every call of a conversation, in the order they were received."""

    @abstractmethod
    def pending(self, message_id: int) -> PendingBatch | None:
        """The message's latest batch if the platform has not accepted its outputs."""

    def pending_batch(self, message_id: int) -> ToolBatch | None:
        """The message's latest batch if it was not submitted (what a crash left open)."""
        pending = self.pending(message_id)
        return pending.batch if pending is not None else None

    # --- platform conversations -------------------------------------------------------------------

    @abstractmethod
    def replace_platform_conversation(
        self, conversation_id: str, platform_conversation_id: str, *, reason: str
    ) -> None:
        """From now on the conversation continues in another platform conversation."""

    @abstractmethod
    def platform_conversations(self, conversation_id: str) -> list[PlatformConversationRecord]:
        """Every platform conversation it ran in, oldest (its own id) first."""

    # --- platform state ---------------------------------------------------------------------------

    @abstractmethod
    def save_platform_state(self, conversation_id: str, snapshot: StateSnapshot) -> None:
        """Replace the journaled state of one platform conversation (strings redacted)."""

    @abstractmethod
    def platform_state(
        self, conversation_id: str, platform_conversation_id: str
    ) -> PlatformStateRecord | None:
        """The latest state journaled for a platform conversation, or None."""

    # --- approvals --------------------------------------------------------------------------------

    @abstractmethod
    def request_approval(
        self,
        conversation_id: str,
        call: ToolCall,
        *,
        message_id: int | None,
        arguments_digest: str,
        requested_by: str | None,
        deadline: datetime,
    ) -> ApprovalRecord:
        """Record a pending approval for `call` (with these exact arguments), or return the
        one recorded already for the same call id and digest, whatever its status."""

    @abstractmethod
    def find_approval(
        self, conversation_id: str, call_id: str, arguments_digest: str
    ) -> ApprovalRecord | None:
        """The approval of this call with these exact arguments, if one was requested."""

    @abstractmethod
    def get_approval(self, approval_id: str) -> ApprovalRecord | None:
        """One approval, or None."""

    @abstractmethod
    def decide_approval(
        self,
        approval_id: str,
        *,
        status: Literal["approved", "rejected", "expired"],
        decided_by: str | None,
        note: str = "",
    ) -> ApprovalRecord | None:
        """Decide a pending approval; returns the decided record (None: unknown id).

        Raises:
            ApprovalDecidedError: it is not pending any more (decided, or expired).
        """

    @abstractmethod
    def list_approvals(
        self,
        *,
        status: ApprovalStatus | None = None,
        conversation_id: str | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> tuple[list[ApprovalRecord], int]:
        """A page of approvals (None: any status or conversation), newest first, and the
        total count of those matching."""

    def close(self) -> None:  # noqa: B027 - optional for stores without resources
        """Release the store (idempotent)."""


def redacted_arguments(arguments: dict[str, Any] | str) -> dict[str, Any] | str:
    """The arguments with registered secrets masked (JSON round trip keeps the shape)."""
    if isinstance(arguments, str):
        return redact(arguments)
    text = json.dumps(arguments, ensure_ascii=False, default=str)
    masked = redact(text)
    if masked == text:
        return arguments
    try:
        value = json.loads(masked)
    except json.JSONDecodeError:
        return masked
    return value if isinstance(value, dict) else masked


def redacted_state(state: Any) -> Any:
    """A JSON value with registered secrets masked in every string (keys included).

    String by string rather than on the serialised text: a mask must never eat a quote and
    leave JSON that cannot be read back.
    """
    if isinstance(state, str):
        return redact(state)
    if isinstance(state, dict):
        return {redact(str(key)): redacted_state(value) for key, value in state.items()}
    if isinstance(state, list | tuple):
        return [redacted_state(value) for value in state]
    return state


# --- what the loop uses ---------------------------------------------------------------------------


class Ledger:
    """One conversation's tool calls in a journal: what ran, what to run, what was cut short.

    Args:
        journal: where the states are written.
        conversation_id: the conversation ("" before the platform gave it an id).
    """

    def __init__(self, journal: Journal, conversation_id: str) -> None:
        self.journal = journal
        self.conversation_id = conversation_id

    def get(self, call_id: str) -> ToolRun | None:
        """The recorded run of a call that finished, else None."""
        record = self.journal.get_call(self.conversation_id, call_id)
        return record.to_run() if record is not None and record.done else None

    def __contains__(self, call_id: object) -> bool:
        return isinstance(call_id, str) and self.get(call_id) is not None

    def __getitem__(self, call_id: str) -> ToolRun:
        run = self.get(call_id)
        if run is None:
            raise KeyError(call_id)
        return run

    def receive(
        self, batch: ToolBatch, message_id: int | None, state: StateSnapshot | None = None
    ) -> None:
        """Write the batch down ("received") before anything else happens to it, with the
        platform's state that has it pending (`state`, if the platform keeps any)."""
        self.journal.receive(self.conversation_id, batch, message_id=message_id, state=state)

    def plan(self, batch: ToolBatch, toolbox: Toolbox) -> tuple[list[ToolCall], list[ToolRun]]:
        """Split a received batch into calls to run now and records for interrupted calls.

        Finished calls are in neither list (their recorded output is sent); a call "started"
        but never finished is run again only if its tool is idempotent.
        """
        fresh: list[ToolCall] = []
        interrupted: list[ToolRun] = []
        for call in batch.calls:
            record = self.journal.get_call(self.conversation_id, call.call_id)
            if record is not None and record.done:
                logger.info("call %s already ran; sending its recorded output", call.call_id)
            elif record is not None and record.state == "started":
                spec = toolbox.get(call.name)
                if spec is not None and spec.options.idempotent:
                    logger.warning(
                        "call %s was interrupted; re-running idempotent tool %r",
                        call.call_id,
                        call.name,
                    )
                    fresh.append(call)
                else:
                    logger.warning(
                        "call %s was interrupted; tool %r is not idempotent, so it "
                        "is not run again",
                        call.call_id,
                        call.name,
                    )
                    interrupted.append(_interrupted_run(call, record.started_at))
            else:
                fresh.append(call)
        return fresh, interrupted

    def start(self, calls: Iterable[ToolCall]) -> None:
        """Mark calls "started": each right before its function may run."""
        ids = [call.call_id for call in calls]
        if ids:
            self.journal.start(self.conversation_id, ids)

    def finish(self, run: ToolRun) -> None:
        """Record a call's outcome."""
        self.journal.finish(self.conversation_id, run)

    def submitting(self, batch: ToolBatch) -> None:
        """Mark the batch "submitting" before its outputs are posted."""
        self.journal.submitting(self.conversation_id, batch)

    def submit(self, batch: ToolBatch) -> None:
        """Mark the batch "submitted" once the platform accepted its outputs."""
        self.journal.submit(self.conversation_id, batch)


def _interrupted_run(call: ToolCall, started_at: datetime | None) -> ToolRun:
    return ToolRun(
        call_id=call.call_id,
        name=call.name,
        arguments=call.arguments,
        output=INTERRUPTED_OUTPUT.format(name=call.name),
        error="tool_error",
        started_at=started_at or now(),
        duration_ms=0.0,
    )


class MessageTrail:
    """Watches a run's events and writes how its message ended."""

    def __init__(self, journal: Journal, message_id: int) -> None:
        self.journal = journal
        self.message_id = message_id
        self._tally = EventTally()

    def see(self, event: Event) -> None:
        """Take note of one event."""
        self._tally.see(event)

    def close(self, error: BaseException | None, *, rounds: int) -> None:
        """Write the message's end: from the terminal event, or from `error`."""
        end = self._tally.end
        text = "".join(self._tally.text)
        common: dict[str, Any] = {"request_ids": self._tally.request_ids, "rounds": rounds}
        if isinstance(error, GeneratorExit) and end is not None:
            error = None  # closed after its last event (e.g. a failed run): record that event
        if isinstance(error, GeneratorExit):
            # Nobody is left to tell: the caller abandoned the stream (or it is being
            # garbage-collected), so a failed write is logged rather than raised.
            try:
                self.journal.end_message(
                    self.message_id,
                    status="failed",
                    answer=text,
                    error_code="abandoned",
                    error_message="the caller stopped reading the run before it ended",
                    platform_settled=False,
                    **common,
                )
            except Exception:
                logger.exception("could not record the end of message %s", self.message_id)
        elif error is not None:
            if isinstance(error, BridgeError) and not isinstance(error, RunInterruptedError):
                code = type(error).__name__
            else:
                code = INTERRUPTED_CODE
            message = str(error) or type(error).__name__
            self.journal.end_message(
                self.message_id,
                status="failed",
                answer=text,
                error_code=code,
                error_message=message,
                platform_settled=False,
                **common,
            )
        elif isinstance(end, RunFailed):
            # A platform that fails a run may still wait for what it asked (an in-band error
            # answering tool outputs leaves their calls pending): not a state to build on.
            self.journal.end_message(
                self.message_id,
                status="failed",
                answer=text,
                error_code=end.code,
                error_message=end.message,
                platform_settled=False,
                **common,
            )
        elif isinstance(end, HumanInputRequested):
            self.journal.end_message(
                self.message_id,
                status="waiting_input",
                answer=text or end.prompt,
                interrupt_id=end.interrupt_id,
                **common,
            )
        else:
            answer = self._tally.answer
            self.journal.end_message(self.message_id, status="finished", answer=answer, **common)


def __getattr__(name: str) -> Any:
    # The implementations live in their own modules (they import the records above); loading
    # them on first use also keeps `import bridge` light.
    if name == "MemoryJournal":
        from bridge._journal_memory import MemoryJournal

        return MemoryJournal
    if name == "SQLiteJournal":
        from bridge._journal_sqlite import SQLiteJournal

        return SQLiteJournal
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
