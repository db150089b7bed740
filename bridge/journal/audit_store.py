"""The audit table's rows, as every store keeps them, and read-only readers of a journal's
audit record for the commands that check or export it.

The journal only stores rows: one hash chain per writer (``chain``: "local" for a memory or
SQLite journal, the replica id on PostgreSQL), each row an entry's sequence number, time,
kind, canonical JSON text and the hashes linking it to the previous row. What the hashes are
and how a chain is checked belongs to `bridge.access.audit`.

`open_audit_reader` reads a SQLite file without opening it as a journal (a read-only
connection: a daemon may own the file meanwhile), or a PostgreSQL database without migrating
it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, NamedTuple, Protocol, runtime_checkable

from bridge.errors import UsageError

__all__ = [
    "AUDIT_PAGE",
    "AuditReader",
    "AuditRow",
    "AuditStore",
    "audit_time",
    "open_audit_reader",
]

AUDIT_PAGE = 1000
"""Rows read per query when walking a chain (a long chain is never held in memory at once)."""

LOCAL_CHAIN = "local"

COLUMNS = "chain, seq, at, kind, entry, prev_hash, hash"
TAIL_SQL = f"SELECT {COLUMNS} FROM audit WHERE chain = ? ORDER BY seq DESC LIMIT 1"
CHAINS_SQL = "SELECT DISTINCT chain FROM audit ORDER BY chain"
INSERT_SQL = f"INSERT INTO audit ({COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)"

Query = Callable[[str, Sequence[Any]], list[Any]]
"""Runs one read statement (``?`` placeholders) and returns its rows (mappings by column)."""


class AuditRow(NamedTuple):
    """One stored entry of the audit record.

    Attributes:
        chain: Whose chain ("local", or a replica id on PostgreSQL).
        seq: Its number in the chain, from 1.
        at: When it was appended (UTC, ISO 8601 with microseconds).
        kind: The event's kind (``policy``, ``tool``...).
        entry: The entry as canonical JSON text (what is hashed).
        prev_hash: The previous entry's hash (64 zeros for the first).
        hash: SHA-256 (hex) of ``prev_hash + entry``.
    """

    chain: str
    seq: int
    at: str
    kind: str
    entry: str
    prev_hash: str
    hash: str


def audit_time(value: datetime) -> str:
    """`value` as the audit record writes times: UTC, ISO 8601, microseconds (a naive time is
    taken as UTC). Written this way, times compare as text too."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return value.astimezone(timezone.utc).isoformat(timespec="microseconds")


def audit_row(row: Any) -> AuditRow:
    """A row read back (SQLite text times; PostgreSQL ``timestamptz``) as an `AuditRow`."""
    at = row["at"]
    return AuditRow(
        chain=row["chain"],
        seq=int(row["seq"]),
        at=audit_time(at) if isinstance(at, datetime) else str(at),
        kind=row["kind"],
        entry=row["entry"],
        prev_hash=row["prev_hash"],
        hash=row["hash"],
    )


def page_query(
    chain: str | None, since: datetime | None, after: tuple[str, int] | None
) -> tuple[str, list[Any]]:
    """One page of rows ordered by chain and seq, after the (chain, seq) `after`."""
    where: list[str] = []
    params: list[Any] = []
    if chain is not None:
        where.append("chain = ?")
        params.append(chain)
    if since is not None:
        where.append("at >= ?")
        params.append(audit_time(since))
    if after is not None:
        where.append("(chain > ? OR (chain = ? AND seq > ?))")
        params.extend((after[0], after[0], after[1]))
    clause = (" WHERE " + " AND ".join(where)) if where else ""
    return (
        f"SELECT {COLUMNS} FROM audit{clause} ORDER BY chain, seq LIMIT {AUDIT_PAGE}",
        params,
    )


def iter_rows(query: Query, chain: str | None, since: datetime | None) -> Iterator[AuditRow]:
    """Every row matching, ordered by chain and seq, read a page at a time."""
    after: tuple[str, int] | None = None
    while True:
        sql, params = page_query(chain, since, after)
        rows = [audit_row(row) for row in query(sql, params)]
        yield from rows
        if len(rows) < AUDIT_PAGE:
            return
        after = (rows[-1].chain, rows[-1].seq)


