"""manifests/sqlite_query.py: read-only SQL with row limits; every kind of write, ATTACH,
PRAGMA, transactions, several statements, runaway queries and a missing file are refused, and
the database is unchanged afterwards. Values, memory, result size and time are bounded (the
query process is killed when one function call outlasts the limit); functions that reach past
the database are denied, read-only table-valued pragmas allowed."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from bridge.tools import Toolbox
from tests.manifests.conftest import MANIFESTS, Call, loaded


@pytest.fixture(scope="module")
def box() -> Toolbox:
    return loaded("sqlite_query.py")


@pytest.fixture
def database(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "sales.db"
    with sqlite3.connect(path) as connection:
        connection.executescript(
            """
            CREATE TABLE sales (id INTEGER PRIMARY KEY, region TEXT, amount REAL, logo BLOB);
            CREATE VIEW totals AS SELECT region, SUM(amount) AS total FROM sales GROUP BY region;
            """
        )
        connection.executemany(
            "INSERT INTO sales (region, amount, logo) VALUES (?, ?, ?)",
            [("north", 10.5, None), ("south", 20.0, b"\x00\x01"), ("north", 5.0, None)]
            + [("east", float(i), None) for i in range(200)],
        )
    connection.close()
    monkeypatch.setenv("TOOLBRIDGE_SQLITE_PATH", str(path))
    monkeypatch.setenv("TOOLBRIDGE_SQLITE_TIME_LIMIT", "0.5")
    return path


@pytest.fixture
def call(box: Toolbox, call_in: Callable[[Toolbox], Call]) -> Call:
    return call_in(box)


def count(path: Path) -> int:
    with sqlite3.connect(path) as connection:
        rows: int = connection.execute("SELECT COUNT(*) FROM sales").fetchone()[0]
    connection.close()
    return rows


def test_tables(database: Path, call: Call) -> None:
    tables = json.loads(call("sqlite_tables", {}).output)
    assert [t["name"] for t in tables] == ["sales", "totals"]
    assert tables[0]["columns"][0] == {"name": "id", "type": "INTEGER", "primary_key": True}


def test_select_with_row_limit(database: Path, call: Call) -> None:
    result = json.loads(
        call("sqlite_query", {"sql": "SELECT * FROM totals ORDER BY region"}).output
    )
    assert result == {
        "columns": ["region", "total"],
        "rows": [["east", 19900.0], ["north", 15.5], ["south", 20.0]],
        "truncated": False,
    }
    many = json.loads(call("sqlite_query", {"sql": "SELECT id FROM sales", "max_rows": 5}).output)
    assert len(many["rows"]) == 5 and many["truncated"] is True
    blob = json.loads(call("sqlite_query", {"sql": "SELECT logo FROM sales WHERE id = 2"}).output)
    assert blob["rows"] == [[{"blob_base64": "AAE=", "size": 2}]]


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        ("INSERT INTO sales (region) VALUES ('west')", "needs 'insert'"),
        ("UPDATE sales SET amount = 0", "needs 'update'"),
        ("DELETE FROM sales", "needs 'delete'"),
        ("DROP TABLE sales", "needs 'a schema change (CREATE, DROP or ALTER)'"),
        ("CREATE TABLE t (x)", "needs 'a schema change (CREATE, DROP or ALTER)'"),
        ("CREATE INDEX i ON sales (region)", "needs 'a schema change (CREATE, DROP or ALTER)'"),
        ("ALTER TABLE sales ADD COLUMN x", "needs 'alter table'"),
        ("ATTACH DATABASE ':memory:' AS other", "needs 'attach'"),
        ("PRAGMA journal_mode = WAL", "needs 'pragma journal_mode'"),
        ("SELECT * FROM pragma_database_list", "needs 'pragma database_list'"),
        ("UPDATE sqlite_master SET sql = 'x'", "needs 'update'"),
        ("BEGIN", "needs 'transaction'"),
        ("REPLACE INTO sales (id, region) VALUES (1, 'x')", "needs 'insert'"),
    ],
)
def test_writes_are_refused(database: Path, call: Call, sql: str, message: str) -> None:
    result = call("sqlite_query", {"sql": sql})
    assert result.error == "tool_error"
    assert result.output.startswith("PermissionError: refused: this tool only reads; the "), (
        result.output
    )
    assert message in result.output
    assert count(database) == 203


def test_other_refusals(database: Path, call: Call, monkeypatch: pytest.MonkeyPatch) -> None:
    several = call("sqlite_query", {"sql": "SELECT 1; DELETE FROM sales"})
    assert several.output == "ValueError: sql: send one statement at a time"
    bad = call("sqlite_query", {"sql": "SELECT * FROM nowhere"})
    assert bad.output == "ValueError: sql: no such table: nowhere"
    limit = call("sqlite_query", {"sql": "SELECT 1", "max_rows": 5000})
    assert limit.output == "ValueError: max_rows: expected 1 to 1000 (got 5000)"
    runaway = call(
        "sqlite_query",
        {
            "sql": "WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n) "
            "SELECT COUNT(*) FROM n"
        },
    )
    assert runaway.output == ("TimeoutError: the query ran longer than 0.5 seconds and was stopped")
    assert count(database) == 203
    monkeypatch.setenv("TOOLBRIDGE_SQLITE_PATH", str(database.with_name("none.db")))
    missing = call("sqlite_query", {"sql": "SELECT 1"})
    assert "which is not a file" in missing.output
    assert not database.with_name("none.db").exists(), "read-only mode never creates a file"
    monkeypatch.delenv("TOOLBRIDGE_SQLITE_PATH")
    unset = call("sqlite_tables", {})
    assert unset.output.startswith("PermissionError: TOOLBRIDGE_SQLITE_PATH is not set")


# Connection.setlimit (the length limit) is Python 3.11+; on 3.10 the heap limit stops it.
VALUE_TOO_BIG = (
    "ValueError: sql: a value would be larger than 10,000,000 bytes, the limit of this tool "
    "(string or blob too big)"
    if sys.version_info >= (3, 11)
    else "MemoryError: the query needed more than 128 MB of memory, the limit of this tool, and "
    "was stopped"
)


def test_value_size_is_bounded(database: Path, call: Call) -> None:
    bomb = call(
        "sqlite_query",
        {"sql": "SELECT " + ", ".join(["length(randomblob(900000000))"] * 3)},
    )
    assert bomb.output == VALUE_TOO_BIG


def test_memory_is_bounded(database: Path, call: Call, monkeypatch: pytest.MonkeyPatch) -> None:
    # Each value is under the length limit; together they pass SQLite's heap limit. The time
    # limit is out of the way, so a busy machine cannot make it stop the query first.
    monkeypatch.setenv("TOOLBRIDGE_SQLITE_TIME_LIMIT", "60")
    wide = call("sqlite_query", {"sql": "SELECT " + ", ".join(["randomblob(9000000)"] * 60)})
    assert wide.output == (
        "MemoryError: the query needed more than 128 MB of memory, the limit of this tool, and "
        "was stopped"
    )


DENIED_FUNCTIONS = ("fts3_tokenizer", "fts5", "load_extension", "sqlite_log")

BOMBS = [
    "SELECT " + ", ".join(["length(randomblob(900000000))"] * 3),
    "SELECT " + ", ".join(["randomblob(9000000)"] * 60),
    "SELECT printf('%.*c', 9000000, 'x') FROM sales",
    "SELECT zeroblob(9000000) FROM sales",
]

MEASURE = """
import json, resource, sys
from bridge.loading import load_tools
from bridge.tools import Dispatcher
from bridge.types import ToolCall

