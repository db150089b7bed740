"""The journal: the same contract for both stores, and the loop's use of it after a crash."""

from __future__ import annotations

import sqlite3
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from bridge import (
    Bridge,
    ToolBatch,
    Toolbox,
    ToolCall,
    ToolCallsRequested,
    ToolRun,
    UsageError,
    manifest,
)
from bridge.emulator import Emulator
from bridge.errors import register_secret
from bridge.journal import (
    INTERRUPTED_OUTPUT,
    Journal,
    Ledger,
    MemoryJournal,
    SQLiteJournal,
    StateSnapshot,
)
from bridge.journal.migrations import MIGRATIONS, SCHEMA_VERSION
from bridge.journal.stores import open_journal
from bridge.platforms.appbuilder import AppBuilderPlatform

RUNS: Counter[str] = Counter()


@manifest(description="Pay an invoice (never twice).")
def pay(invoice: str) -> str:
    """Pay.

    Args:
        invoice: Invoice number.
    """
    RUNS[f"pay {invoice}"] += 1
    return f"paid {invoice}"


@manifest(description="Read a price (safe to repeat).", idempotent=True)
def price(item: str) -> str:
    """Price.

    Args:
        item: Item.
    """
    RUNS[f"price {item}"] += 1
    return f"{item}: 3 EUR"


SCENARIO: dict[str, Any] = {
    "rules": [
        {
            "match": r"pay (?P<i>\w+) and price (?P<p>\w+)",
            "steps": [
                {
                    "calls": [
                        {"tool": "pay", "arguments": {"invoice": "{i}"}},
                        {"tool": "price", "arguments": {"item": "{p}"}},
                    ]
                }
            ],
            "answer": "{outputs.pay} / {outputs.price}",
        }
    ]
}


def _run(call_id: str, output: str = "out") -> ToolRun:
    return ToolRun(
        call_id=call_id,
        name="pay",
        arguments={"invoice": "A1"},
        output=output,
        started_at=datetime.now(timezone.utc),
        duration_ms=1.5,
    )


BATCH = ToolBatch(
    batch_id="b1",
    calls=(
        ToolCall(call_id="c1", name="pay", arguments={"invoice": "A1"}),
        ToolCall(call_id="c2", name="price", arguments='{"item": "tea"}'),
    ),
    resume={"request_id": "r-1", "message_id": "m-1"},
)


def test_call_states_in_order(journal: Journal) -> None:
    journal.add_conversation("conv", end_user_id="u1")
    message = journal.begin_message("conv", "pay A1")
    journal.receive("conv", BATCH, message_id=message)
    assert [c.state for c in journal.calls("conv")] == ["received", "received"]
    assert journal.pending_batch(message) == BATCH
    journal.start("conv", ["c1", "c2"])
    assert journal.get_call("conv", "c1").state == "started"  # type: ignore[union-attr]
    journal.finish("conv", _run("c1", "paid"))
    record = journal.get_call("conv", "c1")
    assert record is not None and record.done and record.to_run().output == "paid"
    assert record.duration_ms == 1.5 and record.message_id == message
    journal.finish("conv", _run("c2"))
    journal.submit("conv", BATCH)
    assert [c.state for c in journal.calls("conv")] == ["submitted", "submitted"]
    assert journal.pending_batch(message) is None
    assert journal.get_call("conv", "c2").arguments == '{"item": "tea"}'  # type: ignore[union-attr]


def test_messages_and_conversations(journal: Journal) -> None:
    journal.add_conversation("a")
    journal.add_conversation("b", end_user_id="u2")
    first = journal.begin_message("a", "hello")
    assert [m.message_id for m in journal.unfinished_messages()] == [first]
    journal.end_message(first, status="finished", answer="hi", request_ids=["r1"], rounds=2)
    assert journal.unfinished_messages() == []
    [message] = journal.messages("a")
    assert (message.answer, message.status, message.request_ids, message.rounds) == (
        "hi", "finished", ["r1"], 2,
    )  # fmt: skip
    items, total = journal.list_conversations(limit=1)
    assert total == 2 and items[0].conversation_id == "a", "most recently updated first"
    assert items[0].status == "finished" and items[0].messages == 1
    record = journal.get_conversation("b")
    assert record is not None and record.end_user_id == "u2" and record.status == "new"
    assert journal.get_conversation("nope") is None


