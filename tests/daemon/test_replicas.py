"""Two `toolbridge serve` replicas on one PostgreSQL journal (real server, real processes).

- either replica serves any conversation, one run at a time: a message for a conversation the
  other one is running gets 409 ``conversation_busy`` naming that replica;
- kill -9 of a replica at any journal step: once its lease expires the other one takes the
  message over and finishes it (never a tool run twice, no output lost) and the conversation
  takes its next message;
- a replica paused past its lease (SIGSTOP) finds, when it wakes, that it can write nothing:
  the other one finished the message, and its own late tool output is refused (fencing).
"""

from __future__ import annotations

import signal
import uuid
from pathlib import Path
from typing import Any

import pytest

from bridge.emulator import Emulator
from tests.daemon.conftest import (
    DaemonProcess,
    executions,
    in_background,
    start_daemon,
    stopped,
    wait_for,
)
from tests.support.postgres import PostgresServer

KEY = "replica-test-key-0123456789abcdef"
LEASE = "2"  # seconds: short, so a takeover comes quickly; renewals every 0.67 s


@pytest.fixture
def dsn(postgres: PostgresServer) -> str:
    return postgres.create_database(f"r_{uuid.uuid4().hex[:12]}")


def _replica(
    emulator: Emulator, tools_dir: Path, dsn: str, name: str, lease: str = LEASE, **env: str
) -> DaemonProcess:
    """A replica `name` serving the journal `dsn` (`KEY` its API key)."""
    return start_daemon(
        emulator,
        tools_dir,
        dsn,
        "--replica-id",
        name,
        "--lease-seconds",
        lease,
        api_key=KEY,
        env=env,
    )


def _messages(daemon: DaemonProcess, cid: str) -> list[dict[str, Any]]:
    return list(daemon.request("GET", f"/v1/conversations/{cid}").json()["messages"])


def _all_ended(daemon: DaemonProcess, cid: str) -> list[dict[str, Any]] | None:
    messages = _messages(daemon, cid)
    return messages if all(m["status"] != "running" for m in messages) else None


def _who() -> str:
    return f"u{uuid.uuid4().hex[:8]}"


def test_either_replica_serves_a_conversation_and_a_busy_one_gets_409(
    emulator: Emulator, tools_dir: Path, dsn: str
) -> None:
    a = _replica(emulator, tools_dir, dsn, "replica-a")
    b = _replica(emulator, tools_dir, dsn, "replica-b")
    block = tools_dir / "block-send_email"
    with stopped(a, b):
        assert a.request("GET", "/healthz").json()["replica"] == "replica-a"
        assert b.request("GET", "/healthz").json()["replica"] == "replica-b"
        metrics = b.request("GET", "/metrics").text
        assert 'toolbridge_replica_info{replica="replica-b"} 1.0' in metrics

        cid = a.new_conversation()
        first = a.ask(cid, "weather in Paris")
        assert first.status_code == 200 and first.json()["answer"] == "Paris: 18 degrees"
        second = b.ask(cid, "weather in Tokyo")
        assert second.status_code == 200 and second.json()["answer"] == "Tokyo: 22 degrees"

        who = _who()
        block.touch()
        try:
            running = in_background(lambda: a.ask(cid, f"email {who}"))
            wait_for(lambda: f"send_email {who}" in executions(tools_dir), "the call to run")
            busy = b.ask(cid, "weather in Paris")
            assert busy.status_code == 409, busy.text
            error = busy.json()["error"]
            assert error["code"] == "conversation_busy"
            assert "replica-a" in error["message"]
            assert b.request("GET", f"/v1/conversations/{cid}").json()["busy"] is True
        finally:
            block.unlink(missing_ok=True)
        running["thread"].join(timeout=60)
        assert running["response"].json()["answer"] == f"result: sent to {who}"
        third = b.ask(cid, "weather in Paris")
        assert third.status_code == 200, third.text
        messages = _messages(b, cid)
    assert [m["replica"] for m in messages] == [
        "replica-a",
        "replica-b",
        "replica-a",
        "replica-b",
    ]
    assert [m["status"] for m in messages] == ["finished"] * 4