box = load_tools([sys.argv[1]])
with Dispatcher(box) as dispatcher:
    for i, sql in enumerate(json.loads(sys.argv[2])):
        call = ToolCall(call_id=str(i), name="sqlite_query", arguments={"sql": sql})
        [run] = dispatcher.run([call])
        print(json.dumps(run.output))
for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
    print(resource.getrusage(who).ru_maxrss)  # KiB on Linux
"""


@pytest.mark.skipif(sys.platform != "linux", reason="ru_maxrss is in KiB on Linux only")
def test_bombs_do_not_balloon_memory(database: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOLBRIDGE_SQLITE_TIME_LIMIT", "60")  # the memory limits stop them
    done = subprocess.run(
        [sys.executable, "-c", MEASURE, str(MANIFESTS / "sqlite_query.py"), json.dumps(BOMBS)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    lines = done.stdout.splitlines()
    outputs = [json.loads(line) for line in lines[: len(BOMBS)]]
    assert outputs[0] == VALUE_TOO_BIG
    assert "128 MB of memory" in outputs[1]
    assert '"rows": []' in outputs[2] and "the limit of this tool" in outputs[2]
    assert '"size": 9000000' in outputs[3] and "the limit of this tool" in outputs[3]
    bridge_kib, queries_kib = (int(line) for line in lines[len(BOMBS) :])
    # Without the limits these four statements held 2.7 GB at once.
    assert bridge_kib < 500 * 1024, bridge_kib
    assert queries_kib < 500 * 1024, queries_kib


def test_time_limit_holds(database: Path, call: Call) -> None:
    counting = call(
        "sqlite_query",
        {
            "sql": "WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n "
            "WHERE x < 1000000000) SELECT COUNT(*) FROM n"
        },
    )
    assert counting.output == (
        "TimeoutError: the query ran longer than 0.5 seconds and was stopped"
    )
    # One call of a quadratic function is a single VM step: only the kill stops it.
    quadratic = call(
        "sqlite_query",
        {"sql": "SELECT instr(printf('%.*c', 4000000, 'a'), printf('%.*c', 2000000, 'a') || 'b')"},
    )
    assert quadratic.output == (
        "TimeoutError: the query ran longer than 0.5 seconds and was stopped"
    )


@pytest.mark.parametrize(
    ("sql", "reason"),
    [
        ("SELECT fts3_tokenizer('simple')", "native pointers into the SQLite library"),
        ("SELECT hex(FTS3_TOKENIZER('porter'))", "native pointers into the SQLite library"),
        ("SELECT fts5(NULL)", "native pointer to the FTS5 API"),
        ("SELECT load_extension('libevil')", "loads native code into the process"),
        ("SELECT sqlite_log(1, 'forged entry')", "writes to the process's SQLite error log"),
    ],
)
def test_functions_reaching_past_the_database_are_denied(
    database: Path, call: Call, sql: str, reason: str
) -> None:
    run = call("sqlite_query", {"sql": sql})
    name = next(name for name in DENIED_FUNCTIONS if name in sql.lower())
    assert run.output.startswith(
        f"PermissionError: refused: the function {name}() is not allowed here: it "
    ), run.output
    assert reason in run.output


def test_read_only_pragmas_are_allowed(database: Path, call: Call) -> None:
    info = json.loads(
        call("sqlite_query", {"sql": "SELECT name, pk FROM pragma_table_info('sales')"}).output
    )
    assert info["rows"] == [["id", 1], ["region", 0], ["amount", 0], ["logo", 0]]
    indexes = json.loads(
        call("sqlite_query", {"sql": "SELECT * FROM pragma_index_list('sales')"}).output
    )
    assert indexes["rows"] == []
    direct = json.loads(call("sqlite_query", {"sql": "PRAGMA table_info(totals)"}).output)
    assert [row[1] for row in direct["rows"]] == ["region", "total"]
    functions = call("sqlite_query", {"sql": "SELECT count(*) FROM pragma_function_list"})
    assert functions.error is None, functions.output


def test_result_size_is_bounded(database: Path, call: Call) -> None:
    big = json.loads(
        call(
            "sqlite_query",
            {"sql": "SELECT id, printf('%.*c', 6000, 'x') FROM sales", "max_rows": 10},
        ).output
    )
    assert [row[0] for row in big["rows"]] == [1, 2, 3]
    assert big["truncated"] is True
    assert big["note"] == (
        "rows stop here: the result reached 20,000 characters, the limit of this tool; select "
        "fewer or narrower columns, or fewer rows"
    )
    long_sql = call("sqlite_query", {"sql": "SELECT 1" + " " * 100_000})
    assert long_sql.output == (
        "ValueError: sql: the statement is 100,008 bytes; the limit of this tool is 100,000"
    )
