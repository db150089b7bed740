"""Leases on a shared PostgreSQL journal: one replica runs a conversation at a time, a dead
replica's unfinished messages are claimed by exactly one other, and a replica that lost its
lease can write nothing more of that conversation (fencing by generation).

Each "replica" here is its own `PostgresJournal` bound to a replica id, on one real database
(`tests/support/postgres.py`), as two daemons would be. Expiry is forced with SQL rather than
waited for, so no test depends on timing.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bridge.journal import Journal, MemoryJournal, PostgresJournal, SQLiteJournal
from bridge.journal.postgres_migrations import MIGRATIONS
from bridge.journal.records import (
    Lease,
    LeaseHeldError,
    LeaseLostError,
    MessageEnd,
    StateSnapshot,
    now,
)
from bridge.types import ToolBatch, ToolCall, ToolRun
from tests.support.postgres import PostgresServer

LONG = 600.0  # seconds: never expires by itself within a test


@pytest.fixture
def dsn(postgres: PostgresServer) -> str:
    # One database per test: claims scan the whole database.
    return postgres.create_database(f"l_{uuid.uuid4().hex[:12]}")


@pytest.fixture
def replicas(dsn: str) -> Iterator[tuple[PostgresJournal, PostgresJournal]]:
    a = PostgresJournal(dsn, pool_size=4)
    b = PostgresJournal(dsn, pool_size=4)
    a.bind_replica("a")
    b.bind_replica("b")
    try:
        yield a, b
    finally:
        a.close()
        b.close()


def _expire(dsn: str, conversation_id: str) -> None:
    """What the passing of `--lease-seconds` without a renewal does."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "UPDATE leases SET expires_at = clock_timestamp() - interval '1 second' "
            "WHERE conversation_id = %s",
            (conversation_id,),
        )


def _cid() -> str:
    return f"c-{uuid.uuid4().hex[:10]}"


def _batch(call_id: str = "call-1") -> ToolBatch:
    return ToolBatch(
        batch_id="b-1",
        calls=(ToolCall(call_id=call_id, name="send_email", arguments={"to": "carol"}),),
    )


def test_a_held_lease_refuses_another_replica_and_names_the_holder(
    replicas: tuple[PostgresJournal, PostgresJournal],
) -> None:
    a, b = replicas
    cid = _cid()
    a.add_conversation(cid)
    lease = a.acquire_lease(cid, "a", LONG)
    with pytest.raises(LeaseHeldError) as caught:
        b.acquire_lease(cid, "b", LONG)
    assert caught.value.owner == "a" and "replica a" in str(caught.value)
    assert b.lease_holder(cid) == "a"
    a.release_lease(lease)
    assert b.lease_holder(cid) is None
    taken = b.acquire_lease(cid, "b", LONG)
    assert taken.generation == lease.generation + 1


def test_a_message_left_running_is_not_overtaken_by_a_new_one(
    replicas: tuple[PostgresJournal, PostgresJournal], dsn: str
) -> None:
    a, b = replicas
    cid = _cid()
    a.add_conversation(cid)
    a.acquire_lease(cid, "a", LONG)
    a.begin_message(cid, "email carol")
    _expire(dsn, cid)  # a died mid-run
    with pytest.raises(LeaseHeldError, match="replica a left unfinished"):
        b.acquire_lease(cid, "b", LONG)
    claimed = b.claim_orphans("b", LONG)
    assert [(m.conversation_id, m.replica) for m, _ in claimed] == [(cid, "a")]
    assert [m.replica for m in b.messages(cid)] == ["b"]