@pytest.mark.parametrize("step", ["received", "started", "finished", "submitting", "submitted"])
def test_kill_9_of_a_replica_at_each_step_and_the_other_finishes_its_message(
    emulator: Emulator, tools_dir: Path, dsn: str, tmp_path: Path, step: str
) -> None:
    mark = tmp_path / f"hit-{step}"
    a = _replica(emulator, tools_dir, dsn, "replica-a", TOOLBRIDGE_FAILPOINT=f"{step}:{mark}")
    b = _replica(emulator, tools_dir, dsn, "replica-b")
    who = _who()
    with stopped(a, b):
        cid = a.new_conversation()
        in_background(lambda: a.ask(cid, f"email {who}"))
        wait_for(mark.exists, f"replica a to write {step!r}")
        a.kill9()
        messages = wait_for(
            lambda: _all_ended(b, cid), "replica b to take the message over", timeout=90
        )
        after = b.ask(cid, "weather in Paris")
        assert after.status_code == 200, after.text
        final = _messages(b, cid)
    ran = executions(tools_dir).count(f"send_email {who}")
    assert ran <= 1, "a tool never runs twice"
    [first] = messages
    assert first["replica"] == "replica-b"
    if step == "submitted":
        # The outputs were accepted and the answer stream died with replica a: as after a
        # local crash, the message fails "interrupted" (delivered once, never resent).
        assert (first["status"], first["error_code"]) == ("failed", "interrupted")
        assert ran == 1
    else:
        assert first["status"] == "finished", first
        if step in ("finished", "submitting"):
            assert ran == 1 and first["answer"] == f"result: sent to {who}"
        elif step == "received":
            assert ran == 1, "never started on a: b runs it"
    assert final[-1]["status"] == "finished" and final[-1]["answer"] == "Paris: 18 degrees"
    assert (
        "taking over 1 unfinished message(s) in 1 conversation(s) from replica(s) replica-a"
        in b.log
    )


def test_kill_9_with_several_runs_in_flight_each_is_finished_elsewhere_once(
    emulator: Emulator, tools_dir: Path, dsn: str
) -> None:
    a = _replica(emulator, tools_dir, dsn, "replica-a")
    b = _replica(emulator, tools_dir, dsn, "replica-b")
    block = tools_dir / "block-send_email"
    people = [_who() for _ in range(5)]
    block.touch()
    try:
        with stopped(a, b):
            cids = [a.new_conversation() for _ in people]
            for cid, who in zip(cids, people, strict=True):
                in_background(lambda cid=cid, who=who: a.ask(cid, f"email {who}"))
            wait_for(
                lambda: all(f"send_email {w}" in executions(tools_dir) for w in people),
                "every call to be running on replica a",
            )
            a.kill9()
            block.unlink()
            ended = [
                wait_for(lambda cid=cid: _all_ended(b, cid), "the takeover", timeout=90)
                for cid in cids
            ]
            nexts = [b.ask(cid, "weather in Tokyo").status_code for cid in cids]
    finally:
        block.unlink(missing_ok=True)
    for messages in ended:
        [message] = messages
        assert message["status"] == "finished" and message["replica"] == "replica-b"
        # The call had started on a and may have run: reported to the agent, never re-run.
        assert "interrupted" in message["answer"] or "restart" in message["answer"]
    assert [executions(tools_dir).count(f"send_email {w}") for w in people] == [1] * 5
    assert nexts == [200] * 5


def test_a_paused_replica_whose_lease_was_taken_cannot_write(
    emulator: Emulator, tools_dir: Path, dsn: str
) -> None:
    a = _replica(emulator, tools_dir, dsn, "replica-a")
    b = _replica(emulator, tools_dir, dsn, "replica-b")
    block = tools_dir / "block-send_email"
    who = _who()
    block.touch()
    try:
        with stopped(a, b):
            cid = a.new_conversation()
            late = in_background(lambda: a.ask(cid, f"email {who}"))
            wait_for(lambda: f"send_email {who}" in executions(tools_dir), "the call to run")
            a.proc.send_signal(signal.SIGSTOP)  # a long GC pause, a frozen VM...
            [message] = wait_for(lambda: _all_ended(b, cid), "replica b to take over", 90)
            calls_by_b = b.request("GET", f"/v1/conversations/{cid}").json()["tool_calls"]
            block.unlink()
            a.proc.send_signal(signal.SIGCONT)
            late["thread"].join(timeout=60)
            calls_after = b.request("GET", f"/v1/conversations/{cid}").json()["tool_calls"]
            messages_after = _messages(b, cid)
            log_a = a.log
    finally:
        block.unlink(missing_ok=True)
    assert message["status"] == "finished" and message["replica"] == "replica-b"
    # a woke up, its tool returned, and its output was refused: the journal is b's.
    assert calls_after == calls_by_b
    assert messages_after == [message]
    assert f"sent to {who}" not in str(calls_after)
    response = late["response"]
    assert response.status_code == 409, response.text
    assert response.json()["error"]["code"] == "lease_lost"
    assert "run stopped: conversation" in log_a
    assert "lease was taken over by replica replica-b" in log_a
