"""A run's total time limit enforced on the socket, from the request to the end of its answer.

requests' read timeout restarts with every byte, so a server that trickles its response
headers (or a body) a byte at a time is never stopped by it. A `Guard` carries the deadline of
one answer request (`RunBudget` makes it); while `sending(guard)` is in effect, the platform
pools' connections (`_http.GuardedHTTPConnection`, `_http.GuardedHTTPSConnection`, installed
by `_http.guard_pools`) attach their socket to it as they connect or send a request. One shared
watchdog thread keeps the armed guards in a heap by deadline: when one passes while its
socket is attached, the socket is shut down (a blocked ``recv`` returns at once) and the guard
is marked `fired`, so that the read error that follows is reported as the run's timeout. The
connection is then closed with its response, never reused.

Arming costs a heap push under a lock (no thread, no timer per request); a closed guard is
dropped from the heap lazily, the heap compacted once most of it is dead.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import logging
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

__all__ = ["Guard", "current", "sending"]

logger = logging.getLogger(__name__)

_COMPACT_AT = 256
"""Dead heap entries tolerated before the heap is rebuilt (when they are also most of it)."""


class Guard:
    """The deadline of one answer request and the socket it is read from, if any yet."""

    __slots__ = ("_armed", "closed", "deadline", "fired", "sock")

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        """`time.monotonic()` past which the socket is shut down."""
        self.sock: socket.socket | None = None
        self.fired = False
        """True once the watchdog shut the socket down: the request ran out of time."""
        self.closed = False
        self._armed = False

    def attach(self, sock: Any) -> None:
        """Watch `sock` (the request's connection) from now on; shut it at once if late."""
        if sock is None:
            return
        with _watchdog.lock:
            if self.closed:
                return
            self.sock = sock
            if self.fired:
                _shut(sock)
            elif not self._armed:
                self._armed = True
                _watchdog.push(self)

    def detach(self, sock: Any) -> None:
        """Stop watching `sock` (its connection serves another request now)."""
        with _watchdog.lock:
            if self.sock is sock:
                self.sock = None

    def close(self) -> None:
        """The request is over: never shut anything down for it again."""
        with _watchdog.lock:
            if not self.closed:
                self.closed = True
                self.sock = None
                if self._armed:
                    _watchdog.dead += 1


class _Watchdog:
    """One daemon thread shutting down the sockets of guards past their deadline."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self._wake = threading.Condition(self.lock)
        self._heap: list[tuple[float, int, Guard]] = []
        self._order = itertools.count()
        self._thread: threading.Thread | None = None
        self.dead = 0
        """Closed guards still in the heap."""

    def push(self, guard: Guard) -> None:
        """Arm `guard` (called with `lock` held)."""
        heap = self._heap
        if self.dead > _COMPACT_AT and self.dead * 2 > len(heap):
            heap[:] = [entry for entry in heap if not entry[2].closed]
            heapq.heapify(heap)
            self.dead = 0
        first = not heap or guard.deadline < heap[0][0]
        heapq.heappush(heap, (guard.deadline, next(self._order), guard))
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name="toolbridge-run-deadline", daemon=True
            )
            self._thread.start()
        elif first:
            self._wake.notify()

    def _run(self) -> None:
        heap = self._heap
        with self.lock:
            while True:
                if not heap:
                    self._wake.wait()
                    continue
                deadline, _, guard = heap[0]
                if guard.closed:
                    heapq.heappop(heap)
                    self.dead = max(0, self.dead - 1)
                    continue
                left = deadline - time.monotonic()
                if left > 0:
                    self._wake.wait(left)
                    continue
                heapq.heappop(heap)
                guard.fired = True
                guard._armed = False
                if guard.sock is not None:
                    logger.debug("a run's total time limit passed: closing its connection")
                    _shut(guard.sock)


def _shut(sock: Any) -> None:
    with contextlib.suppress(OSError):  # already closed: nothing left to stop
        sock.shutdown(socket.SHUT_RDWR)


_watchdog = _Watchdog()
_current = threading.local()


@contextlib.contextmanager
def sending(guard: Guard) -> Iterator[None]:
    """Attach the connections this thread uses in the block to `guard`."""
    previous = getattr(_current, "guard", None)
    _current.guard = guard
    try:
        yield
    finally:
        _current.guard = previous


def current() -> Guard | None:
    """The guard of the request this thread is sending, if any."""
    guard: Guard | None = getattr(_current, "guard", None)
    return guard
