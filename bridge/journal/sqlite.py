"""`SQLiteJournal`: the durable journal, one SQLite file in WAL mode (see `bridge.journal`).

Durability: every write is committed (alone, or with concurrent ones) with
``synchronous=FULL`` before its method returns, so its state survives a crash of the process
*and* of the machine. NORMAL would be enough against ``kill -9`` in WAL mode but may lose the
last transactions on power loss, and a lost "started" would let a call run twice after the
reboot: exactly-once needs FULL. FULL is the default; ``synchronous="normal"`` is the operator's
choice to trade the power-loss case for a commit without fsync (``serve --sqlite-sync normal``).

Threads: one connection for writes, behind one lock
(`bridge.journal._writer.GroupCommitWriter`): a write that comes alone runs on its caller's
thread; writes that find it busy queue to the writer's thread. Concurrent writes are committed
together, one fsync per group, and each caller returns only once its own write is committed.
Reads (one statement each) run on the caller's thread, on a read-only connection of that
thread's own: in WAL mode a reader sees every committed write and neither waits for the writer
nor makes it wait, so a read costs no hand-off to the writer's thread (four or five per
conversation). An in-memory database has one connection: its reads go through the writer too.

Statements: `bridge.journal._sql.SQLJournal`, shared with `PostgresJournal`; this module
says how they run here (the writer thread, ``cursor.lastrowid``, ``IN (...)``).

Schema: versioned with ``PRAGMA user_version``; `MIGRATIONS[i]` moves a file from version i
to i + 1, applied in one transaction on open. A file from a newer toolbridge is refused.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from bridge.errors import UsageError
from bridge.journal._sql import SQLJournal, migrated_message
from bridge.journal._writer import GroupCommitWriter
from bridge.journal.leases import LocalLeases
from bridge.journal.migrations import MIGRATIONS, SCHEMA_VERSION
from bridge.journal.owner import share, unshare

__all__ = ["SCHEMA_VERSION", "SQLiteJournal"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

MAX_READERS = 64
"""Read connections at most (one per thread that reads); past this, reads go to the writer."""


class SQLiteJournal(LocalLeases, SQLJournal[sqlite3.Connection]):
    """A journal in one SQLite file (WAL, ``synchronous=FULL``), safe across threads.

    Args:
        path: the database file (created with its folder if missing) or ``":memory:"``.
        on_write: called with the step name ("conversation", "message", "received",
            "started", "finished", "submitting", "submitted", "message_end",
            "platform_conversation", "platform_state", "approval", "approval_decided",
            "audit"...) after each write is durable; for metrics and fault injection. An
            exception it raises propagates.
        synchronous: ``"full"`` (default: each commit is fsynced, so it survives a power loss)
            or ``"normal"`` (no fsync at commit: in WAL mode a commit still survives a killed
            process, but a power loss may undo the last ones).

    A file a daemon owns (`bridge.journal.owner`) is refused; processes that are not daemons
    may take turns on one file: each holds it shared while open.

    Raises:
        UsageError: the file cannot be opened, is not a toolbridge journal, or was written by
            a newer toolbridge; `JournalInUseError`: a daemon owns it.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        on_write: Callable[[str], None] | None = None,
        synchronous: str = "full",
    ) -> None:
        if synchronous not in ("full", "normal"):
            raise UsageError(f"synchronous must be 'full' or 'normal', not {synchronous!r}")
        self.path = str(path)
        self.on_write = on_write
        self._share: int | None = None
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            # Never under a daemon that owns the file (nor a daemon under this journal).
            self._share = share(self.path, advice="stop it first or open another journal file")
        try:
            self._db = sqlite3.connect(
                self.path, isolation_level=None, check_same_thread=False, timeout=30.0
            )
            self._db.row_factory = sqlite3.Row
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(f"PRAGMA synchronous={synchronous.upper()}")
            self._db.execute("PRAGMA foreign_keys=ON")
            self._migrate()
        except sqlite3.Error as exc:
            unshare(self._share)
            raise UsageError(f"cannot open the journal {self.path}: {exc}") from None
        except BaseException:
            unshare(self._share)
            raise
        self._writer = GroupCommitWriter(self._db)
        self._local = threading.local()
        self._readers: list[sqlite3.Connection] = []
        self._readers_lock = threading.Lock()
        self._closed = False

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
        if version < SCHEMA_VERSION:  # one line, not one per step
            logger.info(migrated_message(version), self.path, SCHEMA_VERSION)

    def _transaction(self, fn: Callable[[sqlite3.Connection], T], *, write: bool) -> T:
        if not write:
            reader = self._reader()
            if reader is not None:
                return fn(reader)
        return self._writer.run(fn, write=write)

    def _reader(self) -> sqlite3.Connection | None:
        """This thread's read connection (None: reads go to the writer's thread)."""
        if self._closed:
            raise RuntimeError("the journal is closed")
        reader: sqlite3.Connection | None = getattr(self._local, "reader", None)
        if reader is not None or self.path == ":memory:":
            return reader
        with self._readers_lock:
            if self._closed:
                raise RuntimeError("the journal is closed")
            if len(self._readers) >= MAX_READERS:
                return None
            reader = sqlite3.connect(
                self.path, isolation_level=None, check_same_thread=False, timeout=30.0
            )
            reader.row_factory = sqlite3.Row
            reader.execute("PRAGMA query_only=ON")
            self._readers.append(reader)
        self._local.reader = reader
        return reader

    def _execute(
        self, db: sqlite3.Connection, sql: str, params: Sequence[Any] = ()
    ) -> sqlite3.Cursor:
        return db.execute(sql, params)

    def _executemany(self, db: sqlite3.Connection, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        db.executemany(sql, rows)

    def _insert(self, db: sqlite3.Connection, sql: str, params: Sequence[Any], key: str) -> int:
        # Every key the journal generates is the table's INTEGER PRIMARY KEY, i.e. its rowid.
        rowid = db.execute(sql, params).lastrowid
        assert rowid is not None
        return rowid

    def _any(self, column: str, values: Sequence[Any]) -> tuple[str, list[Any]]:
        return f"{column} IN ({', '.join('?' for _ in values)})", list(values)

    def close(self) -> None:
        with self._readers_lock:
            self._closed = True
            readers, self._readers = self._readers, []
        for reader in readers:
            reader.close()
        self._writer.close()
        share, self._share = self._share, None
        unshare(share)
