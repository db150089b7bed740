"""`MemoryJournal`: the journal of a library `Bridge`, kept in memory (see `bridge.journal`)."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any, Literal, TypeVar

from pydantic import BaseModel

from bridge.errors import redact
from bridge.journal.audit_store import AUDIT_PAGE, AuditRow, Link, audit_time
from bridge.journal.leases import LocalLeases
from bridge.journal.records import (
    ApprovalDecidedError,
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
    now,
    redacted_arguments,
    redacted_state_json,
)
from bridge.types import ToolBatch, ToolCall, ToolRun

__all__ = ["MemoryJournal"]

_R = TypeVar("_R", bound=BaseModel)


def _updated(record: _R, **changes: Any) -> _R:
    """`record.model_copy(update=changes)` without its three `copy.copy` calls: the journal
    writes several per round, and the values given are of the fields' types already."""
    new = object.__new__(type(record))
    values = record.__dict__.copy()
    values.update(changes)
    object.__setattr__(new, "__dict__", values)
    object.__setattr__(
        new, "__pydantic_fields_set__", record.__pydantic_fields_set__ | changes.keys()
    )
    object.__setattr__(new, "__pydantic_extra__", record.__pydantic_extra__)
    object.__setattr__(new, "__pydantic_private__", record.__pydantic_private__)
    return new


class _Batch:
    def __init__(self, batch: ToolBatch, message_id: int | None) -> None:
        self.batch = batch
        self.message_id = message_id
        self.submitting = False
        self.submitted = False


class _State:
    """A journaled platform state, kept as its JSON text (as SQLite keeps it): each read
    builds its own record, so nothing a reader or the adapter holds is shared with it."""

    __slots__ = ("platform", "text", "updated_at", "writer")

    def __init__(self, snapshot: StateSnapshot) -> None:
        self.text = redacted_state_json(snapshot)
        self.platform = snapshot.platform
        self.writer = snapshot.writer
        self.updated_at = now()


class _Conv:
    def __init__(self, conversation_id: str, end_user_id: str | None) -> None:
        self.record = ConversationRecord(
            conversation_id=conversation_id,
            end_user_id=end_user_id,
            created_at=now(),
            updated_at=now(),
            platform_conversation_id=conversation_id,
        )
        self.message_ids: list[int] = []
        self.calls: dict[str, CallRecord] = {}
        self.batches: list[_Batch] = []
        self.states: dict[str, _State] = {}
        """The latest platform state, by platform conversation id."""
        self.platform: list[PlatformConversationRecord] = [
            PlatformConversationRecord(
                platform_conversation_id=conversation_id, created_at=self.record.created_at
            )
        ]


