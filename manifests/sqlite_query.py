"""Ready-made tools: read-only SQL on one SQLite database file.

    export TOOLBRIDGE_SQLITE_PATH=/srv/data/sales.db
    toolbridge run "which region sold most last month?" --tools manifests/sqlite_query.py

Tools: `sqlite_tables` (the schema), `sqlite_query` (one SELECT, at most 1000 rows and
20,000 characters of JSON). Writes are impossible twice over: the file is opened read-only
(``mode=ro``, ``query_only``) and an authorizer refuses every action but reading (no
INSERT/UPDATE/DELETE, DDL, ATTACH, transactions, pragmas other than the read-only
table-valued ones such as ``pragma_table_info``, nor the functions in `DENIED_FUNCTIONS`).

Each call runs in its own short-lived Python process (stdlib only, about 30 ms to start), so
its limits bind the query and nothing else in the bridge's process:

- time: `TOOLBRIDGE_SQLITE_TIME_LIMIT` seconds (10). A progress handler checks the clock every
  1000 SQLite VM instructions and interrupts the query with a clear error; one SQL function
  call on large values (``instr``, ``replace``, ``trim``, all quadratic) cannot be interrupted
  that way, so the process is killed one second after the limit as well.
- memory: values are capped at `MAX_VALUE_BYTES` (``SQLITE_LIMIT_LENGTH``; Python 3.11+), SQLite's
  heap at `HEAP_LIMIT_BYTES` (``PRAGMA hard_heap_limit``, which is process-wide, hence the
  separate process), and the process's address space at `ADDRESS_SPACE_BYTES`.
- size: statements up to `MAX_SQL_BYTES`, results up to `MAX_RESULT_CHARS` (rows after the cap
  are dropped and `note` says so), temporary files up to `MAX_TEMP_FILE_BYTES`.
"""

from __future__ import annotations

import base64
import json
import logging
import math
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

__all__ = [
    "DENIED_FUNCTIONS",
    "PATH_ENV",
    "READ_ONLY_PRAGMAS",
    "TIME_LIMIT_ENV",
    "sqlite_query",
    "sqlite_tables",
]

PATH_ENV = "TOOLBRIDGE_SQLITE_PATH"
TIME_LIMIT_ENV = "TOOLBRIDGE_SQLITE_TIME_LIMIT"
MAX_ROWS = 1_000
MAX_SQL_BYTES = 100_000
MAX_VALUE_BYTES = 10_000_000
# The dispatcher's default output limit: past it the model would get JSON cut mid-row; here it
# gets whole rows and a note.
MAX_RESULT_CHARS = 20_000
HEAP_LIMIT_BYTES = 128 * 2**20
ADDRESS_SPACE_BYTES = 1024 * 2**20
MAX_TEMP_FILE_BYTES = 512 * 2**20
PROGRESS_STEPS = 1_000  # VM instructions between two looks at the clock
KILL_GRACE = 1.0  # seconds after the limit before the query process is killed

logger = logging.getLogger(__name__)

# Functions that reach past the database: process memory, native code, files, logs. The last
# five exist in the sqlite3 shell and some builds, not in Python's; listed in case a build has
# them. Allowed on purpose: sqlite_offset (a row's place in the file: about the data, not the
# process), sqlite_version/sqlite_source_id/sqlite_compileoption_* (which SQL works here),
# random/randomblob/zeroblob (bounded by the length limit), changes/total_changes/
# last_insert_rowid (always 0 on a read-only connection).
DENIED_FUNCTIONS = {
    "fts3_tokenizer": "it hands out (and, with two arguments, takes) native pointers into the "
    "SQLite library",
    "fts5": "it hands out a native pointer to the FTS5 API",
    "load_extension": "it loads native code into the process",
    "sqlite_log": "it writes to the process's SQLite error log",
    "optimize": "it rewrites a full-text index (a write)",
    "readfile": "it reads files of the host",
    "writefile": "it writes files of the host",
    "edit": "it starts an editor",
    "fsdir": "it lists folders of the host",
    "eval": "it runs SQL text built while the query runs",
}
# Table-valued pragmas that only describe the schema or the SQL dialect. Left out on purpose:
# every pragma that sets something, `database_list` (it shows file paths) and the integrity
# checks (whole-file scans).
READ_ONLY_PRAGMAS = frozenset(
    (
        "table_info", "table_xinfo", "table_list", "index_list", "index_info", "index_xinfo",
        "foreign_key_list", "collation_list", "function_list", "module_list", "pragma_list",
        "compile_options",
    )
)  # fmt: skip

_READ_ACTIONS = frozenset((sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_RECURSIVE))
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
_SCHEMA_CHANGE = "a schema change (CREATE, DROP or ALTER)"


