"""Who owns a journal: one daemon per SQLite file, one live process per PostgreSQL replica id.

SQLite (`JournalLock`): a daemon takes an exclusive ``flock`` on ``<journal>.lock`` beside the
file before it reads anything for recovery, and holds it for as long as the process lives. The
lock file says who holds it (pid, host, address, since, as one JSON object) so a second
process can name the holder in its refusal. The kernel releases a ``flock`` when its process
dies, however it dies (kill -9 included): a lock file left behind by a dead daemon blocks
nobody, the next daemon simply takes the lock and rewrites the file. A clean stop removes it.

Readers do not take the exclusive lock: `holder` (``toolbridge db status``) probes with a
shared lock for an instant; a daemon that starts at that instant sees only a shared holder and
tries again, so a probe never makes a start fail.

The library's `SQLiteJournal` shares (`share`): it holds a shared lock while it is open, so
library processes can take turns on one file as before, but none opens a file a daemon owns,
and no daemon starts (and recovers) on a file a library process has open.

PostgreSQL replica ids are owned through the journal itself
(`bridge.journal.postgres_replicas.claim_replica`); `ReplicaInUseError` is their
refusal, worded like `JournalInUseError`.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import socket
import time
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

from bridge.errors import UsageError

__all__ = [
    "JournalInUseError",
    "JournalLock",
    "Owner",
    "ReplicaInUseError",
    "holder",
    "lock_path",
    "share",
    "unshare",
]

logger = logging.getLogger(__name__)

SUFFIX = ".lock"
PROBE_SECONDS = 2.0
"""How long a starting daemon retries while only a reader's instant probe holds the lock."""
DEFAULT_COMMAND = "toolbridge serve"
SHARED = "another process that has it open (a library SQLiteJournal)"


@dataclass(frozen=True)
class Owner:
    """The process that holds a journal (or a replica id): what the lock file records."""

    pid: int | None
    host: str = ""
    address: str | None = None
    since: str | None = None
    command: str = DEFAULT_COMMAND

    def describe(self, *, host: bool = False) -> str:
        """``toolbridge serve (pid 1234, http://127.0.0.1:8412)`` and the like; the host is
        named when it is another machine's (always with `host`)."""
        if self.command == SHARED:
            return SHARED
        parts = [f"pid {self.pid}" if self.pid is not None else "pid unknown"]
        if self.host and (host or self.host != socket.gethostname()):
            parts.append(f"on {self.host}")
        if self.address:
            parts.append(self.address)
        elif self.command == DEFAULT_COMMAND:
            parts.append("not listening yet")
        return f"{self.command} ({', '.join(parts)})"

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False, sort_keys=True)

    @classmethod
    def from_text(cls, text: str) -> Owner:
        """What a lock file holds; a file being rewritten at that instant gives pid unknown."""
        try:
            data = json.loads(text)
            pid = data.get("pid")
            return cls(
                pid=int(pid) if isinstance(pid, int) else None,
                host=str(data.get("host") or ""),
                address=str(data["address"]) if data.get("address") else None,
                since=str(data["since"]) if data.get("since") else None,
                command=str(data.get("command") or DEFAULT_COMMAND),
            )
        except (ValueError, AttributeError, TypeError):
            return cls(pid=None)


class JournalInUseError(UsageError):
    """Another live process owns the SQLite journal (exit code 2)."""

    def __init__(self, db: str, owner: Owner, advice: str) -> None:
        super().__init__(f"journal {db} is in use by {owner.describe()}; {advice}")
        self.db = db
        self.owner = owner


class ReplicaInUseError(UsageError):
    """A live process already serves as this replica id on the PostgreSQL journal (exit 2)."""

    def __init__(self, replica: str, journal: str, owner: Owner | None, advice: str) -> None:
        who = owner.describe(host=True) if owner is not None else "another process that is starting"
        super().__init__(f"replica {replica} of journal {journal} is in use by {who}; {advice}")
        self.replica = replica
        self.owner = owner


def lock_path(db: str | Path) -> Path:
    """The lock file of a SQLite journal: ``journal.db`` -> ``journal.db.lock``.

    Beside the file the path names once symlinks are followed, as SQLite opens it: a link to
    a journal is the same journal, with the same lock. (A hard link cannot be told from its
    path; SQLite's WAL does not support one either.)
    """
    return Path(f"{os.path.realpath(db)}{SUFFIX}")


def _key(path: Path) -> str:
    return os.path.realpath(path)


def _refuse_hard_links(db: str | Path) -> None:
    """Refuse a journal file with more than one name: the lock is found by name (beside the
    file), so a hard link would be a second journal with a lock of its own, and SQLite keeps a
    write-ahead log per name, so two daemons would corrupt the one database."""
    try:
        links = os.stat(db).st_nlink
    except OSError:
        return  # not there yet (a fresh journal) or unreadable: opening it says why
    if links > 1:
        raise UsageError(
            f"journal {db} has {links} names (hard links); a journal file must have one "
            "name, or a second daemon could open it under another: remove the other links "
            f"(find -samefile {db} lists them) and start again"
        )