class MemoryJournal(LocalLeases):
    """A journal in memory: the ledger of a library `Bridge`, gone when the process ends.

    Args:
        max_conversations: how many conversations to keep; beyond that the least recently
            updated ones without a running message are forgotten, so a long-lived `Bridge`
            does not grow without bound.
    """

    def __init__(self, *, max_conversations: int = 1000) -> None:
        self.max_conversations = max_conversations
        self._lock = threading.RLock()
        self._convs: dict[str, _Conv] = {}
        self._messages: dict[int, MessageRecord] = {}
        self._next_message = 1
        self._approvals: dict[str, ApprovalRecord] = {}
        self._direct: dict[str, DirectCallRecord] = {}
        self._audit: dict[str, list[AuditRow]] = {}
        """Each audit chain's rows, in order (kept whole: the record is not evicted)."""

    def __repr__(self) -> str:
        return f"MemoryJournal(conversations={len(self._convs)})"

    def _conv(self, conversation_id: str) -> _Conv:
        conv = self._convs.get(conversation_id)
        if conv is None:
            conv = self._convs[conversation_id] = _Conv(conversation_id, None)
            self._evict()
        return conv

    def _touch(self, conv: _Conv) -> None:
        conv.record = _updated(conv.record, **self._status(conv), updated_at=now())
        # Keep the dict ordered by last update: eviction pops from the front.
        self._convs.pop(conv.record.conversation_id, None)
        self._convs[conv.record.conversation_id] = conv

    def _status(self, conv: _Conv) -> dict[str, Any]:
        last = self._messages.get(conv.message_ids[-1]) if conv.message_ids else None
        return {"status": last.status if last else "new", "messages": len(conv.message_ids)}

    def _evict(self) -> None:
        while len(self._convs) > self.max_conversations:
            # The least recently updated first (the dict is kept in that order): usually the
            # very first entry, so a full journal pays one step per new conversation, not a
            # copy of every key.
            key = next(
                (k for k, c in self._convs.items() if self._status(c)["status"] != "running"),
                None,
            )
            if key is None:
                return  # every conversation is running: none may be forgotten
            conv = self._convs.pop(key)
            for message_id in conv.message_ids:
                self._messages.pop(message_id, None)
            for approval_id in [
                a.approval_id for a in self._approvals.values() if a.conversation_id == key
            ]:
                del self._approvals[approval_id]

    def add_conversation(
        self,
        conversation_id: str,
        *,
        end_user_id: str | None = None,
        created_by: str | None = None,
    ) -> None:
        with self._lock:
            conv = self._conv(conversation_id)
            if end_user_id and conv.record.end_user_id is None:
                conv.record = _updated(conv.record, end_user_id=end_user_id)
            if created_by is not None and conv.record.created_by is None:
                conv.record = _updated(conv.record, created_by=created_by)

    def get_conversation(self, conversation_id: str) -> ConversationRecord | None:
        with self._lock:
            conv = self._convs.get(conversation_id)
            return conv.record if conv else None

    def list_conversations(
        self, *, limit: int = 50, offset: int = 0, created_by: str | None = None
    ) -> tuple[list[ConversationRecord], int]:
        with self._lock:
            records = [
                conv.record
                for conv in reversed(self._convs.values())
                if created_by is None or conv.record.created_by == created_by
            ]
            return records[offset : offset + limit], len(records)

    def begin_message(
        self,
        conversation_id: str,
        query: str,
        *,
        sent_by: str | None = None,
        traceparent: str | None = None,
    ) -> int:
        with self._lock:
            conv = self._conv(conversation_id)
            message_id, self._next_message = self._next_message, self._next_message + 1
            self._messages[message_id] = MessageRecord(
                message_id=message_id,
                conversation_id=conversation_id,
                query=redact(query),
                status="running",
                created_at=now(),
                sent_by=sent_by,
                replica=self.replica,
                traceparent=traceparent,
            )
            conv.message_ids.append(message_id)
            self._touch(conv)
            return message_id

    def record_end(self, message_id: int, end: MessageEnd) -> None:
        with self._lock:
            message = self._messages.get(message_id)
            if message is None:
                return
            self._messages[message_id] = _updated(
                message,
                status=end.status,
                answer=redact(end.answer),
                error_code=end.error_code,
                error_message=redact(end.error_message) if end.error_message else None,
                request_ids=list(end.request_ids),
                rounds=end.rounds,
                finished_at=now(),
                interrupt_id=end.interrupt_id,
                platform_settled=end.platform_settled,
            )
            conv = self._convs.get(message.conversation_id)
            if conv is not None:
                self._touch(conv)

    def messages(self, conversation_id: str) -> list[MessageRecord]:
        with self._lock:
            conv = self._convs.get(conversation_id)
            return [self._messages[m] for m in conv.message_ids] if conv else []

    def unfinished_messages(self) -> list[MessageRecord]:
        with self._lock:
            return [m for m in self._messages.values() if m.status == "running"]

    def receive(
        self,
        conversation_id: str,
        batch: ToolBatch,
        *,
        message_id: int | None,
        state: StateSnapshot | None = None,
    ) -> None:
        with self._lock:
            conv = self._conv(conversation_id)
            if state is not None:
                self._save_state(conv, state)
            last = conv.batches[-1] if conv.batches else None
            if last is None or last.submitted or last.batch.batch_id != batch.batch_id:
                conv.batches.append(_Batch(batch, message_id))
            for call in batch.calls:
                if call.call_id not in conv.calls:
                    conv.calls[call.call_id] = CallRecord(
                        conversation_id=conversation_id,
                        call_id=call.call_id,
                        message_id=message_id,
                        name=call.name,
                        arguments=redacted_arguments(call.arguments),
                        state="received",
                        updated_at=now(),
                    )

    def start(
        self,
        conversation_id: str,
        call_ids: Sequence[str],
        *,
        traceparents: Mapping[str, str] | None = None,
    ) -> None:
        with self._lock:
            conv = self._conv(conversation_id)
            moment = now()
            for call_id in call_ids:
                record = conv.calls.get(call_id)
                if record is not None and not record.done:
                    conv.calls[call_id] = _updated(
                        record,
                        state="started",
                        started_at=moment,
                        updated_at=moment,
                        traceparent=traceparents.get(call_id) if traceparents else None,
                    )

    def finish(self, conversation_id: str, run: ToolRun) -> None:
        with self._lock:
            conv = self._conv(conversation_id)
            record = conv.calls.get(run.call_id)
            conv.calls[run.call_id] = CallRecord(
                conversation_id=conversation_id,
                call_id=run.call_id,
                message_id=record.message_id if record else None,
                name=record.name if record else run.name,
                arguments=record.arguments if record else redacted_arguments(run.arguments),
                state="finished",
                output=redact(run.output),
                error=run.error,
                started_at=run.started_at,
                duration_ms=run.duration_ms,
                updated_at=now(),
                traceparent=record.traceparent if record else None,
            )

    def submitting(self, conversation_id: str, batch: ToolBatch) -> None:
        self._mark_batch(conversation_id, batch, "submitting")

    def submit(
        self, conversation_id: str, batch: ToolBatch, *, state: StateSnapshot | None = None
    ) -> None:
        with self._lock:
            if state is not None:
                self._save_state(self._conv(conversation_id), state)
            self._mark_batch(conversation_id, batch, "submitted")

    def _mark_batch(
        self, conversation_id: str, batch: ToolBatch, state: Literal["submitting", "submitted"]
    ) -> None:
        with self._lock:
            conv = self._conv(conversation_id)
            for entry in reversed(conv.batches):
                if entry.batch.batch_id == batch.batch_id and not entry.submitted:
                    setattr(entry, state, True)
                    break
            moment = now()
            for call in batch.calls:
                record = conv.calls.get(call.call_id)
                if record is not None and record.done and record.state != "submitted":
                    conv.calls[call.call_id] = _updated(record, state=state, updated_at=moment)

    def get_call(self, conversation_id: str, call_id: str) -> CallRecord | None:
        with self._lock:
            conv = self._convs.get(conversation_id)
            return conv.calls.get(call_id) if conv else None

    def calls(self, conversation_id: str) -> list[CallRecord]:
        with self._lock:
            conv = self._convs.get(conversation_id)
            return list(conv.calls.values()) if conv else []

    def pending(self, message_id: int) -> PendingBatch | None:
        with self._lock:
            message = self._messages.get(message_id)
            conv = self._convs.get(message.conversation_id) if message else None
            for entry in reversed(conv.batches if conv else []):
                if entry.message_id == message_id:
                    if entry.submitted:
                        return None
                    return PendingBatch(batch=entry.batch, submitting=entry.submitting)
            return None

    def replace_platform_conversation(
        self, conversation_id: str, platform_conversation_id: str, *, reason: str
    ) -> None:
        with self._lock:
            conv = self._conv(conversation_id)
            if not reason and len(conv.platform) == 1:  # opened by the first message
                conv.platform.clear()
            conv.platform.append(
                PlatformConversationRecord(
                    platform_conversation_id=platform_conversation_id,
                    created_at=now(),
                    reason=redact(reason),
                )
            )
            conv.record = _updated(conv.record, platform_conversation_id=platform_conversation_id)
            self._touch(conv)

    def platform_conversations(self, conversation_id: str) -> list[PlatformConversationRecord]:
        with self._lock:
            conv = self._convs.get(conversation_id)
            return list(conv.platform) if conv else []

    def save_platform_state(self, conversation_id: str, snapshot: StateSnapshot) -> None:
        with self._lock:
            self._save_state(self._conv(conversation_id), snapshot)

    def _save_state(self, conv: _Conv, snapshot: StateSnapshot) -> None:
        conv.states[snapshot.platform_conversation_id] = _State(snapshot)

    def platform_state(
        self, conversation_id: str, platform_conversation_id: str
    ) -> PlatformStateRecord | None:
        with self._lock:
            conv = self._convs.get(conversation_id)
            saved = conv.states.get(platform_conversation_id) if conv else None
            if conv is None or saved is None:
                return None
            return PlatformStateRecord(
                conversation_id=conv.record.conversation_id,
                platform_conversation_id=platform_conversation_id,
                platform=saved.platform,
                state=json.loads(saved.text),
                writer=saved.writer,
                updated_at=saved.updated_at,
            )

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
        with self._lock:
            known = self.find_approval(conversation_id, call.call_id, arguments_digest)
            if known is not None:
                return known
            record = ApprovalRecord(
                approval_id=uuid.uuid4().hex,
                conversation_id=conversation_id,
                message_id=message_id,
                call_id=call.call_id,
                tool=call.name,
                arguments=redacted_arguments(call.arguments),
                arguments_digest=arguments_digest,
                requested_by=requested_by,
                requested_at=now(),
                deadline=deadline,
                status="pending",
            )
            self._approvals[record.approval_id] = record
            return record

    def find_approval(
        self, conversation_id: str, call_id: str, arguments_digest: str
    ) -> ApprovalRecord | None:
        with self._lock:
            for record in self._approvals.values():
                if (
                    record.conversation_id == conversation_id
                    and record.call_id == call_id
                    and record.arguments_digest == arguments_digest
                ):
                    return record
            return None

    def get_approval(self, approval_id: str) -> ApprovalRecord | None:
        with self._lock:
            return self._approvals.get(approval_id)

    def decide_approval(
        self,
        approval_id: str,
        *,
        status: Literal["approved", "rejected", "expired"],
        decided_by: str | None,
        note: str = "",
    ) -> ApprovalRecord | None:
        with self._lock:
            record = self._approvals.get(approval_id)
            if record is None:
                return None
            if record.status != "pending":
                raise ApprovalDecidedError(record)
            record = record.model_copy(
                update={
                    "status": status,
                    "decided_by": decided_by,
                    "decided_at": now(),
                    "note": redact(note),
                }
            )
            self._approvals[approval_id] = record
            return record

    def list_approvals(
        self,
        *,
        status: ApprovalStatus | None = None,
        conversation_id: str | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> tuple[list[ApprovalRecord], int]:
        with self._lock:
            found = [
                record
                for record in reversed(self._approvals.values())
                if (status is None or record.status == status)
                and (conversation_id is None or record.conversation_id == conversation_id)
            ]
            return found[offset : offset + limit], len(found)

    # --- direct calls -----------------------------------------------------------------------------

    def begin_direct_call(
        self, call: ToolCall, *, called_by: str | None, approved_by: str | None
    ) -> None:
        with self._lock:
            self._direct[call.call_id] = DirectCallRecord(
                call_id=call.call_id,
                tool=call.name,
                arguments=redacted_arguments(call.arguments),
                called_by=called_by,
                approved_by=approved_by,
                state="started",
                started_at=now(),
            )
            while len(self._direct) > self.max_conversations:  # the oldest go first
                del self._direct[next(iter(self._direct))]

    def finish_direct_call(self, run: ToolRun) -> None:
        with self._lock:
            record = self._direct.get(run.call_id)
            if record is not None:
                self._direct[run.call_id] = _updated(
                    record,
                    state="finished",
                    output=redact(run.output),
                    error=run.error,
                    duration_ms=run.duration_ms,
                    finished_at=now(),
                )

    def direct_calls(
        self, *, limit: int = 100, offset: int = 0
    ) -> tuple[list[DirectCallRecord], int]:
        with self._lock:
            found = list(reversed(self._direct.values()))
            return found[offset : offset + limit], len(found)

    # --- the audit record -------------------------------------------------------------------------

    def audit_tail(self, chain: str) -> AuditRow | None:
        with self._lock:
            rows = self._audit.get(chain)
            return rows[-1] if rows else None

    def append_linked(self, chain: str, link: Link) -> None:
        with self._lock:
            kept = self._audit.get(chain)
            self.append_audit(chain, link(kept[-1] if kept else None))

    def append_audit(self, chain: str, rows: Sequence[AuditRow]) -> None:
        with self._lock:
            kept = self._audit.setdefault(chain, [])
            last = kept[-1].seq if kept else 0
            for row in rows:
                if row.chain != chain or row.seq <= last:
                    raise ValueError(f"audit entry {chain}:{row.seq} exists already")
                last = row.seq
            kept.extend(rows)

    def audit_entries(
        self, *, chain: str | None = None, since: datetime | None = None
    ) -> Iterator[AuditRow]:
        start = audit_time(since) if since is not None else None
        for name in [chain] if chain is not None else self.audit_chains():
            position = 0
            while True:
                with self._lock:  # a page at a time: writers wait for a copy, not a walk
                    page = self._audit.get(name, [])[position : position + AUDIT_PAGE]
                position += len(page)
                for row in page:
                    if start is None or row.at >= start:
                        yield row
                if len(page) < AUDIT_PAGE:
                    break

    def audit_chains(self) -> list[str]:
        with self._lock:
            return sorted(name for name, rows in self._audit.items() if rows)
