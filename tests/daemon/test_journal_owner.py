"""One daemon per journal, through real processes.

A daemon owns its SQLite journal (a lock taken before anything is read for recovery) and binds
its port before it recovers anything. A second `toolbridge serve` on the same file, on another
port or the same one, exits 2 with one line naming the file, the holder's pid and address, and
the first daemon's call in flight goes on untouched: no "resuming" in the second, no
interruption in the journal, the first one's client gets its answer. A daemon whose port is in
use exits 2 with one line and has recovered nothing. ``toolbridge db status`` names the holder.
"""

from __future__ import annotations

import contextlib
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from bridge.emulator import Emulator
from tests.daemon.conftest import (
    DaemonProcess,
    daemon_env,
    db_status,
    executions,
    in_background,
    start_daemon,
    wait_for,
)


def _second(emulator: Emulator, tools_dir: Path, db: Path, port: str) -> DaemonProcess:
    """Another `serve` on `db`, not waited for: it must exit, not listen."""
    argv = ["--tools", str(tools_dir / "daemon_tools.py"), "--port", port, "--db", str(db)]
    return DaemonProcess(argv, env=daemon_env(emulator, tools_dir), wait=False)


def _exit_or_listen(proc: DaemonProcess) -> int | None:
    """The exit code, or None if the process started serving instead (then it is stopped)."""
    wait_for(
        lambda: proc.proc.poll() is not None or proc.url,
        "the second daemon to exit or listen",
        timeout=60,
    )
    if proc.proc.poll() is None:
        proc.stop()
        return None
    return proc.wait_exit()


def _statuses(db: Path) -> list[tuple[str, str | None]]:
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as raw:
        rows = raw.execute("SELECT status, error_code FROM messages ORDER BY id").fetchall()
    return [(str(status), code) for status, code in rows]


@pytest.mark.parametrize("same_port", [False, True], ids=["another-port", "same-port"])
def test_a_second_daemon_on_the_journal_exits_2_and_the_first_ones_call_goes_on(
    emulator: Emulator, tools_dir: Path, tmp_path: Path, same_port: bool
) -> None:
    (tools_dir / "executions.log").unlink(missing_ok=True)
    db = tmp_path / "journal.db"
    block = tools_dir / "block-charge"
    block.touch()
    first = start_daemon(emulator, tools_dir, db)
    try:
        cid = first.new_conversation()
        asked = in_background(lambda: first.ask(cid, "charge 9"))
        wait_for(lambda: "charge 9" in executions(tools_dir), "the first daemon's call to start")

        port = first.url.rsplit(":", 1)[1] if same_port else "0"
        second = _second(emulator, tools_dir, db, port)
        code = _exit_or_listen(second)
        assert code == 2, f"the second daemon served on the first one's journal:\n{second.log}"
        lines = [line for line in second.lines if line.strip()]
        assert len(lines) == 1, second.log
        assert lines[0] == (
            f"error: journal {db} is in use by toolbridge serve (pid {first.proc.pid}, "
            f"{first.url}); stop it first or use another --db"
        )
        assert "resuming" not in second.log and "interrupted" not in second.log
        assert _statuses(db) == [("running", None)], "the journal was left as the first wrote it"

        block.unlink()
        asked["thread"].join(timeout=60)
        response = asked["response"]
        assert response.status_code == 200, response.text
        assert response.json()["answer"] == "result: charged 9"
        detail = first.request("GET", f"/v1/conversations/{cid}").json()
    finally:
        block.unlink(missing_ok=True)
        first.stop()
    assert executions(tools_dir).count("charge 9") == 1
    [call] = detail["tool_calls"]
    assert call["state"] == "submitted" and call["error"] is None, call
    assert _statuses(db) == [("finished", None)]
    assert "resuming" not in first.log


def test_a_port_in_use_exits_2_before_anything_is_recovered(
    emulator: Emulator, tools_dir: Path, tmp_path: Path
) -> None:
    (tools_dir / "executions.log").unlink(missing_ok=True)
    db = tmp_path / "journal.db"
    block = tools_dir / "block-charge"
    block.touch()
    crashed = start_daemon(emulator, tools_dir, db)
    try:
        cid = crashed.new_conversation()
        in_background(lambda: crashed.ask(cid, "charge 4"))
        wait_for(lambda: "charge 4" in executions(tools_dir), "the call to start")
        crashed.kill9()  # leaves a message for recovery
    finally:
        block.unlink(missing_ok=True)
        crashed.stop()
    before = _files(db), _statuses(db)
    assert before[1] == [("running", None)]

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        late = _second(emulator, tools_dir, db, str(port))
        code = _exit_or_listen(late)
    assert "resuming" not in late.log, late.log
    assert (_files(db), _statuses(db)) == before, "recovery ran although nothing served"
    assert code == 2, late.log
    lines = [line for line in late.lines if line.strip()]
    assert lines == [
        f"error: port {port} on 127.0.0.1 is in use by another process; stop it or choose "
        "another --port (0 picks a free one)"
    ], late.log

    # The same journal on a free port recovers it as usual.
    again = start_daemon(emulator, tools_dir, db)
    try:
        wait_for(lambda: _statuses(db)[0][0] != "running", "the message to be recovered")
    finally:
        again.stop()
    assert "resuming message" in again.log
    assert executions(tools_dir).count("charge 4") == 1


def _files(db: Path) -> tuple[bytes, ...]:
    """The journal's bytes: the file and its write-ahead log."""
    wal = Path(f"{db}-wal")
    return db.read_bytes(), wal.read_bytes() if wal.exists() else b""


def test_db_status_names_the_daemon_that_holds_the_journal(
    emulator: Emulator, tools_dir: Path, tmp_path: Path
) -> None:
    db = tmp_path / "journal.db"
    daemon = start_daemon(emulator, tools_dir, db)
    try:
        held = db_status(db)
        upgrade = subprocess.run(
            [sys.executable, "-m", "bridge", "db", "upgrade", "--db", str(db)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        daemon.stop()
    assert held.returncode == 0, held.stderr
    assert f"held by: toolbridge serve (pid {daemon.proc.pid}, {daemon.url}), since " in (
        held.stdout
    )
    assert upgrade.returncode == 2
    assert upgrade.stderr.strip().splitlines() == [
        f"error: journal {db} is in use by toolbridge serve (pid {daemon.proc.pid}, "
        f"{daemon.url}); stop it first, then upgrade (a daemon upgrades its journal at start)"
    ]
    free = db_status(db)
    assert free.returncode == 0, free.stderr
    assert "held by: nobody" in free.stdout
    assert not Path(f"{db}.lock").exists(), "a clean stop removes the lock file"


def test_a_daemon_killed_with_kill_9_leaves_a_lock_file_that_blocks_nobody(
    emulator: Emulator, tools_dir: Path, tmp_path: Path
) -> None:
    db = tmp_path / "journal.db"
    first = start_daemon(emulator, tools_dir, db)
    try:
        first.kill9()
    finally:
        first.stop()
    lock = Path(f"{db}.lock")
    assert f'"pid": {first.proc.pid}' in lock.read_text(encoding="utf-8")
    assert "held by: nobody" in db_status(db).stdout
    again = start_daemon(emulator, tools_dir, db)
    try:
        assert f'"pid": {again.proc.pid}' in lock.read_text(encoding="utf-8")
        assert again.url in lock.read_text(encoding="utf-8")
    finally:
        again.stop()
