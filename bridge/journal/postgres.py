"""`PostgresJournal`: the journal in a PostgreSQL database, shared by any number of processes.

Durability: every write is one transaction, committed (``synchronous_commit`` as the server
says, ``on`` by default: flushed to the server's WAL) before its method returns, exactly the
points where `SQLiteJournal` commits, so recovery reads the same states after a crash.

Threads: a `psycopg_pool.ConnectionPool`; each operation borrows a connection for one
transaction. Writes that read-then-insert for one conversation (`receive`) take a
transaction-scoped advisory lock on it, so two writers of one conversation serialise the way
SQLite's single writer does.

Statements: `bridge.journal._sql.SQLJournal`, shared with `SQLiteJournal` and written with
``?`` placeholders, turned into ``%s`` once per statement (`_sql`); string parameters lose
their NUL characters (`_text`), generated keys come back by ``RETURNING``.

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

import logging
import select
import threading
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from bridge.errors import UsageError, redact, register_secret
from bridge.journal._rows import message_record
from bridge.journal._sql import SQLJournal, migrated_message
from bridge.journal.owner import Owner, ReplicaInUseError
from bridge.journal.postgres_migrations import MIGRATIONS, SCHEMA_VERSION
from bridge.journal.records import (
    JournalUnavailableError,
    Lease,
    LeaseHeldError,
    LeaseLostError,
    MessageRecord,
)

if TYPE_CHECKING:
    import psycopg

__all__ = [
    "SCHEMA_VERSION",
    "PostgresJournal",
    "ReplicaClaim",
    "ReplicaStatus",
    "SchemaStatus",
    "claim_replica",
    "migrate",
    "replica_status",
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
CHECKOUT_TIMEOUT = 10
IDLE_CHECK_SECONDS = 1.0
"""A pooled connection idle for longer than this is pinged before use (`_check_if_idle`)."""
_RETURNED_AT = "_toolbridge_returned_at"
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


_STATEMENTS: dict[str, str] = {}


def _sql(statement: str) -> str:
    """A shared statement (``?`` placeholders, no ``%``) as psycopg takes it (``%s``).

    Translated once per statement text; statements written for PostgreSQL alone (``%s``)
    pass unchanged.
    """
    translated = _STATEMENTS.get(statement)
    if translated is None:
        translated = _STATEMENTS[statement] = statement.replace("?", "%s")
    return translated


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
            if applied:  # one line, not one per step
                logger.info(migrated_message(version), safe_dsn(dsn), SCHEMA_VERSION)
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
    _returned(conn)


def _returned(conn: psycopg.Connection[Any]) -> None:
    """The pool's ``reset``: note when the connection was last known to work."""
    setattr(conn, _RETURNED_AT, time.monotonic())


def _check_if_idle(conn: psycopg.Connection[Any]) -> None:
    """The pool's ``check``: ping a connection (one round trip) only when the server may have
    dropped it: it sat idle in the pool for more than `IDLE_CHECK_SECONDS`, or something
    arrived on its socket while it was idle (a backend ended by a server restart or a
    failover says so and closes the socket). Pinging on every checkout cost one round trip
    per step, about 21 per conversation."""
    idle = time.monotonic() - getattr(conn, _RETURNED_AT, 0.0)
    if idle > IDLE_CHECK_SECONDS or _has_input(conn):
        from psycopg_pool import ConnectionPool

        ConnectionPool.check_connection(conn)


def _has_input(conn: psycopg.Connection[Any]) -> bool:
    """Whether an idle connection's socket is readable (no round trip: one poll(2))."""
    try:
        poller = select.poll()
        poller.register(conn.fileno(), select.POLLIN)
        return bool(poller.poll(0))
    except (OSError, ValueError):  # closed meanwhile: let the ping say so
        return True


