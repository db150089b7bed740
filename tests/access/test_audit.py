"""The audit record (`bridge.access.audit`): one hash chain per writer, built over every journal
store, redacted arguments with the SHA-256 of the real ones, appends from many threads, a
failed append that refuses the step, and `verify_audit` naming the first bad entry."""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import threading
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from bridge.access import (
    AuditEvent,
    AuditLog,
    AuditWriteError,
    ExpectedHead,
    Records,
    export_audit,
    verify_audit,
)
from bridge.access.audit import GENESIS, canonical_json, entry_hash
from bridge.errors import UsageError, register_secret
from bridge.journal import Journal, MemoryJournal, SQLiteJournal
from tests.support.postgres import PostgresServer

SECRET = "sk-audit-" + uuid.uuid4().hex


def _policy(
    n: int, *, outcome: str = "allow", arguments: dict[str, Any] | None = None
) -> AuditEvent:
    return AuditEvent(
        kind="policy",
        outcome=outcome,
        caller="alice",
        via="key",
        conversation_id="conv-1",
        call_id=f"call-{n}",
        tool="transfer",
        arguments=arguments if arguments is not None else {"amount": n, "to": "bob"},
        detail={"policies": ["p1"], "reason": ""},
    )


def test_a_chain_over_each_store(journal: Journal) -> None:
    log = AuditLog(journal)
    assert isinstance(log, Records)
    for n in range(1, 6):
        log.record(_policy(n))
    log.record(AuditEvent(kind="tool", outcome="ok", caller="alice", tool="transfer"))

    rows = list(journal.audit_entries())
    assert [row.seq for row in rows] == [1, 2, 3, 4, 5, 6]
    assert {row.chain for row in rows} == {"local"} == set(journal.audit_chains())
    assert rows[0].prev_hash == GENESIS
    for before, row in itertools.pairwise(rows):
        assert row.prev_hash == before.hash
        assert row.at >= before.at
    for row in rows:
        assert row.hash == hashlib.sha256((row.prev_hash + row.entry).encode()).hexdigest()
        entry = json.loads(row.entry)
        assert row.entry == canonical_json(entry)  # stored as canonical JSON
        assert (entry["seq"], entry["prev_hash"], entry["chain"]) == (
            row.seq,
            row.prev_hash,
            "local",
        )
    first = json.loads(rows[0].entry)
    assert first["kind"] == "policy" and first["caller"] == "alice" and first["call_id"] == "call-1"
    assert first["detail"] == {"policies": ["p1"], "reason": ""}
    assert datetime.fromisoformat(first["at"]).tzinfo is not None

    tail = journal.audit_tail("local")
    assert tail is not None and (tail.seq, tail.hash) == (6, rows[-1].hash)
    report = verify_audit(journal)
    assert report.ok, report.summary()
    assert report.summary() == f"intact: 6 entries in 1 chain, head local:6:{rows[-1].hash}"

    # A new writer (a restarted process) continues the chain from the journal's tail.
    again = AuditLog(journal)
    again.record(_policy(7))
    assert [row.seq for row in journal.audit_entries()][-1] == 7
    assert verify_audit(journal).ok


def test_arguments_are_kept_masked_with_the_hash_of_the_real_ones(journal: Journal) -> None:
    register_secret(SECRET)
    arguments = {"query": f"use {SECRET} now", "password": "hunter2-is-long", "n": 1}
    AuditLog(journal).record(_policy(1, arguments=arguments))

    (row,) = journal.audit_entries()
    assert SECRET not in row.entry and "hunter2-is-long" not in row.entry
    (exported,) = export_audit(journal)
    assert exported["arguments"] == {"query": "use [secure] now", "password": "[secure]", "n": 1}
    real = json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert exported["arguments_sha256"] == hashlib.sha256(real.encode()).hexdigest()
    assert exported["hash"] == row.hash and exported["seq"] == 1


