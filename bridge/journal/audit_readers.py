"""Read-only readers of a journal's audit record, for the commands that check or export it.

`open_audit_reader` reads a SQLite file without opening it as a journal (a read-only
connection: a daemon may own the file meanwhile), or a PostgreSQL database without migrating
it (psycopg is imported only then).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from bridge.errors import UsageError
from bridge.journal.audit_store import AuditRow, Query, chains_of, iter_rows, tail_of
from bridge.journal.stores import db_label, is_postgres_url

__all__ = ["AuditReader", "open_audit_reader"]


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
