"""One live process per replica id on a PostgreSQL journal (real server, real processes).

- a second process started with the replica id of a live one (its keeper renewing) exits 2
  with one line naming the replica, the holder's pid, host and address, before it recovers
  anything; the live one's message in flight finishes there, untouched;
- after kill -9 of the holder, a restart with the same id takes its leases back at once (the
  lease is long: waiting for it to expire would not end within the test's timeout);
- a process frozen past its lease (SIGSTOP) no longer holds the id: a new one takes its place;
- ``toolbridge db status`` lists the replicas: live ones, and those whose process is gone.
"""

from __future__ import annotations

import signal
import socket
import uuid
from pathlib import Path
from typing import Any

import pytest

from bridge.emulator import Emulator
from bridge.journal.postgres_connect import safe_dsn
from tests.daemon.conftest import (
    DaemonProcess,
    daemon_env,
    db_status,
    executions,
    in_background,
    stopped,
    wait_for,
)
from tests.daemon.test_replicas import KEY, _replica
from tests.support.postgres import PostgresServer


@pytest.fixture
def dsn(postgres: PostgresServer) -> str:
    return postgres.create_database(f"o_{uuid.uuid4().hex[:12]}")


def _argv(tools_dir: Path, dsn: str, name: str, lease: str) -> list[str]:
    return [
        "--tools",
        str(tools_dir / "daemon_tools.py"),
        "--port",
        "0",
        "--db",
        dsn,
        "--replica-id",
        name,
        "--lease-seconds",
        lease,
        "--api-key",
        KEY,
    ]


def _sql(dsn: str, statement: str, *params: Any) -> list[tuple[Any, ...]]:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        return list(conn.execute(statement, params).fetchall())


def _lease_from_now(dsn: str, seconds: float) -> Any:
    """The database's clock `seconds` from now (a replica's expiries are on that clock)."""
    [(when,)] = _sql(dsn, "SELECT clock_timestamp() + make_interval(secs => %s)", seconds)
    return when


def _past(dsn: str, when: Any) -> bool:
    [(past,)] = _sql(dsn, "SELECT clock_timestamp() > %s", when)
    return bool(past)


def _outcome(proc: DaemonProcess) -> int | None:
    wait_for(lambda: proc.proc.poll() is not None or proc.url, "exit or listen", timeout=60)
    if proc.proc.poll() is None:
        proc.stop()
        return None
    return proc.wait_exit()


def test_a_live_replica_id_is_refused_and_its_message_goes_on(
    emulator: Emulator, tools_dir: Path, dsn: str, postgres: PostgresServer
) -> None:
    who = f"u{uuid.uuid4().hex[:8]}"
    block = tools_dir / "block-send_email"
    block.touch()
    first = _replica(emulator, tools_dir, dsn, "r1")
    with stopped(first):
        expires_at = _lease_from_now(dsn, 2)  # later than the first claim's expiry
        cid = first.new_conversation()
        asked = in_background(lambda: first.ask(cid, f"email {who}"))
        wait_for(lambda: f"send_email {who}" in executions(tools_dir), "the call to run")
        # Past the first claim's lease: only the keeper's renewals keep the id held now.
        wait_for(lambda: _past(dsn, expires_at), "the first lease to pass", timeout=60)

        second = DaemonProcess(
            _argv(tools_dir, dsn, "r1", "2"), env=daemon_env(emulator, tools_dir), wait=False
        )
        code = _outcome(second)
        assert code == 2, f"a second process took over live replica r1:\n{second.log}"
        lines = [line for line in second.lines if line.strip()]
        assert lines == [
            f"error: replica r1 of journal {safe_dsn(dsn)} is in use by toolbridge serve "
            f"(pid {first.proc.pid}, on {socket.gethostname()}, {first.url}); stop it first, "
            "or give this process another --replica-id (each process sharing a journal needs "
            "its own)"
        ], second.log
        assert postgres.password not in second.log
        assert "resuming" not in second.log and "taking over" not in second.log

        block.unlink()
        asked["thread"].join(timeout=60)
        response = asked["response"]
        assert response.status_code == 200, response.text
        assert response.json()["answer"] == f"result: sent to {who}"
    assert executions(tools_dir).count(f"send_email {who}") == 1
    assert "lost the lease" not in first.log and "taken over" not in first.log
    assert _sql(dsn, "SELECT count(*) FROM replicas") == [(0,)], "a clean stop gives r1 back"


