"""`toolbridge audit verify|head|export` on real journals: a SQLite file tampered with raw
sqlite3 (an edited entry, a deleted row, two rows' seq swapped, the end cut off), read while a
daemon owns the file, and a PostgreSQL database with two replicas' chains."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bridge.access import AuditEvent, AuditLog
from bridge.cli import app
from bridge.cli.audit_cmd import parse_since
from bridge.errors import UsageError, register_secret
from bridge.journal import SQLiteJournal
from bridge.journal.owner import JournalInUseError
from tests.support.postgres import PostgresServer

runner = CliRunner()
SECRET = "sk-cli-audit-" + uuid.uuid4().hex


def _events() -> list[AuditEvent]:
    decisions = ["allow", "refuse", "allow", "approval", "allow"]
    return [
        AuditEvent(
            kind="policy",
            outcome=outcome,
            caller="alice",
            via="key",
            conversation_id="conv-1",
            call_id=f"call-{n}",
            tool="transfer",
            arguments={"amount": n, "note": f"key {SECRET}"},
            detail={"policies": ["limit"]},
        )
        for n, outcome in enumerate(decisions, 1)
    ]


@pytest.fixture
def db(tmp_path: Path) -> str:
    """A SQLite journal holding five policy entries (closed again)."""
    register_secret(SECRET)
    path = str(tmp_path / "journal.db")
    journal = SQLiteJournal(path)
    log = AuditLog(journal)
    for event in _events():
        log.record(event)
    journal.close()
    return path


def _sql(db: str, *statements: str) -> None:
    with sqlite3.connect(db) as conn:
        for statement in statements:
            conn.execute(statement)


def _hash(db: str, seq: int) -> str:
    with sqlite3.connect(db) as conn:
        return str(conn.execute("SELECT hash FROM audit WHERE seq = ?", (seq,)).fetchone()[0])


def _verify(db: str, *more: str) -> tuple[int, str]:
    result = runner.invoke(app, ["audit", "verify", "--db", db, *more])
    return result.exit_code, result.output


def test_an_intact_record_verifies(db: str) -> None:
    code, output = _verify(db)
    assert code == 0, output
    assert output.strip() == f"intact: 5 entries in 1 chain, head local:5:{_hash(db, 5)}"


def test_an_edited_entry_is_named(db: str) -> None:
    _sql(
        db,
        'UPDATE audit SET entry = replace(entry, \'"outcome":"refuse"\', \'"outcome":"allow"\') '
        "WHERE seq = 2",
    )
    code, output = _verify(db)
    assert code == 1, output
    assert "chain local, entry 2 (policy): edited: its hash does not match its content" in output


def test_a_deleted_entry_is_named(db: str) -> None:
    _sql(db, "DELETE FROM audit WHERE seq = 3")
    code, output = _verify(db)
    assert code == 1, output
    assert "chain local, entry 4 (policy): deleted: entry 3 is missing" in output


def test_swapped_entries_are_named(db: str) -> None:
    _sql(
        db,
        "UPDATE audit SET seq = -1 WHERE seq = 2",
        "UPDATE audit SET seq = 2 WHERE seq = 3",
        "UPDATE audit SET seq = 3 WHERE seq = -1",
    )
    code, output = _verify(db)
    assert code == 1, output
    assert "chain local, entry 2 (policy): reordered: stored as entry 2 but its hashed" in output


def test_a_rehashed_edit_is_caught_by_the_next_link(db: str) -> None:
    # Someone who edits an entry and recomputes its hash still breaks the link after it.
    from bridge.access.audit import entry_hash

    with sqlite3.connect(db) as conn:
        prev, entry = conn.execute("SELECT prev_hash, entry FROM audit WHERE seq = 2").fetchone()
        entry = entry.replace('"outcome":"refuse"', '"outcome":"allow"')
        conn.execute(
            "UPDATE audit SET entry = ?, hash = ? WHERE seq = 2", (entry, entry_hash(prev, entry))
        )
    code, output = _verify(db)
    assert code == 1 and "chain local, entry 3 (policy): deleted: it does not link to entry 2" in (
        output
    )


def test_a_cut_off_end_is_caught_against_a_head_kept_elsewhere(db: str) -> None:
    result = runner.invoke(app, ["audit", "head", "--db", db])
    assert result.exit_code == 0
    head = result.output.strip()
    assert head == f"local:5:{_hash(db, 5)}"

    _sql(db, "DELETE FROM audit WHERE seq >= 4")
    assert _verify(db)[0] == 0  # the chain alone still holds together
    code, output = _verify(db, "--expect-head", head)
    assert code == 1, output
    assert "chain local, entry 4: truncated: the chain ends at entry 3, but entry 5" in output
    code, output = _verify(db, "--expect-head", head.removeprefix("local:"))
    assert code == 1 and "truncated" in output

    code, output = _verify(db, "--expect-head", "5:nothex")
    assert code == 2 and "[CHAIN:]SEQ:HASH" in output


HOLDER = """
import sys
from bridge.journal.owner import JournalLock
lock = JournalLock.acquire(sys.argv[1])
print("locked", flush=True)
sys.stdin.read()
lock.release()
"""


def test_verify_reads_a_journal_a_daemon_owns(db: str) -> None:
    # Another process owns the file, as a daemon does: a journal cannot be opened on it, the
    # audit commands read it all the same.
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, db], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        with pytest.raises(JournalInUseError):
            SQLiteJournal(db)
        code, output = _verify(db)
        assert code == 0 and output.startswith("intact: 5 entries"), output
        result = runner.invoke(app, ["audit", "export", "--db", db])
        assert result.exit_code == 0 and len(result.output.splitlines()) == 5
    finally:
        holder.communicate("", timeout=30)


def test_export_masks_secrets_and_keeps_the_hash(db: str) -> None:
    result = runner.invoke(app, ["audit", "export", "--db", db, "--format", "jsonl"])
    assert result.exit_code == 0, result.output
    assert SECRET not in result.output
    lines = result.output.splitlines()
    entries = [json.loads(line) for line in lines]
    assert [e["seq"] for e in entries] == [1, 2, 3, 4, 5]
    first = entries[0]
    assert first["arguments"] == {"amount": 1, "note": "key [secure]"}
    assert len(first["arguments_sha256"]) == 64 and first["hash"] == _hash(db, 1)
    assert (first["kind"], first["outcome"], first["caller"]) == ("policy", "allow", "alice")


def test_export_since(db: str) -> None:
    def seqs(*args: str) -> list[int]:
        result = runner.invoke(app, ["audit", "export", "--db", db, *args])
        assert result.exit_code == 0, result.output
        return [json.loads(line)["seq"] for line in result.output.splitlines()]

    assert seqs("--since", "1h") == [1, 2, 3, 4, 5]
    future = (datetime.now(timezone.utc) + timedelta(minutes=5)).isoformat()
    assert seqs("--since", future) == []
    with sqlite3.connect(db) as conn:
        at = conn.execute("SELECT at FROM audit WHERE seq = 4").fetchone()[0]
    assert seqs("--since", at, "--chain", "local") == [4, 5]
    assert seqs("--chain", "elsewhere") == []

    result = runner.invoke(app, ["audit", "export", "--db", db, "--since", "yesterday"])
    assert result.exit_code == 2 and "expected an ISO time" in result.output
    result = runner.invoke(app, ["audit", "export", "--db", db, "--format", "csv"])
    assert result.exit_code == 2 and "the only format is jsonl" in result.output


def test_parse_since() -> None:
    now = datetime(2026, 1, 31, 12, tzinfo=timezone.utc)
    assert parse_since("24h", now=now) == now - timedelta(hours=24)
    assert parse_since("7d", now=now) == now - timedelta(days=7)
    assert parse_since("2026-01-30T09:00:00") == datetime(2026, 1, 30, 9, tzinfo=timezone.utc)
    assert parse_since("2026-01-30T09:00:00+02:00").utcoffset() == timedelta(hours=2)
    with pytest.raises(UsageError):
        parse_since("-3d")


def test_a_missing_journal_or_one_without_the_record_is_a_clear_error(tmp_path: Path) -> None:
    code, output = _verify(str(tmp_path / "none.db"))
    assert code == 2 and "no journal at" in output
    old = str(tmp_path / "old.db")
    _sql(old, "CREATE TABLE conversations (id TEXT)", "PRAGMA user_version = 8")
    code, output = _verify(old)
    assert code == 2 and "has no audit record yet" in output and "db upgrade" in output


def test_postgres_two_replicas_then_an_edit(postgres: PostgresServer) -> None:
    from bridge.journal.postgres import PostgresJournal

    register_secret(SECRET)  # not left to another test: each runs alone too
    database = f"a_{uuid.uuid4().hex[:12]}"
    dsn = postgres.create_database(database)
    journals = [PostgresJournal(dsn), PostgresJournal(dsn)]
    try:
        for name, journal in zip(("r1", "r2"), journals, strict=True):
            journal.bind_replica(name)
            log = AuditLog(journal)
            for event in _events():
                log.record(event)
    finally:
        for journal in journals:
            journal.close()

    code, output = _verify(dsn)
    assert code == 0, output
    assert output.startswith("intact: 10 entries in 2 chains, heads r1:5:")
    assert postgres.password not in output
    result = runner.invoke(app, ["audit", "head", "--db", dsn])
    assert [line.split(":")[:2] for line in result.output.split()] == [["r1", "5"], ["r2", "5"]]
    result = runner.invoke(app, ["audit", "export", "--db", dsn, "--chain", "r2"])
    assert [json.loads(line)["chain"] for line in result.output.splitlines()] == ["r2"] * 5
    assert SECRET not in result.output

    postgres.psql(
        "UPDATE audit SET entry = replace(entry, '\"amount\":4', '\"amount\":40') "
        "WHERE chain = 'r2' AND seq = 4;",
        database,
    )
    code, output = _verify(dsn)
    assert code == 1, output
    assert "chain r2, entry 4 (policy): edited" in output and "chain r1" not in output
    code, output = _verify(dsn, "--expect-head", f"5:{'0' * 64}")
    assert code == 2 and "several chains" in output
