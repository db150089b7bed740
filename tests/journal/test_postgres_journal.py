"""`PostgresJournal` beyond the behavioural suite (which runs on it via journal_stores):
migrations under an advisory lock, hostile values PostgreSQL would refuse, and the password
kept out of repr, logs and errors. A real server: `tests/support/postgres.py`."""

from __future__ import annotations

import logging
import math
import subprocess
import sys
import threading
import uuid
from datetime import datetime, timezone
from pathlib import Path

import psycopg
import pytest

from bridge.errors import UsageError
from bridge.journal import open_journal
from bridge.journal.postgres import POOL_MAX, PostgresJournal
from bridge.journal.postgres_connect import safe_dsn
from bridge.journal.postgres_migrations import MIGRATIONS, SCHEMA_VERSION, migrate, schema_status
from bridge.types import ToolBatch, ToolCall, ToolRun
from tests.support.postgres import PostgresServer


def _fresh(postgres: PostgresServer) -> str:
    return postgres.create_database(f"m_{uuid.uuid4().hex[:12]}")


def test_two_threads_migrating_an_empty_database_apply_each_step_once(
    postgres: PostgresServer,
) -> None:
    dsn = _fresh(postgres)
    barrier = threading.Barrier(2)
    results: list[list[int]] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            barrier.wait(timeout=30)
            results.append(migrate(dsn))
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert errors == []
    assert sorted(results, key=len) == [[], list(range(1, SCHEMA_VERSION + 1))]
    status = schema_status(dsn)
    assert (status.version, status.pending) == (SCHEMA_VERSION, [])


def test_status_of_an_empty_database_lists_every_step_and_creates_nothing(
    postgres: PostgresServer,
) -> None:
    dsn = _fresh(postgres)
    status = schema_status(dsn)
    assert (status.version, status.pending) == (0, list(range(1, SCHEMA_VERSION + 1)))
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT to_regclass('toolbridge_schema')").fetchone() == (None,)


def test_a_newer_schema_is_refused(postgres: PostgresServer) -> None:
    dsn = _fresh(postgres)
    migrate(dsn)
    with psycopg.connect(dsn) as conn:
        conn.execute("UPDATE toolbridge_schema SET version = %s", (SCHEMA_VERSION + 1,))
    with pytest.raises(UsageError, match="newer than this toolbridge"):
        PostgresJournal(dsn)


def test_nan_arguments_and_nul_characters_are_stored(postgres: PostgresServer) -> None:
    journal = PostgresJournal(_fresh(postgres))
    try:
        call = ToolCall(call_id="c\x001", name="t", arguments={"x": math.nan, "y": math.inf})
        journal.receive("conv\x00", ToolBatch(batch_id="b", calls=(call,)), message_id=None)
        journal.finish(
            "conv\x00",
            ToolRun(
                call_id="c\x001",
                name="t",
                arguments=call.arguments,
                output="out\x00put",
                started_at=datetime.now(timezone.utc),
                duration_ms=1.0,
            ),
        )
        record = journal.get_call("conv\x00", "c\x001")
        assert record is not None
        assert record.state == "finished"
        assert record.output == "out\ufffdput"
        assert isinstance(record.arguments, dict) and math.isnan(record.arguments["x"])
    finally:
        journal.close()


