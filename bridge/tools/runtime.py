"""Where tools run: daemon worker threads for sync tools and a private loop for `run()`.

Why not `concurrent.futures.ThreadPoolExecutor`: a timed-out sync tool cannot be killed, only
abandoned, and an executor with a fixed number of workers would starve once enough tools hang;
its threads are also joined at interpreter exit, so one hung tool would hang the process on
exit. `Workers` starts another daemon thread whenever no idle one is waiting, so abandoned
tools never block later calls, and reuses idle threads otherwise.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import itertools
import logging
import queue
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["LoopThread", "Workers", "bridge_future"]

logger = logging.getLogger(__name__)

_Job = tuple[Callable[[], Any], "concurrent.futures.Future[Any]"]


class Workers:
    """An unbounded pool of daemon threads that reuses idle ones (bounds belong to callers)."""

    def __init__(self, name: str = "toolbridge-tool") -> None:
        self._name = name
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        # One permit per thread waiting for a job, as in ThreadPoolExecutor: a submit that
        # takes a permit knows an idle thread will pick its job up.
        self._idle = threading.Semaphore(0)
        self._count = itertools.count(1)
        self._lock = threading.Lock()
        self._threads: set[threading.Thread] = set()
        self._closed = False

    @property
    def size(self) -> int:
        """How many threads exist (busy, idle, or running an abandoned tool)."""
        with self._lock:
            return len(self._threads)

    def submit(self, fn: Callable[[], Any]) -> concurrent.futures.Future[Any]:
        """Run `fn` on a worker thread; its result or exception lands on the returned future."""
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        with self._lock:
            if self._closed:
                raise RuntimeError("the worker pool is closed")
            self._jobs.put((fn, future))
            if self._idle.acquire(blocking=False):
                return future
            thread = threading.Thread(
                target=self._work, name=f"{self._name}-{next(self._count)}", daemon=True
            )
            self._threads.add(thread)
        thread.start()
        return future

    def _work(self) -> None:
        try:
            while (job := self._jobs.get()) is not None:
                fn, future = job
                if future.set_running_or_notify_cancel():
                    try:
                        result = fn()
                    except BaseException as exc:  # handed to the waiter, which decides
                        future.set_exception(exc)
                    else:
                        future.set_result(result)
                del job, fn, future  # do not keep the last result alive while idle
                self._idle.release()
        finally:
            with self._lock:
                self._threads.discard(threading.current_thread())

    def close(self) -> None:
        """Let every thread exit once it is idle (threads running a tool finish it first)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            count = len(self._threads)
        for _ in range(count):
            self._jobs.put(None)


class LoopThread:
    """An event loop running forever in a daemon thread, for the blocking `Dispatcher.run`.

    One loop for every batch (instead of `asyncio.run` per batch) keeps a batch cheap and lets
    `run()` work from any thread, including one that is itself running an event loop.
    """

    def __init__(self, name: str = "toolbridge-dispatch") -> None:
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()

        def serve(loop: asyncio.AbstractEventLoop = self.loop) -> None:
            asyncio.set_event_loop(loop)
            loop.call_soon(ready.set)
            try:
                loop.run_forever()
            finally:
                loop.close()

        self.thread = threading.Thread(target=serve, name=name, daemon=True)
        self.thread.start()
        ready.wait()

    def is_current(self) -> bool:
        """True when called from the loop's own thread."""
        return threading.current_thread() is self.thread

    def close(self) -> None:
        """Cancel what still runs on the loop, stop it, and wait briefly for its thread."""
        loop = self.loop
        if loop.is_closed():
            return

        async def shutdown() -> None:
            # Cancelled tasks resolve the futures `run()` callers wait on, so none hangs.
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            if tasks:
                await asyncio.wait(tasks, timeout=5)
            loop.stop()

        try:
            asyncio.run_coroutine_threadsafe(shutdown(), loop)
        except RuntimeError:  # already closed
            return
        if not self.is_current():
            self.thread.join(timeout=10)


def bridge_future(
    future: concurrent.futures.Future[Any], loop: asyncio.AbstractEventLoop
) -> asyncio.Future[Any]:
    """An asyncio future on `loop` that follows `future` (like `asyncio.wrap_future`).

    Unlike `wrap_future` it stays quiet when the loop is closed before an abandoned tool
    returns, and cancelling it does not touch the worker.
    """
    waiter: asyncio.Future[Any] = loop.create_future()

    def copy(done: concurrent.futures.Future[Any]) -> None:
        if waiter.done():
            return
        exc = done.exception()
        if exc is not None:
            waiter.set_exception(exc)
        else:
            waiter.set_result(done.result())

    def notify(done: concurrent.futures.Future[Any]) -> None:
        # A closed loop means nobody waits for this result any more.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(copy, done)

    future.add_done_callback(notify)
    return waiter
