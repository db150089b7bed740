"""The Dispatcher: run a batch of tool calls and report one `ToolRun` per call.

    run(calls) / await arun(calls)
      for every call, concurrently (at most `max_concurrency` of a batch at once):
        look the tool up            -> "unknown_tool" (lists the available tools)
        parse, before, validate     -> "invalid_arguments" (each problem + the JSON Schema)
        call it (ToolContext in)    -> "timeout" (abandoned) / "tool_error" (per `errors`)
        after, serialise, truncate  -> output
      -> [ToolRun, ...] in the order of the calls

Nothing a tool or the agent does makes `run` raise, except a failing tool with
`errors="raise"`. Sync tools run on daemon worker threads (see `runtime`), async tools on the
event loop: the dispatcher's private loop thread for `run`, the caller's loop for `arun`.
What happens to a call is decided once, in `_core`; `_threaded` (for `run`) and `_aio` (for
`arun`) only schedule its steps, wait for them and enforce its deadline.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import weakref
from collections.abc import Callable, Generator, Iterable
from typing import TYPE_CHECKING, Any

from opentelemetry.trace import TracerProvider

from bridge.errors import UsageError
from bridge.tools._aio import run_async
from bridge.tools._core import Core, ErrorsMode, Policy
from bridge.tools._spans import CallSpans
from bridge.tools._threaded import run_threaded
from bridge.tools.context import ConversationScope
from bridge.tools.runtime import LoopThread, Workers
from bridge.tracing import Tracing
from bridge.types import ToolCall, ToolCallFinished, ToolCallStarted, ToolRun

if TYPE_CHECKING:
    from bridge.tools.toolbox import Toolbox

__all__ = ["Dispatcher", "ErrorsMode", "OnFinish", "OnStart"]

logger = logging.getLogger(__name__)

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

    def check_open(self) -> None:
        if self.closed:
            raise UsageError("this Dispatcher is closed; create a new one")

    def is_loop_thread(self) -> bool:
        loop_thread = self.loop_thread
        return loop_thread is not None and loop_thread.is_current()

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
        tracer_provider: Where each call's ``execute_tool`` span goes (OpenTelemetry); None:
            the global provider, and no span at all while none is configured.

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
        tracer_provider: TracerProvider | None = None,
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
        self.tracing = Tracing(tracer_provider)
        """Where the calls' spans go (`bridge.tracing`)."""
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
        updates = self.iter_run(calls, scope=scope, spans=self._spans())
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
        spans: CallSpans | None = None,
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
        self._runtime.check_open()
        if self._runtime.is_loop_thread():
            raise UsageError(
                "Dispatcher.run() was called from an async tool of the same dispatcher; "
                "use `await dispatcher.arun(...)` there"
            )
        core = self._core()
        if spans is None:
            spans = self._spans()
        if all(self._runs_on_threads(call) for call in batch):
            # Only worker threads involved (the usual case): the caller's thread drives them,
            # without the loop thread's two extra hand-offs per call.
            return (
                yield from run_threaded(
                    core,
                    self._runtime.workers,
                    self._runtime.loop,
                    batch,
                    scope,
                    self.max_concurrency,
                    before_run,
                    spans,
                )
            )
        events: queue.SimpleQueue[ToolCallStarted | ToolCallFinished | None] = queue.SimpleQueue()
        future = asyncio.run_coroutine_threadsafe(
            run_async(
                core,
                self._runtime.workers,
                batch,
                scope,
                self.max_concurrency,
                lambda call: events.put(ToolCallStarted(call=call)),
                lambda run: events.put(ToolCallFinished(run=run)),
                before_run,
                spans,
            ),
            self._runtime.loop().loop,
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

        self._runtime.check_open()
        return await run_async(
            self._core(),
            self._runtime.workers,
            batch,
            scope,
            self.max_concurrency,
            guard(on_start),
            guard(on_finish),
            spans=self._spans(),
        )

    def reject(self, call: ToolCall, reason: str = "rejected by the user") -> ToolRun:
        """A "rejected" record for a call that was not run (e.g. a person said no)."""
        return self._core().reject(call, reason)

    def close(self) -> None:
        """Stop the dispatcher's loop thread and idle workers (running batches are cancelled)."""
        self._finalizer()

    def __enter__(self) -> Dispatcher:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # --- one batch ---------------------------------------------------------------------------

    def _core(self) -> Core:
        # Built per batch from the public attributes, so a changed option takes effect.
        policy = Policy(self.default_timeout, self.errors, self.max_output_chars)
        return Core(self.toolbox, policy)

    def _spans(self) -> CallSpans | None:
        """A batch's spans, when tracing is on (off: nothing is made)."""
        if not self.tracing.enabled:
            return None
        return CallSpans(self.tracing, tool_type=self.tool_type)

    def tool_type(self, name: str) -> str:
        """`gen_ai.tool.type` of a tool: "extension" for one from a tool source (an HTTP
        service, an MCP server), when the toolbox knows, else "function"."""
        of = getattr(self.toolbox, "tool_type", None)
        kind = of(name) if callable(of) else None
        return kind if isinstance(kind, str) else "function"

    def _runs_on_threads(self, call: ToolCall) -> bool:
        spec = self.toolbox.get(call.name)
        return spec is None or not spec.is_async

    @staticmethod
    def _checked(calls: Iterable[ToolCall]) -> list[ToolCall]:
        batch = list(calls)
        for call in batch:
            if not isinstance(call, ToolCall):
                raise UsageError(
                    f"calls must be bridge.ToolCall objects, got {type(call).__name__}"
                )
        return batch