def test_the_password_is_never_in_repr_logs_or_errors(
    postgres: PostgresServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    dsn = _fresh(postgres)
    journal = PostgresJournal(dsn)
    try:
        assert postgres.password not in repr(journal)
        assert postgres.password not in journal.path
        assert postgres.password not in safe_dsn(dsn)
    finally:
        journal.close()
    wrong = dsn.replace(postgres.password, "not-the-password-at-all")
    with pytest.raises(UsageError) as info:
        PostgresJournal(wrong)
    assert "not-the-password-at-all" not in str(info.value)
    assert "cannot connect" in str(info.value)
    missing = dsn.rsplit("/", 1)[0] + "/no_such_database"
    with pytest.raises(UsageError) as info:
        PostgresJournal(missing)
    assert postgres.password not in str(info.value)
    assert postgres.password not in caplog.text
    assert "not-the-password-at-all" not in caplog.text


def test_the_password_may_come_from_pgpassword(
    postgres: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    dsn = _fresh(postgres)
    monkeypatch.setenv("PGPASSWORD", postgres.password)
    bare = dsn.replace(f":{postgres.password}@", "@")
    journal = PostgresJournal(bare)
    try:
        journal.add_conversation("c")
        assert journal.get_conversation("c") is not None
    finally:
        journal.close()


def test_the_password_may_come_from_a_pgpass_file(
    postgres: PostgresServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    dsn = _fresh(postgres)
    passfile = tmp_path / "pgpass"
    passfile.write_text(f"*:*:*:{postgres.user}:{postgres.password}\n", encoding="utf-8")
    passfile.chmod(0o600)  # libpq ignores a file others can read
    monkeypatch.delenv("PGPASSWORD", raising=False)
    monkeypatch.setenv("PGPASSFILE", str(passfile))
    journal = PostgresJournal(dsn.replace(f":{postgres.password}@", "@"))
    try:
        journal.add_conversation("c")
        assert journal.get_conversation("c") is not None
    finally:
        journal.close()


def test_a_database_of_the_previous_version_is_migrated_with_its_rows(
    postgres: PostgresServer,
) -> None:
    dsn = _fresh(postgres)
    with psycopg.connect(dsn) as conn:
        for step in MIGRATIONS[:-1]:
            conn.execute(step)
        conn.execute(
            "CREATE TABLE toolbridge_schema (one BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (one), "
            "version INTEGER NOT NULL)"
        )
        conn.execute("INSERT INTO toolbridge_schema VALUES (TRUE, %s)", (SCHEMA_VERSION - 1,))
        conn.execute(
            "INSERT INTO conversations (id, created_at, updated_at) VALUES ('old', %s, %s)",
            ("2026-01-01T00:00:00+00:00", "2026-01-01T00:00:00+00:00"),
        )
    assert schema_status(dsn).pending == [SCHEMA_VERSION]
    journal = PostgresJournal(dsn)
    try:
        assert journal.get_conversation("old") is not None
        assert schema_status(dsn).pending == []
    finally:
        journal.close()


def test_commits_are_synchronous_whatever_the_role_default(postgres: PostgresServer) -> None:
    dsn = _fresh(postgres)
    postgres.psql(f"ALTER ROLE {postgres.user} SET synchronous_commit = off;\n")
    try:
        journal = PostgresJournal(dsn)
        try:
            setting = journal._read("SHOW synchronous_commit")[0]["synchronous_commit"]
            assert setting == "on"
        finally:
            journal.close()
    finally:
        postgres.psql(f"ALTER ROLE {postgres.user} RESET synchronous_commit;\n")


def test_without_psycopg_the_error_names_the_extra() -> None:
    code = (
        "import sys; sys.modules['psycopg'] = None\n"
        "import bridge, bridge.daemon.settings\n"
        "from bridge.journal.stores import open_journal\n"
        "try:\n"
        "    open_journal('postgresql://u:secret-password-1@127.0.0.1:1/db')\n"
        "except Exception as exc:\n"
        "    print(type(exc).__name__, exc)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    ).stdout
    assert "UsageError" in out and "pip install 'toolbridge[postgres]'" in out
    assert "secret-password-1" not in out


def test_import_bridge_does_not_import_psycopg() -> None:
    code = "import sys, bridge, bridge.journal, bridge.daemon.app; print('psycopg' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    ).stdout
    assert out.strip() == "False"


def test_the_journal_keeps_working_after_the_server_is_killed_and_restarted(
    postgres: PostgresServer,  # only so that the test is skipped where no server exists
) -> None:
    with PostgresServer() as server:
        journal = PostgresJournal(server.dsn)
        try:
            journal.add_conversation("before")
            server.kill()
            server.start()
            journal.add_conversation("after")
            assert journal.get_conversation("before") is not None
            assert journal.get_conversation("after") is not None
        finally:
            journal.close()


def test_a_role_without_create_rights_opens_an_upgraded_journal(
    postgres: PostgresServer,
) -> None:
    dsn = _fresh(postgres)
    database = dsn.rsplit("/", 1)[1]
    migrate(dsn)  # an admin's `toolbridge db upgrade`
    role, password = f"dml_{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    postgres.psql(
        f"CREATE ROLE {role} LOGIN PASSWORD '{password}';\n"
        f"REVOKE CREATE ON SCHEMA public FROM PUBLIC;\n"
        f"GRANT SELECT, INSERT, UPDATE ON ALL TABLES IN SCHEMA public TO {role};\n"
        f"GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO {role};\n",
        database=database,
    )
    journal = PostgresJournal(
        f"postgresql://{role}:{password}@{postgres.host}:{postgres.port}/{database}"
    )
    try:
        journal.begin_message("c", "hello")
        assert [m.query for m in journal.messages("c")] == ["hello"]
    finally:
        journal.close()


def test_open_journal_sizes_the_pool_as_asked(postgres: PostgresServer) -> None:
    # The daemon asks for one connection per worker and some room (bridge/daemon/app.py), so
    # 16 workers never queue behind the default 10 connections.
    dsn = _fresh(postgres)
    journal = open_journal(dsn, pool_size=20)
    try:
        assert journal._pool.max_size == 20  # type: ignore[attr-defined]
    finally:
        journal.close()
    journal = open_journal(dsn)
    try:
        assert journal._pool.max_size == POOL_MAX  # type: ignore[attr-defined]
    finally:
        journal.close()
