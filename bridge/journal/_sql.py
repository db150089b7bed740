"""`SQLJournal`: the statements of the SQL journals (SQLite, PostgreSQL), written once.

Every `Journal` method is one transaction of the same statements in both stores. What differs
is behind a few hooks the stores implement:

- `_transaction(fn, write=...)`: how `fn(connection)` runs in one transaction (SQLite: its
  group-commit writer thread; PostgreSQL: a pooled connection);
- `_execute`, `_executemany`, `_insert`: how one statement runs. Statements are written with
  ``?`` placeholders (the PostgreSQL store turns them into ``%s``); `_insert` returns the
  generated key (``cursor.lastrowid`` or ``RETURNING``);
- `_any(column, values)`: a column matching any of a few values;
- `_value`: how a string is stored (PostgreSQL text cannot hold NUL);
- `_fence(fn, conversation, message)`: what a conversation's write checks first in its
  transaction (PostgreSQL: the lease, once a replica is bound);
- `_lock_conversation`: serialises the read-then-insert writers of one conversation where
  several writers may run at once;
- `ORDER`: the tie-breaker column of orderings (SQLite's implicit ``rowid``).
"""

from __future__ import annotations

import json
import threading
import uuid
from abc import abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any, Generic, Literal, Protocol, TypeVar

from bridge.errors import redact
from bridge.journal._rows import (
    CONVERSATION_SELECT,
    Row,
    approval_record,
    arguments_json,
    call_record,
    conversation_record,
    direct_call_record,
    message_record,
    platform_state_record,
    state_json,
)
from bridge.journal.audit_store import (
    INSERT_SQL,
    TAIL_SQL,
    AuditRow,
    Link,
    audit_row,
    chains_of,
    iter_rows,
    tail_of,
)
from bridge.journal.base import Journal
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
)
from bridge.types import ToolBatch, ToolCall, ToolRun

__all__ = ["Cursor", "SQLJournal", "migrated_message"]

T = TypeVar("T")
C = TypeVar("C")
"""The store's connection type."""


class Cursor(Protocol):
    """What the statements read back: a `sqlite3.Cursor` or a psycopg cursor."""

    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...