def test_arguments_that_are_not_an_object_are_kept_as_text() -> None:
    # A model may send arguments that are not a JSON object: they are masked and hashed as
    # the JSON string they are.
    register_secret(SECRET)
    journal = MemoryJournal()
    raw = f'{{"query": "{SECRET}"'  # not even JSON
    AuditLog(journal).record(AuditEvent(kind="tool", outcome="error", tool="t", arguments=raw))
    (exported,) = export_audit(journal)
    assert exported["arguments"] == '{"query": "[secure]"'
    assert exported["arguments_sha256"] == hashlib.sha256(json.dumps(raw).encode()).hexdigest()


def test_many_threads_make_one_valid_chain(tmp_path: Path) -> None:
    journal = SQLiteJournal(tmp_path / "j.db")
    log = AuditLog(journal)
    errors: list[BaseException] = []

    def work(worker: int) -> None:
        try:
            for n in range(25):
                log.record(_policy(worker * 100 + n))
        except BaseException as exc:  # pragma: no cover - shown by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(w,)) for w in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    try:
        assert errors == []
        rows = list(journal.audit_entries())
        assert [row.seq for row in rows] == list(range(1, 201))
        assert sorted(json.loads(r.entry)["call_id"] for r in rows) == sorted(
            f"call-{w * 100 + n}" for w in range(8) for n in range(25)
        )
        assert verify_audit(journal).ok
    finally:
        journal.close()


def test_two_writers_of_one_chain_take_turns() -> None:
    # One writer per chain is the rule; a second one (a misconfiguration) must still not
    # fork the chain: its append finds the tail moved and continues from there.
    journal = MemoryJournal()
    first, second = AuditLog(journal), AuditLog(journal)
    first.record(_policy(1))
    second.record(_policy(2))
    first.record(_policy(3))
    second.record(_policy(4))
    assert [row.seq for row in journal.audit_entries()] == [1, 2, 3, 4]
    assert verify_audit(journal).ok


