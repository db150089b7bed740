"""`toolbridge db status|upgrade` on a real PostgreSQL server (and on a SQLite file)."""

from __future__ import annotations

import uuid
from pathlib import Path

from typer.testing import CliRunner

from bridge.cli import app
from bridge.journal.migrations import SCHEMA_VERSION as SQLITE_VERSION
from bridge.journal.postgres_migrations import SCHEMA_VERSION
from tests.support.postgres import PostgresServer

runner = CliRunner()


def test_status_then_upgrade_then_status(postgres: PostgresServer) -> None:
    dsn = postgres.create_database(f"c_{uuid.uuid4().hex[:12]}")
    every = ", ".join(str(step) for step in range(1, SCHEMA_VERSION + 1))

    result = runner.invoke(app, ["db", "status", "--db", dsn])
    assert result.exit_code == 0, result.output
    assert "schema version: 0" in result.output
    assert f"pending migrations: {every}" in result.output
    assert postgres.password not in result.output

    result = runner.invoke(app, ["db", "upgrade"], env={"TOOLBRIDGE_DB": dsn})
    assert result.exit_code == 0, result.output
    assert f"applied {every}" in result.output
    assert postgres.password not in result.output

    result = runner.invoke(app, ["db", "upgrade", "--db", dsn])
    assert result.exit_code == 0 and "already current" in result.output

    result = runner.invoke(app, ["db", "status", "--db", dsn])
    assert f"schema version: {SCHEMA_VERSION}" in result.output
    assert "pending migrations: none" in result.output


def test_a_wrong_password_fails_clearly_without_showing_it(postgres: PostgresServer) -> None:
    dsn = postgres.dsn.replace(postgres.password, "wrong-password-123456")
    result = runner.invoke(app, ["db", "status", "--db", dsn])
    assert result.exit_code != 0
    assert "cannot connect to the journal" in result.output
    assert "wrong-password-123456" not in result.output


def test_sqlite_status_and_upgrade(tmp_path: Path) -> None:
    db = str(tmp_path / "j.db")
    result = runner.invoke(app, ["db", "status", "--db", db])
    assert result.exit_code == 0 and "schema version: 0" in result.output
    result = runner.invoke(app, ["db", "upgrade", "--db", db])
    assert result.exit_code == 0 and "applied" in result.output
    result = runner.invoke(app, ["db", "status", "--db", db])
    assert f"schema version: {SQLITE_VERSION}" in result.output
    assert "pending migrations: none" in result.output
