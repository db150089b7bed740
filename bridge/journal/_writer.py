"""One SQLite connection owned by one thread, with group commit.

Every caller's operation is queued to the connection's thread and the caller waits for its
outcome. The thread takes whatever writes are waiting, runs them in *one* transaction (each in
its own savepoint when there are several, so one failing operation does not undo the others),
and commits once: with ``synchronous=FULL`` that is one fsync for the whole group instead of
one per write. Under load (the daemon's many conversations) this turns a queue of fsyncs into
a few; alone, a write costs what it did. A caller returns only after its commit, so "written
before the step" still holds for each of them.

When nothing is queued and no group is being committed, the caller runs its operation (and its
commit) itself, on its own thread, holding the connection's lock as the writer's thread does:
alone, a write then costs no hand-off to the writer's thread and back (two thread wake-ups), and
under load the writes that find the lock held queue up and are committed together as before.
"""

from __future__ import annotations

import logging
import queue
import sqlite3
import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

__all__ = ["GroupCommitWriter"]

logger = logging.getLogger(__name__)

T = TypeVar("T")
MAX_GROUP = 256
"""Most operations committed together (bounds one transaction's size)."""


class _Op(Generic[T]):
    __slots__ = ("done", "error", "fn", "result", "write")

    def __init__(self, fn: Callable[[sqlite3.Connection], T], write: bool) -> None:
        self.fn = fn
        self.write = write
        # A one-shot latch: held until the writer releases it. A bare lock costs a fraction
        # of a threading.Event (a Condition and its lock) per operation.
        self.done = threading.Lock()
        self.done.acquire()
        self.result: T | None = None
        self.error: BaseException | None = None


class GroupCommitWriter:
    """Runs operations on `connection` from its own daemon thread.

    Args:
        connection: opened with ``check_same_thread=False`` and ``isolation_level=None``; from
            now on only the writer's thread uses it.
        name: the thread's name.
    """

    def __init__(self, connection: sqlite3.Connection, *, name: str = "toolbridge-journal") -> None:
        self._db = connection
        self._queue: queue.SimpleQueue[_Op[Any] | None] = queue.SimpleQueue()
        self._busy = threading.Lock()
        """Held by whoever uses the connection: the writer's thread, or a caller alone."""
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def run(self, fn: Callable[[sqlite3.Connection], T], *, write: bool) -> T:
        """Run `fn(connection)` on the writer's thread; writes return once committed.

        Raises:
            RuntimeError: the writer is closed.
            Exception: whatever `fn` or the commit raised.
        """
        if self._closed:
            raise RuntimeError("the journal is closed")
        op: _Op[T] = _Op(fn, write)
        if self._queue.empty() and self._busy.acquire(blocking=False):
            try:
                if self._closed:
                    raise RuntimeError("the journal is closed")
                if write:
                    self._commit([op])
                else:
                    self._apply(op)
            finally:
                self._busy.release()
            if op.error is not None:
                raise op.error
            return op.result  # type: ignore[return-value]
        self._queue.put(op)
        op.done.acquire()
        if op.error is not None:
            raise op.error
        return op.result  # type: ignore[return-value]

    def close(self, timeout: float = 10.0) -> None:
        """Finish the queued operations, stop the thread and close the connection."""
        if self._closed:
            return
        self._closed = True
        self._queue.put(None)
        self._thread.join(timeout)
        if not self._thread.is_alive():
            with self._busy:  # a caller running its own operation finishes it first
                self._db.close()

    def _loop(self) -> None:
        stop = False
        while not stop:
            first = self._queue.get()
            if first is None:
                return
            group: list[_Op[Any]] = [first]
            while len(group) < MAX_GROUP:
                try:
                    more = self._queue.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    stop = True
                    break
                group.append(more)
            with self._busy:
                self._commit([op for op in group if op.write])
                for op in group:
                    if not op.write:
                        self._apply(op)
            for op in group:
                op.done.release()

    def _apply(self, op: _Op[Any]) -> None:
        try:
            op.result = op.fn(self._db)
        except BaseException as exc:
            op.error = exc

    def _commit(self, writes: list[_Op[Any]]) -> None:
        if not writes:
            return
        db = self._db
        try:
            db.execute("BEGIN IMMEDIATE")
            if len(writes) == 1:
                # Alone in its transaction: a failure rolls all of it back, which is what its
                # savepoint would undo; two statements fewer for a write that came alone.
                self._apply(writes[0])
                if writes[0].error is None:
                    db.execute("COMMIT")
                elif db.in_transaction:
                    db.execute("ROLLBACK")
                return
            for op in writes:
                db.execute("SAVEPOINT op")
                self._apply(op)
                if op.error is not None:
                    db.execute("ROLLBACK TO op")
                db.execute("RELEASE op")
            db.execute("COMMIT")
        except BaseException as exc:
            logger.error("journal commit failed: %s", exc)
            if db.in_transaction:
                try:
                    db.execute("ROLLBACK")
                except sqlite3.Error:
                    logger.exception("journal rollback failed")
            for op in writes:
                if op.error is None:
                    op.error = exc
                    op.result = None