def test_a_repeated_batch_is_one_batch_and_keeps_call_states(journal: Journal) -> None:
    message = journal.begin_message("conv", "q")
    journal.receive("conv", BATCH, message_id=message)
    journal.start("conv", ["c1"])
    journal.receive("conv", BATCH, message_id=message)  # recovery receives it again
    assert journal.get_call("conv", "c1").state == "started"  # type: ignore[union-attr]
    journal.finish("conv", _run("c1"))
    journal.finish("conv", _run("c2"))
    journal.submit("conv", BATCH)
    assert journal.pending_batch(message) is None


def test_registered_secrets_are_never_written(journal: Journal) -> None:
    register_secret("sk-journal-secret-123456")
    message = journal.begin_message("conv", "my key is sk-journal-secret-123456")
    batch = ToolBatch(
        batch_id="b",
        calls=(ToolCall(call_id="c", name="pay", arguments={"k": "sk-journal-secret-123456"}),),
    )
    journal.receive("conv", batch, message_id=message)
    journal.finish("conv", _run("c", "echo sk-journal-secret-123456"))
    journal.end_message(message, status="failed", error_message="bad sk-journal-secret-123456")
    text = repr(journal.messages("conv")) + repr(journal.calls("conv"))
    assert "sk-journal-secret-123456" not in text and "[secure]" in text


def test_sqlite_journal_is_versioned_and_durable(tmp_path: Path) -> None:
    path = tmp_path / "j.db"
    journal = SQLiteJournal(path)
    message = journal.begin_message("conv", "q")
    journal.close()
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    reopened = SQLiteJournal(path)
    assert [m.message_id for m in reopened.unfinished_messages()] == [message]
    reopened.close()
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA user_version=99")
    with pytest.raises(UsageError, match="schema version 99, newer than"):
        SQLiteJournal(path)


@pytest.mark.parametrize(("sync", "pragma"), [("full", 2), ("normal", 1)])
def test_sqlite_journal_commits_with_the_fsync_policy_it_is_given(
    tmp_path: Path, sync: str, pragma: int
) -> None:
    journal = open_journal(str(tmp_path / "j.db"), sqlite_sync=sync)
    assert isinstance(journal, SQLiteJournal)
    try:
        assert journal._db.execute("PRAGMA synchronous").fetchone()[0] == pragma
    finally:
        journal.close()
    default = SQLiteJournal(tmp_path / "k.db")
    try:
        assert default._db.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    finally:
        default.close()
    with pytest.raises(UsageError, match="'full' or 'normal'"):
        SQLiteJournal(tmp_path / "l.db", synchronous="off")


