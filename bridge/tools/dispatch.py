"""The Dispatcher: run a batch of tool calls and report one `ToolRun` per call.

    run(calls) / await arun(calls)
      for every call, concurrently (at most `max_concurrency` of a batch at once):
        look the tool up            -> "unknown_tool" (lists the available tools)
        parse, before, validate     -> "invalid_arguments" (each problem + the JSON Schema)
        call it (ToolContext in)    -> "timeout" (abandoned) / "tool_error" (per `errors`)
        after, serialise, truncate  -> output
      -> [ToolRun, ...] in the order of the calls

Nothing a tool or the agent does makes `run` raise, except a failing tool with
`errors="raise"`. Sync tools run on daemon worker threads (see `_runtime`), async tools on the
event loop: the dispatcher's private loop thread for `run`, the caller's loop for `arun`.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import queue
import threading
import time
import weakref
from collections.abc import Awaitable, Callable, Generator, Iterable
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Literal

from bridge.errors import UsageError, redact
from bridge.tools._output import (
    HIDDEN_ERROR,
    describe_exception,
    invalid_arguments,
    parse_arguments,
    serialize,
    truncate,
)
from bridge.tools._runtime import LoopThread, Workers, bridge_future
from bridge.tools._threaded import (
    CallTimeoutError,
    Deferred,
    Outcome,
    Prepared,
    log_late,
    run_on_threads,
    sync_job,
)
from bridge.tools.context import ConversationScope, ToolContext
from bridge.tools.spec import ArgumentError, ToolError, ToolSpec
from bridge.types import ToolCall, ToolCallFinished, ToolCallStarted, ToolRun

if TYPE_CHECKING:
    from bridge.tools.toolbox import Toolbox

__all__ = ["Dispatcher", "ErrorsMode", "OnFinish", "OnStart"]

logger = logging.getLogger(__name__)

ErrorsMode = Literal["message", "hidden", "raise"]
"""What the model reads when a tool raises: its message, a fixed text, or nothing (re-raise)."""
OnStart = Callable[[ToolCall], object]
OnFinish = Callable[[ToolRun], object]

_ERRORS_MODES = ("message", "hidden", "raise")
MIN_OUTPUT_CHARS = 100
"""Below this a truncated output would be mostly marker."""


class _Runtime:
    """The threads a dispatcher owns; kept apart from it so a finalizer can stop them."""

    def __init__(self) -> None:
        self.workers = Workers()
        self.loop_thread: LoopThread | None = None
        self.lock = threading.Lock()
        self.closed = False

    def loop(self) -> LoopThread:
        with self.lock:
            if self.closed:
                raise UsageError("this Dispatcher is closed; create a new one")
            if self.loop_thread is None:
                self.loop_thread = LoopThread()
            return self.loop_thread

    def close(self) -> None:
        with self.lock:
            self.closed = True
            loop_thread, self.loop_thread = self.loop_thread, None
        if loop_thread is not None:
            loop_thread.close()
        self.workers.close()


def _call_safely(callback: Callable[[Any], object] | None, value: Any) -> None:
    # A progress callback is UI code: its bug must not lose the tool's result.
    if callback is None:
        return
    try:
        callback(value)
    except Exception:
        logger.exception("progress callback %r failed", callback)


def _check_options(
    max_concurrency: object, default_timeout: object, errors: object, max_output_chars: object
) -> None:
    if isinstance(max_concurrency, bool) or not isinstance(max_concurrency, int):
        raise UsageError(f"max_concurrency must be an integer >= 1, got {max_concurrency!r}")
    if max_concurrency < 1:
        raise UsageError(f"max_concurrency must be an integer >= 1, got {max_concurrency}")
    if (
        isinstance(default_timeout, bool)
        or not isinstance(default_timeout, (int, float))
        or not 0 < default_timeout < float("inf")
    ):
        raise UsageError(
            f"default_timeout must be a positive, finite number of seconds, got {default_timeout!r}"
        )
    if errors not in _ERRORS_MODES:
        raise UsageError(
            f"errors must be one of {', '.join(map(repr, _ERRORS_MODES))}, got {errors!r}"
        )
    if max_output_chars is not None and (
        isinstance(max_output_chars, bool)
        or not isinstance(max_output_chars, int)
        or max_output_chars < MIN_OUTPUT_CHARS
    ):
        raise UsageError(
            f"max_output_chars must be an integer >= {MIN_OUTPUT_CHARS} (or None for no "
            f"limit), got {max_output_chars!r}"
        )


class Dispatcher:
    """Runs tool calls from a toolbox: validated, concurrent, bounded in time and size.

    Args:
        toolbox: Where tools are looked up by name (only enabled tools are found).
        max_concurrency: How many calls of one batch run at once. Concurrent batches (several
            conversations) each have their own bound. Abandoned (timed-out) calls do not count.
        default_timeout: Seconds a call may take when its tool sets no `timeout`.
        errors: What the model reads when a tool raises: ``"message"`` (``"<Type>: <message>"``,
            no traceback), ``"hidden"`` (a fixed text), or ``"raise"`` (the exception leaves
            `run`/`arun`; the batch's other calls are cancelled). The traceback is always logged.
        max_output_chars: Longer outputs are cut, with a marker saying how much; None: no limit.

    Raises:
        UsageError: An option is out of range; the message says what is allowed.
    """

    def __init__(
        self,
        toolbox: Toolbox,
        *,
        max_concurrency: int = 8,
        default_timeout: float = 60.0,
        errors: ErrorsMode = "message",
        max_output_chars: int | None = 20_000,
    ) -> None:
        _check_options(max_concurrency, default_timeout, errors, max_output_chars)
        if not callable(getattr(toolbox, "get", None)) or not callable(
            getattr(toolbox, "names", None)
        ):
            raise UsageError(
                f"toolbox must be a bridge.Toolbox (with get() and names()), "
                f"got {type(toolbox).__name__}"
            )
        self.toolbox = toolbox
        self.max_concurrency = max_concurrency
        self.default_timeout = float(default_timeout)
        self.errors: ErrorsMode = errors
        self.max_output_chars = max_output_chars
        self._runtime = _Runtime()
        self._finalizer = weakref.finalize(self, self._runtime.close)

    def __repr__(self) -> str:
        return (
            f"Dispatcher(tools={len(list(self.toolbox.names()))}, "
            f"max_concurrency={self.max_concurrency}, default_timeout={self.default_timeout:g}, "
            f"errors={self.errors!r}, max_output_chars={self.max_output_chars})"
        )

    # --- public API ----------------------------------------------------------------------------

    def run(
        self,
        calls: Iterable[ToolCall],
        *,
        scope: ConversationScope | None = None,
        on_start: OnStart | None = None,
        on_finish: OnFinish | None = None,
    ) -> list[ToolRun]:
        """Run a batch and block until every call has an outcome.

        Works from any thread, also one running an event loop (the batch runs on the
        dispatcher's own loop thread, which is not blocked by it). `on_start(call)` and
        `on_finish(run)` are called in the thread that called `run`, one at a time, as calls
        start and finish; an exception they raise is logged, not propagated.

        Args:
            calls: The calls of one batch.
            scope: The conversation they belong to (its state and resources); None gives the
                batch a private scope, closed when the batch ends.
            on_start: Told about each call as it starts.
            on_finish: Told about each call's `ToolRun` as it finishes.

        Returns:
            One `ToolRun` per call, in the order of `calls`.
        """
        updates = self.iter_run(calls, scope=scope)
        while True:
            try:
                event = next(updates)
            except StopIteration as done:
                runs: list[ToolRun] = done.value
                return runs
            if isinstance(event, ToolCallStarted):
                _call_safely(on_start, event.call)
            else:
                _call_safely(on_finish, event.run)

    def iter_run(
        self,
        calls: Iterable[ToolCall],
        *,
        scope: ConversationScope | None = None,
        before_run: Callable[[ToolCall], None] | None = None,
    ) -> Generator[ToolCallStarted | ToolCallFinished, None, list[ToolRun]]:
        """Run a batch, yielding each call as it starts and finishes; return the runs.

        The same as `run` for a caller that wants the progress as events in its own thread
        (the conversation loop streams them): no extra thread, no callbacks. Closing the
        generator early cancels the batch.

        `before_run(call)` is called once per call whose arguments passed validation, right
        before its function may run, and the function waits for it: the loop journals each
        call "started" there. An exception it raises fails the batch, and that call never runs.

        Returns:
            One `ToolRun` per call, in the order of `calls` (the generator's return value).
        """
        batch = self._checked(calls)
        if not batch:
            return []
        loop_thread = self._runtime.loop()
        if loop_thread.is_current():
            raise UsageError(
                "Dispatcher.run() was called from an async tool of the same dispatcher; "
                "use `await dispatcher.arun(...)` there"
            )
        if all(self._runs_on_threads(call) for call in batch):
            # Only worker threads involved: skip the loop thread's two extra hand-offs.
            return (yield from run_on_threads(self, batch, scope, before_run))
        events: queue.SimpleQueue[ToolCallStarted | ToolCallFinished | None] = queue.SimpleQueue()
        future = asyncio.run_coroutine_threadsafe(
            self._batch(
                batch,
                scope,
                lambda call: events.put(ToolCallStarted(call=call)),
                lambda run: events.put(ToolCallFinished(run=run)),
                before_run,
            ),
            loop_thread.loop,
        )
        future.add_done_callback(lambda _: events.put(None))
        try:
            while (event := events.get()) is not None:
                yield event
        except BaseException:  # KeyboardInterrupt, GeneratorExit: stop the batch, never orphan it
            future.cancel()
            raise
        return future.result()

    async def arun(
        self,
        calls: Iterable[ToolCall],
        *,
        scope: ConversationScope | None = None,
        on_start: OnStart | None = None,
        on_finish: OnFinish | None = None,
    ) -> list[ToolRun]:
        """Run a batch on the running loop: async tools as tasks, sync tools on worker threads.

        Never blocks the loop (unless a tool does). The callbacks are called on this loop,
        one at a time; see `run` for the parameters.
        """
        batch = self._checked(calls)
        if not batch:
            return []

        def guard(callback: Callable[[Any], object] | None) -> Callable[[Any], None] | None:
            if callback is None:
                return None
            return lambda value: _call_safely(callback, value)

        return await self._batch(batch, scope, guard(on_start), guard(on_finish))

    def reject(self, call: ToolCall, reason: str = "rejected by the user") -> ToolRun:
        """A "rejected" record for a call that was not run (e.g. a person said no)."""
        return ToolRun(
            call_id=call.call_id,
            name=call.name,
            arguments=call.arguments,
            output=truncate(f"The tool call was not run: {reason}", self.max_output_chars),
            error="rejected",
            started_at=datetime.now(timezone.utc),
            duration_ms=0.0,
        )

    def close(self) -> None:
        """Stop the dispatcher's loop thread and idle workers (running batches are cancelled)."""
        self._finalizer()

    def __enter__(self) -> Dispatcher:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # --- one batch ---------------------------------------------------------------------------

    @staticmethod
    def _checked(calls: Iterable[ToolCall]) -> list[ToolCall]:
        batch = list(calls)
        for call in batch:
            if not isinstance(call, ToolCall):
                raise UsageError(
                    f"calls must be bridge.ToolCall objects, got {type(call).__name__}"
                )
        return batch

    async def _batch(
        self,
        calls: list[ToolCall],
        scope: ConversationScope | None,
        on_start: Callable[[ToolCall], None] | None,
        on_finish: Callable[[ToolRun], None] | None,
        before_run: Callable[[ToolCall], None] | None = None,
    ) -> list[ToolRun]:
        own_scope = scope is None
        conversation = ConversationScope(None) if scope is None else scope
        limit = asyncio.Semaphore(self.max_concurrency)
        tasks = [
            asyncio.ensure_future(
                self._one(call, conversation, limit, on_start, on_finish, before_run)
            )
            for call in calls
        ]
        try:
            return list(await asyncio.gather(*tasks))
        except BaseException:
            for task in tasks:
                task.cancel()
            await asyncio.wait(tasks)  # let each call set its cancel event before we leave
            raise
        finally:
            if own_scope:
                await conversation.aclose()

    async def _one(
        self,
        call: ToolCall,
        scope: ConversationScope,
        limit: asyncio.Semaphore,
        on_start: Callable[[ToolCall], None] | None,
        on_finish: Callable[[ToolRun], None] | None,
        before_run: Callable[[ToolCall], None] | None = None,
    ) -> ToolRun:
        async with limit:
            started_at = datetime.now(timezone.utc)
            began = time.perf_counter()
            if on_start is not None:
                on_start(call)
            outcome = await self._execute(call, scope, before_run)
            run = self._record(call, started_at, began, outcome)
            if on_finish is not None:
                on_finish(run)
            return run

    def _runs_on_threads(self, call: ToolCall) -> bool:
        spec = self.toolbox.get(call.name)
        return spec is None or not spec.is_async

    def _prepare(self, call: ToolCall, scope: ConversationScope) -> Prepared | Outcome:
        """Everything before the function runs: the lookup, `before`, validation, context.

        Returns the call ready to run, or its outcome when it must not run.
        """
        spec = self.toolbox.get(call.name)
        if spec is None:
            return self._unknown(call.name), "unknown_tool"
        raw = parse_arguments(call.arguments)
        if isinstance(raw, str):
            return invalid_arguments(spec, [raw]), "invalid_arguments"
        try:
            if spec.options.before is not None:
                # A copy: the record must show what the agent sent, even if `before` edits it.
                raw = spec.options.before(dict(raw))
            kwargs = spec.validate(raw)
        except ArgumentError as exc:
            logger.info("invalid arguments for %r (call %s): %s", spec.name, call.call_id, exc)
            return invalid_arguments(spec, exc.problems), "invalid_arguments"
        except Exception as exc:
            return self._failed(spec, call, exc, scope), "tool_error"
        cancelled = threading.Event()
        if spec.context_param:
            kwargs[spec.context_param] = ToolContext(
                call_id=call.call_id, tool_name=spec.name, scope=scope, cancelled=cancelled
            )
        timeout = spec.options.timeout if spec.options.timeout is not None else self.default_timeout
        return Prepared(spec, kwargs, cancelled, timeout)

    async def _execute(
        self,
        call: ToolCall,
        scope: ConversationScope,
        before_run: Callable[[ToolCall], None] | None = None,
    ) -> Outcome:
        ready = self._prepare(call, scope)
        if not isinstance(ready, Prepared):
            return ready
        if before_run is not None:
            # A durable write: off the loop thread, so other calls' coroutines keep going.
            await asyncio.to_thread(before_run, call)
        spec = ready.spec
        try:
            result = await self._invoke(
                spec, call, ready.kwargs, ready.timeout, ready.cancelled, scope
            )
            return serialize(result), None
        except CallTimeoutError:
            return self._timed_out(spec, call, ready.timeout), "timeout"
        except Exception as exc:
            return self._failed(spec, call, exc, scope), "tool_error"

    def _record(
        self, call: ToolCall, started_at: datetime, began: float, outcome: Outcome
    ) -> ToolRun:
        """The `ToolRun` of a call that began at `began` (perf_counter) and ended now."""
        output, error = outcome
        return ToolRun(
            call_id=call.call_id,
            name=call.name,
            arguments=call.arguments,
            output=truncate(output, self.max_output_chars),
            error=error,
            started_at=started_at,
            duration_ms=(time.perf_counter() - began) * 1000,
        )

    # --- calling the function ----------------------------------------------------------------

    async def _invoke(
        self,
        spec: ToolSpec,
        call: ToolCall,
        kwargs: dict[str, Any],
        timeout: float,
        cancelled: threading.Event,
        scope: ConversationScope,
    ) -> Any:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        after = spec.options.after
        leave = scope.enter_call()  # resources stay until the function really returns
        if spec.is_async:
            try:
                result = spec.function(**kwargs)
            except BaseException:
                leave()
                raise
            if not inspect.isawaitable(result):
                leave()
                return after(result) if after is not None else result
            return await self._await(result, after, deadline, cancelled, leave)

        work = sync_job(spec, kwargs, leave)
        try:
            job = self._runtime.workers.submit(work)
        except BaseException:
            leave()
            raise
        waiter = bridge_future(job, loop)
        try:
            done, _ = await asyncio.wait({waiter}, timeout=max(0.0, deadline - loop.time()))
        except asyncio.CancelledError:
            cancelled.set()
            waiter.cancel()
            raise
        if not done:
            cancelled.set()
            waiter.cancel()
            job.add_done_callback(lambda f: log_late(spec.name, call.call_id, f))
            raise CallTimeoutError
        result = waiter.result()
        if isinstance(result, Deferred):
            return await self._await(result.awaitable, after, deadline, cancelled, leave)
        return result

    @staticmethod
    async def _await(
        awaitable: Awaitable[Any],
        after: Callable[[Any], Any] | None,
        deadline: float,
        cancelled: threading.Event,
        leave: Callable[[], None],
    ) -> Any:
        async def finish() -> Any:
            result = await awaitable
            return after(result) if after is not None else result

        loop = asyncio.get_running_loop()
        task = loop.create_task(finish())
        task.add_done_callback(lambda _: leave())
        try:
            done, _ = await asyncio.wait({task}, timeout=max(0.0, deadline - loop.time()))
        except asyncio.CancelledError:
            cancelled.set()
            task.cancel()
            raise
        if not done:
            # Cancel and move on: a tool that swallows the cancellation must not hold the batch.
            cancelled.set()
            task.cancel()
            task.add_done_callback(_consume)
            raise CallTimeoutError
        return task.result()

    # --- outputs for the model ---------------------------------------------------------------

    @staticmethod
    def _timed_out(spec: ToolSpec, call: ToolCall, timeout: float) -> str:
        logger.warning(
            "tool %r (call %s) timed out after %g s and was abandoned",
            spec.name,
            call.call_id,
            timeout,
        )
        return (
            f"The tool {spec.name!r} timed out after {timeout:g} seconds and was abandoned; "
            "it returned no result."
        )

    def _unknown(self, name: str) -> str:
        names = list(self.toolbox.names())
        available = f"Available tools: {', '.join(names)}." if names else "No tools are available."
        return f"Unknown tool {name!r}. {available}"

    def _failed(
        self,
        spec: ToolSpec,
        call: ToolCall,
        exc: Exception,
        scope: ConversationScope | None = None,
    ) -> str:
        # One line per failure, whatever raised: the output (and the CLI's tool line) already
        # says what went wrong. The traceback is a debugging aid, so DEBUG (`-v`); a ToolError
        # is an expected failure and has none worth showing.
        conversation_id = scope.conversation_id if scope is not None else None
        extra: dict[str, object] = {
            "tool": spec.name,
            "call_id": call.call_id,
            "tool_failure": True,
        }
        if conversation_id is not None:
            extra["conversation_id"] = conversation_id
        error = describe_exception(exc).splitlines()[0]
        logger.warning(
            "tool %r failed (conversation %s, call %s): %s",
            spec.name,
            conversation_id or "-",
            call.call_id,
            redact(error),
            extra=extra,
        )
        if not isinstance(exc, ToolError):
            logger.debug(
                "traceback of tool %r (call %s)", spec.name, call.call_id, exc_info=exc, extra=extra
            )
        if self.errors == "raise":
            raise exc
        if self.errors == "hidden":
            return HIDDEN_ERROR
        return redact(describe_exception(exc))


def _consume(task: asyncio.Task[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        logger.warning("an abandoned async tool raised after its timeout: %r", task.exception())
