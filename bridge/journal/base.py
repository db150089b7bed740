"""`Journal`: the interface every store implements (see `bridge.journal`)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any, Literal

from bridge.errors import UsageError
from bridge.journal.audit_store import AuditRow, Link
from bridge.journal.records import (
    ApprovalRecord,
    ApprovalStatus,
    CallRecord,
    ConversationRecord,
    DirectCallRecord,
    MessageEnd,
    MessageRecord,
    PendingBatch,
    PlatformConversationRecord,
    PlatformStateRecord,
    StateSnapshot,
)
from bridge.types import ToolBatch, ToolCall, ToolRun

__all__ = ["Journal"]


class Journal(ABC):
    """Where conversations, messages and tool-call states are written down.

    Implementations must be safe to call from several threads and must make each write durable
    before returning (that is what lets the loop write a state *before* its step).
    """

    # --- conversations and messages -------------------------------------------------------------

    @abstractmethod
    def add_conversation(
        self,
        conversation_id: str,
        *,
        end_user_id: str | None = None,
        created_by: str | None = None,
    ) -> None:
        """Record a conversation (nothing happens if it is known already).

        `created_by`: the caller who opened it (its owner); None: nobody's.
        """

    @abstractmethod
    def get_conversation(self, conversation_id: str) -> ConversationRecord | None:
        """One conversation, or None."""

    @abstractmethod
    def list_conversations(
        self, *, limit: int = 50, offset: int = 0, created_by: str | None = None
    ) -> tuple[list[ConversationRecord], int]:
        """A page of conversations, most recently updated first, and the total count;
        with `created_by`, only the conversations that caller opened."""

    @abstractmethod
    def begin_message(
        self,
        conversation_id: str,
        query: str,
        *,
        sent_by: str | None = None,
        traceparent: str | None = None,
    ) -> int:
        """Record a query whose run starts now (status "running"); returns its message id.

        `sent_by`: who sent it (the daemon's API key name), for attribution.
        `traceparent`: the W3C trace context of the run's span, kept so that a run resumed
        after a crash (or by another replica) continues its trace.
        """

    def end_message(self, message_id: int, end: MessageEnd | None = None, /, **fields: Any) -> None:
        """Record how a message's run ended: `end`, or its fields as keywords
        (``end_message(id, status="finished", answer="hi")`` is ``MessageEnd(status=...)``).

        Raises:
            UsageError: both `end` and keywords were given.
            pydantic.ValidationError: a keyword is unknown or a value does not fit.
        """
        if end is None:
            end = MessageEnd(**fields)
        elif fields:
            raise UsageError(
                f"end_message takes a MessageEnd or its fields as keywords, not both "
                f"(got a MessageEnd and {', '.join(sorted(fields))})"
            )
        self.record_end(message_id, end)

    @abstractmethod
    def record_end(self, message_id: int, end: MessageEnd) -> None:
        """Write `end` onto the message (what `end_message` calls; stores implement this)."""

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
    def start(
        self,
        conversation_id: str,
        call_ids: Sequence[str],
        *,
        traceparents: Mapping[str, str] | None = None,
    ) -> None:
        """Mark calls "started": written before any of them may run.

        `traceparents`: call id -> the W3C trace context of the span of this execution, in
        the same write (a call run again after a crash links its new span to it).
        """

    @abstractmethod
    def finish(self, conversation_id: str, run: ToolRun) -> None:
        """Record a call's outcome ("finished")."""

    @abstractmethod
    def submitting(self, conversation_id: str, batch: ToolBatch) -> None:
        """Mark a batch's outputs "submitting": written before they are posted."""

    @abstractmethod
    def submit(
        self, conversation_id: str, batch: ToolBatch, *, state: StateSnapshot | None = None
    ) -> None:
        """Mark a batch's outputs "submitted": written once the platform accepted them, with
        the platform's state that holds them (`state`, if the platform keeps any), in one
        write."""

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
        """From now on the conversation continues in another platform conversation.

        An empty `reason` names the conversation's first platform conversation, opened by its
        first message (its own id is a local handle: `OpensOnFirstMessage`); it then stands
        first in `platform_conversations`, in place of that handle."""

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

    # --- direct calls -----------------------------------------------------------------------------

    @abstractmethod
    def begin_direct_call(
        self, call: ToolCall, *, called_by: str | None, approved_by: str | None
    ) -> None:
        """Record a direct call (outside any conversation) as "started": written before the
        tool may run. `approved_by`: who approved a `confirm=True` tool's call (the caller)."""

    @abstractmethod
    def finish_direct_call(self, run: ToolRun) -> None:
        """Record how a direct call ended ("finished", its output and error)."""

    @abstractmethod
    def direct_calls(
        self, *, limit: int = 100, offset: int = 0
    ) -> tuple[list[DirectCallRecord], int]:
        """A page of direct calls, newest first, and how many there are."""

    # --- the audit record -------------------------------------------------------------------------

    def audit_chain(self) -> str:
        """The audit chain this journal's writer appends to: "local" for an embedded store
        (one process owns it), the bound replica's id on a shared one."""
        return "local"

    @abstractmethod
    def audit_tail(self, chain: str) -> AuditRow | None:
        """The last row of `chain`, or None when it is empty."""

    @abstractmethod
    def append_audit(self, chain: str, rows: Sequence[AuditRow]) -> None:
        """Insert `rows` (of `chain`, in order) in one transaction, durable before returning.

        Raises:
            Exception: a row's (chain, seq) exists already (another writer appended), or the
                store failed; nothing was written.
        """

    def append_linked(self, chain: str, link: Link) -> None:
        """Append the rows `link` makes from the chain's current last row, durable before
        returning (one transaction where the store has them)."""
        self.append_audit(chain, link(self.audit_tail(chain)))

    def stage_audit(self, conversation_id: str, chain: str, link: Link) -> None:
        """Append `link`'s rows in the same transaction as the next write of
        `conversation_id` (its call started, or finished), so the entry and the step it records
        are durable together or not at all; a store without such writes appends them now."""
        self.append_linked(chain, link)

    @abstractmethod
    def audit_entries(
        self, *, chain: str | None = None, since: datetime | None = None
    ) -> Iterator[AuditRow]:
        """Rows ordered by chain then seq (only `chain`'s; only those at or after `since`),
        read a page at a time."""

    @abstractmethod
    def audit_chains(self) -> list[str]:
        """The chains the audit record holds, sorted."""

    # --- the replica writing --------------------------------------------------------------------

    replica: str | None = None
    """The daemon replica writing through this store (`bind_replica`), recorded on messages."""

    def bind_replica(self, replica: str) -> None:
        """Write as `replica` from now on: messages record it, and a shared store refuses a
        conversation's writes unless this replica holds its lease (`LeaseLostError`, see
        `bridge.journal.leases`)."""
        self.replica = replica

    def close(self) -> None:  # noqa: B027 - optional for stores without resources
        """Release the store (idempotent)."""
