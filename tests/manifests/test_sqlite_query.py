"""manifests/sqlite_query.py: read-only SQL with row limits; every kind of write, ATTACH,
PRAGMA, transactions, several statements, runaway queries and a missing file are refused, and
the database is unchanged afterwards."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from bridge.tools import Toolbox
from tests.manifests.conftest import Call, loaded


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
        ("PRAGMA journal_mode = WAL", "needs 'pragma'"),
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
