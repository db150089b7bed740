"""Ready-made tools: read-only SQL on one SQLite database file.

    export TOOLBRIDGE_SQLITE_PATH=/srv/data/sales.db
    toolbridge run "which region sold most last month?" --tools manifests/sqlite_query.py

Tools: `sqlite_tables` (the schema), `sqlite_query` (one SELECT, at most 1000 rows). Writes are
impossible twice over: the file is opened read-only (``mode=ro``) and an authorizer refuses
every action but reading (no INSERT/UPDATE/DELETE, DDL, ATTACH, PRAGMA or transactions). A
query that runs longer than 10 seconds (`TOOLBRIDGE_SQLITE_TIME_LIMIT`) is interrupted.
"""

from __future__ import annotations

import base64
import os
import sqlite3
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

from bridge.tools import manifest

__all__ = ["PATH_ENV", "TIME_LIMIT_ENV", "sqlite_query", "sqlite_tables"]

PATH_ENV = "TOOLBRIDGE_SQLITE_PATH"
TIME_LIMIT_ENV = "TOOLBRIDGE_SQLITE_TIME_LIMIT"
MAX_ROWS = 1_000

_READ_ACTIONS = frozenset(
    (sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION, sqlite3.SQLITE_RECURSIVE)
)
_AUTHORIZER_ACTIONS = (
    "CREATE_INDEX", "CREATE_TABLE", "CREATE_TEMP_INDEX", "CREATE_TEMP_TABLE",
    "CREATE_TEMP_TRIGGER", "CREATE_TEMP_VIEW", "CREATE_TRIGGER", "CREATE_VIEW", "DELETE",
    "DROP_INDEX", "DROP_TABLE", "DROP_TEMP_INDEX", "DROP_TEMP_TABLE", "DROP_TEMP_TRIGGER",
    "DROP_TEMP_VIEW", "DROP_TRIGGER", "DROP_VIEW", "INSERT", "PRAGMA", "TRANSACTION", "UPDATE",
    "ATTACH", "DETACH", "ALTER_TABLE", "REINDEX", "ANALYZE", "CREATE_VTABLE", "DROP_VTABLE",
    "SAVEPOINT",
)  # fmt: skip
_ACTION_NAMES = {
    getattr(sqlite3, f"SQLITE_{name}"): name.replace("_", " ").lower()
    for name in _AUTHORIZER_ACTIONS
    if hasattr(sqlite3, f"SQLITE_{name}")
}


_SCHEMA_TABLES = frozenset(("sqlite_master", "sqlite_schema", "sqlite_temp_master"))


def _connect() -> sqlite3.Connection:
    value = os.environ.get(PATH_ENV)
    if not value:
        raise PermissionError(
            f"{PATH_ENV} is not set: set it to the SQLite file these tools may read"
        )
    path = Path(value).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"{PATH_ENV} points to {value!r}, which is not a file")
    uri = f"file:{quote(str(path.resolve()))}?mode=ro"
    connection = sqlite3.connect(uri, uri=True, timeout=5, check_same_thread=False)
    connection.execute("PRAGMA query_only = ON")
    return connection


def _time_limit() -> float:
    raw = os.environ.get(TIME_LIMIT_ENV, "10")
    try:
        return max(0.01, float(raw))
    except ValueError:
        raise ValueError(f"{TIME_LIMIT_ENV} must be a number of seconds (got {raw!r})") from None


def _json(value: Any) -> Any:
    if isinstance(value, bytes):
        return {"blob_base64": base64.b64encode(value[:1024]).decode("ascii"), "size": len(value)}
    return value


@manifest(idempotent=True)
def sqlite_tables() -> list[dict[str, Any]]:
    """The tables and views of the database, with their columns."""
    with _connect() as connection:
        rows = connection.execute(
            "SELECT name, type FROM sqlite_schema WHERE type IN ('table', 'view') "
            "AND name NOT LIKE 'sqlite_%' ORDER BY name"
        ).fetchall()
        result = []
        for name, kind in rows:
            columns = connection.execute(
                "SELECT name, type, pk FROM pragma_table_info(?)", (name,)
            ).fetchall()
            result.append(
                {
                    "name": name,
                    "type": kind,
                    "columns": [
                        {"name": c[0], "type": c[1], "primary_key": bool(c[2])} for c in columns
                    ],
                }
            )
    return result


@manifest(idempotent=True, timeout=30)
def sqlite_query(sql: str, max_rows: int = 100) -> dict[str, Any]:
    """Run one read-only SQL statement (SELECT or WITH ... SELECT) and return its rows.

    Args:
        sql: One SQLite SELECT statement (values written inline); writes are refused.
        max_rows: Most rows to return (1-1000); `truncated` says when there were more.
    """
    if not 1 <= max_rows <= MAX_ROWS:
        raise ValueError(f"max_rows: expected 1 to {MAX_ROWS} (got {max_rows})")
    if not sql.strip():
        raise ValueError("sql: expected one SELECT statement")
    refused: list[str] = []

    def authorize(action: int, table: str | None, *_: Any) -> int:
        if action in _READ_ACTIONS:
            return sqlite3.SQLITE_OK
        if table in _SCHEMA_TABLES:  # DDL first asks to write the schema table
            refused.append("a schema change (CREATE, DROP or ALTER)")
        else:
            refused.append(_ACTION_NAMES.get(action, str(action)))
        return sqlite3.SQLITE_DENY

    limit = _time_limit()
    deadline = time.monotonic() + limit
    with _connect() as connection:
        connection.set_authorizer(authorize)
        connection.set_progress_handler(lambda: int(time.monotonic() > deadline), 10_000)
        try:
            cursor = connection.execute(sql)
            rows = cursor.fetchmany(max_rows + 1)
        except (sqlite3.Warning, sqlite3.DatabaseError) as exc:
            if "one statement at a time" in str(exc):
                raise ValueError("sql: send one statement at a time") from None
            if refused or "not authorized" in str(exc):
                needs = f"needs {refused[0]!r}" if refused else "uses a function"
                raise PermissionError(
                    f"refused: this tool only reads; the statement {needs}, which is not allowed"
                ) from None
            if "interrupted" in str(exc):
                raise TimeoutError(
                    f"the query ran longer than {limit:g} seconds and was stopped"
                ) from None
            raise ValueError(f"sql: {exc}") from None
        columns = [item[0] for item in cursor.description or ()]
    return {
        "columns": columns,
        "rows": [[_json(value) for value in row] for row in rows[:max_rows]],
        "truncated": len(rows) > max_rows,
    }
