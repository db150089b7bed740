"""A policy decision and a call's outcome go into the audit record in the same transaction as
the journal step they belong to (the call started, the call finished), on a real SQLite file
journal: both are durable or neither, the chain stays whole however staged and immediate
entries interleave, and a conversation costs no commit of its own for them."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bridge import Bridge, ToolCall, manifest
from bridge.access import AuditEvent, AuditLog, Principal, verify_audit
from bridge.access.policy import Policy
from bridge.emulator import Emulator
from bridge.journal import Journal, SQLiteJournal
from bridge.platforms.appbuilder import AppBuilderPlatform
from bridge.types import ToolBatch


@manifest(description="Look an order up.", read_only=True)
def lookup(order_id: str) -> str:
    """Lookup.

    Args:
        order_id: The order.
    """
    return f"order {order_id}: shipped"


SCENARIO: dict[str, Any] = {
    "rules": [
        {
            "match": r"look (?P<order>\w+) up",
            "steps": [{"tool": "lookup", "arguments": {"order_id": "{order}"}}],
            "answer": "{outputs.lookup}",
        }
    ]
}
POLICY = Policy.from_text(
    '@id("reads")\npermit (principal, action, resource) when { resource.read_only };',
    source="reads.cedar",
)


@pytest.fixture
def journal(tmp_path: Path) -> Iterator[SQLiteJournal]:
    journal = SQLiteJournal(tmp_path / "journal.db")
    yield journal
    journal.close()


def _entries(journal: SQLiteJournal) -> list[tuple[str, str, str | None]]:
    import json

    return [
        (row.kind, json.loads(row.entry)["outcome"], json.loads(row.entry)["call_id"])
        for row in journal.audit_entries()
    ]


def test_a_conversation_writes_its_entries_with_its_steps(journal: SQLiteJournal) -> None:
    commits: list[str] = []
    journal.on_write = commits.append
    audit = AuditLog(journal)
    with (
        Emulator(scenario=SCENARIO) as emu,
        AppBuilderPlatform(app_id=emu.app_id, token=emu.token, base_url=emu.base_url) as platform,
        Bridge(
            platform,
            [lookup],
            journal=journal,
            policy=POLICY,
            audit=audit,
            caller=Principal("alice"),
        ) as bridge,
    ):
        assert bridge.ask("look A1 up").answer == "order A1: shipped"
    entries = _entries(journal)
    assert [(kind, outcome) for kind, outcome, _ in entries] == [
        ("message", "sent"),
        ("policy", "allow"),
        ("tool", "ok"),
    ]
    assert entries[1][2] == entries[2][2]  # one call
    assert "audit" not in commits  # no commit of their own: they rode with the steps
    assert verify_audit(journal).ok


def test_a_staged_entry_and_its_step_are_written_together_or_not_at_all(
    journal: SQLiteJournal,
) -> None:
    audit = AuditLog(journal)
    journal.add_conversation("c1")
    message = journal.begin_message("c1", "q")
    call = ToolCall(call_id="k1", name="lookup", arguments={"order_id": "A1"})
    journal.receive("c1", ToolBatch(batch_id="b1", calls=(call,)), message_id=message)

    def broken(tail: object) -> list[Any]:
        raise RuntimeError("disk full")

    journal.stage_audit("c1", audit.chain, broken)
    with pytest.raises(RuntimeError, match="disk full"):
        journal.start("c1", ["k1"])
    record = journal.get_call("c1", "k1")
    assert record is not None and record.state == "received"  # the step was not written
    audit.stage(AuditEvent(kind="policy", outcome="allow", conversation_id="c1", call_id="k1"))
    journal.start("c1", ["k1"])
    record = journal.get_call("c1", "k1")
    assert record is not None and record.state == "started"
    assert _entries(journal) == [("policy", "allow", "k1")]


@pytest.fixture(params=["sqlite", "postgres"])
def any_journal(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Journal]:
    """A file journal (one writer thread) and a PostgreSQL one (a pool of connections whose
    transactions append concurrently)."""
    if request.param == "sqlite":
        journal: Journal = SQLiteJournal(tmp_path / "journal.db")
    else:
        from bridge.journal.postgres import PostgresJournal

        server = request.getfixturevalue("postgres")
        journal = PostgresJournal(server.create_database(f"s_{uuid.uuid4().hex[:12]}"))
    yield journal
    journal.close()


def test_staged_and_immediate_entries_interleave_into_one_chain(any_journal: Journal) -> None:
    journal = any_journal
    audit = AuditLog(journal)
    for n in range(4):
        journal.add_conversation(f"c{n}")
    errors: list[BaseException] = []

    def conversation(n: int) -> None:
        try:
            cid = f"c{n}"
            for i in range(25):
                audit.stage(
                    AuditEvent(kind="tool", outcome="ok", conversation_id=cid, call_id=f"{n}-{i}")
                )
                journal.add_conversation(f"{cid}-{i}")  # not this conversation's write
                journal.begin_message(cid, f"q{i}")  # this conversation's: carries the entry
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    def door() -> None:
        try:
            for i in range(50):
                audit.record(AuditEvent(kind="identity", outcome="unauthorized", detail={"i": i}))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=conversation, args=(n,)) for n in range(4)]
    threads.append(threading.Thread(target=door))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    report = verify_audit(journal)
    assert report.ok, report.summary()
    assert report.entries == 4 * 25 + 50
