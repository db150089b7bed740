"""`PostgresJournal`: the journal in a PostgreSQL database, shared by any number of processes.

Durability: every write is one transaction, committed (``synchronous_commit`` as the server
says, ``on`` by default: flushed to the server's WAL) before its method returns, exactly the
points where `SQLiteJournal` commits, so recovery reads the same states after a crash.

Threads: a `psycopg_pool.ConnectionPool`; each operation borrows a connection for one
transaction. Writes that read-then-insert for one conversation (`receive`) take a
transaction-scoped advisory lock on it, so two writers of one conversation serialise the way
SQLite's single writer does.

Leases (daemon replicas): one row per conversation in ``leases`` (owner, generation,
expires_at on the database's clock). `acquire_lease` takes a free, expired or own lease and
bumps its generation; `claim_orphans` takes the expired leases of conversations with running
messages under ``SELECT ... FOR UPDATE SKIP LOCKED`` (two replicas scanning together never
claim the same one); after `bind_replica` every write of a conversation first reads its lease
row ``FOR SHARE`` in the same transaction and refuses (`LeaseLostError`) unless this replica
holds it at the generation it took: a takeover's UPDATE waits for a write in progress, and
a write after a takeover sees the new generation (fencing).

Schema: `bridge.journal.postgres_migrations`, the version in ``toolbridge_schema``; `migrate`
applies missing steps under ``pg_advisory_lock`` so two daemons starting together apply each
step once. A database from a newer toolbridge is refused.

Secrets: the password (in the URL, ``PGPASSWORD`` or ``~/.pgpass``, which libpq reads itself)
is never in `repr`, logs or errors: `safe_dsn` drops it and every error text goes through
`bridge.errors.redact`, with the password registered.

psycopg is imported lazily, so ``import bridge`` works without the ``postgres`` extra.
"""

from __future__ import annotations