def test_fencing_a_replica_that_lost_its_lease_cannot_write(
    replicas: tuple[PostgresJournal, PostgresJournal], dsn: str
) -> None:
    a, b = replicas
    cid = _cid()
    a.add_conversation(cid)
    a.acquire_lease(cid, "a", LONG)
    message = a.begin_message(cid, "email carol")
    a.receive(cid, _batch(), message_id=message)
    a.start(cid, ["call-1"])
    # a pauses past its lease; b takes the message over.
    _expire(dsn, cid)
    [(found, lease)] = b.claim_orphans("b", LONG)
    assert found.message_id == message and lease.owner == "b"
    run = ToolRun(
        call_id="call-1",
        name="send_email",
        arguments={"to": "carol"},
        output="sent",
        started_at=now(),
        duration_ms=1.0,
    )
    # a wakes up: every write of that conversation is refused, and nothing changed.
    for write in (
        lambda: a.start(cid, ["call-1"]),
        lambda: a.finish(cid, run),
        lambda: a.submitting(cid, _batch()),
        lambda: a.submit(cid, _batch()),
        lambda: a.receive(cid, _batch("call-2"), message_id=message),
        lambda: a.end_message(message, MessageEnd(status="finished", answer="from a")),
        lambda: a.begin_message(cid, "another"),
    ):
        with pytest.raises(LeaseLostError, match="taken over by replica b"):
            write()
    call = b.get_call(cid, "call-1")
    assert call is not None and call.state == "started" and call.output is None
    assert [m.status for m in b.messages(cid)] == ["running"]
    assert a.renew_leases("a", LONG) == [cid]  # what the daemon's lease keeper learns
    # b, the holder, writes.
    b.finish(cid, run)
    b.end_message(message, MessageEnd(status="finished", answer="from b"))
    assert [(m.status, m.answer, m.replica) for m in b.messages(cid)] == [
        ("finished", "from b", "b")
    ]


def _count_reads(journal: PostgresJournal) -> list[str]:
    """A list that gets one entry per read `journal` makes from the database from now on."""
    reads: list[str] = []
    real = journal._read

    def counted(*args):  # type: ignore[no-untyped-def]
        reads.append("read")
        return real(*args)

    journal._read = counted  # type: ignore[method-assign]
    return reads


def test_a_call_just_written_under_a_held_lease_is_read_back_without_a_statement(
    replicas: tuple[PostgresJournal, PostgresJournal], dsn: str
) -> None:
    """The loop reads each call back right after receiving it (to plan the batch) and after
    finishing it (to submit its output): the holder answers from its own write, once, the
    same record a fresh read gives; anything else reads the database."""
    a, b = replicas
    cid = _cid()
    a.acquire_lease(cid, "a", LONG)
    message = a.begin_message(cid, "email carol")
    reads = _count_reads(a)
    a.receive(cid, _batch(), message_id=message)
    received = a.get_call(cid, "call-1")
    assert reads == []  # from the write
    assert received == b.get_call(cid, "call-1")
    assert received is not None and received.state == "received"
    assert a.get_call(cid, "call-1") == received and reads == ["read"]  # once only
    a.start(cid, ["call-1"])
    run = ToolRun(
        call_id="call-1",
        name="send_email",
        arguments={"to": "carol"},
        output="sent",
        started_at=now(),
        duration_ms=1.0,
    )
    a.finish(cid, run)
    reads.clear()
    finished = a.get_call(cid, "call-1")
    assert reads == []
    assert finished == b.get_call(cid, "call-1")
    assert finished is not None and finished.state == "finished" and finished.output == "sent"
    # A recovery's receive of the same batch: the call as it already was, not "received".
    a.receive(cid, _batch(), message_id=message)
    again = a.get_call(cid, "call-1")
    assert reads == [] and again == finished
    # Another generation (the lease taken again): what was kept is not used.
    a.finish(cid, run)
    a.end_message(message, MessageEnd(status="finished", answer="sent"))
    a.release_lease(Lease(conversation_id=cid, owner="a", generation=a._held[cid]))
    a.acquire_lease(cid, "a", LONG)
    assert a.get_call(cid, "call-1") == b.get_call(cid, "call-1") and reads == ["read"]