class PostgresJournal(SQLJournal["psycopg.Connection[Row]"]):
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

    ORDER = "rid"  # SQLite's implicit rowid, made explicit (see postgres_migrations)

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
            # before use instead of failing the step that drew it; only one that was idle
            # for a while is pinged (`_check_if_idle`).
            check=_check_if_idle,
            reset=_returned,
            open=False,
            name="toolbridge-journal",
            # A step waits this long for a connection, then fails as JournalUnavailableError:
            # an outage is reported in seconds, a restart of the server is ridden out.
            timeout=CHECKOUT_TIMEOUT,
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
            raise JournalUnavailableError(
                f"journal {self.path}: {_clean(self._dsn, exc)}"
            ) from None

    def _transaction(self, fn: Callable[[psycopg.Connection[Row]], T], *, write: bool) -> T:
        return self._run(fn)

    def _execute(
        self, db: psycopg.Connection[Row], sql: str, params: Sequence[Any] = ()
    ) -> psycopg.Cursor[Row]:
        return db.execute(_sql(sql), _params(params))

    def _executemany(
        self, db: psycopg.Connection[Row], sql: str, rows: Iterable[Sequence[Any]]
    ) -> None:
        with db.cursor() as cursor:
            cursor.executemany(_sql(sql), [_params(row) for row in rows])

    def _insert(
        self, db: psycopg.Connection[Row], sql: str, params: Sequence[Any], key: str
    ) -> int:
        row = self._execute(db, f"{sql} RETURNING {key}", params).fetchone()
        assert row is not None
        return int(row[key])

    def _any(self, column: str, values: Sequence[Any]) -> tuple[str, list[Any]]:
        return f"{column} = ANY(?)", [list(values)]

    def _value(self, value: Any) -> Any:
        return _text(value)

    def _lock_conversation(self, db: psycopg.Connection[Row], conversation_id: str) -> None:
        # One writer per conversation at a time, as SQLite's single writer does.
        db.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", _params((conversation_id,))
        )

    def _fence(
        self,
        fn: Callable[[psycopg.Connection[Row]], T],
        conversation: str | None,
        message: int | None,
    ) -> Callable[[psycopg.Connection[Row]], T]:
        # Once a replica is bound, a conversation's write first checks, in its transaction,
        # that this replica still holds the conversation's lease.
        if self.replica is None or (conversation is None and message is None):
            return fn

        def fenced(db: psycopg.Connection[Row]) -> T:
            self._check_lease(db, conversation, message)
            return fn(db)

        return fenced

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

    def notify_connection(self) -> psycopg.Connection[Any]:
        """A new autocommit connection of its own, outside the pool, for LISTEN/NOTIFY
        (`bridge.daemon.relay`); the caller closes it.

        Raises:
            UsageError: the database is unreachable (the message never holds the password).
        """
        return _connect(self._dsn)


# --- replica ids: one live process each ----------------------------------------------------------

REPLICA_LOCK_PREFIX = "toolbridge replica:"
"""Hashed with the replica id into the key of the session advisory lock its process holds."""
_LOCK_KEY = f"hashtextextended('{REPLICA_LOCK_PREFIX}' || %s, 0)"


