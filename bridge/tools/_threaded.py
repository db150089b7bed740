"""The blocking shell: a batch driven from the caller's thread (`Dispatcher.run`/`iter_run`).

The caller's thread advances each call's flow (`_core`), hands every step to a worker thread
(sync callables) or to the dispatcher's loop thread (async ones, and awaitables a sync callable
returned), and waits for the next step to finish or the nearest deadline to pass. A batch of
sync tools never touches the loop thread.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import inspect
import logging
import queue
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import partial
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry.context import Context

from bridge.tools._core import ADMIT, Core, Deferred, Flow, Settled, Step, on_worker
from bridge.tools._spans import CallSpans
from bridge.tools.context import ConversationScope
from bridge.tools.runtime import LoopThread, Workers
from bridge.types import ToolCall, ToolCallFinished, ToolCallStarted, ToolRun

__all__ = ["Launched", "launch", "launch_on_loop", "log_late", "run_threaded"]

logger = logging.getLogger("bridge.tools.dispatch")


class Launched:
    """A step in flight; `future` resolves when it ended (a `Deferred` result: not yet).

    A sync step's future is its worker job's own (one hand-off, as before the core existed);
    an async step's future is resolved by its task on the loop thread.
    """

    __slots__ = ("_cancelled", "_loop", "_task", "future")

    def __init__(self, future: concurrent.futures.Future[Any] | None = None) -> None:
        self.future: concurrent.futures.Future[Any] = future or concurrent.futures.Future()
        self._task: asyncio.Task[Any] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._cancelled = False

    def cancel(self) -> None:
        """Cancel the async part, if any (a sync callable cannot be stopped, only abandoned)."""
        self._cancelled = True
        task, loop = self._task, self._loop
        if task is not None and loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: nothing runs there
                loop.call_soon_threadsafe(task.cancel)

    def _start(
        self,
        loop: asyncio.AbstractEventLoop,
        make: Callable[[], Any],
        context: Context | None = None,
    ) -> None:
        # On the loop's thread.
        async def drive() -> Any:
            # The task has a context of its own: what is attached here stays in it.
            if context is not None:
                otel_context.attach(context)
            result = make()
            return (await result) if inspect.isawaitable(result) else result

        self._loop = loop
        self._task = loop.create_task(drive())
        self._task.add_done_callback(self._copy)
        if self._cancelled:
            self._task.cancel()

    def _copy(self, task: asyncio.Task[Any]) -> None:
        if task.cancelled():
            self.future.set_exception(asyncio.CancelledError())
        elif (exc := task.exception()) is not None:
            self.future.set_exception(exc)
        else:
            self.future.set_result(task.result())


def launch(step: Step, workers: Workers, context: Context | None = None) -> Launched:
    """Start a sync step on a worker thread (`context`: the trace context it runs in)."""
    return Launched(workers.submit(partial(on_worker, step, context)))


def launch_on_loop(
    make: Callable[[], Any],
    loop_thread: Callable[[], LoopThread],
    context: Context | None = None,
) -> Launched:
    """Start an async step (or await what a sync one returned) on the loop thread."""
    launched = Launched()
    try:
        loop = loop_thread().loop
        loop.call_soon_threadsafe(launched._start, loop, make, context)
    except Exception as exc:  # the dispatcher was closed meanwhile
        launched.future.set_exception(exc)
    return launched


def log_late(name: str, call_id: str, future: concurrent.futures.Future[Any]) -> None:
    """Say what an abandoned call did when it finally returned."""
    exc = future.exception()
    logger.warning(
        "abandoned tool %r (call %s) returned after its timeout%s",
        name,
        call_id,
        f" by raising {exc!r}"
        if exc is not None and not isinstance(exc, asyncio.CancelledError)
        else "",
    )


@dataclass(slots=True)
class _Live:
    flow: Flow
    started_at: datetime
    began: float
    deadline: float
    step: Launched | None = None
    leave: Callable[[], None] | None = None
    """Ends the function's hold on the conversation's resources, once it really returned."""

    def release(self) -> None:
        leave, self.leave = self.leave, None
        if leave is not None:
            leave()

    def release_when_done(self) -> None:
        leave, self.leave = self.leave, None
        if leave is not None and self.step is not None:
            self.step.future.add_done_callback(partial(_leave, leave))


def run_threaded(
    core: Core,
    workers: Workers,
    loop_thread: Callable[[], LoopThread],
    batch: list[ToolCall],
    scope: ConversationScope | None,
    max_concurrency: int,
    before_run: Callable[[ToolCall], None] | None = None,
    spans: CallSpans | None = None,
) -> Generator[ToolCallStarted | ToolCallFinished, None, list[ToolRun]]:
    """Run a batch, at most `max_concurrency` calls at once; yield progress, return the runs.

    `spans`: the calls' ``execute_tool`` spans (None: untraced), each current where its
    call's steps run."""
    conversation = ConversationScope(None) if scope is None else scope
    runs: dict[int, ToolRun] = {}
    waiting = collections.deque(range(len(batch)))
    running: dict[int, _Live] = {}
    done: queue.SimpleQueue[int] = queue.SimpleQueue()

    def advance(index: int, live: _Live, result: Any = None, error: Any = None) -> Settled | None:
        """Drive a flow until it needs a step to finish (None) or has settled."""
        steps = live.flow.steps
        while True:
            try:
                step = steps.throw(error) if error is not None else steps.send(result)
            except StopIteration as stop:
                settled: Settled = stop.value
                return settled
            result = error = None
            if step is ADMIT:
                if before_run is not None:
                    _admitted(before_run, live.flow)
                continue
            assert isinstance(step, Step)
            live.leave = conversation.enter_call() if step.holds_scope else None
            try:
                if step.is_async:
                    live.step = launch_on_loop(step, loop_thread, live.flow.context)
                else:
                    live.step = launch(step, workers, live.flow.context)
            except BaseException:
                live.release()
                raise
            live.step.future.add_done_callback(partial(_put, done, index))
            return None

    try:
        while waiting or running:
            while waiting and len(running) < max_concurrency:
                index = waiting.popleft()
                call = batch[index]
                started_at, began = datetime.now(timezone.utc), time.perf_counter()
                context = spans.context(call) if spans is not None else None
                flow = core.start(call, conversation, context)
                if isinstance(flow, Flow):
                    live = _Live(flow, started_at, began, began + flow.timeout)
                    running[index] = live
                    # The first step is submitted before the event is yielded: a slow consumer
                    # never holds it.
                    settled = advance(index, live)
                else:
                    settled = flow
                yield ToolCallStarted(call=call)
                if settled is not None:
                    running.pop(index, None)
                    runs[index] = core.record(call, started_at, began, settled)
                    if spans is not None:
                        spans.close(runs[index])
                    yield ToolCallFinished(run=runs[index])
            if not running:
                continue
            nearest = min(live.deadline for live in running.values())
            try:
                ready = [done.get(timeout=max(0.0, nearest - time.perf_counter()))]
            except queue.Empty:
                ready = []
            for index in ready:
                found = running.get(index)
                if found is None or found.step is None:
                    continue  # it returned after its timeout was already reported
                live, future = found, found.step.future
                if not future.done():
                    continue
                try:
                    value = future.result()
                except Exception as exc:
                    live.release()
                    settled = advance(index, live, error=exc)
                except BaseException as exc:  # a cancelled task: treat as the tool's failure
                    live.release()
                    settled = advance(index, live, error=RuntimeError(repr(exc)))
                else:
                    if isinstance(value, Deferred):
                        # A sync callable gave an awaitable: await it on the loop, in time.
                        live.step = launch_on_loop(
                            partial(_get, value), loop_thread, live.flow.context
                        )
                        live.step.future.add_done_callback(partial(_put, done, index))
                        continue
                    live.release()
                    settled = advance(index, live, result=value)
                if settled is not None:
                    running.pop(index)
                    runs[index] = core.record(live.flow.call, live.started_at, live.began, settled)
                    if spans is not None:
                        spans.close(runs[index])
                    yield ToolCallFinished(run=runs[index])
            now = time.perf_counter()
            if nearest > now:
                continue
            for index, live in list(running.items()):
                if live.deadline <= now and live.step is not None and not live.step.future.done():
                    running.pop(index)
                    _abandon(live)
                    runs[index] = core.record(
                        live.flow.call, live.started_at, live.began, core.timed_out(live.flow)
                    )
                    if spans is not None:
                        spans.close(runs[index])
                    yield ToolCallFinished(run=runs[index])
    except BaseException as exc:
        for live in running.values():  # errors="raise", KeyboardInterrupt, a closed generator
            live.release_when_done()
            live.flow.cancelled.set()
            if live.step is not None:
                live.step.cancel()
        if spans is not None:
            spans.abort(exc, batch)
        raise
    finally:
        if scope is None:
            conversation.close()
    return [runs[index] for index in range(len(batch))]


def _admitted(before_run: Callable[[ToolCall], None], flow: Flow) -> None:
    """`before_run(call)`, with the call's span current (the journal writes its context)."""
    if flow.context is None:
        before_run(flow.call)
        return
    token = otel_context.attach(flow.context)
    try:
        before_run(flow.call)
    finally:
        otel_context.detach(token)


def _abandon(live: _Live) -> None:
    assert live.step is not None
    live.release_when_done()
    live.flow.cancelled.set()
    live.step.cancel()
    live.step.future.add_done_callback(
        partial(log_late, live.flow.spec.name, live.flow.call.call_id)
    )


def _leave(leave: Callable[[], None], _future: object) -> None:
    leave()


def _get(deferred: Deferred) -> Any:
    return deferred.awaitable


def _put(done: queue.SimpleQueue[int], index: int, _future: object) -> None:
    done.put(index)