import json
import logging
import threading
import uuid
from collections.abc import Callable, Collection, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from bridge.errors import UsageError, redact, register_secret
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
from bridge.journal.base import Journal
from bridge.journal.postgres_migrations import MIGRATIONS, SCHEMA_VERSION
from bridge.journal.records import (
    ApprovalDecidedError,
    ApprovalRecord,
    ApprovalStatus,
    CallRecord,
    ConversationRecord,
    Lease,
    LeaseHeldError,
    LeaseLostError,
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

if TYPE_CHECKING:
    import psycopg

__all__ = [
    "SCHEMA_VERSION",
    "PostgresJournal",
    "SchemaStatus",
    "migrate",
    "safe_dsn",
    "schema_status",
]

logger = logging.getLogger(__name__)

T = TypeVar("T")
Row = dict[str, Any]

INSTALL_HINT = "pip install 'toolbridge[postgres]'"
# One key for every toolbridge migration, on any database: pg_advisory_lock is per database.
MIGRATION_LOCK = 0x746F6F6C62726467  # "toolbrdg"
CONNECT_TIMEOUT = 30
POOL_MAX = 10


def _psycopg() -> Any:
    try:
        import psycopg
    except ImportError:
        raise UsageError(
            f"a postgresql:// journal needs psycopg, which is not installed: {INSTALL_HINT}"
        ) from None
    return psycopg


def _parts(dsn: str) -> dict[str, Any]:
    from psycopg.conninfo import conninfo_to_dict

    try:
        return conninfo_to_dict(dsn)
    except Exception:
        raise UsageError(
            "the PostgreSQL URL cannot be parsed; expected postgresql://user[:password]@host"
            "[:port]/database[?options]"
        ) from None


def safe_dsn(dsn: str) -> str:
    """`dsn` without its password, for logs, errors, `repr` and the API."""
    _psycopg()
    from psycopg.conninfo import make_conninfo

    parts = _parts(dsn)
    parts.pop("password", None)
    host = parts.get("host", "")
    port = parts.get("port", "")
    user = parts.get("user", "")
    database = parts.get("dbname", "")
    if set(parts) <= {"host", "port", "user", "dbname"}:
        who = f"{user}@" if user else ""
        where = f"{host}:{port}" if port else str(host)
        return f"postgresql://{who}{where}/{database}"
    return make_conninfo("", **parts)


def _secret(dsn: str) -> str | None:
    password = _parts(dsn).get("password")
    return str(password) if password else None


def _clean(dsn: str, exc: BaseException) -> str:
    """An error's text with the password masked (psycopg may echo the conninfo)."""
    text = str(exc).strip() or type(exc).__name__
    password = _secret(dsn)
    if password:
        text = text.replace(password, "[secure]")
    return redact(text)


def _text(value: Any) -> Any:
    # PostgreSQL text cannot hold NUL, which hostile input (an answer, a tool output, an id)
    # may contain; SQLite stores it. Replaced, not rejected: a run must not fail on it.
    return value.replace("\x00", "\ufffd") if isinstance(value, str) else value


def _params(params: Sequence[Any]) -> list[Any]:
    return [_text(value) for value in params]


def _connect(dsn: str) -> psycopg.Connection[Any]:
    pg = _psycopg()
    try:
        conn: psycopg.Connection[Any] = pg.connect(
            dsn, autocommit=True, connect_timeout=CONNECT_TIMEOUT
        )
    except pg.Error as exc:
        raise UsageError(
            f"cannot connect to the journal {safe_dsn(dsn)}: {_clean(dsn, exc)}"
        ) from None
    return conn


def _version(conn: psycopg.Connection[Any]) -> int:
    # Created only when missing: CREATE ... IF NOT EXISTS still needs CREATE on the schema,
    # which a daemon's role (DML only, after an admin's `toolbridge db upgrade`) may lack.
    found = conn.execute("SELECT to_regclass('toolbridge_schema')").fetchone()
    if found is None or found[0] is None:
        conn.execute(
            "CREATE TABLE toolbridge_schema (one BOOLEAN PRIMARY KEY DEFAULT TRUE "
            "CHECK (one), version INTEGER NOT NULL)"
        )
    row = conn.execute("SELECT version FROM toolbridge_schema").fetchone()
    return int(row[0]) if row else 0


class SchemaStatus:
    """A database's schema version and the steps this toolbridge would apply."""

    def __init__(self, version: int) -> None:
        self.version = version
        self.latest = SCHEMA_VERSION
        self.pending = list(range(version + 1, SCHEMA_VERSION + 1))

    @property
    def newer(self) -> bool:
        return self.version > self.latest


def schema_status(dsn: str) -> SchemaStatus:
    """Read the schema version without changing anything (creates no tables)."""
    psycopg = _psycopg()
    conn = _connect(dsn)
    try:
        row = conn.execute("SELECT to_regclass('toolbridge_schema')").fetchone()
        if row is None or row[0] is None:
            return SchemaStatus(0)
        got = conn.execute("SELECT version FROM toolbridge_schema").fetchone()
        return SchemaStatus(int(got[0]) if got else 0)
    except psycopg.Error as exc:
        raise UsageError(f"cannot read the journal {safe_dsn(dsn)}: {_clean(dsn, exc)}") from None
    finally:
        conn.close()


def migrate(dsn: str) -> list[int]:
    """Apply missing schema steps; returns the versions applied (empty: already current).

    Holds a session advisory lock meanwhile, so of two processes starting together one waits
    and then finds the schema current. Each step commits with its version.

    Raises:
        UsageError: unreachable database, or a schema newer than this toolbridge.
    """
    psycopg = _psycopg()
    conn = _connect(dsn)
    applied: list[int] = []
    try:
        conn.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK,))
        try:
            version = _version(conn)
            if version > SCHEMA_VERSION:
                raise UsageError(
                    f"the journal {safe_dsn(dsn)} has schema version {version}, newer than "
                    f"this toolbridge understands ({SCHEMA_VERSION}); upgrade toolbridge"
                )
            for target in range(version + 1, SCHEMA_VERSION + 1):
                with conn.transaction():
                    conn.execute(MIGRATIONS[target - 1])
                    conn.execute(
                        "INSERT INTO toolbridge_schema (one, version) VALUES (TRUE, %s) "
                        "ON CONFLICT (one) DO UPDATE SET version = excluded.version",
                        (target,),
                    )
                applied.append(target)
                logger.info("journal %s migrated to schema version %d", safe_dsn(dsn), target)
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK,))
    except psycopg.Error as exc:
        raise UsageError(
            f"cannot migrate the journal {safe_dsn(dsn)}: {_clean(dsn, exc)}"
        ) from None
    finally:
        conn.close()
    return applied


