"""The journal steps of a conversation's run in PostgreSQL, each one statement: `PostgresSteps`,
the hot half of `PostgresJournal`.

`SQLJournal` writes a step as a transaction of several statements, which is what SQLite wants
(its writes cost no round trip). On PostgreSQL every statement is a round trip and BEGIN and
COMMIT are two more, and after `bind_replica` a separate read of the lease came first. Here the
steps a run takes (a message begun and ended, a tool batch received, calls started and
finished, a batch submitting and submitted, a conversation added) are each one statement,
committed on its own (the connection is in autocommit mode):

- every row the step writes is in that statement, in data-modifying ``WITH`` queries, so they
  commit together or not at all, exactly as the transaction did;
- the fence is in the statement too: ``lease`` reads this replica's lease row at the generation
  it holds ``FOR SHARE`` (a takeover's UPDATE waits for the write, and a write after a takeover
  finds no row: READ COMMITTED re-checks the ``WHERE`` on the row's newest version), and every
  write joins it, so a fenced step writes nothing and returns no row (`LeaseLostError`);
- audit rows staged for the conversation (`stage_audit`) still commit with the step: then the
  step runs in a transaction with them, under the chain's lock, as before.

``receive`` reads the conversation's last batch before it inserts. Fenced, it is one statement
too: only the lease's holder at that generation writes the conversation, one step after
another (a run takes the lease again: a new generation). Unfenced (no replica bound), other
processes may write the conversation at the same time: it stays a transaction of two
statements (the conversation's advisory lock, then the rows).

``receive`` and ``finish`` return the calls' rows as they left them; `get_call` answers the
loop's read-back of those calls (planning a batch just received, collecting outputs just
finished) from them, once each, while the lease's generation they were written under is held
(no other process can have written them since).

``add_conversation`` repeated for a conversation this process added, bringing nothing the row
lacks, writes nothing (conversations are never deleted: the upsert would change nothing).
The other writes (approvals, direct calls, the platform conversation, the audit appended on
its own) keep `SQLJournal`'s statements.

The steps here write what `SQLJournal`'s steps of the same name write: a change to what a step
writes goes into both (the journal tests run every store against the same expectations).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from bridge.errors import redact
from bridge.journal._rows import arguments_json, call_record, state_json
from bridge.journal.postgres_connect import pg_params, pg_text
from bridge.journal.records import (
    CallRecord,
    LeaseLostError,
    MessageEnd,
    StateSnapshot,
    now,
    redacted_arguments,
)
from bridge.types import ToolBatch, ToolRun

if TYPE_CHECKING:
    import psycopg

__all__ = ["PostgresSteps"]

T = TypeVar("T")
Row = dict[str, Any]

KEPT_MAX = 10_000
"""At most this many conversations (and messages) are remembered by `add_conversation` (and
`record_end`)."""
_UNFENCED = "lease AS (SELECT 1 AS ok)"
_FENCED = (
    "lease AS (SELECT 1 AS ok FROM leases WHERE conversation_id = %s AND owner = %s "
    "AND generation = %s FOR SHARE)"
)
_STATE_UPSERT = (
    "state AS (INSERT INTO platform_states (conversation_id, platform_conversation_id, "
    "platform, state, writer, updated_at) SELECT %s, %s, %s, %s, %s, %s FROM lease "
    "ON CONFLICT (conversation_id, platform_conversation_id) DO UPDATE SET "
    "platform = excluded.platform, state = excluded.state, writer = excluded.writer, "
    "updated_at = excluded.updated_at)"
)


class _FencedError(Exception):
    """A step found no lease row at the generation held (raised inside its transaction, so
    it rolls back; `_finish` turns it into `LeaseLostError`)."""

    def __init__(self, conversation: str, held: int | None) -> None:
        super().__init__(conversation)
        self.conversation = conversation
        self.held = held


class PostgresSteps:
    """A run's journal steps as one statement each (see the module's docstring)."""

    if TYPE_CHECKING:  # provided by PostgresJournal and SQLJournal
        replica: str | None
        on_write: Callable[[str], None] | None
        _held: dict[str, int]
        _held_lock: threading.Lock
        _staged: dict[str, list[Any]]

        def _run(self, fn: Callable[[psycopg.Connection[Row]], T]) -> T: ...

        def _autocommit(self, fn: Callable[[psycopg.Connection[Row]], T]) -> T: ...

        def _with_staged(
            self, conversation_id: str, fn: Callable[[psycopg.Connection[Row]], T]
        ) -> Callable[[psycopg.Connection[Row]], T]: ...

        def _lease_owner(self, conversation_id: str) -> str | None: ...

        def _drop_prefetched(self, conversation_id: str | None) -> None: ...

        def _hold_prefetched(self, conversation_id: str) -> Any: ...

        def _prefetch_begun(self, conversation_id: str, begun: Any, stamp: str) -> None: ...

    _conversation_of: dict[int, str]
    """Message -> its conversation, for the messages this process began (`record_end`)."""
    _kept: dict[str, tuple[bool, bool]]
    """Conversation this process added -> whether its row has an end user and an owner
    (`add_conversation` skips a repeat that would change nothing)."""
    _written: dict[tuple[str, str], tuple[int, CallRecord]]
    """(conversation, call) -> the lease generation held and the call's row as this process's
    last write of it left it (`receive`, `finish`): `get_call` answers once from it while the
    same generation is held (no other process can have written the call since: fencing)."""

    def _note_calls(self, conversation: str, held: int | None, rows: Sequence[Row]) -> None:
        """Keep `rows` (calls of `conversation` as just written under `held`) for `get_call`."""
        if held is None:  # unfenced (no replica bound): another process may write them
            return
        records = [call_record(row) for row in rows]
        with self._held_lock:
            if len(self._written) >= KEPT_MAX:
                self._written.clear()
            for record in records:
                self._written[conversation, record.call_id] = (held, record)

    def _drop_calls(self, conversation: str, call_ids: Sequence[str]) -> None:
        with self._held_lock:
            for call_id in call_ids:
                self._written.pop((conversation, pg_text(call_id)), None)

    def get_call(self, conversation_id: str, call_id: str) -> CallRecord | None:
        # Read back right after this process wrote it (the loop plans a batch it just
        # received, and collects the outputs it just finished): the row it wrote, once.
        with self._held_lock:
            written = self._written.pop((conversation_id, pg_text(call_id)), None)
            held = self._held.get(conversation_id)
        if written is not None and written[0] == held:
            return written[1]
        record: CallRecord | None = super().get_call(conversation_id, call_id)  # type: ignore[misc]
        return record

    # --- primitives ------------------------------------------------------------------------------

    def _step(
        self,
        step: str,
        fn: Callable[[psycopg.Connection[Row]], T],
        conversation: str | None = None,
    ) -> T:
        """Run `fn` (one statement) committed on its own, or in a transaction with the audit
        rows staged for `conversation`; `on_write(step)` once it is committed."""
        wrapped = fn
        if conversation is not None and self._staged:
            wrapped = self._with_staged(conversation, fn)
        if wrapped is fn:
            return self._finish(step, lambda: self._autocommit(fn))
        return self._finish(step, lambda: self._run(wrapped))

    def _lease(self, conversation: str) -> tuple[str, list[Any], int | None]:
        """The ``lease`` query of a write of `conversation`, its parameters and the held
        generation: one row when this replica may write it (always, before `bind_replica`)."""
        if self.replica is None:
            return _UNFENCED, [], None
        with self._held_lock:
            held = self._held.get(conversation)
        return _FENCED, [conversation, self.replica, held], held

    def _fenced(self, conversation: str, held: int | None) -> _FencedError:
        return _FencedError(conversation, held)

    def _finish(self, step: str, run: Callable[[], T]) -> T:
        """`run()`, then `on_write(step)`; a step found fenced raises `LeaseLostError`, naming
        the lease's holder once the step's connection went back to the pool."""
        try:
            result = run()
        except _FencedError as fenced:
            owner = self._lease_owner(fenced.conversation)
            raise LeaseLostError(fenced.conversation, fenced.held, owner) from None
        if self.on_write is not None:
            self.on_write(step)
        return result

    def _fenced_write(
        self,
        step: str,
        conversation: str,
        queries: Sequence[tuple[str, Sequence[Any]]],
        final: tuple[str, Sequence[Any]] = ("SELECT ok FROM lease", ()),
    ) -> Row:
        """One statement, ``WITH lease, *queries`` then `final` (each a query and its
        parameters): its first row, or `LeaseLostError` when it returned none (`final` returns
        a row whenever ``lease`` has one)."""
        if step != "message":  # `begin_message` brings what was read with the lease up to date
            self._drop_prefetched(conversation)
        lease, params, held = self._lease(conversation)
        sql = "WITH " + ", ".join([lease, *(query for query, _ in queries)]) + " " + final[0]
        values = pg_params([*params, *(value for _, args in (*queries, final) for value in args)])

        def op(db: psycopg.Connection[Row]) -> Row:
            row: Row | None = db.execute(sql, values).fetchone()
            if row is None:
                raise self._fenced(conversation, held)
            return row

        return self._step(step, op, conversation)

    # --- the steps -------------------------------------------------------------------------------

    def add_conversation(
        self,
        conversation_id: str,
        *,
        end_user_id: str | None = None,
        created_by: str | None = None,
    ) -> None:
        with self._held_lock:
            kept = self._kept.get(conversation_id)
        if (
            kept is not None
            and (end_user_id is None or kept[0])
            and (created_by is None or kept[1])
        ):
            # The row exists (conversations are never deleted) and keeps the values it has:
            # the upsert below would change nothing.
            if self.on_write is not None:
                self.on_write("conversation")
            return
        stamp = now().isoformat()
        self._drop_prefetched(conversation_id)
        params = pg_params((conversation_id, end_user_id, stamp, stamp, created_by))
        row: Row | None = self._step(
            "conversation",
            lambda db: db.execute(
                "INSERT INTO conversations (id, end_user_id, created_at, updated_at, created_by) "
                "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (id) DO UPDATE SET "
                "end_user_id = coalesce(conversations.end_user_id, excluded.end_user_id), "
                "created_by = coalesce(conversations.created_by, excluded.created_by) "
                "RETURNING end_user_id IS NOT NULL AS has_user, "
                "created_by IS NOT NULL AS has_owner",
                params,
            ).fetchone(),
        )
        if row is not None:
            with self._held_lock:
                if len(self._kept) >= KEPT_MAX:
                    self._kept.clear()
                self._kept[conversation_id] = (bool(row["has_user"]), bool(row["has_owner"]))

    def begin_message(
        self,
        conversation_id: str,
        query: str,
        *,
        sent_by: str | None = None,
        traceparent: str | None = None,
    ) -> int:
        stamp = now().isoformat()
        begun = self._hold_prefetched(conversation_id)
        row = self._fenced_write(
            "message",
            conversation_id,
            [
                (
                    "conversation AS (INSERT INTO conversations (id, created_at, updated_at) "
                    "SELECT %s, %s, %s FROM lease "
                    "ON CONFLICT (id) DO UPDATE SET updated_at = excluded.updated_at)",
                    (conversation_id, stamp, stamp),
                )
            ],
            (
                "INSERT INTO messages (conversation_id, query, status, created_at, sent_by, "
                "replica, traceparent) SELECT %s, %s, 'running', %s, %s, %s, %s FROM lease "
                "RETURNING id",
                (conversation_id, redact(query), stamp, sent_by, self.replica, traceparent),
            ),
        )
        message_id = int(row["id"])
        if begun is not None:
            self._prefetch_begun(conversation_id, begun, stamp)
        with self._held_lock:
            if len(self._conversation_of) >= KEPT_MAX:  # messages never ended (a crash)
                self._conversation_of.clear()  # `record_end` then reads the message's
            self._conversation_of[message_id] = conversation_id
        return message_id

    def record_end(self, message_id: int, end: MessageEnd) -> None:
        with self._held_lock:
            conversation = self._conversation_of.pop(message_id, None)
        if conversation is None:  # begun by another process: find its conversation first
            super().record_end(message_id, end)  # type: ignore[misc]
            return
        stamp = now().isoformat()
        try:
            self._fenced_write(
                "message_end",
                conversation,
                [
                    (
                        "message AS (UPDATE messages SET status = %s, answer = %s, "
                        "error_code = %s, error_message = %s, request_ids = %s, rounds = %s, "
                        "finished_at = %s, interrupt_id = %s, platform_settled = %s "
                        "FROM lease WHERE id = %s RETURNING conversation_id)",
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
                    ),
                    (
                        "touched AS (UPDATE conversations SET updated_at = %s "
                        "WHERE id IN (SELECT conversation_id FROM message))",
                        (stamp,),
                    ),
                ],
            )
        except BaseException:
            with self._held_lock:  # not ended: a retry still knows where it belongs
                self._conversation_of.setdefault(message_id, conversation)
            raise

    def receive(
        self,
        conversation_id: str,
        batch: ToolBatch,
        *,
        message_id: int | None,
        state: StateSnapshot | None = None,
    ) -> None:
        stamp = now().isoformat()
        self._drop_prefetched(conversation_id)
        lease, lease_params, held = self._lease(conversation_id)
        # The conversation's lock (read-then-insert below), taken only while the lease is held.
        lock = (
            f"WITH {lease} SELECT pg_advisory_xact_lock(hashtextextended(%s, 0)) FROM lease",
            pg_params([*lease_params, conversation_id]),
        )
        calls = [call.model_dump(mode="json") for call in batch.calls]
        queries: list[tuple[str, Sequence[Any]]] = [
            (
                "conversation AS (INSERT INTO conversations (id, created_at, updated_at) "
                "SELECT %s, %s, %s FROM lease ON CONFLICT (id) DO NOTHING)",
                (conversation_id, stamp, stamp),
            ),
            (
                # The same batch again (recovery): its first row is kept.
                "same AS (SELECT seq FROM lease, (SELECT seq, batch_id, submitted_at "
                "FROM batches WHERE conversation_id = %s ORDER BY seq DESC LIMIT 1) last "
                "WHERE batch_id = %s AND (submitted_at IS NULL OR submitted_at = ''))",
                (conversation_id, batch.batch_id),
            ),
            (
                "added AS (INSERT INTO batches (conversation_id, batch_id, message_id, calls, "
                "resume, received_at) SELECT %s, %s, %s::bigint, %s, %s, %s FROM lease "
                "WHERE NOT EXISTS (SELECT 1 FROM same) RETURNING seq)",
                (
                    conversation_id,
                    batch.batch_id,
                    message_id,
                    redact(json.dumps(calls, ensure_ascii=False)),
                    redact(json.dumps(batch.resume, ensure_ascii=False, default=str)),
                    stamp,
                ),
            ),
            (
                "batch AS (SELECT seq FROM same UNION ALL SELECT seq FROM added)",
                (),
            ),
            (
                "received AS (INSERT INTO calls (conversation_id, call_id, seq, message_id, "
                "name, arguments, state, updated_at) SELECT %s, c.call_id, batch.seq, %s::bigint, "
                "c.name, "
                "c.arguments, 'received', %s FROM batch, unnest(%s::text[], %s::text[], "
                "%s::text[]) WITH ORDINALITY AS c (call_id, name, arguments, n) ORDER BY c.n "
                "ON CONFLICT (conversation_id, call_id) DO NOTHING RETURNING calls.*)",
                (
                    conversation_id,
                    message_id,
                    stamp,
                    pg_params([c.call_id for c in batch.calls]),
                    pg_params([c.name for c in batch.calls]),
                    pg_params([arguments_json(c) for c in batch.calls]),
                ),
            ),
        ]
        if state is not None:
            queries.append(_state(conversation_id, state, stamp))
        # Every write reads ``FROM lease``. The statement returns one row per call of the batch
        # as it now is (those it inserted, and those that were there already: recovery; its
        # snapshot has them, not its own inserts), and one row at least while ``lease`` has
        # one (the calls' columns empty for a batch without calls).
        ids = pg_params([c.call_id for c in batch.calls])
        final = (
            " SELECT lease.ok, written.* FROM lease LEFT JOIN (SELECT * FROM received "
            "UNION ALL SELECT * FROM calls WHERE conversation_id = %s "
            "AND call_id = ANY(%s::text[])) written ON true"
        )
        values = [value for _, args in queries for value in args]
        values += [conversation_id, ids]
        if held is None:
            # Unfenced (no replica bound): other processes may write the conversation at the
            # same time, so its lock comes first, in a statement of its own (a statement's
            # snapshot is taken when it starts: the last batch is read after the lock).
            rows = "WITH " + ", ".join([_UNFENCED, *(q for q, _ in queries)]) + final
            unfenced = pg_params(values)

            def op(db: psycopg.Connection[Row]) -> list[Row]:
                if db.execute(*lock).fetchone() is None:
                    raise self._fenced(conversation_id, held)
                result: list[Row] = db.execute(rows, unfenced).fetchall()
                return result

            wrapped: Callable[[psycopg.Connection[Row]], list[Row]] = op
            if self._staged:
                wrapped = self._with_staged(conversation_id, op)
            written = self._finish("received", lambda: self._run(wrapped))
        else:
            # Fenced: only the holder of the lease at this generation writes the conversation,
            # one step after another (each run takes the lease again: a new generation), and
            # a takeover waits for this statement (``FOR SHARE``): no lock, one statement.
            sql = "WITH " + ", ".join([lease, *(q for q, _ in queries)]) + final
            fenced = pg_params([*lease_params, *values])

            def one(db: psycopg.Connection[Row]) -> list[Row]:
                result: list[Row] = db.execute(sql, fenced).fetchall()
                if not result:
                    raise self._fenced(conversation_id, held)
                return result

            written = self._step("received", one, conversation_id)
        self._note_calls(conversation_id, held, [r for r in written if r["call_id"] is not None])

    def start(
        self,
        conversation_id: str,
        call_ids: Sequence[str],
        *,
        traceparents: Mapping[str, str] | None = None,
    ) -> None:
        stamp = now().isoformat()
        spans = traceparents or {}
        self._drop_calls(conversation_id, call_ids)
        self._fenced_write(
            "started",
            conversation_id,
            [
                (
                    "started AS (UPDATE calls SET state = 'started', started_at = %s, "
                    "updated_at = %s, traceparent = c.traceparent FROM lease, "
                    "unnest(%s::text[], %s::text[]) AS c (call_id, traceparent) "
                    "WHERE calls.conversation_id = %s AND calls.call_id = c.call_id "
                    "AND calls.state IN ('received', 'started'))",
                    (
                        stamp,
                        stamp,
                        pg_params(list(call_ids)),
                        pg_params([spans.get(call_id) for call_id in call_ids]),
                        conversation_id,
                    ),
                )
            ],
        )

    def finish(self, conversation_id: str, run: ToolRun) -> None:
        stamp = now().isoformat()
        with self._held_lock:
            held = self._held.get(conversation_id) if self.replica is not None else None
        # An upsert: a call finished without being received (direct use) is recorded too.
        row = self._fenced_write(
            "finished",
            conversation_id,
            [
                (
                    "finished AS (INSERT INTO calls (conversation_id, call_id, seq, name, "
                    "arguments, state, output, error, started_at, duration_ms, updated_at) "
                    "SELECT %s, %s, 0, %s, %s, 'finished', %s, %s, %s, %s::float8, %s FROM lease "
                    "ON CONFLICT (conversation_id, call_id) DO UPDATE SET state = 'finished', "
                    "output = excluded.output, error = excluded.error, "
                    "started_at = excluded.started_at, duration_ms = excluded.duration_ms, "
                    "updated_at = excluded.updated_at RETURNING calls.*)",
                    (
                        conversation_id,
                        run.call_id,
                        run.name,
                        json.dumps(
                            redacted_arguments(run.arguments), ensure_ascii=False, default=str
                        ),
                        redact(run.output),
                        run.error,
                        run.started_at.isoformat(),
                        run.duration_ms,
                        stamp,
                    ),
                )
            ],
            # The row as written (one whenever ``lease`` has one: the upsert always writes).
            ("SELECT * FROM finished", ()),
        )
        self._note_calls(conversation_id, held, [row])

    def submitting(self, conversation_id: str, batch: ToolBatch) -> None:
        self._mark(conversation_id, batch, "submitting", ("finished",))

    def submit(
        self, conversation_id: str, batch: ToolBatch, *, state: StateSnapshot | None = None
    ) -> None:
        self._mark(conversation_id, batch, "submitted", ("finished", "submitting"), state)

    def _mark(
        self,
        conversation_id: str,
        batch: ToolBatch,
        state: str,
        before: tuple[str, ...],
        snapshot: StateSnapshot | None = None,
    ) -> None:
        stamp = now().isoformat()
        column = f"{state}_at"  # a column name of ours, never input
        self._drop_calls(conversation_id, [call.call_id for call in batch.calls])
        queries: list[tuple[str, Sequence[Any]]] = []
        if snapshot is not None:
            queries.append(_state(conversation_id, snapshot, stamp))
        queries += [
            (
                f"batch AS (UPDATE batches SET {column} = %s FROM lease WHERE seq = "
                "(SELECT max(seq) FROM batches WHERE conversation_id = %s AND batch_id = %s "
                "AND submitted_at IS NULL))",
                (stamp, conversation_id, batch.batch_id),
            ),
            (
                "marked AS (UPDATE calls SET state = %s, updated_at = %s FROM lease "
                "WHERE conversation_id = %s AND call_id = ANY(%s) AND state = ANY(%s))",
                (
                    state,
                    stamp,
                    conversation_id,
                    pg_params([call.call_id for call in batch.calls]),
                    list(before),
                ),
            ),
        ]
        self._fenced_write(state, conversation_id, queries)


def _state(conversation_id: str, snapshot: StateSnapshot, stamp: str) -> tuple[str, Sequence[Any]]:
    """The upsert of a platform state, as a ``WITH`` query reading ``FROM lease``."""
    return (
        _STATE_UPSERT,
        (
            conversation_id,
            snapshot.platform_conversation_id,
            snapshot.platform,
            state_json(snapshot),
            snapshot.writer,
            stamp,
        ),
    )
