"""Schema step 10: the trace context of each message's run and of each call's execution, kept
by every store (`tests/support/journal_stores`, PostgreSQL included) in the write that already
happens (the message's insert, the call's "started"), and journals of version 9 migrated."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import psycopg

from bridge.journal import Journal, Ledger, SQLiteJournal
from bridge.journal.migrations import MIGRATIONS
from bridge.journal.postgres import PostgresJournal
from bridge.journal.postgres_migrations import MIGRATIONS as PG_MIGRATIONS
from tests.journal.test_journal import BATCH, _run
from tests.journal.test_postgres_journal import _fresh
from tests.support.postgres import PostgresServer

RUN = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
FIRST = "00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01"
SECOND = "00-0af7651916cd43dd8448eb211c80319c-53995c3f42cd8ad8-01"
AGAIN = "00-0af7651916cd43dd8448eb211c80319c-1f1f1f1f1f1f1f1f-01"


def test_a_message_keeps_its_runs_trace_context(journal: Journal) -> None:
    traced = journal.begin_message("conv", "q", traceparent=RUN)
    untraced = journal.begin_message("conv", "q2", sent_by="alice")
    journal.end_message(traced, status="finished", answer="a")
    by_id = {m.message_id: m for m in journal.messages("conv")}
    assert by_id[traced].traceparent == RUN
    assert by_id[traced].status == "finished"
    assert by_id[untraced].traceparent is None
    [running] = journal.unfinished_messages()
    assert (running.message_id, running.traceparent) == (untraced, None)


def test_a_call_keeps_its_executions_trace_context_until_it_runs_again(journal: Journal) -> None:
    ledger = Ledger(journal, "conv")
    ledger.receive(BATCH, journal.begin_message("conv", "q"))
    first, second = BATCH.calls
    ledger.start((first,), {first.call_id: FIRST})
    journal.start("conv", [second.call_id], traceparents={second.call_id: SECOND})
    assert [c.traceparent for c in journal.calls("conv")] == [FIRST, SECOND]
    ledger.finish(_run(first.call_id))
    done = journal.get_call("conv", first.call_id)
    assert done is not None and done.state == "finished" and done.traceparent == FIRST
    # Run again after a crash: the new execution's span replaces it (none: untraced).
    journal.start("conv", [second.call_id], traceparents={second.call_id: AGAIN})
    assert journal.get_call("conv", second.call_id).traceparent == AGAIN  # type: ignore[union-attr]
    ledger.start((second,))
    assert journal.get_call("conv", second.call_id).traceparent is None  # type: ignore[union-attr]


def test_a_version_9_sqlite_journal_is_migrated_to_10_with_its_rows(tmp_path: Path) -> None:
    db = tmp_path / "v9.db"
    with sqlite3.connect(db) as raw:
        raw.executescript("".join(MIGRATIONS[:9]) + "PRAGMA user_version=9;")
        raw.execute(
            "INSERT INTO conversations (id, created_at, updated_at) VALUES "
            "('old', '2026-01-01T00:00:00+00:00', '2026-01-01T00:00:00+00:00')"
        )
        raw.execute(
            "INSERT INTO messages (conversation_id, query, status, created_at) VALUES "
            "('old', 'q', 'running', '2026-01-01T00:00:00+00:00')"
        )
    journal = SQLiteJournal(db)
    try:
        [old] = journal.messages("old")
        assert old.traceparent is None
        journal.begin_message("old", "q2", traceparent=RUN)
        assert [m.traceparent for m in journal.messages("old")] == [None, RUN]
    finally:
        journal.close()
    with sqlite3.connect(db) as raw:
        assert raw.execute("PRAGMA user_version").fetchone()[0] == 10


def test_a_version_9_postgres_journal_is_migrated_to_10_with_its_rows(
    postgres: PostgresServer,
) -> None:
    dsn = _fresh(postgres)
    with psycopg.connect(dsn) as conn:
        for step in PG_MIGRATIONS[:9]:
            conn.execute(step)
        conn.execute(
            "CREATE TABLE toolbridge_schema (one BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (one), "
            "version INTEGER NOT NULL)"
        )
        conn.execute("INSERT INTO toolbridge_schema VALUES (TRUE, 9)")
        conn.execute(
            "INSERT INTO conversations (id, created_at, updated_at) VALUES ('old', %s, %s)",
            ("2026-01-01T00:00:00+00:00", "2026-01-01T00:00:00+00:00"),
        )
        conn.execute(
            "INSERT INTO messages (conversation_id, query, status, created_at) "
            "VALUES ('old', 'q', 'running', %s)",
            ("2026-01-01T00:00:00+00:00",),
        )
    journal = PostgresJournal(dsn)
    try:
        [old] = journal.messages("old")
        assert old.traceparent is None
        journal.begin_message("old", "q2", traceparent=RUN)
        assert [m.traceparent for m in journal.messages("old")] == [None, RUN]
    finally:
        journal.close()