_HELD: dict[str, JournalLock] = {}
"""The locks this process holds, by the lock file's real path (a process never refuses
itself)."""


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class JournalLock:
    """An exclusive, process-lifetime lock on a SQLite journal (see the module docstring).

    Take it with `acquire`; `set_address` records where the daemon listens once it is bound;
    `release` (or the process's death) gives it back.
    """

    def __init__(self, db: str, path: Path, fd: int, owner: Owner) -> None:
        self.db = db
        self.path = path
        self.owner = owner
        self._fd: int | None = fd

    @classmethod
    def acquire(
        cls,
        db: str,
        *,
        command: str = DEFAULT_COMMAND,
        advice: str = "stop it first or use another --db",
    ) -> JournalLock:
        """Lock `db` for this process, or raise `JournalInUseError` naming the holder.

        Creates the journal's folder if missing (the journal file itself is not touched).
        """
        _refuse_hard_links(db)
        path = lock_path(db)
        held = _HELD.get(_key(path))
        if held is not None:
            raise JournalInUseError(db, held.owner, advice)
        path.parent.mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + PROBE_SECONDS
        while True:
            fd, found = _attempt(path)
            if fd is not None:
                break
            if found is not None:
                raise JournalInUseError(db, found, advice)
            # Shared holders only: a reader's instant probe (try again), or library journals
            # that keep it open (refused once that lasts).
            if time.monotonic() >= deadline:
                raise JournalInUseError(db, Owner(pid=None, command=SHARED), advice)
            time.sleep(0.01)
        owner = Owner(pid=os.getpid(), host=socket.gethostname(), since=_now(), command=command)
        lock = cls(db, path, fd, owner)
        lock._write()
        _HELD[_key(path)] = lock
        return lock

    @property
    def held(self) -> bool:
        return self._fd is not None

    def set_address(self, address: str) -> None:
        """Record where the owning daemon listens (named by a refused second process)."""
        self.owner = Owner(
            pid=self.owner.pid,
            host=self.owner.host,
            address=address,
            since=self.owner.since,
            command=self.owner.command,
        )
        self._write()

    def _write(self) -> None:
        if self._fd is None:
            return
        data = (self.owner.to_json() + "\n").encode()
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, data, 0)

    def release(self) -> None:
        """Remove the lock file and let go (a clean stop); a second call does nothing."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        _HELD.pop(_key(self.path), None)
        # Removed while still locked: a process that opened it meanwhile finds, once it holds
        # its lock, that the path names another file (or none), and opens it again.
        with contextlib.suppress(OSError):
            if _same_file(fd, self.path):
                self.path.unlink()
        os.close(fd)

    def __enter__(self) -> JournalLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _attempt(path: Path) -> tuple[int | None, Owner | None]:
    """One try at the exclusive lock: (its descriptor, None), or (None, the owner that holds
    it), or (None, None) when only shared holders have it or the file was just replaced."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        if _try_lock(fd, fcntl.LOCK_EX):
            if _same_file(fd, path):
                got, fd = fd, -1
                return got, None
            # Removed by a stopping daemon between our open and our lock: the file we
            # locked is no longer the lock file; the next try opens the new one.
            return None, None
        if _try_lock(fd, fcntl.LOCK_SH):
            return None, None
        return None, Owner.from_text(_read(fd))
    finally:
        if fd >= 0:
            os.close(fd)


def _try_lock(fd: int, kind: int) -> bool:
    try:
        fcntl.flock(fd, kind | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            return False
        raise
    return True


def _same_file(fd: int, path: Path) -> bool:
    try:
        on_disk = os.stat(path)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (mine.st_dev, mine.st_ino) == (on_disk.st_dev, on_disk.st_ino)


def _read(fd: int) -> str:
    return os.pread(fd, 4096, 0).decode("utf-8", "replace")


def holder(db: str | Path) -> Owner | None:
    """The live process that holds `db`'s lock, or None (nobody; a stale file counts as
    nobody). Never blocks and never makes a starting daemon fail (a shared probe)."""
    path = lock_path(db)
    held = _HELD.get(_key(path))
    if held is not None:
        return held.owner
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        if _try_lock(fd, fcntl.LOCK_SH):
            return None
        return Owner.from_text(_read(fd))
    finally:
        os.close(fd)


def share(db: str, *, advice: str) -> int | None:
    """Hold `db` shared (a library journal): returns the descriptor to give to `unshare`, or
    None when this process owns `db` already (its daemon opening its own journal).

    Raises:
        JournalInUseError: a daemon (another process) owns `db`.
    """
    path = lock_path(db)
    if _key(path) in _HELD:
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            if not _try_lock(fd, fcntl.LOCK_SH):
                raise JournalInUseError(db, Owner.from_text(_read(fd)), advice)
            if _same_file(fd, path):
                return fd
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)  # removed by a stopping daemon meanwhile: open the new one


def unshare(fd: int | None) -> None:
    """Let go of what `share` returned."""
    if fd is not None:
        os.close(fd)