class SQLJournal(Journal, Generic[C]):
    """The `Journal` methods over a SQL connection of type `C` (see the module's docstring)."""

    ORDER = "rowid"
    on_write: Callable[[str], None] | None = None

    # --- the store's hooks ------------------------------------------------------------------------

    @abstractmethod
    def _transaction(self, fn: Callable[[C], T], *, write: bool) -> T:
        """Run `fn(connection)` in one transaction; a write returns once it is committed."""

    @abstractmethod
    def _execute(self, db: C, sql: str, params: Sequence[Any] = ()) -> Cursor:
        """Run one statement (``?`` placeholders)."""

    @abstractmethod
    def _executemany(self, db: C, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        """Run one statement (``?`` placeholders) once per row of parameters."""

    @abstractmethod
    def _insert(self, db: C, sql: str, params: Sequence[Any], key: str) -> int:
        """Run an INSERT of one row; returns its generated `key` column."""

    @abstractmethod
    def _any(self, column: str, values: Sequence[Any]) -> tuple[str, list[Any]]:
        """A condition true when `column` is one of `values`, and its parameters."""

    def _value(self, value: Any) -> Any:
        """`value` as the store keeps it (to compare with what it reads back)."""
        return value

    def _fence(
        self, fn: Callable[[C], T], conversation: str | None, message: int | None
    ) -> Callable[[C], T]:
        """`fn` with whatever a write of `conversation` (or of `message`'s) checks first."""
        return fn

    def _lock_conversation(self, db: C, conversation_id: str) -> None:
        """Hold off other writers of the conversation until this transaction ends."""

    # --- primitives ------------------------------------------------------------------------------

    def _write(
        self,
        step: str,
        fn: Callable[[C], T],
        *,
        conversation: str | None = None,
        message: int | None = None,
    ) -> T:
        """Run `fn` in one transaction; `on_write(step)` once it is committed.

        `conversation` (or the `message` of one): whose write this is (see `_fence`).
        """
        if conversation is not None and self._staged:
            fn = self._with_staged(conversation, fn)
        result = self._transaction(self._fence(fn, conversation, message), write=True)
        if self.on_write is not None:
            self.on_write(step)
        return result

    def _read(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        rows: list[Row] = self._transaction(
            lambda db: self._execute(db, sql, params).fetchall(), write=False
        )
        return rows

    def _ensure_conversation(self, db: C, conversation_id: str, stamp: str) -> None:
        self._execute(
            db,
            "INSERT INTO conversations (id, created_at, updated_at) VALUES (?, ?, ?) "
            "ON CONFLICT (id) DO NOTHING",
            (conversation_id, stamp, stamp),
        )

    def _upsert_state(
        self, db: C, conversation_id: str, snapshot: StateSnapshot, stamp: str
    ) -> None:
        self._execute(
            db,
            "INSERT INTO platform_states (conversation_id, platform_conversation_id, platform, "
            "state, writer, updated_at) VALUES (?, ?, ?, ?, ?, ?) "
            "ON CONFLICT (conversation_id, platform_conversation_id) DO UPDATE SET "
            "platform = excluded.platform, state = excluded.state, writer = excluded.writer, "
            "updated_at = excluded.updated_at",
            (
                conversation_id,
                snapshot.platform_conversation_id,
                snapshot.platform,
                state_json(snapshot),
                snapshot.writer,
                stamp,
            ),
        )

    # --- conversations and messages ---------------------------------------------------------------

    def add_conversation(
        self,
        conversation_id: str,
        *,
        end_user_id: str | None = None,
        created_by: str | None = None,
    ) -> None:
        stamp = now().isoformat()

        def op(db: C) -> None:
            self._execute(
                db,
                "INSERT INTO conversations (id, end_user_id, created_at, updated_at, created_by) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET "
                "end_user_id = coalesce(conversations.end_user_id, excluded.end_user_id), "
                "created_by = coalesce(conversations.created_by, excluded.created_by)",
                (conversation_id, end_user_id, stamp, stamp, created_by),
            )

        self._write("conversation", op)

    def get_conversation(self, conversation_id: str) -> ConversationRecord | None:
        rows = self._read(CONVERSATION_SELECT + " WHERE c.id = ?", (conversation_id,))
        return conversation_record(rows[0]) if rows else None

    def list_conversations(
        self, *, limit: int = 50, offset: int = 0, created_by: str | None = None
    ) -> tuple[list[ConversationRecord], int]:
        where, args = ("", ()) if created_by is None else (" WHERE c.created_by = ?", (created_by,))
        rows = self._read(
            CONVERSATION_SELECT
            + where
            + f" ORDER BY c.updated_at DESC, c.{self.ORDER} DESC LIMIT ? OFFSET ?",
            (*args, limit, offset),
        )
        total = self._read("SELECT count(*) AS n FROM conversations c" + where, args)[0]["n"]
        return [conversation_record(row) for row in rows], int(total)

    def begin_message(
        self,
        conversation_id: str,
        query: str,
        *,
        sent_by: str | None = None,
        traceparent: str | None = None,
    ) -> int:
        stamp = now().isoformat()

        def op(db: C) -> int:
            self._execute(
                db,
                "INSERT INTO conversations (id, created_at, updated_at) VALUES (?, ?, ?) "
                "ON CONFLICT (id) DO UPDATE SET updated_at = excluded.updated_at",
                (conversation_id, stamp, stamp),
            )
            return self._insert(
                db,
                "INSERT INTO messages (conversation_id, query, status, created_at, sent_by, "
                "replica, traceparent) VALUES (?, ?, 'running', ?, ?, ?, ?)",
                (conversation_id, redact(query), stamp, sent_by, self.replica, traceparent),
                "id",
            )

        return self._write("message", op, conversation=conversation_id)

    def record_end(self, message_id: int, end: MessageEnd) -> None:
        stamp = now().isoformat()

        def op(db: C) -> None:
            self._execute(
                db,
                "UPDATE messages SET status = ?, answer = ?, error_code = ?, error_message = ?, "
                "request_ids = ?, rounds = ?, finished_at = ?, interrupt_id = ?, "
                "platform_settled = ? WHERE id = ?",
                (
                    end.status,
                    redact(end.answer),
                    end.error_code,
                    redact(end.error_message) if end.error_message else None,
                    json.dumps(list(end.request_ids)),
                    end.rounds,
                    stamp,
                    end.interrupt_id,
                    int(end.platform_settled),
                    message_id,
                ),
            )
            self._execute(
                db,
                "UPDATE conversations SET updated_at = ? WHERE id = "
                "(SELECT conversation_id FROM messages WHERE id = ?)",
                (stamp, message_id),
            )

        self._write("message_end", op, message=message_id)

    def messages(self, conversation_id: str) -> list[MessageRecord]:
        rows = self._read(
            "SELECT * FROM messages WHERE conversation_id = ? ORDER BY id", (conversation_id,)
        )
        return [message_record(row) for row in rows]

    def unfinished_messages(self) -> list[MessageRecord]:
        rows = self._read("SELECT * FROM messages WHERE status = 'running' ORDER BY id")
        return [message_record(row) for row in rows]

    # --- tool calls -------------------------------------------------------------------------------

    def receive(
        self,
        conversation_id: str,
        batch: ToolBatch,
        *,
        message_id: int | None,
        state: StateSnapshot | None = None,
    ) -> None:
        stamp = now().isoformat()

        def op(db: C) -> None:
            self._lock_conversation(db, conversation_id)  # read-then-insert below
            self._ensure_conversation(db, conversation_id, stamp)
            last = self._execute(
                db,
                "SELECT seq, batch_id, submitted_at FROM batches WHERE conversation_id = ? "
                "ORDER BY seq DESC LIMIT 1",
                (conversation_id,),
            ).fetchone()
            if (
                last is not None
                and last["batch_id"] == self._value(batch.batch_id)
                and not last["submitted_at"]
            ):
                seq = int(last["seq"])  # the same batch again (recovery): keep the first row
            else:
                calls = [call.model_dump(mode="json") for call in batch.calls]
                seq = self._insert(
                    db,
                    "INSERT INTO batches (conversation_id, batch_id, message_id, calls, resume, "
                    "received_at) VALUES (?, ?, ?, ?, ?, ?)",
                    (
                        conversation_id,
                        batch.batch_id,
                        message_id,
                        redact(json.dumps(calls, ensure_ascii=False)),
                        redact(json.dumps(batch.resume, ensure_ascii=False, default=str)),
                        stamp,
                    ),
                    "seq",
                )
            self._executemany(
                db,
                "INSERT INTO calls (conversation_id, call_id, seq, message_id, name, arguments, "
                "state, updated_at) VALUES (?, ?, ?, ?, ?, ?, 'received', ?) "
                "ON CONFLICT (conversation_id, call_id) DO NOTHING",
                [
                    (conversation_id, c.call_id, seq, message_id, c.name, arguments_json(c), stamp)
                    for c in batch.calls
                ],
            )
            if state is not None:
                self._upsert_state(db, conversation_id, state, stamp)

        self._write("received", op, conversation=conversation_id)

    def start(
        self,
        conversation_id: str,
        call_ids: Sequence[str],
        *,
        traceparents: Mapping[str, str] | None = None,
    ) -> None:
        stamp = now().isoformat()
        spans = traceparents or {}

        def op(db: C) -> None:
            self._executemany(
                db,
                "UPDATE calls SET state = 'started', started_at = ?, updated_at = ?, "
                "traceparent = ? "
                "WHERE conversation_id = ? AND call_id = ? AND state IN ('received', 'started')",
                [
                    (stamp, stamp, spans.get(call_id), conversation_id, call_id)
                    for call_id in call_ids
                ],
            )

        self._write("started", op, conversation=conversation_id)

    def finish(self, conversation_id: str, run: ToolRun) -> None:
        stamp = now().isoformat()

        def op(db: C) -> None:
            # An upsert: a call finished without being received (direct use) is recorded too.
            self._execute(
                db,
                "INSERT INTO calls (conversation_id, call_id, seq, name, arguments, state, output, "
                "error, started_at, duration_ms, updated_at) "
                "VALUES (?, ?, 0, ?, ?, 'finished', ?, ?, ?, ?, ?) "
                "ON CONFLICT (conversation_id, call_id) DO UPDATE SET state = 'finished', "
                "output = excluded.output, error = excluded.error, "
                "started_at = excluded.started_at, duration_ms = excluded.duration_ms, "
                "updated_at = excluded.updated_at",
                (
                    conversation_id,
                    run.call_id,
                    run.name,
                    json.dumps(redacted_arguments(run.arguments), ensure_ascii=False, default=str),
                    redact(run.output),
                    run.error,
                    run.started_at.isoformat(),
                    run.duration_ms,
                    stamp,
                ),
            )

        self._write("finished", op, conversation=conversation_id)

    def submitting(self, conversation_id: str, batch: ToolBatch) -> None:
        self._mark_batch(conversation_id, batch, "submitting", ("finished",))

    def submit(
        self, conversation_id: str, batch: ToolBatch, *, state: StateSnapshot | None = None
    ) -> None:
        self._mark_batch(
            conversation_id, batch, "submitted", ("finished", "submitting"), snapshot=state
        )

    def _mark_batch(
        self,
        conversation_id: str,
        batch: ToolBatch,
        state: str,
        before: tuple[str, ...],
        *,
        snapshot: StateSnapshot | None = None,
    ) -> None:
        stamp = now().isoformat()
        column = f"{state}_at"  # a column name of ours, never input
        was, was_params = self._any("state", before)

        def op(db: C) -> None:
            if snapshot is not None:
                self._upsert_state(db, conversation_id, snapshot, stamp)
            self._execute(
                db,
                f"UPDATE batches SET {column} = ? WHERE seq = (SELECT max(seq) FROM batches "
                "WHERE conversation_id = ? AND batch_id = ? AND submitted_at IS NULL)",
                (stamp, conversation_id, batch.batch_id),
            )
            self._executemany(
                db,
                "UPDATE calls SET state = ?, updated_at = ? "
                f"WHERE conversation_id = ? AND call_id = ? AND {was}",
                [
                    (state, stamp, conversation_id, call.call_id, *was_params)
                    for call in batch.calls
                ],
            )

        self._write(state, op, conversation=conversation_id)

    def get_call(self, conversation_id: str, call_id: str) -> CallRecord | None:
        rows = self._read(
            "SELECT * FROM calls WHERE conversation_id = ? AND call_id = ?",
            (conversation_id, call_id),
        )
        return call_record(rows[0]) if rows else None

    def calls(self, conversation_id: str) -> list[CallRecord]:
        rows = self._read(
            f"SELECT * FROM calls WHERE conversation_id = ? ORDER BY seq, {self.ORDER}",
            (conversation_id,),
        )
        return [call_record(row) for row in rows]

    def pending(self, message_id: int) -> PendingBatch | None:
        rows = self._read(
            "SELECT * FROM batches WHERE message_id = ? ORDER BY seq DESC LIMIT 1", (message_id,)
        )
        if not rows or rows[0]["submitted_at"]:
            return None
        row = rows[0]
        batch = ToolBatch(
            batch_id=row["batch_id"],
            calls=tuple(ToolCall.model_validate(c) for c in json.loads(row["calls"])),
            resume=json.loads(row["resume"]),
        )
        return PendingBatch(batch=batch, submitting=bool(row["submitting_at"]))

    # --- platform conversations -------------------------------------------------------------------

    def replace_platform_conversation(
        self, conversation_id: str, platform_conversation_id: str, *, reason: str
    ) -> None:
        stamp = now().isoformat()

        def op(db: C) -> None:
            self._execute(
                db,
                "INSERT INTO platform_conversations (conversation_id, platform_conversation_id, "
                "created_at, reason) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
                (conversation_id, platform_conversation_id, stamp, redact(reason)),
            )
            self._execute(
                db,
                "UPDATE conversations SET platform_conversation_id = ?, updated_at = ? "
                "WHERE id = ?",
                (platform_conversation_id, stamp, conversation_id),
            )

        self._write("platform_conversation", op, conversation=conversation_id)

    def platform_conversations(self, conversation_id: str) -> list[PlatformConversationRecord]:
        first = self._read("SELECT created_at FROM conversations WHERE id = ?", (conversation_id,))
        if not first:
            return []
        rows = self._read(
            "SELECT * FROM platform_conversations WHERE conversation_id = ? "
            f"ORDER BY created_at, {self.ORDER}",
            (conversation_id,),
        )
        records = [
            PlatformConversationRecord(
                platform_conversation_id=row["platform_conversation_id"],
                created_at=datetime.fromisoformat(row["created_at"]),
                reason=row["reason"],
            )
            for row in rows
        ]
        if rows and not rows[0]["reason"]:  # opened by the first message: the id is a handle
            return records
        own = PlatformConversationRecord(
            platform_conversation_id=conversation_id,
            created_at=datetime.fromisoformat(first[0]["created_at"]),
        )
        return [own, *records]

    # --- platform state ---------------------------------------------------------------------------

    def save_platform_state(self, conversation_id: str, snapshot: StateSnapshot) -> None:
        stamp = now().isoformat()

        def op(db: C) -> None:
            self._ensure_conversation(db, conversation_id, stamp)
            self._upsert_state(db, conversation_id, snapshot, stamp)

        self._write("platform_state", op, conversation=conversation_id)

    def platform_state(
        self, conversation_id: str, platform_conversation_id: str
    ) -> PlatformStateRecord | None:
        rows = self._read(
            "SELECT * FROM platform_states WHERE conversation_id = ? "
            "AND platform_conversation_id = ?",
            (conversation_id, platform_conversation_id),
        )
        return platform_state_record(rows[0]) if rows else None

    # --- approvals --------------------------------------------------------------------------------

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
        stamp = now().isoformat()

        def op(db: C) -> None:
            self._ensure_conversation(db, conversation_id, stamp)
            self._execute(
                db,
                "INSERT INTO approvals (id, conversation_id, message_id, call_id, tool, "
                "arguments, arguments_digest, requested_by, requested_at, deadline, status) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'pending') "
                "ON CONFLICT (conversation_id, call_id, arguments_digest) DO NOTHING",
                (
                    uuid.uuid4().hex,
                    conversation_id,
                    message_id,
                    call.call_id,
                    call.name,
                    arguments_json(call),
                    arguments_digest,
                    requested_by,
                    stamp,
                    deadline.isoformat(),
                ),
            )

        self._write("approval", op, conversation=conversation_id)
        record = self.find_approval(conversation_id, call.call_id, arguments_digest)
        assert record is not None
        return record

    def find_approval(
        self, conversation_id: str, call_id: str, arguments_digest: str
    ) -> ApprovalRecord | None:
        rows = self._read(
            "SELECT * FROM approvals WHERE conversation_id = ? AND call_id = ? "
            "AND arguments_digest = ?",
            (conversation_id, call_id, arguments_digest),
        )
        return approval_record(rows[0]) if rows else None

    def get_approval(self, approval_id: str) -> ApprovalRecord | None:
        rows = self._read("SELECT * FROM approvals WHERE id = ?", (approval_id,))
        return approval_record(rows[0]) if rows else None

    def decide_approval(
        self,
        approval_id: str,
        *,
        status: Literal["approved", "rejected", "expired"],
        decided_by: str | None,
        note: str = "",
    ) -> ApprovalRecord | None:
        stamp = now().isoformat()

        def op(db: C) -> int:
            # Conditional: of two deciders (a person and the deadline) only the first one wins.
            return self._execute(
                db,
                "UPDATE approvals SET status = ?, decided_by = ?, decided_at = ?, note = ? "
                "WHERE id = ? AND status = 'pending'",
                (status, decided_by, stamp, redact(note), approval_id),
            ).rowcount

        changed = self._write("approval_decided", op)
        record = self.get_approval(approval_id)
        if record is None:
            return None
        if not changed:
            raise ApprovalDecidedError(record)
        return record

    def list_approvals(
        self,
        *,
        status: ApprovalStatus | None = None,
        conversation_id: str | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> tuple[list[ApprovalRecord], int]:
        where: list[str] = []
        params: list[Any] = []
        if status is not None:
            where.append("status = ?")
            params.append(status)
        if conversation_id is not None:
            where.append("conversation_id = ?")
            params.append(conversation_id)
        clause = (" WHERE " + " AND ".join(where)) if where else ""
        rows = self._read(
            f"SELECT * FROM approvals{clause} ORDER BY requested_at DESC, {self.ORDER} DESC "
            "LIMIT ? OFFSET ?",
            (*params, limit, offset),
        )
        total = self._read(f"SELECT count(*) AS n FROM approvals{clause}", params)[0]["n"]
        return [approval_record(row) for row in rows], int(total)

    # --- direct calls -----------------------------------------------------------------------------

    def begin_direct_call(
        self, call: ToolCall, *, called_by: str | None, approved_by: str | None
    ) -> None:
        stamp = now().isoformat()

        def op(db: C) -> None:
            self._execute(
                db,
                "INSERT INTO direct_calls (call_id, tool, arguments, called_by, approved_by, "
                "state, started_at) VALUES (?, ?, ?, ?, ?, 'started', ?)",
                (call.call_id, call.name, arguments_json(call), called_by, approved_by, stamp),
            )

        self._write("direct_call", op)

    def finish_direct_call(self, run: ToolRun) -> None:
        stamp = now().isoformat()

        def op(db: C) -> None:
            self._execute(
                db,
                "UPDATE direct_calls SET state = 'finished', output = ?, error = ?, "
                "duration_ms = ?, finished_at = ? WHERE call_id = ?",
                (redact(run.output), run.error, run.duration_ms, stamp, run.call_id),
            )

        self._write("direct_call_finished", op)

    def direct_calls(
        self, *, limit: int = 100, offset: int = 0
    ) -> tuple[list[DirectCallRecord], int]:
        rows = self._read(
            f"SELECT * FROM direct_calls ORDER BY started_at DESC, {self.ORDER} DESC "
            "LIMIT ? OFFSET ?",
            (limit, offset),
        )
        total = self._read("SELECT count(*) AS n FROM direct_calls")[0]["n"]
        return [direct_call_record(row) for row in rows], int(total)

    # --- the audit record -------------------------------------------------------------------------

    def audit_tail(self, chain: str) -> AuditRow | None:
        return tail_of(self._read, chain)

    # Audit rows waiting for their conversation's next write (`stage_audit`); made on first
    # use, as the stores' own __init__ do not call this class's.
    _staged: dict[str, list[tuple[str, Link]]] = {}  # noqa: RUF012 - replaced per instance
    _staging = threading.Lock()

    def append_linked(self, chain: str, link: Link) -> None:
        self._write("audit", lambda db: self._link(db, chain, link))

    def stage_audit(self, conversation_id: str, chain: str, link: Link) -> None:
        with SQLJournal._staging:  # one lock for the rare first use; then the instance's
            if "_staged" not in self.__dict__:
                self._staged = {}
                self._staging = threading.Lock()
        with self._staging:
            self._staged.setdefault(conversation_id, []).append((chain, link))

    def _lock_audit_chain(self, db: C, chain: str) -> None:
        """Hold off other appenders of `chain` until this transaction ends (a store whose
        writes all go through one connection needs nothing)."""

    def _link(self, db: C, chain: str, link: Link) -> None:
        self._lock_audit_chain(db, chain)  # the tail read below stays the tail
        found = self._execute(db, TAIL_SQL, [chain]).fetchall()
        rows = link(audit_row(found[0]) if found else None)
        if any(row.chain != chain for row in rows):
            raise ValueError(f"audit rows of another chain than {chain!r}")
        self._executemany(db, INSERT_SQL, rows)

    def _with_staged(self, conversation_id: str, fn: Callable[[C], T]) -> Callable[[C], T]:
        with self._staging:
            staged = self._staged.pop(conversation_id, None)
        if not staged:
            return fn

        def both(db: C) -> T:
            # The step first: its own locks (the conversation's) before the chain's, in the
            # order every other writer takes them.
            result = fn(db)
            for chain, link in staged:
                self._link(db, chain, link)
            return result

        return both

    def append_audit(self, chain: str, rows: Sequence[AuditRow]) -> None:
        if any(row.chain != chain for row in rows):
            raise ValueError(f"audit rows of another chain than {chain!r}")

        def op(db: C) -> None:
            self._executemany(db, INSERT_SQL, rows)

        self._write("audit", op)

    def audit_entries(
        self, *, chain: str | None = None, since: datetime | None = None
    ) -> Iterator[AuditRow]:
        return iter_rows(self._read, chain, since)

    def audit_chains(self) -> list[str]:
        return chains_of(self._read)


def migrated_message(version: int) -> str:
    """The one log line of a migration from `version` (0: a new journal), as a %-format of the
    journal's name and the version it now has: one line, not one per schema step."""
    if version == 0:
        return "journal %s created (schema version %d)"
    return f"journal %s migrated from schema version {version} to %d"
