"""`PostgresJournal`: the journal in a PostgreSQL database, shared by any number of processes.

Durability: every write is one transaction (the steps of a run one statement each,
`postgres_steps`), committed (``synchronous_commit`` as the server
says, ``on`` by default: flushed to the server's WAL) before its method returns, exactly the
points where `SQLiteJournal` commits, so recovery reads the same states after a crash.

Threads: a `psycopg_pool.ConnectionPool`; each operation borrows a connection for one
transaction. Writes that read-then-insert for one conversation (`receive`) take a
transaction-scoped advisory lock on it, so two writers of one conversation serialise the way
SQLite's single writer does.

Statements: `bridge.journal._sql.SQLJournal`, shared with `SQLiteJournal` and written with
``?`` placeholders, turned into ``%s`` once per statement (`pg_sql`); string parameters lose
their NUL characters (`pg_text`), generated keys come back by ``RETURNING``.

Beside it, one module per job: `postgres_connect` (psycopg, the URL without its password,
connections and the pool's hooks), `postgres_migrations` (the schema steps and `migrate`,
applied under ``pg_advisory_lock`` so two daemons starting together apply each step once; a
database from a newer toolbridge is refused), `postgres_leases` (leases of daemon replicas,
with fencing: `PostgresLeases`, which this journal is), `postgres_steps` (a run's steps, one
statement each: `PostgresSteps`, which it is too) and `postgres_replicas` (one live
process per replica id).

psycopg is imported lazily, so ``import bridge`` works without the ``postgres`` extra.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from bridge.errors import UsageError, register_secret
from bridge.journal._sql import SQLJournal
from bridge.journal.postgres_connect import (
    CHECKOUT_TIMEOUT,
    CONNECT_TIMEOUT,
    check_if_idle,
    clean_error,
    configure_connection,
    connect,
    dsn_password,
    load_psycopg,
    mark_returned,
    pg_params,
    pg_sql,
    pg_text,
    safe_dsn,
)
from bridge.journal.postgres_leases import PostgresLeases
from bridge.journal.postgres_migrations import migrate
from bridge.journal.postgres_steps import PostgresSteps
from bridge.journal.records import JournalUnavailableError

if TYPE_CHECKING:
    import psycopg

__all__ = ["POOL_MAX", "PostgresJournal"]

T = TypeVar("T")
Row = dict[str, Any]

POOL_MAX = 10


class PostgresJournal(PostgresSteps, PostgresLeases, SQLJournal["psycopg.Connection[Row]"]):
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
        psycopg = load_psycopg()
        self._dsn = dsn
        register_secret(dsn_password(dsn))
        self.path = safe_dsn(dsn)
        self.on_write = on_write
        migrate(dsn)
        from psycopg.rows import dict_row
        from psycopg_pool import ConnectionPool

        self._error = psycopg.Error
        self._held: dict[str, int] = {}
        """Conversation -> the lease generation this replica holds (what writes check)."""
        self._held_lock = threading.Lock()
        self._conversation_of = {}
        self._kept = {}
        self._written = {}
        self._prefetched = {}
        self._pool: Any = ConnectionPool(
            dsn,
            min_size=1,
            max_size=max(1, pool_size),
            # Autocommit: a read, or a step of one statement (`PostgresSteps`), commits on
            # its own, without BEGIN and COMMIT; `_run` opens a transaction for the others.
            kwargs={
                "row_factory": dict_row,
                "connect_timeout": CONNECT_TIMEOUT,
                "autocommit": True,
                # Prepared on first use, not the fifth: each of a run's statements is parsed
                # once per connection (the pool holds one per worker: with psycopg's default,
                # a connection ran each statement unprepared five times first).
                "prepare_threshold": 0,
            },
            configure=configure_connection,
            # A connection the server dropped (restart, failover to a standby) is replaced
            # before use instead of failing the step that drew it; only one that was idle
            # for a while is pinged (`check_if_idle`).
            check=check_if_idle,
            # No ``reset``: with one, psycopg_pool hands every returned connection to a worker
            # thread; the steps note the return time themselves (`_borrowed`).
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
            raise UsageError(
                f"cannot open the journal {self.path}: {clean_error(dsn, exc)}"
            ) from None

    def __repr__(self) -> str:
        return f"PostgresJournal({self.path!r})"

    @contextlib.contextmanager
    def _borrowed(self) -> Iterator[psycopg.Connection[Row]]:
        """A pooled connection, noted as working when it goes back (`check_if_idle`)."""
        with self._pool.connection() as conn:
            try:
                yield conn
            finally:
                mark_returned(conn)

    def _run(self, fn: Callable[[psycopg.Connection[Row]], T]) -> T:
        try:
            with self._borrowed() as conn, conn.transaction():
                return fn(conn)
        except self._error as exc:
            raise JournalUnavailableError(
                f"journal {self.path}: {clean_error(self._dsn, exc)}"
            ) from None

    def _autocommit(self, fn: Callable[[psycopg.Connection[Row]], T]) -> T:
        """Run `fn` (one statement: it commits on its own) on a pooled connection."""
        try:
            with self._borrowed() as conn:
                return fn(conn)
        except self._error as exc:
            raise JournalUnavailableError(
                f"journal {self.path}: {clean_error(self._dsn, exc)}"
            ) from None

    def _transaction(self, fn: Callable[[psycopg.Connection[Row]], T], *, write: bool) -> T:
        # A read is one statement (`_read`): no transaction around it.
        return self._run(fn) if write else self._autocommit(fn)

    def _execute(
        self, db: psycopg.Connection[Row], sql: str, params: Sequence[Any] = ()
    ) -> psycopg.Cursor[Row]:
        return db.execute(pg_sql(sql), pg_params(params))

    def _executemany(
        self, db: psycopg.Connection[Row], sql: str, rows: Iterable[Sequence[Any]]
    ) -> None:
        with db.cursor() as cursor:
            cursor.executemany(pg_sql(sql), [pg_params(row) for row in rows])

    def _insert(
        self, db: psycopg.Connection[Row], sql: str, params: Sequence[Any], key: str
    ) -> int:
        row = self._execute(db, f"{sql} RETURNING {key}", params).fetchone()
        assert row is not None
        return int(row[key])

    def _any(self, column: str, values: Sequence[Any]) -> tuple[str, list[Any]]:
        return f"{column} = ANY(?)", [list(values)]

    def _value(self, value: Any) -> Any:
        return pg_text(value)

    def _lock_conversation(self, db: psycopg.Connection[Row], conversation_id: str) -> None:
        # One writer per conversation at a time, as SQLite's single writer does.
        db.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", pg_params((conversation_id,))
        )

    def _lock_audit_chain(self, db: psycopg.Connection[Row], chain: str) -> None:
        # A replica's connections append to its chain concurrently: one at a time.
        db.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))",
            pg_params(("toolbridge-audit:" + chain,)),
        )

    def _fence(
        self,
        fn: Callable[[psycopg.Connection[Row]], T],
        conversation: str | None,
        message: int | None,
    ) -> Callable[[psycopg.Connection[Row]], T]:
        if conversation is not None or message is not None:  # (a message's: any conversation)
            self._drop_prefetched(conversation if message is None else None)
        # Once a replica is bound, a conversation's write first checks, in its transaction,
        # that this replica still holds the conversation's lease.
        if self.replica is None or (conversation is None and message is None):
            return fn

        def fenced(db: psycopg.Connection[Row]) -> T:
            self._check_lease(db, conversation, message)
            return fn(db)

        return fenced

    def audit_chain(self) -> str:
        # Every process writing to the database has its own chain: its replica's.
        return self.replica or "local"

    def close(self) -> None:
        self._pool.close()

    def notify_connection(self) -> psycopg.Connection[Any]:
        """A new autocommit connection of its own, outside the pool, for LISTEN/NOTIFY
        (`bridge.daemon.relay`); the caller closes it.

        Raises:
            UsageError: the database is unreachable (the message never holds the password).
        """
        return connect(self._dsn)
