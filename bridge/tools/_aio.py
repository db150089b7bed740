"""The async shell: a batch run on the caller's event loop (`Dispatcher.arun`, `acall_tool`).

Each call's flow (`_core`) is driven by one task: async steps run as tasks on this loop, sync
steps on worker threads (an awaitable they return is awaited here), each within what is left
of the call's deadline.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import logging
import time
from collections.abc import Callable
from datetime import datetime, timezone
from functools import partial
from typing import Any

from opentelemetry import context as otel_context

from bridge.tools._core import ADMIT, Core, Deferred, Flow, Settled, Step, on_worker
from bridge.tools._spans import CallSpans
from bridge.tools._threaded import log_late
from bridge.tools.context import ConversationScope
from bridge.tools.runtime import Workers, bridge_future
from bridge.types import ToolCall, ToolRun

__all__ = ["run_async"]

logger = logging.getLogger("bridge.tools.dispatch")


class _TimedOutError(Exception):
    pass


async def run_async(
    core: Core,
    workers: Workers,
    batch: list[ToolCall],
    scope: ConversationScope | None,
    max_concurrency: int,
    on_start: Callable[[ToolCall], None] | None = None,
    on_finish: Callable[[ToolRun], None] | None = None,
    before_run: Callable[[ToolCall], None] | None = None,
    spans: CallSpans | None = None,
) -> list[ToolRun]:
    """Run a batch concurrently on the running loop; one `ToolRun` per call, in order.

    `spans`: the calls' ``execute_tool`` spans (None: untraced); each call's task runs with
    its span current (so do the threads and tasks it starts)."""
    own_scope = scope is None
    conversation = ConversationScope(None) if scope is None else scope
    limit = asyncio.Semaphore(max_concurrency)

    async def one(call: ToolCall) -> ToolRun:
        async with limit:
            started_at, began = datetime.now(timezone.utc), time.perf_counter()
            if on_start is not None:
                on_start(call)
            context = None
            if spans is not None:
                # This task's own context: attached for good, it ends with the task.
                context = spans.context(call)
                otel_context.attach(context)
            flow = core.start(call, conversation, context)
            if isinstance(flow, Flow):
                settled = await _drive(core, flow, workers, conversation, began, before_run)
            else:
                settled = flow
            run = core.record(call, started_at, began, settled)
            if spans is not None:
                spans.close(run)
            if on_finish is not None:
                on_finish(run)
            return run

    tasks = [asyncio.ensure_future(one(call)) for call in batch]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException as exc:
        for task in tasks:
            task.cancel()
        await asyncio.wait(tasks)  # let each call set its cancel event before we leave
        if spans is not None:
            spans.abort(exc, batch)
        raise
    finally:
        if own_scope:
            await conversation.aclose()


async def _drive(
    core: Core,
    flow: Flow,
    workers: Workers,
    scope: ConversationScope,
    began: float,
    before_run: Callable[[ToolCall], None] | None,
) -> Settled:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + flow.timeout - (time.perf_counter() - began)
    result: Any = None
    error: BaseException | None = None
    while True:
        try:
            step = flow.steps.throw(error) if error is not None else flow.steps.send(result)
        except StopIteration as stop:
            settled: Settled = stop.value
            return settled
        result = error = None
        if step is ADMIT:
            if before_run is not None:
                # A durable write: off the loop thread, so other calls' coroutines keep going.
                await asyncio.to_thread(before_run, flow.call)
            continue
        assert isinstance(step, Step)
        try:
            result = await _run_step(step, flow, workers, scope, deadline)
        except _TimedOutError:
            return core.timed_out(flow)
        except asyncio.CancelledError:
            flow.cancelled.set()
            raise
        except Exception as exc:
            error = exc


async def _run_step(
    step: Step, flow: Flow, workers: Workers, scope: ConversationScope, deadline: float
) -> Any:
    loop = asyncio.get_running_loop()
    leave = scope.enter_call() if step.holds_scope else None
    task: asyncio.Future[Any]
    if step.is_async:
        task = loop.create_task(_awaited(step))
        if leave is not None:
            task.add_done_callback(lambda _: leave())
    else:
        return await _run_on_worker(step, flow, workers, leave, deadline)
    return await _wait_task(task, flow, deadline)


async def _wait_task(task: asyncio.Future[Any], flow: Flow, deadline: float) -> Any:
    loop = asyncio.get_running_loop()
    try:
        done, _ = await asyncio.wait({task}, timeout=max(0.0, deadline - loop.time()))
    except asyncio.CancelledError:
        task.cancel()
        raise
    if not done:
        # Cancel and move on: a tool that swallows the cancellation must not hold the batch.
        flow.cancelled.set()
        task.cancel()
        task.add_done_callback(lambda t: _late(flow, t))
        raise _TimedOutError
    return task.result()


async def _run_on_worker(
    step: Step,
    flow: Flow,
    workers: Workers,
    leave: Callable[[], None] | None,
    deadline: float,
) -> Any:
    loop = asyncio.get_running_loop()
    try:
        job = workers.submit(partial(on_worker, step, flow.context))
    except BaseException:
        if leave is not None:
            leave()
        raise
    waiter = bridge_future(job, loop)
    try:
        done, _ = await asyncio.wait({waiter}, timeout=max(0.0, deadline - loop.time()))
    except asyncio.CancelledError:
        waiter.cancel()
        _release_when_done(job, leave)
        raise
    if not done:
        flow.cancelled.set()
        waiter.cancel()
        _release_when_done(job, leave)
        job.add_done_callback(partial(log_late, flow.spec.name, flow.call.call_id))
        raise _TimedOutError
    try:
        result = waiter.result()
    except BaseException:
        if leave is not None:
            leave()
        raise
    if not isinstance(result, Deferred):
        if leave is not None:
            leave()
        return result
    # A sync callable returned an awaitable: await it here, in what is left of the time.
    task = loop.create_task(_awaited_value(result.awaitable))
    if leave is not None:
        task.add_done_callback(lambda _: leave())
    return await _wait_task(task, flow, deadline)


def _release_when_done(
    job: concurrent.futures.Future[Any], leave: Callable[[], None] | None
) -> None:
    # Resources stay open until the function really returns, also once it was abandoned.
    if leave is not None:
        job.add_done_callback(lambda _: leave())


async def _awaited_value(awaitable: Any) -> Any:
    return await awaitable


async def _awaited(step: Step) -> Any:
    result = step()
    return (await result) if inspect.isawaitable(result) else result


async def _from_worker(waiter: asyncio.Future[Any]) -> Any:
    result = await waiter
    return (await result) if inspect.isawaitable(result) else result


def _late(flow: Flow, task: asyncio.Future[Any]) -> None:
    if task.cancelled():
        return
    if task.exception() is not None:
        logger.warning(
            "an abandoned tool %r (call %s) raised after its timeout: %r",
            flow.spec.name,
            flow.call.call_id,
            task.exception(),
        )
    else:
        logger.debug("abandoned tool %r (call %s) returned late", flow.spec.name, flow.call.call_id)
