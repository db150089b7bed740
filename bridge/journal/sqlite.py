"""`SQLiteJournal`: the durable journal, one SQLite file in WAL mode (see `bridge.journal`).

Durability: every write is committed (alone, or with concurrent ones) with
``synchronous=FULL`` before its method returns, so its state survives a crash of the process
*and* of the machine. NORMAL would be enough against ``kill -9`` in WAL mode but may lose the
last transactions on power loss, and a lost "started" would let a call run twice after the
reboot: exactly-once needs FULL.

Threads: one connection, owned by one thread (`bridge.journal._writer.GroupCommitWriter`);
callers queue their operations to it. Concurrent writes are committed together, one fsync per
group, and each caller returns only once its own write is committed.

Schema: versioned with ``PRAGMA user_version``; `MIGRATIONS[i]` moves a file from version i
to i + 1, applied in one transaction on open. A file from a newer toolbridge is refused.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, TypeVar

from bridge.errors import UsageError, redact
from bridge.journal._rows import (
    CONVERSATION_SELECT,
    approval_record,
    arguments_json,
    call_record,
    conversation_record,
    message_record,
    platform_state_record,
    state_json,
)
from bridge.journal._writer import GroupCommitWriter
from bridge.journal.base import Journal
from bridge.journal.migrations import MIGRATIONS, SCHEMA_VERSION
from bridge.journal.records import (
    ApprovalDecidedError,
    ApprovalRecord,
    ApprovalStatus,
    CallRecord,
    ConversationRecord,
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

__all__ = ["SCHEMA_VERSION", "SQLiteJournal"]

logger = logging.getLogger(__name__)

T = TypeVar("T")


class SQLiteJournal(Journal):
    """A journal in one SQLite file (WAL, ``synchronous=FULL``), safe across threads.

    Args:
        path: the database file (created with its folder if missing) or ``":memory:"``.
        on_write: called with the step name ("conversation", "message", "received",
            "started", "finished", "submitting", "submitted", "message_end",
            "platform_conversation", "platform_state", "approval", "approval_decided") after
            each write is
            durable;
            for metrics and fault injection. An exception it raises propagates.

    Raises:
        UsageError: the file cannot be opened, is not a toolbridge journal, or was written by
            a newer toolbridge.
    """

    def __init__(self, path: str | Path, *, on_write: Callable[[str], None] | None = None) -> None:
        self.path = str(path)
        self.on_write = on_write
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        try:
            self._db = sqlite3.connect(
                self.path, isolation_level=None, check_same_thread=False, timeout=30.0
            )
            self._db.row_factory = sqlite3.Row
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.execute("PRAGMA foreign_keys=ON")
            self._migrate()
        except sqlite3.Error as exc:
            raise UsageError(f"cannot open the journal {self.path}: {exc}") from None
        self._writer = GroupCommitWriter(self._db)

    def __repr__(self) -> str:
        return f"SQLiteJournal({self.path!r})"

    def _migrate(self) -> None:
        version = int(self._db.execute("PRAGMA user_version").fetchone()[0])
        if version > SCHEMA_VERSION:
            raise UsageError(
                f"the journal {self.path} has schema version {version}, newer than this "
                f"toolbridge understands ({SCHEMA_VERSION}); upgrade toolbridge"
            )
        for target in range(version + 1, SCHEMA_VERSION + 1):
            try:
                self._db.executescript(
                    "BEGIN IMMEDIATE;" + MIGRATIONS[target - 1] + f"PRAGMA user_version={target};"
                    "COMMIT;"
                )
            except sqlite3.Error:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise
            logger.info("journal %s migrated to schema version %d", self.path, target)

    def _write(self, step: str, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run `fn` in a (group) transaction; `on_write(step)` once it is committed."""
        result = self._writer.run(fn, write=True)
        if self.on_write is not None:
            self.on_write(step)
        return result

    def _read(self, sql: str, params: Sequence[Any] = ()) -> list[sqlite3.Row]:
        rows: list[sqlite3.Row] = self._writer.run(
            lambda db: db.execute(sql, params).fetchall(), write=False
        )
        return rows

    def close(self) -> None:
        self._writer.close()

    # --- conversations and messages ---------------------------------------------------------------

    def add_conversation(self, conversation_id: str, *, end_user_id: str | None = None) -> None:
        stamp = now().isoformat()

        def op(db: sqlite3.Connection) -> None:
            db.execute(
                "INSERT INTO conversations (id, end_user_id, created_at, updated_at) "
                "VALUES (?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET "
                "end_user_id = coalesce(conversations.end_user_id, excluded.end_user_id)",
                (conversation_id, end_user_id, stamp, stamp),
            )

        self._write("conversation", op)

    def get_conversation(self, conversation_id: str) -> ConversationRecord | None:
        rows = self._read(CONVERSATION_SELECT + " WHERE c.id = ?", (conversation_id,))
        return conversation_record(rows[0]) if rows else None

    def list_conversations(
        self, *, limit: int = 50, offset: int = 0
    ) -> tuple[list[ConversationRecord], int]:
        rows = self._read(
            CONVERSATION_SELECT + " ORDER BY c.updated_at DESC, c.rowid DESC LIMIT ? OFFSET ?",
            (limit, offset),
        )
        total = self._read("SELECT count(*) FROM conversations")[0][0]
        return [conversation_record(row) for row in rows], int(total)

    def begin_message(self, conversation_id: str, query: str, *, sent_by: str | None = None) -> int:
        stamp = now().isoformat()

        def op(db: sqlite3.Connection) -> int:
            db.execute(
                "INSERT INTO conversations (id, created_at, updated_at) VALUES (?, ?, ?) "
                "ON CONFLICT (id) DO UPDATE SET updated_at = excluded.updated_at",
                (conversation_id, stamp, stamp),
            )
            cursor = db.execute(
                "INSERT INTO messages (conversation_id, query, status, created_at, sent_by, "
                "replica) VALUES (?, ?, 'running', ?, ?, ?)",
                (conversation_id, redact(query), stamp, sent_by, self.replica),
            )
            assert cursor.lastrowid is not None
            return cursor.lastrowid

        return self._write("message", op)

    def record_end(self, message_id: int, end: MessageEnd) -> None:
        stamp = now().isoformat()

        def op(db: sqlite3.Connection) -> None:
            db.execute(
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
            db.execute(
                "UPDATE conversations SET updated_at = ? WHERE id = "
                "(SELECT conversation_id FROM messages WHERE id = ?)",
                (stamp, message_id),
            )

        self._write("message_end", op)

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

        def op(db: sqlite3.Connection) -> None:
            db.execute(
                "INSERT INTO conversations (id, created_at, updated_at) VALUES (?, ?, ?) "
                "ON CONFLICT (id) DO NOTHING",
                (conversation_id, stamp, stamp),
            )
            last = db.execute(
                "SELECT seq, batch_id, submitted_at FROM batches WHERE conversation_id = ? "
                "ORDER BY seq DESC LIMIT 1",
                (conversation_id,),
            ).fetchone()
            if last is not None and last["batch_id"] == batch.batch_id and not last["submitted_at"]:
                seq = int(last["seq"])  # the same batch again (recovery): keep the first row
            else:
                calls = [call.model_dump(mode="json") for call in batch.calls]
                cursor = db.execute(
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
                )
                assert cursor.lastrowid is not None
                seq = cursor.lastrowid
            db.executemany(
                "INSERT INTO calls (conversation_id, call_id, seq, message_id, name, arguments, "
                "state, updated_at) VALUES (?, ?, ?, ?, ?, ?, 'received', ?) "
                "ON CONFLICT (conversation_id, call_id) DO NOTHING",
                [
                    (conversation_id, c.call_id, seq, message_id, c.name, arguments_json(c), stamp)
                    for c in batch.calls
                ],
            )
            if state is not None:
                _upsert_state(db, conversation_id, state, stamp)

        self._write("received", op)

    def start(self, conversation_id: str, call_ids: Sequence[str]) -> None:
        stamp = now().isoformat()

        def op(db: sqlite3.Connection) -> None:
            db.executemany(
                "UPDATE calls SET state = 'started', started_at = ?, updated_at = ? "
                "WHERE conversation_id = ? AND call_id = ? AND state IN ('received', 'started')",
                [(stamp, stamp, conversation_id, call_id) for call_id in call_ids],
            )

        self._write("started", op)

    def finish(self, conversation_id: str, run: ToolRun) -> None:
        stamp = now().isoformat()

        def op(db: sqlite3.Connection) -> None:
            # An upsert: a call finished without being received (direct use) is recorded too.
            db.execute(
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

        self._write("finished", op)

    def submitting(self, conversation_id: str, batch: ToolBatch) -> None:
        self._mark_batch(conversation_id, batch, "submitting", ("finished",))

    def submit(self, conversation_id: str, batch: ToolBatch) -> None:
        self._mark_batch(conversation_id, batch, "submitted", ("finished", "submitting"))

    def _mark_batch(
        self, conversation_id: str, batch: ToolBatch, state: str, before: tuple[str, ...]
    ) -> None:
        stamp = now().isoformat()
        column = f"{state}_at"  # a column name of ours, never input

        def op(db: sqlite3.Connection) -> None:
            db.execute(
                f"UPDATE batches SET {column} = ? WHERE seq = (SELECT max(seq) FROM batches "
                "WHERE conversation_id = ? AND batch_id = ? AND submitted_at IS NULL)",
                (stamp, conversation_id, batch.batch_id),
            )
            marks = ", ".join("?" for _ in before)
            db.executemany(
                f"UPDATE calls SET state = ?, updated_at = ? "
                f"WHERE conversation_id = ? AND call_id = ? AND state IN ({marks})",
                [(state, stamp, conversation_id, call.call_id, *before) for call in batch.calls],
            )

        self._write(state, op)

    def get_call(self, conversation_id: str, call_id: str) -> CallRecord | None:
        rows = self._read(
            "SELECT * FROM calls WHERE conversation_id = ? AND call_id = ?",
            (conversation_id, call_id),
        )
        return call_record(rows[0]) if rows else None

    def calls(self, conversation_id: str) -> list[CallRecord]:
        rows = self._read(
            "SELECT * FROM calls WHERE conversation_id = ? ORDER BY seq, rowid", (conversation_id,)
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

        def op(db: sqlite3.Connection) -> None:
            db.execute(
                "INSERT INTO platform_conversations (conversation_id, platform_conversation_id, "
                "created_at, reason) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
                (conversation_id, platform_conversation_id, stamp, redact(reason)),
            )
            db.execute(
                "UPDATE conversations SET platform_conversation_id = ?, updated_at = ? "
                "WHERE id = ?",
                (platform_conversation_id, stamp, conversation_id),
            )

        self._write("platform_conversation", op)

    def platform_conversations(self, conversation_id: str) -> list[PlatformConversationRecord]:
        first = self._read("SELECT created_at FROM conversations WHERE id = ?", (conversation_id,))
        if not first:
            return []
        rows = self._read(
            "SELECT * FROM platform_conversations WHERE conversation_id = ? "
            "ORDER BY created_at, rowid",
            (conversation_id,),
        )
        return [
            PlatformConversationRecord(
                platform_conversation_id=conversation_id,
                created_at=datetime.fromisoformat(first[0]["created_at"]),
            ),
            *(
                PlatformConversationRecord(
                    platform_conversation_id=row["platform_conversation_id"],
                    created_at=datetime.fromisoformat(row["created_at"]),
                    reason=row["reason"],
                )
                for row in rows
            ),
        ]

    # --- platform state ---------------------------------------------------------------------------

    def save_platform_state(self, conversation_id: str, snapshot: StateSnapshot) -> None:
        stamp = now().isoformat()

        def op(db: sqlite3.Connection) -> None:
            db.execute(
                "INSERT INTO conversations (id, created_at, updated_at) VALUES (?, ?, ?) "
                "ON CONFLICT (id) DO NOTHING",
                (conversation_id, stamp, stamp),
            )
            _upsert_state(db, conversation_id, snapshot, stamp)

        self._write("platform_state", op)

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

        def op(db: sqlite3.Connection) -> None:
            db.execute(
                "INSERT INTO conversations (id, created_at, updated_at) VALUES (?, ?, ?) "
                "ON CONFLICT (id) DO NOTHING",
                (conversation_id, stamp, stamp),
            )
            db.execute(
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

        self._write("approval", op)
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

        def op(db: sqlite3.Connection) -> int:
            # Conditional: of two deciders (a person and the deadline) only the first one wins.
            cursor = db.execute(
                "UPDATE approvals SET status = ?, decided_by = ?, decided_at = ?, note = ? "
                "WHERE id = ? AND status = 'pending'",
                (status, decided_by, stamp, redact(note), approval_id),
            )
            return cursor.rowcount

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
            f"SELECT * FROM approvals{clause} ORDER BY requested_at DESC, rowid DESC "
            "LIMIT ? OFFSET ?",
            (*params, limit, offset),
        )
        total = self._read(f"SELECT count(*) FROM approvals{clause}", params)[0][0]
        return [approval_record(row) for row in rows], int(total)


def _upsert_state(
    db: sqlite3.Connection, conversation_id: str, snapshot: StateSnapshot, stamp: str
) -> None:
    db.execute(
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