def test_what_a_run_reads_first_comes_with_its_lease_and_matches_the_database(
    replicas: tuple[PostgresJournal, PostgresJournal],
) -> None:
    """A run reads its conversation, its platform state and its messages right after taking
    the lease: the holder answers them from the lease's statement, once each, as a fresh
    read would (also after it began the message); any other write reads the database."""
    a, b = replicas
    cid = _cid()
    a.add_conversation(cid, end_user_id="u-1")
    a.acquire_lease(cid, "a", LONG)
    first = a.begin_message(cid, "email carol")
    a.save_platform_state(
        cid, StateSnapshot(platform_conversation_id=cid, platform="emu", state={"k": "v"})
    )
    a.end_message(first, MessageEnd(status="finished", answer="sent"))
    a.release_lease(Lease(conversation_id=cid, owner="a", generation=a._held[cid]))
    reads = _count_reads(a)
    a.acquire_lease(cid, "a", LONG)
    assert a.messages(cid) == b.messages(cid) and len(b.messages(cid)) == 1
    assert reads == []
    assert a.messages(cid) == b.messages(cid) and reads == ["read"]  # once only
    reads.clear()
    a.begin_message(cid, "email dave")
    conversation = a.get_conversation(cid)
    assert conversation == b.get_conversation(cid)
    assert conversation is not None and conversation.status == "running"
    assert conversation.messages == 2
    state = a.platform_state(cid, cid)
    assert state == b.platform_state(cid, cid) and state is not None and state.state == {"k": "v"}
    assert reads == []
    # Another write of the conversation: what was read with the lease is not used.
    second = a.messages(cid)[-1].message_id
    a.end_message(second, MessageEnd(status="finished", answer="sent"))
    a.release_lease(Lease(conversation_id=cid, owner="a", generation=a._held[cid]))
    a.acquire_lease(cid, "a", LONG)
    a.save_platform_state(
        cid, StateSnapshot(platform_conversation_id=cid, platform="emu", state={"k": "w"})
    )
    reads.clear()
    assert a.get_conversation(cid) == b.get_conversation(cid) and reads == ["read"]
    state = a.platform_state(cid, cid)
    assert state is not None and state.state == {"k": "w"} and reads == ["read", "read"]


def test_renewal_reports_a_lease_taken_over(
    replicas: tuple[PostgresJournal, PostgresJournal], dsn: str
) -> None:
    a, b = replicas
    kept, taken = _cid(), _cid()
    for cid in (kept, taken):
        a.add_conversation(cid)
        a.acquire_lease(cid, "a", LONG)
        a.begin_message(cid, "q")
    _expire(dsn, taken)
    assert [lease.conversation_id for _, lease in b.claim_orphans("b", LONG)] == [taken]
    assert a.renew_leases("a", LONG) == [taken]
    assert a.renew_leases("a", LONG) == []
    a.end_message(a.messages(kept)[0].message_id, MessageEnd(status="finished"))  # still held


def test_concurrent_claims_take_each_orphan_exactly_once(
    postgres: PostgresServer,
) -> None:
    dsn = postgres.create_database(f"l_{uuid.uuid4().hex[:12]}")
    dead = PostgresJournal(dsn, pool_size=2)
    dead.bind_replica("dead")
    orphans = [_cid() for _ in range(40)]
    for cid in orphans:
        dead.add_conversation(cid)
        dead.acquire_lease(cid, "dead", LONG)
        dead.begin_message(cid, "q")
    dead.close()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("UPDATE leases SET expires_at = clock_timestamp() - interval '1 second'")
    claimers = [PostgresJournal(dsn, pool_size=2) for _ in range(4)]
    barrier = threading.Barrier(len(claimers))
    got: dict[str, list[str]] = {}
    errors: list[BaseException] = []

    def claim(journal: PostgresJournal, name: str) -> None:
        journal.bind_replica(name)
        try:
            barrier.wait(timeout=30)
            mine: list[str] = []
            while True:
                batch = journal.claim_orphans(name, LONG, limit=3)
                if not batch:
                    break
                mine += [lease.conversation_id for _, lease in batch]
            got[name] = mine
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=claim, args=(j, f"r{i}")) for i, j in enumerate(claimers)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
    finally:
        for journal in claimers:
            journal.close()
    assert errors == []
    every = [cid for mine in got.values() for cid in mine]
    assert sorted(every) == sorted(orphans), "each orphan claimed exactly once"


def test_a_database_from_the_previous_version_migrates_and_its_running_messages_are_claimed(
    postgres: PostgresServer,
) -> None:
    dsn = postgres.create_database(f"l_{uuid.uuid4().hex[:12]}")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE toolbridge_schema (one BOOLEAN PRIMARY KEY DEFAULT TRUE "
            "CHECK (one), version INTEGER NOT NULL)"
        )
        for step in MIGRATIONS[:5]:
            conn.execute(step)
        conn.execute("INSERT INTO toolbridge_schema VALUES (TRUE, 5)")
        conn.execute(
            "INSERT INTO conversations (id, created_at, updated_at) VALUES ('old', 't', 't')"
        )
        conn.execute(
            "INSERT INTO messages (conversation_id, query, status, created_at) "
            "VALUES ('old', 'from version 5', 'running', '2026-01-01T00:00:00+00:00')"
        )
    journal = PostgresJournal(dsn, pool_size=2)
    journal.bind_replica("new")
    try:
        [(message, lease)] = journal.claim_orphans("new", LONG)
        assert (message.query, message.replica, lease.owner) == ("from version 5", None, "new")
        journal.end_message(message.message_id, MessageEnd(status="failed"))
        assert journal.messages("old")[0].status == "failed"
    finally:
        journal.close()