class _QueryError(Exception):
    """An error for the model, raised in the query process as `kind: message`."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


# --- the query process --------------------------------------------------------------------
# Everything from here to `_serve` runs in the child and uses the standard library only.


def _limit_process(time_limit: float) -> None:
    try:
        import resource
    except ImportError:  # not POSIX: the parent's kill still bounds the time
        return
    seconds = math.ceil(time_limit) + 2
    resource.setrlimit(resource.RLIMIT_CPU, (seconds, seconds + 1))
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE_BYTES, ADDRESS_SPACE_BYTES))
    # A temporary file over the cap fails its write (SQLite reports a full disk) instead of
    # killing the process with SIGXFSZ.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (MAX_TEMP_FILE_BYTES, MAX_TEMP_FILE_BYTES))


def _open(path: str) -> sqlite3.Connection:
    connection = sqlite3.connect(f"file:{quote(path)}?mode=ro", uri=True, timeout=5)
    connection.execute("PRAGMA query_only = ON")
    # Pragmas lower these limits only; they hold for the whole (query) process.
    connection.execute(f"PRAGMA hard_heap_limit = {HEAP_LIMIT_BYTES}")
    connection.execute(f"PRAGMA soft_heap_limit = {HEAP_LIMIT_BYTES // 2}")
    if hasattr(connection, "setlimit"):  # Python 3.11+; before, the heap limit still holds
        # getattr: typeshed lacks these names; the numbers are SQLite's own.
        connection.setlimit(getattr(sqlite3, "SQLITE_LIMIT_LENGTH", 0), MAX_VALUE_BYTES)
        connection.setlimit(getattr(sqlite3, "SQLITE_LIMIT_SQL_LENGTH", 1), MAX_SQL_BYTES)
        connection.setlimit(getattr(sqlite3, "SQLITE_LIMIT_ATTACHED", 7), 0)
    return connection


class _Authorizer:
    """Allows reading only; remembers why it refused, for the error message."""

    def __init__(self) -> None:
        self.refused: list[str] = []
        self.denied_function: str | None = None

    def __call__(self, action: int, arg1: str | None, arg2: str | None, *_: str | None) -> int:
        if action in _READ_ACTIONS:
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_FUNCTION:
            name = (arg2 or "").lower()
            if name in DENIED_FUNCTIONS:
                self.denied_function = name
                return sqlite3.SQLITE_DENY
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_PRAGMA:
            pragma = (arg1 or "").lower()
            if pragma in READ_ONLY_PRAGMAS:
                return sqlite3.SQLITE_OK
            self.refused.append(f"pragma {pragma}")
            return sqlite3.SQLITE_DENY
        if action == sqlite3.SQLITE_UPDATE and arg1 in _SCHEMA_TABLES:
            # Asked while SQLite declares a table-valued pragma's columns (a nested parse that
            # never runs). A user's UPDATE of the schema table is refused by SQLite before any
            # authorizer call, and the connection is read-only besides.
            return sqlite3.SQLITE_OK
        self.refused.append(
            _SCHEMA_CHANGE if arg1 in _SCHEMA_TABLES else _ACTION_NAMES.get(action, str(action))
        )
        return sqlite3.SQLITE_DENY


def _explain(exc: Exception, authorizer: _Authorizer, limit: float) -> _QueryError:
    text = str(exc)
    if isinstance(exc, MemoryError):
        return _QueryError(
            "MemoryError",
            f"the query needed more than {HEAP_LIMIT_BYTES // 2**20} MB of memory, the limit "
            "of this tool, and was stopped",
        )
    if authorizer.denied_function:
        name = authorizer.denied_function
        return _QueryError(
            "PermissionError",
            f"refused: the function {name}() is not allowed here: {DENIED_FUNCTIONS[name]}",
        )
    if "one statement at a time" in text:
        return _QueryError("ValueError", "sql: send one statement at a time")
    if authorizer.refused or "not authorized" in text or "may not be modified" in text:
        needs = authorizer.refused[0] if authorizer.refused else "update"
        return _QueryError(
            "PermissionError",
            f"refused: this tool only reads; the statement needs {needs!r}, which is not allowed",
        )
    if "interrupted" in text:
        return _QueryError(
            "TimeoutError", f"the query ran longer than {limit:g} seconds and was stopped"
        )
    if "too big" in text:
        return _QueryError(
            "ValueError",
            f"sql: a value would be larger than {MAX_VALUE_BYTES:,} bytes, the limit of this "
            f"tool ({text})",
        )
    if "disk is full" in text:
        return _QueryError(
            "ValueError",
            f"sql: the query needed more than {MAX_TEMP_FILE_BYTES // 2**20} MB of temporary "
            "files, the limit of this tool",
        )
    return _QueryError("ValueError", f"sql: {text}")


def _value(value: Any) -> Any:
    if isinstance(value, bytes):
        return {"blob_base64": base64.b64encode(value[:1024]).decode("ascii"), "size": len(value)}
    return value


def _select(connection: sqlite3.Connection, sql: str, max_rows: int) -> dict[str, Any]:
    cursor = connection.execute(sql)
    rows: list[list[Any]] = []
    size = 0
    result: dict[str, Any] = {"columns": [], "rows": rows, "truncated": False}
    result["columns"] = [item[0] for item in cursor.description or ()]
    # One row at a time: a result is never held whole, in SQLite or here, past the caps.
    while (row := cursor.fetchone()) is not None:
        if len(rows) == max_rows:
            result["truncated"] = True
            break
        shown = [_value(value) for value in row]
        size += len(json.dumps(shown, ensure_ascii=False))
        if size > MAX_RESULT_CHARS:
            result["truncated"] = True
            result["note"] = (
                f"rows stop here: the result reached {MAX_RESULT_CHARS:,} characters, the limit of "
                "this tool; select fewer or narrower columns, or fewer rows"
            )
            break
        rows.append(shown)
    return result


def _tables(connection: sqlite3.Connection) -> list[dict[str, Any]]:
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


def _answer(request: dict[str, Any]) -> dict[str, Any]:
    limit = float(request["time_limit"])
    deadline = time.monotonic() + limit
    authorizer = _Authorizer()
    try:
        connection = _open(request["path"])
        try:
            connection.set_authorizer(authorizer)
            connection.set_progress_handler(
                lambda: int(time.monotonic() > deadline), PROGRESS_STEPS
            )
            sql = request["sql"]
            if sql is None:
                return {"result": _tables(connection)}
            return {"result": _select(connection, sql, int(request["max_rows"]))}
        finally:
            connection.close()
    except (sqlite3.Warning, sqlite3.Error, MemoryError) as exc:
        error = _explain(exc, authorizer, limit)
        return {"error": [error.kind, str(error)]}


def _serve() -> int:
    """The query process: one JSON request on stdin, one JSON answer on stdout."""
    request = json.loads(sys.stdin.read())
    _limit_process(float(request["time_limit"]))
    answer = _answer(request)
    sys.stdout.write(json.dumps(answer, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(_serve())

# --- the tools (in the bridge's process) ------------------------------------------------------

from bridge.tools import manifest  # noqa: E402  (the query process above runs without it)

_ERRORS: dict[str, type[Exception]] = {
    "PermissionError": PermissionError,
    "ValueError": ValueError,
    "TimeoutError": TimeoutError,
    "MemoryError": MemoryError,
}


def _database() -> str:
    value = os.environ.get(PATH_ENV)
    if not value:
        raise PermissionError(
            f"{PATH_ENV} is not set: set it to the SQLite file these tools may read"
        )
    path = Path(value).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"{PATH_ENV} points to {value!r}, which is not a file")
    return str(path.resolve())


def _time_limit() -> float:
    raw = os.environ.get(TIME_LIMIT_ENV, "10")
    try:
        return max(0.01, float(raw))
    except ValueError:
        raise ValueError(f"{TIME_LIMIT_ENV} must be a number of seconds (got {raw!r})") from None


def _run(sql: str | None, max_rows: int = 0) -> Any:
    """Run one request in a fresh query process and return its result or raise its error."""
    limit = _time_limit()
    request = {"path": _database(), "sql": sql, "max_rows": max_rows, "time_limit": limit}
    stopped = TimeoutError(f"the query ran longer than {limit:g} seconds and was stopped")
    try:
        done = subprocess.run(
            [sys.executable, "-I", "-S", __file__],
            input=json.dumps(request).encode("utf-8"),
            capture_output=True,
            timeout=limit + KILL_GRACE,
            check=False,
        )
    except subprocess.TimeoutExpired:  # run() has killed it
        raise stopped from None
    try:
        answer = json.loads(done.stdout)
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        logger.warning(
            "sqlite query process ended without an answer (exit status %s)", done.returncode
        )
        if done.returncode == -signal.SIGXCPU:
            raise stopped
        raise RuntimeError(
            f"the query process ended without an answer (exit status {done.returncode}; it may "
            f"have passed its {ADDRESS_SPACE_BYTES // 2**20} MB memory limit)"
        )
    if "error" in answer:
        kind, message = answer["error"]
        raise _ERRORS.get(kind, ValueError)(message)
    return answer["result"]


@manifest(idempotent=True)
def sqlite_tables() -> list[dict[str, Any]]:
    """The tables and views of the database, with their columns."""
    tables: list[dict[str, Any]] = _run(None)
    return tables


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
    size = len(sql.encode("utf-8"))
    if size > MAX_SQL_BYTES:
        raise ValueError(
            f"sql: the statement is {size:,} bytes; the limit of this tool is {MAX_SQL_BYTES:,}"
        )
    result: dict[str, Any] = _run(sql, max_rows)
    return result