class ReplicaClaim:
    """This process's hold on a replica id: a row in ``replicas`` renewed every third of the
    lease, and a session advisory lock on a connection of its own (see `claim_replica`).

    `start_renewing` starts the keeper thread; `release` (a clean stop) deletes the row and
    closes the connection. A process that dies just closes the connection: the database drops
    its advisory lock at once, which is how a restart knows the old process is gone.
    """

    def __init__(
        self, dsn: str, replica: str, seconds: float, conn: psycopg.Connection[Any], token: str
    ) -> None:
        self.dsn = dsn
        self.replica = replica
        self.seconds = seconds
        self.token = token
        self.locked = True
        self.lost = False
        self.note: str | None = None
        """What became of a previous process that held the id (for the daemon's log, which
        is set up after the claim)."""
        self._conn: psycopg.Connection[Any] | None = conn
        self._mutex = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def set_address(self, address: str) -> None:
        """Record where this process listens (named when another process is refused)."""
        self._execute(
            "UPDATE replicas SET address = %s WHERE replica_id = %s AND token = %s",
            (address, _text(self.replica), self.token),
        )

    def _execute(self, sql: str, params: Sequence[Any]) -> int:
        psycopg = _psycopg()
        with self._mutex:
            if self._conn is None or self._conn.closed:
                # A new session (the server restarted): its advisory lock is taken again.
                self._conn = _connect(self.dsn)
                self.locked = False
            conn = self._conn
            try:
                if not self.locked:
                    row = conn.execute(
                        f"SELECT pg_try_advisory_lock({_LOCK_KEY})", (_text(self.replica),)
                    ).fetchone()
                    self.locked = bool(row and row[0])
                return int(conn.execute(sql, params).rowcount)
            except psycopg.Error as exc:
                conn.close()
                raise JournalUnavailableError(
                    f"journal {safe_dsn(self.dsn)}: {_clean(self.dsn, exc)}"
                ) from None

    def renew(self) -> bool:
        """Extend the claim by a lease; False once another process took the replica id over
        (this one was frozen for longer than a lease)."""
        if self.lost:
            return False
        renewed = self._execute(
            "UPDATE replicas SET renewed_at = clock_timestamp(), expires_at = clock_timestamp() "
            "+ make_interval(secs => %s) WHERE replica_id = %s AND token = %s",
            (float(self.seconds), _text(self.replica), self.token),
        )
        if not renewed:
            self.lost = True
            logger.error(
                "replica %s was taken over by another process while this one did not renew it "
                "for %g s (paused or cut off from the database); this process no longer holds "
                "the replica id: stop it",
                self.replica,
                self.seconds,
            )
        return bool(renewed)

    def start_renewing(self) -> None:
        """Renew every third of the lease on a thread of its own, until `release`."""
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._keep, name="toolbridge-replica", daemon=True
            )
            self._thread.start()

    def _keep(self) -> None:
        while not self._stop.wait(self.seconds / 3):
            try:
                if not self.renew():
                    return
            except Exception as exc:
                logger.warning("could not renew replica %s's claim: %s", self.replica, exc)

    def release(self) -> None:
        """Give the replica id back (a clean stop); a second call does nothing."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=CONNECT_TIMEOUT)
        with self._mutex:
            conn, self._conn = self._conn, None
        if conn is None or conn.closed:
            return
        try:
            if not self.lost:
                conn.execute(
                    "DELETE FROM replicas WHERE replica_id = %s AND token = %s",
                    (_text(self.replica), self.token),
                )
        except Exception as exc:
            logger.warning("could not give replica %s back: %s", self.replica, exc)
        finally:
            conn.close()


def _owner(row: Row) -> Owner:
    started = row.get("started_at")
    return Owner(
        pid=int(row["pid"]) if row.get("pid") is not None else None,
        host=str(row.get("hostname") or ""),
        address=row.get("address"),
        since=started.isoformat(timespec="seconds") if started is not None else None,
    )


def claim_replica(dsn: str, replica: str, seconds: float, owner: Owner) -> ReplicaClaim:
    """Hold `replica` for this process, or refuse because a live process holds it.

    A process holds its replica id by two things: a session advisory lock (held by a
    connection of its own; the database drops it the moment the process dies, kill -9
    included) and a row in ``replicas`` it renews every third of `seconds`. The rule:

    - the lock is free: no process holds the id (the last one stopped or died): take it, at
      once, even if the dead process's row has not expired yet;
    - the lock is held and the row was renewed within `seconds`: a live process holds it:
      refuse (`ReplicaInUseError`, naming its pid, host and address);
    - the lock is held but the row was not renewed for `seconds` (the process is frozen, or
      its machine vanished and its connection lingers): the same rule that lets other
      replicas take its leases lets this process take the id; the lock is taken when the old
      connection goes.

    Raises:
        ReplicaInUseError: a live process holds `replica`.
        UsageError: the database is unreachable or its schema cannot be brought up to date.
    """
    import secrets

    psycopg = _psycopg()
    migrate(dsn)
    conn = _connect(dsn)
    token = secrets.token_hex(16)
    label = safe_dsn(dsn)
    try:
        from psycopg.rows import dict_row

        got = conn.execute(
            f"SELECT pg_try_advisory_lock({_LOCK_KEY})", (_text(replica),)
        ).fetchone()
        locked = bool(got and got[0])
        with conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
            row = cur.execute(
                "SELECT *, expires_at < clock_timestamp() AS expired, "
                "extract(epoch FROM clock_timestamp() - renewed_at) AS silent_s "
                "FROM replicas WHERE replica_id = %s FOR UPDATE",
                (_text(replica),),
            ).fetchone()
            advice = (
                "stop it first, or give this process another --replica-id (each process "
                "sharing a journal needs its own)"
            )
            if not locked and (row is None or not row["expired"]):
                raise ReplicaInUseError(
                    replica, label, _owner(row) if row is not None else None, advice
                )
            note = None
            if row is not None and not locked:
                note = (
                    f"replica {replica}: its previous process ({_owner(row).describe()}) has "
                    f"not renewed it for {float(row['silent_s']):.0f} s; taking its place"
                )
            elif row is not None and not row["expired"]:
                note = (
                    f"replica {replica}: its previous process ({_owner(row).describe()}) is "
                    "gone; taking its leases back"
                )
            cur.execute(
                "INSERT INTO replicas (replica_id, token, pid, hostname, address, started_at, "
                "renewed_at, expires_at) VALUES (%s, %s, %s, %s, %s, clock_timestamp(), "
                "clock_timestamp(), clock_timestamp() + make_interval(secs => %s)) "
                "ON CONFLICT (replica_id) DO UPDATE SET token = excluded.token, "
                "pid = excluded.pid, hostname = excluded.hostname, address = excluded.address, "
                "started_at = excluded.started_at, renewed_at = excluded.renewed_at, "
                "expires_at = excluded.expires_at",
                (
                    _text(replica),
                    token,
                    owner.pid,
                    _text(owner.host),
                    owner.address,
                    float(seconds),
                ),
            )
    except psycopg.Error as exc:
        conn.close()
        raise UsageError(f"cannot claim replica {replica} on {label}: {_clean(dsn, exc)}") from None
    except BaseException:
        conn.close()
        raise
    claim = ReplicaClaim(dsn, replica, seconds, conn, token)
    claim.locked = locked
    claim.note = note
    return claim


class ReplicaStatus:
    """One row of ``replicas`` as ``toolbridge db status`` shows it."""

    def __init__(self, replica: str, owner: Owner, live: bool, reason: str) -> None:
        self.replica = replica
        self.owner = owner
        self.live = live
        self.reason = reason


def replica_status(dsn: str) -> list[ReplicaStatus]:
    """Every replica id the journal knows, live or not, without changing anything.

    Live: its process's advisory lock is held and it renewed within its lease (the rule of
    `claim_replica`, read from ``pg_locks`` rather than by taking the lock).
    """
    psycopg = _psycopg()
    conn = _connect(dsn)
    try:
        from psycopg.rows import dict_row

        found = conn.execute("SELECT to_regclass('replicas')").fetchone()
        if found is None or found[0] is None:
            return []
        with conn.cursor(row_factory=dict_row) as cur:
            rows = cur.execute(
                "SELECT r.*, r.expires_at < clock_timestamp() AS expired, "
                "extract(epoch FROM clock_timestamp() - r.renewed_at) AS silent_s, "
                "EXISTS (SELECT 1 FROM pg_locks l, (SELECT "
                f"{_LOCK_KEY.replace('%s', 'r.replica_id')} AS k) key "
                "WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 "
                "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
                "AND l.classid::bigint = ((key.k >> 32) & 4294967295) "
                "AND l.objid::bigint = (key.k & 4294967295)) AS locked "
                "FROM replicas r ORDER BY r.replica_id"
            ).fetchall()
    except psycopg.Error as exc:
        raise UsageError(f"cannot read the journal {safe_dsn(dsn)}: {_clean(dsn, exc)}") from None
    finally:
        conn.close()
    statuses: list[ReplicaStatus] = []
    for row in rows:
        silent = float(row["silent_s"])
        if row["locked"] and not row["expired"]:
            live, reason = True, f"renewed {silent:.0f} s ago"
        elif row["locked"]:
            live, reason = False, f"not renewed for {silent:.0f} s (frozen?)"
        else:
            live, reason = False, "its process is gone"
        statuses.append(ReplicaStatus(str(row["replica_id"]), _owner(row), live, reason))
    return statuses