@pytest.mark.parametrize("make", [MemoryJournal, lambda: SQLiteJournal(":memory:")])
def test_embedded_stores_keep_leases_local(make: type[Journal]) -> None:
    journal = make()
    journal.bind_replica("solo")
    cid = _cid()
    journal.add_conversation(cid)
    first = journal.acquire_lease(cid, "solo", LONG)
    message = journal.begin_message(cid, "q")
    assert journal.messages(cid)[0].replica == "solo"
    second = journal.acquire_lease(cid, "solo", LONG)
    assert second.generation == first.generation + 1  # another run here: never refused
    assert [m.message_id for m, _ in journal.claim_orphans("solo", LONG)] == [message]
    assert journal.renew_leases("solo", LONG) == [] and journal.lease_holder(cid) is None
    journal.close()


# --- property: whatever the interleaving, only the current holder writes -------------------------


@pytest.fixture
def own_replicas(
    postgres: PostgresServer,
) -> Iterator[tuple[PostgresJournal, PostgresJournal, str]]:
    dsn = postgres.create_database(f"p_{uuid.uuid4().hex[:12]}")
    a = PostgresJournal(dsn, pool_size=2)
    b = PostgresJournal(dsn, pool_size=2)
    a.bind_replica("a")
    b.bind_replica("b")
    try:
        yield a, b, dsn
    finally:
        a.close()
        b.close()


OPS = st.lists(
    st.tuples(
        st.sampled_from(["acquire", "release", "expire", "claim", "write"]),
        st.sampled_from(["a", "b"]),
    ),
    min_size=1,
    max_size=14,
)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(ops=OPS)
def test_property_a_write_succeeds_only_for_the_replica_that_took_the_lease_last(
    own_replicas: tuple[PostgresJournal, PostgresJournal, str], ops: list[tuple[str, str]]
) -> None:
    *pair, dsn = own_replicas
    journals = dict(zip("ab", pair, strict=True))
    cid = _cid()
    try:
        _play(journals, dsn, cid, ops)
    finally:
        # Claims scan the whole database: leave nothing claimable for the next example.
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("UPDATE messages SET status = 'failed' WHERE conversation_id = %s", (cid,))


def _play(
    journals: dict[str, PostgresJournal], dsn: str, cid: str, ops: list[tuple[str, str]]
) -> None:
    journals["a"].add_conversation(cid)
    held: dict[str, Lease] = {}
    holder: str | None = None  # the model: who may write
    live = False  # is the holder's lease unexpired
    running: int | None = None  # a message begun and not ended
    for op, who in ops:
        journal = journals[who]
        if op == "acquire":
            free = holder is None or not live or holder == who
            if running is not None or not free:
                with pytest.raises(LeaseHeldError):
                    journal.acquire_lease(cid, who, LONG)
            else:
                held[who] = journal.acquire_lease(cid, who, LONG)
                holder, live = who, True
                running = journal.begin_message(cid, "q")
        elif op == "release":
            if who in held:
                journal.release_lease(held.pop(who))
                if holder == who:  # a message still running is then left to be claimed
                    holder = None
        elif op == "expire":
            _expire(dsn, cid)
            live = False
        elif op == "claim":
            claimed = journal.claim_orphans(who, LONG)
            if running is not None and (not live or holder is None):
                assert [m.message_id for m, _ in claimed] == [running]
                held[who] = claimed[0][1]
                holder, live = who, True
            else:
                assert claimed == []
        elif op == "write":
            if running is None:
                continue
            if holder == who and who in held:
                journal.end_message(running, MessageEnd(status="finished"))
                running = None
            else:
                with pytest.raises(LeaseLostError):
                    journal.end_message(running, MessageEnd(status="finished"))
    for lease in held.values():
        journals[lease.owner].release_lease(lease)