def _configure(conn: psycopg.Connection[Any]) -> None:
    # A commit must be on disk before the next step (a lost "started" would let a call run
    # twice), whatever the server's or the role's default says: SQLite's synchronous=FULL.
    conn.execute("SET synchronous_commit = on")
    conn.commit()


class PostgresJournal(Journal):
    """A journal in a PostgreSQL database, safe across threads and processes.

    Args:
        dsn: ``postgresql://user[:password]@host[:port]/database`` (or a libpq conninfo);
            without a password libpq takes ``PGPASSWORD`` or ``~/.pgpass``.
        on_write: as for `SQLiteJournal`: called with the step name once each write is
            committed.
        pool_size: at most this many connections.

    Raises:
        UsageError: psycopg missing, the database unreachable, or its schema newer than this
            toolbridge.
    """

    def __init__(
        self,
        dsn: str,
        *,
        on_write: Callable[[str], None] | None = None,
        pool_size: int = POOL_MAX,
    ) -> None:
        psycopg = _psycopg()
        self._dsn = dsn
        register_secret(_secret(dsn))
        self.path = safe_dsn(dsn)
        self.on_write = on_write
        migrate(dsn)
        from psycopg.rows import dict_row
        from psycopg_pool import ConnectionPool

        self._error = psycopg.Error
        self._held: dict[str, int] = {}
        """Conversation -> the lease generation this replica holds (what writes check)."""
        self._held_lock = threading.Lock()
        self._pool: Any = ConnectionPool(
            dsn,
            min_size=1,
            max_size=max(1, pool_size),
            kwargs={"row_factory": dict_row, "connect_timeout": CONNECT_TIMEOUT},
            configure=_configure,
            # A connection the server dropped (restart, failover to a standby) is replaced
            # before use instead of failing the step that drew it: one round trip per step.
            check=ConnectionPool.check_connection,
            open=False,
            name="toolbridge-journal",
        )
        try:
            self._pool.open(wait=True, timeout=CONNECT_TIMEOUT)
        except Exception as exc:
            self._pool.close()
            raise UsageError(f"cannot open the journal {self.path}: {_clean(dsn, exc)}") from None

    def __repr__(self) -> str:
        return f"PostgresJournal({self.path!r})"

    def _run(self, fn: Callable[[psycopg.Connection[Row]], T]) -> T:
        try:
            with self._pool.connection() as conn, conn.transaction():
                return fn(conn)
        except self._error as exc:
            raise UsageError(f"journal {self.path}: {_clean(self._dsn, exc)}") from None

    def _write(
        self,
        step: str,
        fn: Callable[[psycopg.Connection[Row]], T],
        *,
        conversation: str | None = None,
        message: int | None = None,
    ) -> T:
        """Run `fn` in one transaction; `on_write(step)` once it is committed.

        `conversation` (or the `message` of one): whose write this is; once a replica is
        bound, the transaction first checks that it still holds that conversation's lease.
        """
        if self.replica is not None and (conversation is not None or message is not None):
            body = fn

            def fenced(db: psycopg.Connection[Row]) -> T:
                self._check_lease(db, conversation, message)
                return body(db)

            fn = fenced
        result = self._run(fn)
        if self.on_write is not None:
            self.on_write(step)
        return result

    def _read(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        return self._run(lambda db: db.execute(sql, _params(params)).fetchall())

    def close(self) -> None:
        self._pool.close()

    # --- leases ---------------------------------------------------------------------------------

    shared = True

    def _check_lease(
        self, db: psycopg.Connection[Row], conversation: str | None, message: int | None
    ) -> None:
        if conversation is None:
            row = db.execute(
                "SELECT conversation_id FROM messages WHERE id = %s", (message,)
            ).fetchone()
            if row is None:
                return  # no such message: the write changes nothing
            conversation = str(row["conversation_id"])
        # FOR SHARE: a takeover (an UPDATE of this row) waits until this write commits.
        lease = db.execute(
            "SELECT owner, generation FROM leases WHERE conversation_id = %s FOR SHARE",
            _params((conversation,)),
        ).fetchone()
        with self._held_lock:
            held = self._held.get(conversation)
        if (
            held is None
            or lease is None
            or lease["owner"] != self.replica
            or int(lease["generation"]) != held
        ):
            owner = lease["owner"] if lease is not None else None
            raise LeaseLostError(conversation, held, owner)

    def _hold(self, lease: Lease) -> Lease:
        with self._held_lock:
            self._held[lease.conversation_id] = lease.generation
        return lease

    def acquire_lease(self, conversation_id: str, owner: str, seconds: float) -> Lease:
        def op(db: psycopg.Connection[Row]) -> Lease:
            # A message a dead replica left running is claimed and recovered first
            # (`claim_orphans`), never overtaken by a new one.
            orphan = db.execute(
                "SELECT 1 FROM messages WHERE conversation_id = %s AND status = 'running' LIMIT 1",
                _params((conversation_id,)),
            ).fetchone()
            taken = None
            if orphan is None:
                taken = db.execute(
                    "INSERT INTO leases (conversation_id, owner, generation, expires_at, "
                    "taken_at) VALUES (%s, %s, 1, clock_timestamp() + make_interval(secs => %s), "
                    "clock_timestamp()) ON CONFLICT (conversation_id) DO UPDATE SET "
                    "owner = excluded.owner, generation = leases.generation + 1, "
                    "expires_at = excluded.expires_at, taken_at = excluded.taken_at "
                    "WHERE leases.owner IS NULL OR leases.owner = excluded.owner "
                    "OR leases.expires_at < clock_timestamp() RETURNING generation",
                    _params((conversation_id, owner, float(seconds))),
                ).fetchone()
            if taken is not None:
                return Lease(
                    conversation_id=conversation_id,
                    owner=owner,
                    generation=int(taken["generation"]),
                )
            holder = db.execute(
                "SELECT owner, extract(epoch FROM expires_at - clock_timestamp()) AS left_s "
                "FROM leases WHERE conversation_id = %s",
                _params((conversation_id,)),
            ).fetchone()
            if holder is None:
                raise LeaseHeldError(conversation_id, None, 0.0)
            raise LeaseHeldError(conversation_id, holder["owner"], float(holder["left_s"]))

        return self._hold(self._run(op))

    def renew_leases(self, owner: str, seconds: float) -> list[str]:
        with self._held_lock:
            held = dict(self._held)
        if not held:
            return []
        rows = self._run(
            lambda db: db.execute(
                "UPDATE leases SET expires_at = clock_timestamp() + make_interval(secs => %s) "
                "FROM unnest(%s::text[], %s::bigint[]) AS mine (cid, gen) "
                "WHERE leases.conversation_id = mine.cid AND leases.generation = mine.gen "
                "AND leases.owner = %s RETURNING leases.conversation_id",
                (float(seconds), [_text(c) for c in held], list(held.values()), _text(owner)),
            ).fetchall()
        )
        renewed = {_text(c) for c in (row["conversation_id"] for row in rows)}
        lost: list[str] = []
        with self._held_lock:
            for cid, generation in held.items():
                # Released (or taken again) meanwhile: not lost, just not ours at that generation.
                if _text(cid) not in renewed and self._held.get(cid) == generation:
                    del self._held[cid]
                    lost.append(cid)
        return lost

    def release_lease(self, lease: Lease) -> None:
        with self._held_lock:
            if self._held.get(lease.conversation_id) == lease.generation:
                del self._held[lease.conversation_id]
        self._run(
            lambda db: db.execute(
                # The owner stays: who last ran it, for a fenced writer's error message.
                "UPDATE leases SET expires_at = clock_timestamp() "
                "WHERE conversation_id = %s AND owner = %s AND generation = %s",
                _params((lease.conversation_id, lease.owner, lease.generation)),
            )
        )

    def lease_holder(self, conversation_id: str) -> str | None:
        rows = self._read(
            "SELECT owner FROM leases WHERE conversation_id = %s AND owner IS NOT NULL "
            "AND expires_at >= clock_timestamp()",
            (conversation_id,),
        )
        return str(rows[0]["owner"]) if rows else None

    def claim_orphans(
        self,
        owner: str,
        seconds: float,
        *,
        exclude: Collection[str] = (),
        own: bool = False,
        limit: int = 100,
    ) -> list[tuple[MessageRecord, Lease]]:
        def op(db: psycopg.Connection[Row]) -> list[tuple[MessageRecord, Lease]]:
            # Running messages without a lease row (written before leases existed) get a
            # free one, so the scan below can claim them like any other.
            db.execute(
                "INSERT INTO leases (conversation_id, owner, generation, expires_at) "
                "SELECT DISTINCT conversation_id, NULL, 0, clock_timestamp() FROM messages "
                "WHERE status = 'running' ON CONFLICT (conversation_id) DO NOTHING"
            )
            found = db.execute(
                "SELECT l.conversation_id FROM leases l WHERE (l.owner IS NULL "
                "OR l.expires_at < clock_timestamp() OR (%s AND l.owner = %s)) "
                "AND NOT (l.conversation_id = ANY(%s)) AND EXISTS (SELECT 1 FROM messages m "
                "WHERE m.conversation_id = l.conversation_id AND m.status = 'running') "
                "ORDER BY l.expires_at LIMIT %s FOR UPDATE OF l SKIP LOCKED",
                (own, _text(owner), [_text(c) for c in exclude], limit),
            ).fetchall()
            claimed: list[tuple[MessageRecord, Lease]] = []
            for row in found:
                cid = row["conversation_id"]
                taken = db.execute(
                    "UPDATE leases SET owner = %s, generation = generation + 1, "
                    "expires_at = clock_timestamp() + make_interval(secs => %s), "
                    "taken_at = clock_timestamp() WHERE conversation_id = %s "
                    "RETURNING generation",
                    (_text(owner), float(seconds), cid),
                ).fetchone()
                assert taken is not None
                lease = Lease(conversation_id=cid, owner=owner, generation=int(taken["generation"]))
                # Read before they are marked as this replica's: the caller tells whose they were.
                left = db.execute(
                    "SELECT * FROM messages WHERE conversation_id = %s AND status = 'running' "
                    "ORDER BY id",
                    (cid,),
                ).fetchall()
                claimed.extend((message_record(message), lease) for message in left)
                db.execute(
                    "UPDATE messages SET replica = %s WHERE conversation_id = %s "
                    "AND status = 'running'",
                    (_text(owner), cid),
                )
            return claimed

        claimed = self._run(op)
        for _, lease in claimed:
            self._hold(lease)
        return claimed

    # --- conversations and messages ---------------------------------------------------------------

    def add_conversation(self, conversation_id: str, *, end_user_id: str | None = None) -> None:
        stamp = now().isoformat()

        def op(db: psycopg.Connection[Row]) -> None:
            db.execute(
                "INSERT INTO conversations (id, end_user_id, created_at, updated_at) "
                "VALUES (%s, %s, %s, %s) ON CONFLICT (id) DO UPDATE SET "
                "end_user_id = coalesce(conversations.end_user_id, excluded.end_user_id)",
                _params((conversation_id, end_user_id, stamp, stamp)),
            )

        self._write("conversation", op)

    def get_conversation(self, conversation_id: str) -> ConversationRecord | None:
        rows = self._read(CONVERSATION_SELECT + " WHERE c.id = %s", (conversation_id,))
        return conversation_record(rows[0]) if rows else None

    def list_conversations(
        self, *, limit: int = 50, offset: int = 0
    ) -> tuple[list[ConversationRecord], int]:
        rows = self._read(
            CONVERSATION_SELECT + " ORDER BY c.updated_at DESC, c.rid DESC LIMIT %s OFFSET %s",
            (limit, offset),
        )
        total = self._read("SELECT count(*) AS n FROM conversations")[0]["n"]
        return [conversation_record(row) for row in rows], int(total)

    def begin_message(self, conversation_id: str, query: str, *, sent_by: str | None = None) -> int:
        stamp = now().isoformat()

        def op(db: psycopg.Connection[Row]) -> int:
            db.execute(
                "INSERT INTO conversations (id, created_at, updated_at) VALUES (%s, %s, %s) "
                "ON CONFLICT (id) DO UPDATE SET updated_at = excluded.updated_at",
                _params((conversation_id, stamp, stamp)),
            )
            row = db.execute(
                "INSERT INTO messages (conversation_id, query, status, created_at, sent_by, "
                "replica) VALUES (%s, %s, 'running', %s, %s, %s) RETURNING id",
                _params((conversation_id, redact(query), stamp, sent_by, self.replica)),
            ).fetchone()
            assert row is not None
            return int(row["id"])

        return self._write("message", op, conversation=conversation_id)

    def record_end(self, message_id: int, end: MessageEnd) -> None:
        stamp = now().isoformat()

        def op(db: psycopg.Connection[Row]) -> None:
            db.execute(
                "UPDATE messages SET status = %s, answer = %s, error_code = %s, "
                "error_message = %s, request_ids = %s, rounds = %s, finished_at = %s, "
                "interrupt_id = %s, platform_settled = %s WHERE id = %s",
                _params(
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
                    )
                ),
            )
            db.execute(
                "UPDATE conversations SET updated_at = %s WHERE id = "
                "(SELECT conversation_id FROM messages WHERE id = %s)",
                (stamp, message_id),
            )

        self._write("message_end", op, message=message_id)

    def messages(self, conversation_id: str) -> list[MessageRecord]:
        rows = self._read(
            "SELECT * FROM messages WHERE conversation_id = %s ORDER BY id", (conversation_id,)
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

        def op(db: psycopg.Connection[Row]) -> None:
            # Read-then-insert below: one writer per conversation at a time, as in SQLite.
            db.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
                _params((conversation_id,)),
            )
            db.execute(
                "INSERT INTO conversations (id, created_at, updated_at) VALUES (%s, %s, %s) "
                "ON CONFLICT (id) DO NOTHING",
                _params((conversation_id, stamp, stamp)),
            )
            last = db.execute(
                "SELECT seq, batch_id, submitted_at FROM batches WHERE conversation_id = %s "
                "ORDER BY seq DESC LIMIT 1",
                _params((conversation_id,)),
            ).fetchone()
            if (
                last is not None
                and last["batch_id"] == _text(batch.batch_id)
                and not last["submitted_at"]
            ):
                seq = int(last["seq"])  # the same batch again (recovery): keep the first row
            else:
                calls = [call.model_dump(mode="json") for call in batch.calls]
                row = db.execute(
                    "INSERT INTO batches (conversation_id, batch_id, message_id, calls, resume, "
                    "received_at) VALUES (%s, %s, %s, %s, %s, %s) RETURNING seq",
                    _params(
                        (
                            conversation_id,
                            batch.batch_id,
                            message_id,
                            redact(json.dumps(calls, ensure_ascii=False)),
                            redact(json.dumps(batch.resume, ensure_ascii=False, default=str)),
                            stamp,
                        )
                    ),
                ).fetchone()
                assert row is not None
                seq = int(row["seq"])
            with db.cursor() as cursor:
                cursor.executemany(
                    "INSERT INTO calls (conversation_id, call_id, seq, message_id, name, "
                    "arguments, state, updated_at) VALUES (%s, %s, %s, %s, %s, %s, 'received', "
                    "%s) ON CONFLICT (conversation_id, call_id) DO NOTHING",
                    [
                        _params(
                            (
                                conversation_id,
                                c.call_id,
                                seq,
                                message_id,
                                c.name,
                                arguments_json(c),
                                stamp,
                            )
                        )
                        for c in batch.calls
                    ],
                )
            if state is not None:
                _upsert_state(db, conversation_id, state, stamp)

        self._write("received", op, conversation=conversation_id)

    def start(self, conversation_id: str, call_ids: Sequence[str]) -> None:
        stamp = now().isoformat()

        def op(db: psycopg.Connection[Row]) -> None:
            with db.cursor() as cursor:
                cursor.executemany(
                    "UPDATE calls SET state = 'started', started_at = %s, updated_at = %s "
                    "WHERE conversation_id = %s AND call_id = %s "
                    "AND state IN ('received', 'started')",
                    [_params((stamp, stamp, conversation_id, call_id)) for call_id in call_ids],
                )

        self._write("started", op, conversation=conversation_id)

    def finish(self, conversation_id: str, run: ToolRun) -> None:
        stamp = now().isoformat()

        def op(db: psycopg.Connection[Row]) -> None:
            # An upsert: a call finished without being received (direct use) is recorded too.
            db.execute(
                "INSERT INTO calls (conversation_id, call_id, seq, name, arguments, state, "
                "output, error, started_at, duration_ms, updated_at) "
                "VALUES (%s, %s, 0, %s, %s, 'finished', %s, %s, %s, %s, %s) "
                "ON CONFLICT (conversation_id, call_id) DO UPDATE SET state = 'finished', "
                "output = excluded.output, error = excluded.error, "
                "started_at = excluded.started_at, duration_ms = excluded.duration_ms, "
                "updated_at = excluded.updated_at",
                _params(
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
                    )
                ),
            )

        self._write("finished", op, conversation=conversation_id)

    def submitting(self, conversation_id: str, batch: ToolBatch) -> None:
        self._mark_batch(conversation_id, batch, "submitting", ("finished",))

    def submit(self, conversation_id: str, batch: ToolBatch) -> None:
        self._mark_batch(conversation_id, batch, "submitted", ("finished", "submitting"))

    def _mark_batch(
        self, conversation_id: str, batch: ToolBatch, state: str, before: tuple[str, ...]
    ) -> None:
        stamp = now().isoformat()
        column = f"{state}_at"  # a column name of ours, never input

        def op(db: psycopg.Connection[Row]) -> None:
            db.execute(
                f"UPDATE batches SET {column} = %s WHERE seq = (SELECT max(seq) FROM batches "
                "WHERE conversation_id = %s AND batch_id = %s AND submitted_at IS NULL)",
                _params((stamp, conversation_id, batch.batch_id)),
            )
            with db.cursor() as cursor:
                cursor.executemany(
                    "UPDATE calls SET state = %s, updated_at = %s "
                    "WHERE conversation_id = %s AND call_id = %s AND state = ANY(%s)",
                    [
                        _params((state, stamp, conversation_id, call.call_id, list(before)))
                        for call in batch.calls
                    ],
                )

        self._write(state, op, conversation=conversation_id)

    def get_call(self, conversation_id: str, call_id: str) -> CallRecord | None:
        rows = self._read(
            "SELECT * FROM calls WHERE conversation_id = %s AND call_id = %s",
            (conversation_id, call_id),
        )
        return call_record(rows[0]) if rows else None

    def calls(self, conversation_id: str) -> list[CallRecord]:
        rows = self._read(
            "SELECT * FROM calls WHERE conversation_id = %s ORDER BY seq, rid", (conversation_id,)
        )
        return [call_record(row) for row in rows]

    def pending(self, message_id: int) -> PendingBatch | None:
        rows = self._read(
            "SELECT * FROM batches WHERE message_id = %s ORDER BY seq DESC LIMIT 1", (message_id,)
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

        def op(db: psycopg.Connection[Row]) -> None:
            db.execute(
                "INSERT INTO platform_conversations (conversation_id, platform_conversation_id, "
                "created_at, reason) VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING",
                _params((conversation_id, platform_conversation_id, stamp, redact(reason))),
            )
            db.execute(
                "UPDATE conversations SET platform_conversation_id = %s, updated_at = %s "
                "WHERE id = %s",
                _params((platform_conversation_id, stamp, conversation_id)),
            )

        self._write("platform_conversation", op, conversation=conversation_id)

    def platform_conversations(self, conversation_id: str) -> list[PlatformConversationRecord]:
        first = self._read("SELECT created_at FROM conversations WHERE id = %s", (conversation_id,))
        if not first:
            return []
        rows = self._read(
            "SELECT * FROM platform_conversations WHERE conversation_id = %s "
            "ORDER BY created_at, rid",
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

        def op(db: psycopg.Connection[Row]) -> None:
            db.execute(
                "INSERT INTO conversations (id, created_at, updated_at) VALUES (%s, %s, %s) "
                "ON CONFLICT (id) DO NOTHING",
                _params((conversation_id, stamp, stamp)),
            )
            _upsert_state(db, conversation_id, snapshot, stamp)

        self._write("platform_state", op, conversation=conversation_id)

    def platform_state(
        self, conversation_id: str, platform_conversation_id: str
    ) -> PlatformStateRecord | None:
        rows = self._read(
            "SELECT * FROM platform_states WHERE conversation_id = %s "
            "AND platform_conversation_id = %s",
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

        def op(db: psycopg.Connection[Row]) -> None:
            db.execute(
                "INSERT INTO conversations (id, created_at, updated_at) VALUES (%s, %s, %s) "
                "ON CONFLICT (id) DO NOTHING",
                _params((conversation_id, stamp, stamp)),
            )
            db.execute(
                "INSERT INTO approvals (id, conversation_id, message_id, call_id, tool, "
                "arguments, arguments_digest, requested_by, requested_at, deadline, status) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, 'pending') "
                "ON CONFLICT (conversation_id, call_id, arguments_digest) DO NOTHING",
                _params(
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
                    )
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
            "SELECT * FROM approvals WHERE conversation_id = %s AND call_id = %s "
            "AND arguments_digest = %s",
            (conversation_id, call_id, arguments_digest),
        )
        return approval_record(rows[0]) if rows else None

    def get_approval(self, approval_id: str) -> ApprovalRecord | None:
        rows = self._read("SELECT * FROM approvals WHERE id = %s", (approval_id,))
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

        def op(db: psycopg.Connection[Row]) -> int:
            # Conditional: of two deciders (a person and the deadline) only the first one wins.
            cursor = db.execute(
                "UPDATE approvals SET status = %s, decided_by = %s, decided_at = %s, note = %s "
                "WHERE id = %s AND status = 'pending'",
                _params((status, decided_by, stamp, redact(note), approval_id)),
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
            where.append("status = %s")
            params.append(status)
        if conversation_id is not None:
            where.append("conversation_id = %s")
            params.append(conversation_id)
        clause = (" WHERE " + " AND ".join(where)) if where else ""
        rows = self._read(
            f"SELECT * FROM approvals{clause} ORDER BY requested_at DESC, rid DESC "
            "LIMIT %s OFFSET %s",
            (*params, limit, offset),
        )
        total = self._read(f"SELECT count(*) AS n FROM approvals{clause}", params)[0]["n"]
        return [approval_record(row) for row in rows], int(total)

    def notify_connection(self) -> psycopg.Connection[Any]:
        """A new autocommit connection of its own, outside the pool, for LISTEN/NOTIFY
        (`bridge.daemon.relay`); the caller closes it.

        Raises:
            UsageError: the database is unreachable (the message never holds the password).
        """
        return _connect(self._dsn)


def _upsert_state(
    db: psycopg.Connection[Row], conversation_id: str, snapshot: StateSnapshot, stamp: str
) -> None:
    db.execute(
        "INSERT INTO platform_states (conversation_id, platform_conversation_id, platform, "
        "state, writer, updated_at) VALUES (%s, %s, %s, %s, %s, %s) "
        "ON CONFLICT (conversation_id, platform_conversation_id) DO UPDATE SET "
        "platform = excluded.platform, state = excluded.state, writer = excluded.writer, "
        "updated_at = excluded.updated_at",
        _params(
            (
                conversation_id,
                snapshot.platform_conversation_id,
                snapshot.platform,
                state_json(snapshot),
                snapshot.writer,
                stamp,
            )
        ),
    )