def tail_of(query: Query, chain: str) -> AuditRow | None:
    rows = query(TAIL_SQL, [chain])
    return audit_row(rows[0]) if rows else None


def chains_of(query: Query) -> list[str]:
    return [str(row["chain"]) for row in query(CHAINS_SQL, [])]


@runtime_checkable
class AuditStore(Protocol):
    """What reads an audit record: every `Journal`, and the readers of `open_audit_reader`."""

    def audit_chains(self) -> list[str]:
        """The chains the record holds, sorted."""
        ...

    def audit_tail(self, chain: str) -> AuditRow | None:
        """The last row of `chain`, or None when it is empty."""
        ...

    def audit_entries(
        self, *, chain: str | None = None, since: datetime | None = None
    ) -> Iterator[AuditRow]:
        """Rows ordered by chain then seq (only `chain`'s; only those at or after `since`)."""
        ...


class AuditReader:
    """A read-only `AuditStore` over one connection (see `open_audit_reader`); close it."""

    def __init__(self, label: str, query: Query, close: Callable[[], None]) -> None:
        self.label = label
        self._query = query
        self._close = close

    def __enter__(self) -> AuditReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._close()

    def audit_chains(self) -> list[str]:
        return chains_of(self._query)

    def audit_tail(self, chain: str) -> AuditRow | None:
        return tail_of(self._query, chain)

    def audit_entries(
        self, *, chain: str | None = None, since: datetime | None = None
    ) -> Iterator[AuditRow]:
        return iter_rows(self._query, chain, since)


def open_audit_reader(target: str) -> AuditReader:
    """A read-only reader of the audit record of the journal `target` names: a SQLite file
    (read while a daemon may own it) or a ``postgresql://`` URL (never migrated).

    Raises:
        UsageError: no such journal, not a toolbridge journal, unreachable, or one without an
            audit record yet (an older schema: ``toolbridge db upgrade``).
    """
    from bridge.journal.stores import db_label, is_postgres_url

    if is_postgres_url(target):
        return _postgres_reader(target, db_label(target))
    return _sqlite_reader(target)


def _sqlite_reader(path: str) -> AuditReader:
    if path == ":memory:" or not Path(path).is_file():
        raise UsageError(f"no journal at {path}")
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
        db.row_factory = sqlite3.Row
        found = db.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'audit'"
        ).fetchone()
        version = int(db.execute("PRAGMA user_version").fetchone()[0])
    except sqlite3.Error as exc:
        raise UsageError(f"cannot read the journal {path}: {exc}") from None
    if found is None:
        db.close()
        raise UsageError(_no_audit(path, version))

    def query(sql: str, params: Sequence[Any]) -> list[Any]:
        try:
            return db.execute(sql, list(params)).fetchall()
        except sqlite3.Error as exc:
            raise UsageError(f"cannot read the journal {path}: {exc}") from None

    return AuditReader(path, query, db.close)


def _postgres_reader(dsn: str, label: str) -> AuditReader:
    from bridge.journal.postgres_connect import clean_error, connect, load_psycopg, pg_sql

    psycopg = load_psycopg()
    from psycopg.rows import dict_row

    conn = connect(dsn)
    try:
        conn.row_factory = dict_row
        found = conn.execute("SELECT to_regclass('audit') AS t").fetchone()
    except psycopg.Error as exc:
        conn.close()
        raise UsageError(f"cannot read the journal {label}: {clean_error(dsn, exc)}") from None
    if found is None or found["t"] is None:
        conn.close()
        raise UsageError(_no_audit(label, None))

    def query(sql: str, params: Sequence[Any]) -> list[Any]:
        try:
            rows: list[Any] = conn.execute(pg_sql(sql), list(params)).fetchall()
        except psycopg.Error as exc:
            raise UsageError(f"cannot read the journal {label}: {clean_error(dsn, exc)}") from None
        return rows

    return AuditReader(label, query, conn.close)


def _no_audit(label: str, version: int | None) -> str:
    at = f" (schema version {version})" if version is not None else ""
    return (
        f"the journal {label}{at} has no audit record yet: it predates it; "
        "`toolbridge db upgrade` adds it"
    )