def test_after_kill_9_a_restart_with_the_same_id_takes_its_leases_back_at_once(
    emulator: Emulator, tools_dir: Path, dsn: str
) -> None:
    who = f"k{uuid.uuid4().hex[:8]}"
    block = tools_dir / "block-lookup"
    block.touch()
    # A lease of ten minutes: the restart must not wait for it to expire.
    first = _replica(emulator, tools_dir, dsn, "r1", lease="600")
    with stopped(first):
        cid = first.new_conversation()
        in_background(lambda: first.ask(cid, f"lookup {who}"))
        wait_for(lambda: f"lookup {who}" in executions(tools_dir), "the call to run")
        first.kill9()
    block.unlink()
    again = _replica(emulator, tools_dir, dsn, "r1", lease="600")
    with stopped(again):
        messages = wait_for(
            lambda: [
                m
                for m in again.request("GET", f"/v1/conversations/{cid}").json()["messages"]
                if m["status"] != "running"
            ],
            "the restarted replica to finish the message",
            timeout=60,
        )
    assert messages[0]["status"] == "finished", messages
    assert messages[0]["answer"] == f"result: value of {who}"
    assert "is gone; taking its leases back" in again.log
    assert f"(pid {first.proc.pid}" in again.log


def test_a_replica_frozen_past_its_lease_gives_its_id_up(
    emulator: Emulator, tools_dir: Path, dsn: str
) -> None:
    frozen = _replica(emulator, tools_dir, dsn, "r1")
    with stopped(frozen):
        frozen.proc.send_signal(signal.SIGSTOP)
        # Its last renewal was at most now: its claim expires within a lease from now.
        expires_at = _lease_from_now(dsn, 2)
        wait_for(lambda: _past(dsn, expires_at), "the frozen replica's claim to expire")
        new = _replica(emulator, tools_dir, dsn, "r1")
        with stopped(new):
            assert "has not renewed it for" in new.log
            frozen.proc.send_signal(signal.SIGCONT)
            wait_for(lambda: "was taken over by another process" in frozen.log, "the old one")
            [(pid,)] = _sql(dsn, "SELECT pid FROM replicas WHERE replica_id = 'r1'")
            assert pid == new.proc.pid


def test_db_status_lists_the_live_replicas(
    emulator: Emulator, tools_dir: Path, dsn: str, postgres: PostgresServer
) -> None:
    a = _replica(emulator, tools_dir, dsn, "replica-a")
    b = _replica(emulator, tools_dir, dsn, "replica-b")
    host = socket.gethostname()
    with stopped(a, b):
        both = db_status(dsn)
        b.kill9()
        one = db_status(dsn)
    assert both.returncode == 0, both.stderr
    assert "live replicas: 2" in both.stdout
    assert f"  replica-a: live, toolbridge serve (pid {a.proc.pid}, on {host}, {a.url})" in (
        both.stdout
    )
    assert f"  replica-b: live, toolbridge serve (pid {b.proc.pid}, on {host}, {b.url})" in (
        both.stdout
    )
    assert "live replicas: 1" in one.stdout
    assert "  replica-b: stale, " in one.stdout and "its process is gone" in one.stdout
    assert postgres.password not in both.stdout + both.stderr
    after = db_status(dsn)
    assert "replica-a" not in after.stdout, "a clean stop gives the id back"
