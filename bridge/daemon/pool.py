"""A fixed set of worker threads that run conversations, one run per thread at a time.

Why not `ThreadPoolExecutor`: its threads are joined when the interpreter exits, so a run
stuck in a hung tool would keep a stopped daemon alive forever. These are daemon threads: on
SIGTERM the daemon waits `--grace` seconds for them and then exits, leaving what is unfinished
in the journal for the next start to recover.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable

__all__ = ["RunPool"]

logger = logging.getLogger(__name__)


class RunPool:
    """`size` daemon threads taking jobs from one queue.

    Args:
        size: how many jobs run at once.
        name: thread name prefix.
    """

    def __init__(self, size: int, *, name: str = "toolbridge-run") -> None:
        self.size = size
        self._jobs: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._waiting = 0
        self._busy = 0
        self._threads = [
            threading.Thread(target=self._work, name=f"{name}-{i + 1}", daemon=True)
            for i in range(size)
        ]
        for thread in self._threads:
            thread.start()

    @property
    def waiting(self) -> int:
        """Jobs queued for a free thread."""
        with self._lock:
            return self._waiting

    @property
    def busy(self) -> int:
        """Jobs running now."""
        with self._lock:
            return self._busy

    def submit(self, job: Callable[[], None]) -> None:
        """Queue a job (it must not raise; an exception is logged and dropped)."""
        with self._lock:
            self._waiting += 1
        self._jobs.put(job)

    def close(self) -> None:
        """Let idle threads end; running jobs go on (the threads are daemons)."""
        for _ in self._threads:
            self._jobs.put(None)

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None:
            with self._lock:
                self._waiting -= 1
                self._busy += 1
            try:
                job()
            except Exception:
                logger.exception("a run job failed outside its own error handling")
            finally:
                with self._lock:
                    self._busy -= 1
            del job
