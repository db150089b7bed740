"""`bridge.journal.owner`: the lock that makes one process the owner of a SQLite journal.

The holder is another real process (a child Python that takes the lock and waits), because a
``flock`` is what the kernel keeps per open file: what matters is what a second process sees,
and what is left when the holder dies.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from bridge.errors import UsageError
from bridge.journal.owner import (
    JournalInUseError,
    JournalLock,
    Owner,
    ReplicaInUseError,
    holder,
    lock_path,
)

HOLD = """
import sys
from bridge.journal.owner import JournalLock
lock = JournalLock.acquire(sys.argv[1])
lock.set_address(sys.argv[2])
print("held", flush=True)
sys.stdin.readline()
lock.release()
print("released", flush=True)
"""


class Holder:
    """A child process holding the lock of `db` until `release` or `kill`."""

    def __init__(self, db: Path, address: str = "http://127.0.0.1:8412") -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", HOLD, str(db), address],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line.strip() == "held", self.proc.stderr.read() if self.proc.stderr else line

    @property
    def pid(self) -> int:
        return self.proc.pid

    def release(self) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()
        assert self.proc.stdout.readline().strip() == "released"
        self.proc.wait(timeout=30)

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "state" / "journal.db"


@pytest.fixture
def held(db: Path) -> Iterator[Holder]:
    child = Holder(db)
    try:
        yield child
    finally:
        child.stop()


def test_the_lock_file_sits_beside_the_journal_and_names_its_holder(db: Path, held: Holder) -> None:
    assert lock_path(db) == Path(f"{db}.lock")
    recorded = json.loads(lock_path(db).read_text(encoding="utf-8"))
    assert recorded["pid"] == held.pid
    assert recorded["address"] == "http://127.0.0.1:8412"
    assert recorded["command"] == "toolbridge serve"
    assert recorded["since"]
    owner = holder(db)
    assert owner is not None and owner.pid == held.pid
    assert owner.address == "http://127.0.0.1:8412"
    assert not db.exists(), "the lock never creates the journal itself"


def test_a_second_process_is_refused_with_one_line_naming_file_pid_and_address(
    db: Path, held: Holder
) -> None:
    with pytest.raises(JournalInUseError) as refused:
        JournalLock.acquire(str(db))
    assert isinstance(refused.value, UsageError), "exit code 2 in the CLI"
    assert str(refused.value) == (
        f"journal {db} is in use by toolbridge serve (pid {held.pid}, "
        "http://127.0.0.1:8412); stop it first or use another --db"
    )
    assert "\n" not in str(refused.value)


def test_a_released_lock_is_gone_and_free(db: Path, held: Holder) -> None:
    held.release()
    assert not lock_path(db).exists(), "a clean stop removes the lock file"
    assert holder(db) is None
    with JournalLock.acquire(str(db)) as lock:
        assert lock.held
        assert holder(db) == lock.owner
    assert not lock.held


def test_a_killed_holder_leaves_a_stale_file_that_blocks_nobody(db: Path, held: Holder) -> None:
    held.kill()
    stale = lock_path(db).read_text(encoding="utf-8")
    assert json.loads(stale)["pid"] == held.pid, "the file outlives the process"
    assert holder(db) is None, "the kernel released the lock with the process"
    with JournalLock.acquire(str(db)) as lock:
        recorded = json.loads(lock_path(db).read_text(encoding="utf-8"))
        assert recorded["pid"] == os.getpid() != held.pid
        assert recorded["address"] is None
        lock.set_address("http://[::1]:9000")
        assert holder(db) == Owner(
            pid=os.getpid(),
            host=lock.owner.host,
            address="http://[::1]:9000",
            since=lock.owner.since,
        )


def test_one_process_holds_a_journal_once(db: Path) -> None:
    with JournalLock.acquire(str(db)), pytest.raises(JournalInUseError, match=f"pid {os.getpid()}"):
        JournalLock.acquire(str(db))


def test_a_reader_probing_at_that_instant_does_not_make_a_start_fail(db: Path) -> None:
    path = lock_path(db)
    path.parent.mkdir(parents=True)
    probe = os.open(path, os.O_RDWR | os.O_CREAT)
    fcntl.flock(probe, fcntl.LOCK_SH)  # what `holder` holds for an instant
    got: list[JournalLock] = []
    starting = threading.Thread(target=lambda: got.append(JournalLock.acquire(str(db))))
    starting.start()
    os.close(probe)
    starting.join(timeout=30)
    assert got and got[0].held
    got[0].release()


def test_an_unreadable_lock_file_still_refuses_and_says_so(db: Path, held: Holder) -> None:
    lock_path(db).write_text("not json", encoding="utf-8")
    with pytest.raises(JournalInUseError, match=r"in use by toolbridge serve \(pid unknown"):
        JournalLock.acquire(str(db))


def test_a_replica_refusal_names_the_replica_and_its_holder() -> None:
    owner = Owner(pid=42, host="node-7", address="http://10.0.0.7:8411")
    text = str(ReplicaInUseError("r1", "postgresql://u@db/j", owner, "stop it first"))
    assert text == (
        "replica r1 of journal postgresql://u@db/j is in use by toolbridge serve (pid 42, on "
        "node-7, http://10.0.0.7:8411); stop it first"
    )


def test_a_library_journal_refuses_a_file_a_daemon_owns(db: Path, held: Holder) -> None:
    from bridge.journal.sqlite import SQLiteJournal

    with pytest.raises(JournalInUseError) as refused:
        SQLiteJournal(db)
    assert str(refused.value) == (
        f"journal {db} is in use by toolbridge serve (pid {held.pid}, "
        "http://127.0.0.1:8412); stop it first or open another journal file"
    )
    assert not db.exists()


def test_no_daemon_starts_on_a_file_library_journals_have_open(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from bridge.journal import owner
    from bridge.journal.sqlite import SQLiteJournal

    monkeypatch.setattr(owner, "PROBE_SECONDS", 0.05)
    first, second = SQLiteJournal(db), SQLiteJournal(db)  # library processes take turns
    try:
        with pytest.raises(JournalInUseError) as refused:
            JournalLock.acquire(str(db))
    finally:
        first.close()
        second.close()
    assert str(refused.value) == (
        f"journal {db} is in use by another process that has it open (a library "
        "SQLiteJournal); stop it first or use another --db"
    )
    with JournalLock.acquire(str(db)) as lock:
        assert lock.held, "closed library journals hold nothing"
        journal = SQLiteJournal(db)  # this process's own daemon opening its journal
        journal.close()


def test_a_journal_reached_through_a_symlink_is_the_same_journal(
    db: Path, held: Holder, tmp_path: Path
) -> None:
    """SQLite opens what a symlink names, so the lock must too: a second daemon given a link to
    the file (or to its folder) is refused, and `db status` through the link names the holder."""
    (tmp_path / "link.db").symlink_to(db)
    (tmp_path / "folder-link").symlink_to(db.parent, target_is_directory=True)
    for spelling in (tmp_path / "link.db", tmp_path / "folder-link" / db.name):
        with pytest.raises(JournalInUseError) as refused:
            JournalLock.acquire(str(spelling))
        assert f"pid {held.pid}" in str(refused.value)
        owner = holder(spelling)
        assert owner is not None and owner.pid == held.pid


def test_a_journal_with_a_second_name_is_refused(db: Path, tmp_path: Path) -> None:
    """A hard link is the same file under another name: its lock would sit beside the other
    name (a second daemon would get in) and SQLite would keep a second write-ahead log for the
    one database, so a journal with more than one name is refused under every name."""
    db.parent.mkdir(parents=True)
    db.write_bytes(b"")
    (tmp_path / "other.db").hardlink_to(db)
    for name in (db, tmp_path / "other.db"):
        with pytest.raises(UsageError) as refused:
            JournalLock.acquire(str(name))
        message = str(refused.value)
        assert message.startswith(f"journal {name} has 2 names (hard links)"), message
        assert "remove the other links" in message and "\n" not in message
        assert not lock_path(name).exists()
    (tmp_path / "other.db").unlink()
    JournalLock.acquire(str(db)).release()