def test_a_failed_append_refuses_a_decision_and_logs_an_outcome(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    journal = SQLiteJournal(tmp_path / "j.db")
    log = AuditLog(journal)
    log.record(_policy(1))
    journal.close()  # every write fails from now on

    with pytest.raises(AuditWriteError, match="could not be written"):
        log.record(_policy(2))
    with caplog.at_level(logging.ERROR, logger="bridge.access.audit"):
        log.record(AuditEvent(kind="tool", outcome="ok", tool="transfer"))
    assert "audit record could not be written (tool ok of transfer)" in caplog.text


def test_two_replicas_on_postgres_keep_a_chain_each(postgres: PostgresServer) -> None:
    from bridge.journal.postgres import PostgresJournal

    dsn = postgres.create_database(f"a_{uuid.uuid4().hex[:12]}")
    one, two = PostgresJournal(dsn), PostgresJournal(dsn)
    try:
        log_a = AuditLog(one)  # made before the journal is bound: its chain is settled later
        one.bind_replica("replica-a")
        two.bind_replica("replica-b")
        log_b = AuditLog(two)
        assert (log_a.chain, log_b.chain) == ("replica-a", "replica-b")
        for n in range(3):
            log_a.record(_policy(n))
            log_b.record(_policy(n))
        log_b.record(_policy(9))
        assert one.audit_chains() == ["replica-a", "replica-b"]
        report = verify_audit(one)
        assert report.ok, report.summary()
        assert report.entries == 7
        assert [(h.chain, h.seq) for h in report.heads] == [("replica-a", 3), ("replica-b", 4)]
        assert [r.seq for r in two.audit_entries(chain="replica-a")] == [1, 2, 3]
    finally:
        one.close()
        two.close()


def test_since_selects_by_time(journal: Journal) -> None:
    log = AuditLog(journal)
    log.record(_policy(1))
    log.record(_policy(2))
    past = datetime.now(timezone.utc) - timedelta(hours=1)
    future = datetime.now(timezone.utc) + timedelta(hours=1)
    assert [e["seq"] for e in export_audit(journal, since=past)] == [1, 2]
    assert list(export_audit(journal, since=future)) == []
    second = next(r for r in journal.audit_entries() if r.seq == 2)
    assert [r.seq for r in journal.audit_entries(since=datetime.fromisoformat(second.at))] == [2]


def test_a_long_chain_is_read_page_by_page() -> None:
    from bridge.journal import audit_store

    journal = MemoryJournal()
    log = AuditLog(journal)
    for n in range(audit_store.AUDIT_PAGE + 5):
        log.record(AuditEvent(kind="message", outcome="sent", caller=f"c{n}"))
    report = verify_audit(journal)
    assert report.ok and report.entries == audit_store.AUDIT_PAGE + 5


def _tampered(journal: MemoryJournal, change: str) -> None:
    rows = journal._audit["local"]
    if change == "edit":
        rows[2] = rows[2]._replace(entry=rows[2].entry.replace('"allow"', '"refuse"'))
    elif change == "delete":
        del rows[2]
    elif change == "swap":
        rows[1], rows[2] = rows[2]._replace(seq=2), rows[1]._replace(seq=3)


@pytest.mark.parametrize(
    ("change", "seq", "problem"),
    [("edit", 3, "edited"), ("delete", 4, "deleted"), ("swap", 2, "reordered")],
)
def test_verify_names_the_first_bad_entry(change: str, seq: int, problem: str) -> None:
    journal = MemoryJournal()
    log = AuditLog(journal)
    for n in range(1, 6):
        log.record(_policy(n))
    _tampered(journal, change)
    report = verify_audit(journal)
    assert not report.ok
    (found,) = report.problems
    assert (found.chain, found.seq, found.kind, found.problem) == ("local", seq, "policy", problem)


def test_an_expected_head_catches_a_cut_off_end() -> None:
    journal = MemoryJournal()
    log = AuditLog(journal)
    for n in range(1, 6):
        log.record(_policy(n))
    head = log.head()
    assert head is not None and head.seq == 5
    expected = ExpectedHead.parse(head.token())
    assert verify_audit(journal, expect=[expected]).ok

    del journal._audit["local"][3:]
    assert verify_audit(journal).ok  # the chain alone cannot tell: the documented limit
    report = verify_audit(journal, expect=[ExpectedHead.parse(f"5:{head.hash}")])
    (found,) = report.problems
    assert (found.problem, found.seq) == ("truncated", 4)
    assert "ends at entry 3" in found.what


def test_expected_heads_are_parsed_strictly() -> None:
    digest = "ab" * 32
    assert ExpectedHead.parse(f"replica:x:7:{digest}") == ExpectedHead("replica:x", 7, digest)
    assert ExpectedHead.parse(f"7:{digest.upper()}") == ExpectedHead(None, 7, digest)
    for bad in ("7", f"x:{digest}", "7:abc", f"0:{digest}"):
        with pytest.raises(UsageError, match="expected"):
            ExpectedHead.parse(bad)


def _rewrite(journal: MemoryJournal, change: dict[int, dict[str, Any]]) -> None:
    """Rewrite the local chain as a forger with write access would: entries changed, every
    hash after them recomputed so that the chain alone holds together."""
    rows = journal._audit["local"]
    prev = GENESIS
    for index, row in enumerate(rows):
        entry = {**json.loads(row.entry), **change.get(row.seq, {}), "prev_hash": prev}
        text = canonical_json(entry)
        digest = entry_hash(prev, text)
        rows[index] = row._replace(entry=text, prev_hash=prev, hash=digest, at=entry["at"])
        prev = digest


def test_a_rewritten_chain_is_caught_only_against_an_expected_head() -> None:
    journal = MemoryJournal()
    log = AuditLog(journal)
    for n in range(1, 6):
        log.record(_policy(n))
    head = log.head()
    assert head is not None

    _rewrite(journal, {2: {"outcome": "refuse"}})
    assert verify_audit(journal).ok  # every hash recomputed: the documented limit
    (found,) = verify_audit(journal, expect=[ExpectedHead.parse(head.token())]).problems
    assert (found.seq, found.problem) == (5, "edited")
    assert "rewritten" in found.what


def test_time_going_backwards_is_named() -> None:
    journal = MemoryJournal()
    log = AuditLog(journal)
    for n in range(1, 4):
        log.record(_policy(n))
    _rewrite(journal, {3: {"at": "2000-01-01T00:00:00.000000+00:00"}})
    (found,) = verify_audit(journal).problems
    assert (found.seq, found.problem) == (3, "reordered")
    assert "before entry 2" in found.what
