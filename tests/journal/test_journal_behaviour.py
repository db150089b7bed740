"""What every journal store must do, run unchanged against each (`tests/support/journal_stores`).

`tests/journal/test_journal.py` holds the older behaviours on the same fixture (and the SQLite
file's own tests); these pin the rest of the `Journal` interface, so a new store (PostgreSQL) that
passes both behaves as the loop, recovery and the daemon expect.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from pydantic import ValidationError

from bridge.errors import UsageError
from bridge.journal import Journal, Ledger, MessageEnd, PendingBatch
from tests.journal.test_journal import BATCH, _run, _snapshot


def test_a_message_end_is_written_whole(journal: Journal) -> None:
    message = journal.begin_message("conv", "q")
    end = MessageEnd(
        status="waiting_input",
        answer="when?",
        error_code="E",
        error_message="m",
        request_ids=("r1", "r2"),
        rounds=3,
        interrupt_id="i-1",
        platform_settled=False,
    )
    journal.end_message(message, end)
    [record] = journal.messages("conv")
    assert record.model_dump(include=set(MessageEnd.model_fields)) == {
        **end.model_dump(),
        "request_ids": ["r1", "r2"],
    }
    assert record.finished_at is not None


def test_end_message_keywords_are_the_value_objects_fields(journal: Journal) -> None:
    one = journal.begin_message("conv", "q1")
    two = journal.begin_message("conv", "q2")
    journal.end_message(one, status="finished", answer="hi", request_ids=["r"], rounds=1)
    journal.end_message(
        two, MessageEnd(status="finished", answer="hi", request_ids=("r",), rounds=1)
    )
    first, second = journal.messages("conv")
    fields = set(MessageEnd.model_fields)
    assert first.model_dump(include=fields) == second.model_dump(include=fields)


def test_end_message_refuses_a_value_and_keywords_or_an_unknown_keyword(journal: Journal) -> None:
    message = journal.begin_message("conv", "q")
    with pytest.raises(UsageError, match=r"not both.*answer"):
        journal.end_message(message, MessageEnd(status="finished"), answer="x")
    with pytest.raises(ValidationError, match="anwser"):
        journal.end_message(message, status="finished", anwser="typo")
    assert journal.messages("conv")[0].status == "running"


def test_ending_an_unknown_message_changes_nothing(journal: Journal) -> None:
    journal.end_message(999, status="finished")
    assert journal.unfinished_messages() == []


def test_unfinished_messages_are_the_running_ones(journal: Journal) -> None:
    done = journal.begin_message("a", "q")
    running = journal.begin_message("b", "q")
    journal.end_message(done, status="finished")
    assert [m.message_id for m in journal.unfinished_messages()] == [running]


def test_conversations_are_paged_with_their_total(journal: Journal) -> None:
    for name in ("a", "b", "c"):
        journal.add_conversation(name)
    journal.end_message(journal.begin_message("b", "q"), status="finished")
    page, total = journal.list_conversations(limit=2)
    rest, again = journal.list_conversations(limit=2, offset=2)
    assert total == again == 3
    assert len(page) == 2 and len(rest) == 1
    assert {c.conversation_id for c in (*page, *rest)} == {"a", "b", "c"}
    record = journal.get_conversation("b")
    assert record is not None and record.status == "finished" and record.messages == 1
    assert journal.get_conversation("nobody") is None


def test_a_conversation_keeps_its_creator_and_lists_by_it(journal: Journal) -> None:
    journal.add_conversation("a1", created_by="alice")
    journal.add_conversation("b1", created_by="bob")
    journal.add_conversation("a2", created_by="alice")
    journal.add_conversation("old")  # opened before callers: nobody's
    journal.add_conversation("a1", created_by="bob")  # the first creator stays
    journal.end_message(journal.begin_message("a1", "q", sent_by="alice"), status="finished")
    alices, total = journal.list_conversations(created_by="alice")
    assert total == 2 and {c.conversation_id for c in alices} == {"a1", "a2"}
    assert all(c.created_by == "alice" for c in alices)
    page, total = journal.list_conversations(created_by="alice", limit=1, offset=1)
    assert total == 2 and len(page) == 1
    assert journal.list_conversations(created_by="carol") == ([], 0)
    assert journal.list_conversations()[1] == 4
    old = journal.get_conversation("old")
    assert old is not None and old.created_by is None
    first = journal.get_conversation("a1")
    assert first is not None and first.created_by == "alice"


def test_a_batch_is_pending_until_submitted(journal: Journal) -> None:
    message = journal.begin_message("conv", "q")
    assert journal.pending(message) is None
    journal.receive("conv", BATCH, message_id=message)
    assert journal.pending(message) == PendingBatch(batch=BATCH, submitting=False)
    journal.submitting("conv", BATCH)
    assert journal.pending(message) == PendingBatch(batch=BATCH, submitting=True)
    assert journal.pending_batch(message) == BATCH
    journal.submit("conv", BATCH)
    assert journal.pending(message) is None and journal.pending_batch(message) is None


def test_submitted_is_written_with_the_platform_state_that_holds_the_outputs(
    journal: Journal,
) -> None:
    message = journal.begin_message("conv", "q")
    journal.receive("conv", BATCH, message_id=message, state=_snapshot(["q", "calls"]))
    journal.submit("conv", BATCH, state=_snapshot(["q", "calls", "outputs"]))
    assert journal.pending(message) is None
    record = journal.platform_state("conv", "conv")
    assert record is not None and record.state["messages"] == ["q", "calls", "outputs"]


def test_a_finished_call_is_never_started_again(journal: Journal) -> None:
    message = journal.begin_message("conv", "q")
    journal.receive("conv", BATCH, message_id=message)
    journal.start("conv", ["c1"])
    journal.finish("conv", _run("c1", "paid"))
    journal.start("conv", ["c1", "c2"])
    first = journal.get_call("conv", "c1")
    second = journal.get_call("conv", "c2")
    assert first is not None and first.state == "finished" and first.output == "paid"
    assert second is not None and second.state == "started"
    assert journal.get_call("conv", "nope") is None


def test_a_ledger_reads_finished_calls_only(journal: Journal) -> None:
    ledger = Ledger(journal, "conv")
    ledger.receive(BATCH, journal.begin_message("conv", "q"))
    ledger.start(BATCH.calls[:1])
    assert "c1" not in ledger and ledger.get("c1") is None
    with pytest.raises(KeyError):
        ledger["c1"]
    ledger.finish(_run("c1", "paid"))
    assert "c1" in ledger and ledger["c1"].output == "paid"
    fresh, interrupted = ledger.plan(BATCH, lambda name: False)
    assert [call.call_id for call in fresh] == ["c2"] and interrupted == []


def test_unknown_approvals_are_none(journal: Journal) -> None:
    assert journal.get_approval("nope") is None
    assert journal.decide_approval("nope", status="approved", decided_by="alice") is None
    assert journal.find_approval("conv", "c1", "d") is None
    assert journal.list_approvals() == ([], 0)


def test_an_expired_approval_has_no_decider(journal: Journal) -> None:
    record = journal.request_approval(
        "conv",
        BATCH.calls[0],
        message_id=None,
        arguments_digest="d",
        requested_by=None,
        deadline=datetime.now(timezone.utc) + timedelta(minutes=5),
    )
    expired = journal.decide_approval(
        record.approval_id, status="expired", decided_by=None, note="too late"
    )
    assert expired is not None and expired.status == "expired"
    assert expired.decided_by is None and expired.note == "too late"
    assert journal.get_approval(record.approval_id) == expired


def test_close_is_idempotent(journal: Journal) -> None:
    journal.add_conversation("conv")
    journal.close()
    journal.close()


def test_direct_calls_are_recorded_before_they_run_then_with_their_outcome(
    journal: Journal,
) -> None:
    from bridge.errors import register_secret
    from bridge.types import ToolCall, ToolRun

    secret = "direct-call-secret-4711"
    register_secret(secret)
    call = ToolCall(call_id="try-1", name="stamp", arguments={"doc": f"key {secret}"})
    journal.begin_direct_call(call, called_by="bob", approved_by="bob")
    journal.begin_direct_call(
        ToolCall(call_id="try-2", name="note", arguments={"text": "\x00 half \ud800"}),
        called_by="alice",
        approved_by=None,
    )
    [second, first], total = journal.direct_calls()
    assert total == 2
    assert (first.call_id, first.tool, first.state) == ("try-1", "stamp", "started")
    assert (first.called_by, first.approved_by) == ("bob", "bob")
    assert first.arguments == {"doc": "key [secure]"} and first.output is None
    assert first.finished_at is None and first.started_at is not None
    assert second.arguments == {"text": "\x00 half \ufffd"} or second.arguments == {
        "text": "\ufffd half \ufffd"  # PostgreSQL text holds no NUL
    }

    started = datetime.now(timezone.utc)
    journal.finish_direct_call(
        ToolRun(
            call_id="try-1",
            name="stamp",
            arguments=call.arguments,
            output=f"stamped with {secret}",
            started_at=started,
            duration_ms=12.5,
        )
    )
    [record], total = journal.direct_calls(limit=1, offset=1)
    assert total == 2
    assert (record.call_id, record.state, record.error) == ("try-1", "finished", None)
    assert record.output == "stamped with [secure]" and record.duration_ms == 12.5
    assert record.finished_at is not None and record.finished_at >= record.started_at
