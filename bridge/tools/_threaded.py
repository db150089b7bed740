"""Running sync tools on worker threads, and a batch made only of them.

`run_on_threads` is the dispatcher's fast path for a batch whose tools are all sync (the usual
case): the caller's thread prepares each call, hands the function to a worker thread and
waits for the next one to finish or time out. The general path goes through the dispatcher's
event loop thread as well, which costs two more thread hand-offs per batch; both paths share
`Dispatcher._prepare`, `_record`, `_failed` and `_timed_out`, so they decide alike.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import inspect
import logging
import queue
import threading
import time
from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import partial
from typing import TYPE_CHECKING, Any

from bridge.tools._output import serialize
from bridge.tools.context import ConversationScope
from bridge.tools.spec import ToolSpec
from bridge.types import ErrorKind, ToolCall, ToolCallFinished, ToolCallStarted, ToolRun

if TYPE_CHECKING:
    from bridge.tools.dispatch import Dispatcher

__all__ = [
    "CallTimeoutError",
    "Deferred",
    "Outcome",
    "Prepared",
    "log_late",
    "run_on_threads",
    "sync_job",
]

logger = logging.getLogger("bridge.tools.dispatch")

Outcome = tuple[str, "ErrorKind | None"]
"""A call's output and error kind."""


class CallTimeoutError(Exception):
    """The call outlived its timeout (internal: becomes a "timeout" output)."""


class Deferred:
    """A sync tool returned an awaitable: it is finished on the loop, not on the worker."""

    def __init__(self, awaitable: Awaitable[Any]) -> None:
        self.awaitable = awaitable


@dataclass(frozen=True)
class Prepared:
    """A call that passed lookup and validation, ready to run."""

    spec: ToolSpec
    kwargs: dict[str, Any]
    cancelled: threading.Event
    timeout: float


def sync_job(
    spec: ToolSpec, kwargs: dict[str, Any], leave: Callable[[], None]
) -> Callable[[], Any]:
    """What a worker thread runs for a sync tool: the function, then `after`.

    `leave` (the scope's call counter) runs when the function really returns, so resources
    stay open for an abandoned call until it is done with them.
    """
    after = spec.options.after

    def work() -> Any:
        finished = True
        try:
            result = spec.function(**kwargs)
            if inspect.isawaitable(result):
                finished = False
                return Deferred(result)
            return after(result) if after is not None else result
        finally:
            if finished:
                leave()

    return work


def log_late(name: str, call_id: str, job: concurrent.futures.Future[Any]) -> None:
    """Say what an abandoned call did when it finally returned."""
    exc = job.exception()
    logger.warning(
        "abandoned tool %r (call %s) returned after its timeout%s",
        name,
        call_id,
        f" by raising {exc!r}" if exc is not None else "",
    )


@dataclass
class _Running:
    call: ToolCall
    ready: Prepared
    started_at: datetime
    began: float
    job: concurrent.futures.Future[Any]
    leave: Callable[[], None]

    @property
    def deadline(self) -> float:
        return self.began + self.ready.timeout


def run_on_threads(
    dispatcher: Dispatcher,
    batch: list[ToolCall],
    scope: ConversationScope | None,
    before_run: Callable[[ToolCall], None] | None = None,
) -> Generator[ToolCallStarted | ToolCallFinished, None, list[ToolRun]]:
    """Run a batch of sync tools, at most `max_concurrency` at once; yield progress."""
    conversation = ConversationScope(None) if scope is None else scope
    runs: dict[int, ToolRun] = {}
    waiting = collections.deque(range(len(batch)))
    running: dict[int, _Running] = {}
    finished: queue.SimpleQueue[int] = queue.SimpleQueue()
    try:
        while waiting or running:
            while waiting and len(running) < dispatcher.max_concurrency:
                index = waiting.popleft()
                call = batch[index]
                started_at, began = datetime.now(timezone.utc), time.perf_counter()
                ready = dispatcher._prepare(call, conversation)
                if isinstance(ready, Prepared):
                    if before_run is not None:
                        before_run(call)
                    # Submitted before the event is yielded: a slow consumer never holds it.
                    job, leave = _submit(dispatcher, ready, conversation)
                    job.add_done_callback(partial(_put, finished, index))
                    running[index] = _Running(call, ready, started_at, began, job, leave)
                    yield ToolCallStarted(call=call)
                else:
                    runs[index] = dispatcher._record(call, started_at, began, ready)
                    yield ToolCallStarted(call=call)
                    yield ToolCallFinished(run=runs[index])
            if not running:
                continue
            nearest = min(item.deadline for item in running.values())
            try:
                done = [finished.get(timeout=max(0.0, nearest - time.perf_counter()))]
            except queue.Empty:
                now = time.perf_counter()
                done = [index for index, item in running.items() if item.deadline <= now]
            for index in done:
                item = running.pop(index, None)
                if item is None:
                    continue  # it returned after its timeout was already reported
                runs[index] = dispatcher._record(
                    item.call, item.started_at, item.began, _outcome(dispatcher, item, conversation)
                )
                yield ToolCallFinished(run=runs[index])
    except BaseException:
        for item in running.values():  # errors="raise", KeyboardInterrupt, a closed generator
            item.ready.cancelled.set()
        raise
    finally:
        if scope is None:
            conversation.close()
    return [runs[index] for index in range(len(batch))]


def _submit(
    dispatcher: Dispatcher, ready: Prepared, scope: ConversationScope
) -> tuple[concurrent.futures.Future[Any], Callable[[], None]]:
    leave = scope.enter_call()
    try:
        return dispatcher._runtime.workers.submit(sync_job(ready.spec, ready.kwargs, leave)), leave
    except BaseException:
        leave()
        raise


def _put(finished: queue.SimpleQueue[int], index: int, _job: object) -> None:
    finished.put(index)


def _outcome(dispatcher: Dispatcher, item: _Running, scope: ConversationScope) -> Outcome:
    spec, call = item.ready.spec, item.call
    if not item.job.done():  # past its deadline: abandon it, say so when it returns
        item.ready.cancelled.set()
        item.job.add_done_callback(partial(log_late, spec.name, call.call_id))
        return dispatcher._timed_out(spec, call, item.ready.timeout), "timeout"
    try:
        result = item.job.result()
        if isinstance(result, Deferred):
            result = _finish_on_loop(dispatcher, item, result)
        return serialize(result), None
    except CallTimeoutError:
        return dispatcher._timed_out(spec, call, item.ready.timeout), "timeout"
    except Exception as exc:
        return dispatcher._failed(spec, call, exc, scope), "tool_error"


def _finish_on_loop(dispatcher: Dispatcher, item: _Running, deferred: Deferred) -> Any:
    """A sync tool returned an awaitable: await it on the dispatcher's loop, in time."""
    remaining = item.deadline - time.perf_counter()

    async def finish() -> Any:
        loop = asyncio.get_running_loop()
        return await dispatcher._await(
            deferred.awaitable,
            item.ready.spec.options.after,
            loop.time() + remaining,
            item.ready.cancelled,
            item.leave,
        )

    future = asyncio.run_coroutine_threadsafe(finish(), dispatcher._runtime.loop().loop)
    return future.result()