def test_sqlite_journal_rejects_a_file_that_is_not_a_database(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("not a database at all, just some words" * 100)
    with pytest.raises(UsageError, match="cannot open the journal"):
        SQLiteJournal(path)


def test_memory_journal_forgets_old_conversations() -> None:
    journal = MemoryJournal(max_conversations=2)
    for name in ("a", "b", "c"):
        journal.end_message(journal.begin_message(name, "q"), status="finished")
    assert [c.conversation_id for c in journal.list_conversations()[0]] == ["c", "b"]


def test_ledger_plans_after_a_crash() -> None:
    journal = MemoryJournal()
    toolbox = Toolbox([pay, price])
    ledger = Ledger(journal, "conv")
    batch = ToolBatch(
        batch_id="b",
        calls=(
            ToolCall(call_id="done", name="pay", arguments={"invoice": "1"}),
            ToolCall(call_id="cut", name="pay", arguments={"invoice": "2"}),
            ToolCall(call_id="again", name="price", arguments={"item": "x"}),
            ToolCall(call_id="new", name="pay", arguments={"invoice": "3"}),
        ),
    )
    ledger.receive(batch, None)
    ledger.start(batch.calls[:3])
    ledger.finish(_run("done"))
    fresh, interrupted = ledger.plan(batch, toolbox.is_idempotent)
    assert [c.call_id for c in fresh] == ["again", "new"]
    [cut] = interrupted
    assert cut.call_id == "cut" and cut.error == "tool_error"
    assert cut.output == INTERRUPTED_OUTPUT.format(name="pay")
    assert "done" in ledger and "cut" not in ledger


def test_the_loop_resumes_a_journaled_batch_without_running_twice(tmp_path: Path) -> None:
    """A process died with pay started and price started; a new Bridge finishes the run."""
    RUNS.clear()
    path = tmp_path / "loop.db"
    with Emulator(scenario=SCENARIO) as emu:
        platform = AppBuilderPlatform(app_id=emu.app_id, token=emu.token, base_url=emu.base_url)
        # What the loop had written when the process died: the batch received, both calls
        # started (the dispatcher may have begun them), nothing finished.
        crashed = SQLiteJournal(path)
        cid = platform.create_conversation()
        message_id = crashed.begin_message(cid, "pay X1 and price tea")
        tools = Toolbox([pay, price]).manifests("appbuilder")
        events = platform.start(cid, "pay X1 and price tea", tools=tools)
        [batch] = [e.batch for e in events if isinstance(e, ToolCallsRequested)]
        crashed.receive(cid, batch, message_id=message_id)
        crashed.start(cid, [c.call_id for c in batch.calls])
        crashed.close()
        platform.close()
        assert RUNS == {}, "nothing ran before the crash"

        platform = AppBuilderPlatform(app_id=emu.app_id, token=emu.token, base_url=emu.base_url)
        journal = SQLiteJournal(path)
        [interrupted] = journal.unfinished_messages()
        pending = journal.pending_batch(interrupted.message_id)
        assert pending == batch
        with Bridge(platform, [pay, price], journal=journal) as bridge:
            conv = bridge.conversation(interrupted.conversation_id)
            events = list(conv.stream_recovered(interrupted.message_id, pending))
        assert RUNS == {"price tea": 1}, "only the idempotent call runs again"
        answer = "".join(e.text for e in events if e.kind == "text_delta")
        assert answer.startswith("The tool call 'pay' was interrupted by a restart")
        assert answer.endswith("/ tea: 3 EUR")
        [message] = journal.messages(interrupted.conversation_id)
        assert message.status == "finished" and message.answer == answer
        assert {c.state for c in journal.calls(interrupted.conversation_id)} == {"submitted"}
        journal.close()


def test_a_version_1_journal_is_migrated_in_place(tmp_path: Path) -> None:
    import sqlite3

    db = tmp_path / "old.db"
    with sqlite3.connect(db) as raw:
        raw.executescript(MIGRATIONS[0] + "PRAGMA user_version=1;")
        raw.execute(
            "INSERT INTO conversations VALUES ('c-old', NULL, '2026-01-01T00:00:00+00:00', "
            "'2026-01-01T00:00:00+00:00')"
        )
    journal = SQLiteJournal(db)
    try:
        assert journal.get_conversation("c-old") is not None
        message = journal.begin_message("c-old", "question")
        journal.end_message(message, status="waiting_input", answer="when?", interrupt_id="i-1")
        assert journal.messages("c-old")[-1].interrupt_id == "i-1"
    finally:
        journal.close()
    with sqlite3.connect(db) as raw:
        assert raw.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 10


def test_outputs_are_submitting_before_the_post_and_submitted_once_accepted(
    journal: Journal,
) -> None:
    message = journal.begin_message("conv", "pay A1")
    journal.receive("conv", BATCH, message_id=message)
    journal.finish("conv", _run("c1"))
    journal.finish("conv", _run("c2"))
    pending = journal.pending(message)
    assert pending is not None and pending.batch == BATCH and not pending.submitting
    journal.submitting("conv", BATCH)
    pending = journal.pending(message)
    assert pending is not None and pending.submitting
    assert [c.state for c in journal.calls("conv")] == ["submitting", "submitting"]
    record = journal.get_call("conv", "c1")
    assert record is not None and record.done, "a submitting call has its output: never rerun"
    journal.submit("conv", BATCH)
    assert journal.pending(message) is None
    assert [c.state for c in journal.calls("conv")] == ["submitted", "submitted"]


def test_a_replaced_platform_conversation_is_kept_in_the_history(journal: Journal) -> None:
    journal.add_conversation("conv")
    record = journal.get_conversation("conv")
    assert record is not None and record.platform_id == "conv"
    journal.replace_platform_conversation("conv", "conv-2", reason="stuck on calls c9")
    record = journal.get_conversation("conv")
    assert record is not None and record.platform_id == "conv-2"
    history = journal.platform_conversations("conv")
    assert [h.platform_conversation_id for h in history] == ["conv", "conv-2"]
    assert history[0].reason == "" and history[1].reason == "stuck on calls c9"
    assert journal.platform_conversations("unknown") == []


def test_a_message_knows_whether_its_run_ended_on_a_platform_event(journal: Journal) -> None:
    settled = journal.begin_message("conv", "q1")
    journal.end_message(settled, status="failed", error_code="ServiceError")
    lost = journal.begin_message("conv", "q2")
    journal.end_message(lost, status="failed", error_code="interrupted", platform_settled=False)
    assert [m.platform_settled for m in journal.messages("conv")] == [True, False]


def test_a_version_2_journal_is_migrated_to_3(tmp_path: Path) -> None:
    """Batches in flight and lost runs of an old file read right after the upgrade."""
    db = tmp_path / "v2.db"
    with sqlite3.connect(db) as raw:
        raw.executescript("".join(MIGRATIONS[:2]) + "PRAGMA user_version=2;")
        raw.execute(
            "INSERT INTO conversations VALUES ('c', NULL, '2026-01-01T00:00:00+00:00', "
            "'2026-01-01T00:00:00+00:00')"
        )
        raw.execute(
            "INSERT INTO messages (conversation_id, query, status, error_code, created_at) "
            "VALUES ('c', 'q', 'failed', 'interrupted', '2026-01-01T00:00:00+00:00')"
        )
    journal = SQLiteJournal(db)
    try:
        [message] = journal.messages("c")
        assert not message.platform_settled
        record = journal.get_conversation("c")
        assert record is not None and record.platform_id == "c"
    finally:
        journal.close()


# --- approvals ----------------------------------------------------------------------------------


def _approval(journal: Journal, call: ToolCall, digest: str = "d1") -> Any:
    from datetime import timedelta

    return journal.request_approval(
        "conv",
        call,
        message_id=None,
        arguments_digest=digest,
        requested_by="alice",
        deadline=datetime.now(timezone.utc) + timedelta(minutes=10),
    )


def test_an_approval_is_requested_once_per_call_and_arguments(journal: Journal) -> None:
    call = BATCH.calls[0]
    first = _approval(journal, call)
    assert first.status == "pending" and first.requested_by == "alice"
    assert first.tool == "pay" and first.arguments == {"invoice": "A1"}
    again = _approval(journal, call)
    assert again.approval_id == first.approval_id, "the same call and arguments: one request"
    other = _approval(journal, call, digest="d2")
    assert other.approval_id != first.approval_id, "other arguments: another request"
    assert journal.find_approval("conv", "c1", "d1") == first
    assert journal.find_approval("conv", "c1", "d3") is None
    assert journal.get_approval(first.approval_id) == first
    assert journal.get_approval("nope") is None


def test_an_approval_is_decided_once(journal: Journal) -> None:
    from bridge.journal import ApprovalDecidedError

    record = _approval(journal, BATCH.calls[0])
    decided = journal.decide_approval(
        record.approval_id, status="rejected", decided_by="bob", note="not today"
    )
    assert decided is not None
    assert (decided.status, decided.decided_by, decided.note) == ("rejected", "bob", "not today")
    assert decided.decided_at is not None
    with pytest.raises(ApprovalDecidedError, match="already rejected by bob"):
        journal.decide_approval(record.approval_id, status="approved", decided_by="carol")
    assert journal.get_approval(record.approval_id) == decided
    assert journal.decide_approval("nope", status="approved", decided_by="x") is None


def test_approvals_are_listed_by_status_and_conversation(journal: Journal) -> None:
    a = _approval(journal, BATCH.calls[0])
    b = _approval(journal, BATCH.calls[1])
    journal.decide_approval(b.approval_id, status="approved", decided_by="bob")
    pending, total = journal.list_approvals(status="pending")
    assert [r.approval_id for r in pending] == [a.approval_id] and total == 1
    everything, total = journal.list_approvals()
    assert {r.approval_id for r in everything} == {a.approval_id, b.approval_id} and total == 2
    assert journal.list_approvals(conversation_id="other") == ([], 0)
    page, total = journal.list_approvals(limit=1)
    assert len(page) == 1 and total == 2


def test_messages_remember_who_sent_them(journal: Journal) -> None:
    journal.begin_message("conv", "q1", sent_by="alice")
    journal.begin_message("conv", "q2")
    assert [m.sent_by for m in journal.messages("conv")] == ["alice", None]


def test_registered_secrets_never_reach_an_approval(journal: Journal) -> None:
    register_secret("approval-secret-0123456789")
    call = ToolCall(call_id="c9", name="pay", arguments={"invoice": "approval-secret-0123456789"})
    record = _approval(journal, call)
    assert "approval-secret" not in str(record.arguments)
    decided = journal.decide_approval(
        record.approval_id, status="rejected", decided_by="bob", note="approval-secret-0123456789"
    )
    assert decided is not None and "approval-secret" not in decided.note


def test_a_version_3_journal_is_migrated_to_4(tmp_path: Path) -> None:
    """Old messages have no sender; approvals work right after the upgrade."""
    db = tmp_path / "v3.db"
    with sqlite3.connect(db) as raw:
        raw.executescript("".join(MIGRATIONS[:3]) + "PRAGMA user_version=3;")
        raw.execute(
            "INSERT INTO conversations (id, created_at, updated_at) VALUES "
            "('conv', '2026-01-01T00:00:00+00:00', '2026-01-01T00:00:00+00:00')"
        )
        raw.execute(
            "INSERT INTO messages (conversation_id, query, status, created_at) "
            "VALUES ('conv', 'q', 'finished', '2026-01-01T00:00:00+00:00')"
        )
    journal = SQLiteJournal(db)
    try:
        [message] = journal.messages("conv")
        assert message.sent_by is None
        assert _approval(journal, BATCH.calls[0]).status == "pending"
    finally:
        journal.close()
    with sqlite3.connect(db) as raw:
        assert raw.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 10


def _snapshot(messages: list[Any], *, writer: str = "w1", pid: str = "conv") -> StateSnapshot:
    return StateSnapshot(
        platform_conversation_id=pid,
        platform="openai",
        state={"version": 1, "messages": messages, "pending": None},
        writer=writer,
    )


def test_the_latest_platform_state_is_kept_per_platform_conversation(journal: Journal) -> None:
    journal.add_conversation("conv")
    assert journal.platform_state("conv", "conv") is None
    journal.save_platform_state("conv", _snapshot([{"role": "user", "content": "one"}]))
    journal.save_platform_state(
        "conv", _snapshot([{"role": "user", "content": "two"}, {"content": None}], writer="w2")
    )
    journal.save_platform_state("conv", _snapshot(["other"], pid="conv-2"))
    record = journal.platform_state("conv", "conv")
    assert record is not None
    assert record.state["messages"] == [{"role": "user", "content": "two"}, {"content": None}]
    assert (record.platform, record.writer, record.conversation_id) == ("openai", "w2", "conv")
    other = journal.platform_state("conv", "conv-2")
    assert other is not None and other.state["messages"] == ["other"]
    assert journal.platform_state("unknown", "conv") is None


def test_a_read_platform_state_is_the_readers_own_copy(journal: Journal) -> None:
    journal.save_platform_state("conv", _snapshot([{"role": "user", "content": "one"}]))
    first = journal.platform_state("conv", "conv")
    assert first is not None
    first.state["messages"].append("changed by the reader")
    again = journal.platform_state("conv", "conv")
    assert again is not None and again.state["messages"] == [{"role": "user", "content": "one"}]


def test_a_batch_and_the_state_that_has_it_pending_are_written_together(
    journal: Journal,
) -> None:
    message = journal.begin_message("conv", "pay A1")
    journal.receive("conv", BATCH, message_id=message, state=_snapshot(["pending b1"]))
    record = journal.platform_state("conv", "conv")
    assert record is not None and record.state["messages"] == ["pending b1"]
    assert journal.pending_batch(message) == BATCH


def test_registered_secrets_never_reach_a_platform_state(journal: Journal) -> None:
    register_secret("state-secret-0123456789")
    # A mask must not break the JSON around it, whatever the secret sits next to.
    text = 'Bearer state-secret-0123456789" quoted'
    journal.save_platform_state(
        "conv", _snapshot([{"role": "user", "content": text, "state-secret-0123456789": 1}])
    )
    record = journal.platform_state("conv", "conv")
    assert record is not None
    assert "state-secret" not in repr(record.state)
    assert record.state["messages"][0]["content"].endswith('" quoted')


def test_a_version_4_journal_is_migrated_to_5(tmp_path: Path) -> None:
    """Old conversations have no platform state; it can be written right after the upgrade."""
    db = tmp_path / "v4.db"
    with sqlite3.connect(db) as raw:
        raw.executescript("".join(MIGRATIONS[:4]) + "PRAGMA user_version=4;")
        raw.execute(
            "INSERT INTO conversations (id, created_at, updated_at) VALUES "
            "('conv', '2026-01-01T00:00:00+00:00', '2026-01-01T00:00:00+00:00')"
        )
    journal = SQLiteJournal(db)
    try:
        assert journal.platform_state("conv", "conv") is None
        journal.save_platform_state("conv", _snapshot(["after the upgrade"]))
        record = journal.platform_state("conv", "conv")
        assert record is not None and record.state["messages"] == ["after the upgrade"]
    finally:
        journal.close()
    with sqlite3.connect(db) as raw:
        assert raw.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 10


def test_a_migration_logs_one_line(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A new journal says it was created, an old one what it was migrated from: one line each,
    not one per schema step; a current one says nothing."""
    path = tmp_path / "journal.db"
    with caplog.at_level("INFO", logger="bridge.journal"):
        SQLiteJournal(path).close()
    lines = [r.getMessage() for r in caplog.records if r.name.startswith("bridge.journal")]
    assert lines == [f"journal {path} created (schema version {SCHEMA_VERSION})"]
    caplog.clear()
    with caplog.at_level("INFO", logger="bridge.journal"):
        SQLiteJournal(path).close()
    assert not [r for r in caplog.records if "schema version" in r.getMessage()]
    old = tmp_path / "old.db"
    with sqlite3.connect(old) as raw:
        raw.executescript(MIGRATIONS[0] + "PRAGMA user_version=1;")
    with caplog.at_level("INFO", logger="bridge.journal"):
        SQLiteJournal(old).close()
    lines = [r.getMessage() for r in caplog.records if "schema version" in r.getMessage()]
    assert lines == [f"journal {old} migrated from schema version 1 to {SCHEMA_VERSION}"]


def test_a_write_that_comes_alone_runs_on_its_callers_thread_and_concurrent_ones_all_commit(
    tmp_path: Path,
) -> None:
    """The writer hands a write to its own thread only when another holds the connection: a
    lone write costs no round trip between threads; concurrent ones still all commit."""
    import threading

    from bridge.journal._writer import GroupCommitWriter

    db = sqlite3.connect(tmp_path / "w.db", isolation_level=None, check_same_thread=False)
    db.execute("CREATE TABLE t (n INTEGER, thread TEXT)")
    writer = GroupCommitWriter(db)
    try:

        def insert(n: int) -> Any:
            def op(conn: sqlite3.Connection) -> str:
                conn.execute("INSERT INTO t VALUES (?, ?)", (n, threading.current_thread().name))
                return threading.current_thread().name

            return op

        assert writer.run(insert(0), write=True) == threading.current_thread().name
        threads = [
            threading.Thread(target=lambda i=i: writer.run(insert(i), write=True), name=f"w{i}")
            for i in range(1, 41)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        rows = writer.run(lambda c: c.execute("SELECT n FROM t").fetchall(), write=False)
        assert sorted(n for (n,) in rows) == list(range(41))
    finally:
        writer.close()
