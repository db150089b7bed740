"""One tool call, decided without I/O: prepare, settle, record.

    start(call)   lookup                      -> "unknown_tool" (lists the available tools)
                  parse (JSON, or a tuple)    -> "invalid_arguments"
    flow:         yield Step(before)          -> "invalid_arguments" (ArgumentError) / "tool_error"
                  validate, build the context -> "invalid_arguments"
                  yield ADMIT                 (the shell tells `before_run`)
                  yield Step(function+after)  -> "tool_error" (per `errors`)
                  serialise                   -> Settled(output, None, value)
    timed_out(flow)                           -> "timeout"
    record(call, ..., settled)                -> ToolRun (output truncated)

A flow is a generator, as httpx's `Auth.auth_flow`: it yields what must run (a `Step`) and
receives its result (or has its exception thrown in). The shells (`_threaded` for `run`,
`_aio` for `arun`) only schedule steps, wait for them and enforce the deadline; every decision
about what the model reads is made here, once.
"""

from __future__ import annotations

import inspect
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Generator, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Literal, Protocol

from opentelemetry import context as otel_context
from opentelemetry.context import Context

from bridge.errors import redact, valid_text
from bridge.tools._tuple_args import looks_like_tuple, tuple_arguments
from bridge.tools.context import ConversationScope, ToolContext
from bridge.tools.output import (
    HIDDEN_ERROR,
    describe_exception,
    invalid_arguments,
    parse_arguments,
    serialize,
    truncate,
)
from bridge.tools.spec import ArgumentError, ToolError, ToolSpec
from bridge.types import ErrorKind, ToolCall, ToolRun

__all__ = [
    "ADMIT",
    "Core",
    "Deferred",
    "ErrorsMode",
    "Flow",
    "Policy",
    "Settled",
    "Step",
    "ToolLookup",
    "is_async_callable",
    "on_worker",
]

logger = logging.getLogger("bridge.tools.dispatch")

ErrorsMode = Literal["message", "hidden", "raise"]
"""What the model reads when a tool raises: its message, a fixed text, or nothing (re-raise)."""


@dataclass(frozen=True)
class Policy:
    """The dispatcher options the core decides with."""

    default_timeout: float = 60.0
    errors: ErrorsMode = "message"
    max_output_chars: int | None = 20_000


@dataclass(slots=True)
class Step:
    """Run `function(*args, **kwargs)` and send back its result (an awaitable one is awaited).

    `is_async`: run it on the event loop, not on a worker thread. `holds_scope`: the tool's
    own function, during which the conversation's resources must stay open (until it really
    returns, also when it was abandoned).
    """

    function: Callable[..., Any]
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] | None = None
    is_async: bool = False
    holds_scope: bool = False

    def __call__(self) -> Any:
        return self.function(*self.args, **(self.kwargs or {}))


class Deferred:
    """A sync callable returned an awaitable: it is awaited on the loop, not on the worker."""

    __slots__ = ("awaitable",)

    def __init__(self, awaitable: Any) -> None:
        self.awaitable = awaitable


def on_worker(step: Step, context: Context | None = None) -> Any:
    """What a worker thread runs for a sync step (an awaitable result comes back `Deferred`),
    with `context` (the call's span) current while it runs."""
    if context is None:
        result = step()
    else:
        token = otel_context.attach(context)
        try:
            result = step()
        finally:
            otel_context.detach(token)
    return Deferred(result) if inspect.isawaitable(result) else result


class _Admit:
    def __repr__(self) -> str:
        return "ADMIT"


ADMIT = _Admit()
"""Yielded once the arguments are valid, right before the function may run (`before_run`)."""


@dataclass(slots=True)
class Settled:
    """How a call ended: the output the model reads, the error kind, the raw value."""

    output: str
    error: ErrorKind | None = None
    value: Any = None


@dataclass(slots=True)
class Flow:
    """A call that found its tool: what is left to do, and when it must be done by."""

    call: ToolCall
    spec: ToolSpec
    timeout: float
    cancelled: threading.Event
    steps: Generator[Step | _Admit, Any, Settled]
    context: Context | None = None
    """The trace context its steps run in (its ``execute_tool`` span); None untraced."""


class _HookError(Exception):
    """A `before`/`after` hook raised (kept apart from the tool's own failure)."""

    def __init__(self, hook: str, error: Exception) -> None:
        super().__init__(f"the {hook} hook failed: {describe_exception(error)}")
        self.hook = hook
        self.error = error


def is_async_callable(fn: Any) -> bool:
    """A coroutine function, or an object whose `__call__` is one."""
    if inspect.iscoroutinefunction(fn):
        return True
    dunder = type(fn).__dict__.get("__call__") if not inspect.isroutine(fn) else None
    return dunder is not None and inspect.iscoroutinefunction(dunder)


class ToolLookup(Protocol):
    """Where the core finds tools: what it needs of a registry (a `Toolbox` is one)."""

    def get(self, name: str) -> ToolSpec | None:
        """The enabled tool called `name`, or None."""
        ...

    def names(self) -> Iterable[str]:
        """The names of the enabled tools, for the message about an unknown one."""
        ...


class Core:
    """Every decision about one call, for a registry of tools and a policy."""

    def __init__(self, toolbox: ToolLookup, policy: Policy) -> None:
        self.toolbox = toolbox
        self.policy = policy

    # --- prepare -----------------------------------------------------------------------------

    def start(
        self, call: ToolCall, scope: ConversationScope, context: Context | None = None
    ) -> Flow | Settled:
        """The flow of a call, or how it ended when it cannot run at all (`context`: the
        trace context of its span, which its steps and its `ToolContext` get)."""
        spec = self.toolbox.get(call.name)
        if spec is None:
            return Settled(self._unknown(call.name), "unknown_tool")
        arguments = call.arguments
        if isinstance(arguments, str) and looks_like_tuple(arguments):
            names = list(spec.parameters.get("properties", {}))
            raw: dict[str, Any] | str = tuple_arguments(arguments, names)
        else:
            raw = parse_arguments(arguments)
        if isinstance(raw, str):
            return Settled(invalid_arguments(spec, [raw]), "invalid_arguments")
        timeout = spec.options.timeout
        cancelled = threading.Event()
        return Flow(
            call=call,
            spec=spec,
            timeout=timeout if timeout is not None else self.policy.default_timeout,
            cancelled=cancelled,
            steps=self._steps(call, spec, raw, scope, cancelled, context),
            context=context,
        )

    def _steps(
        self,
        call: ToolCall,
        spec: ToolSpec,
        raw: dict[str, Any],
        scope: ConversationScope,
        cancelled: threading.Event,
        context: Context | None = None,
    ) -> Generator[Step | _Admit, Any, Settled]:
        before = spec.options.before
        if before is not None:
            try:
                # A copy: the record must show what the agent sent, even if `before` edits it.
                raw = yield Step(before, (dict(raw),), is_async=is_async_callable(before))
            except ArgumentError as exc:
                return self._invalid(spec, call, exc)
            except Exception as exc:
                return self._failed(spec, call, _HookError("before", exc), scope)
            if not isinstance(raw, Mapping):
                problem = TypeError(
                    f"it returned {type(raw).__name__}; a before hook must return the "
                    "arguments as a dict"
                )
                return self._failed(spec, call, _HookError("before", problem), scope)
        try:
            kwargs = spec.validate(dict(raw))
        except ArgumentError as exc:
            return self._invalid(spec, call, exc)
        except Exception as exc:
            return self._failed(spec, call, exc, scope)
        if spec.context_param:
            kwargs[spec.context_param] = ToolContext(
                call_id=call.call_id,
                tool_name=spec.name,
                scope=scope,
                cancelled=cancelled,
                trace_context=context,
            )
        yield ADMIT
        function = _with_after(spec.function, spec.options.after, spec.is_async)
        try:
            result = yield Step(function, (), kwargs, is_async=spec.is_async, holds_scope=True)
        except _HookError as exc:
            return self._failed(spec, call, exc, scope)
        except Exception as exc:
            return self._failed(spec, call, exc, scope)
        try:
            output = serialize(result)
        except Exception as exc:
            return self._failed(spec, call, exc, scope)
        return Settled(output, None, result)

    # --- settle ------------------------------------------------------------------------------

    def timed_out(self, flow: Flow) -> Settled:
        """The call outlived its timeout and was abandoned."""
        flow.cancelled.set()
        flow.steps.close()
        logger.warning(
            "tool %r (call %s) timed out after %g s and was abandoned",
            flow.spec.name,
            flow.call.call_id,
            flow.timeout,
        )
        return Settled(
            f"The tool {flow.spec.name!r} timed out after {flow.timeout:g} seconds and was "
            "abandoned; it returned no result.",
            "timeout",
        )

    def _unknown(self, name: str) -> str:
        names = list(self.toolbox.names())
        available = f"Available tools: {', '.join(names)}." if names else "No tools are available."
        return f"Unknown tool {name!r}. {available}"

    @staticmethod
    def _invalid(spec: ToolSpec, call: ToolCall, exc: ArgumentError) -> Settled:
        logger.info("invalid arguments for %r (call %s): %s", spec.name, call.call_id, exc)
        return Settled(invalid_arguments(spec, exc.problems), "invalid_arguments")

    def _failed(
        self, spec: ToolSpec, call: ToolCall, exc: Exception, scope: ConversationScope | None
    ) -> Settled:
        # One line per failure, whatever raised: the output (and the CLI's tool line) already
        # says what went wrong. The traceback is a debugging aid, so DEBUG (`-v`); a ToolError
        # is an expected failure and has none worth showing.
        hook = exc.hook if isinstance(exc, _HookError) else None
        error = exc.error if isinstance(exc, _HookError) else exc
        conversation_id = scope.conversation_id if scope is not None else None
        extra: dict[str, object] = {
            "tool": spec.name,
            "call_id": call.call_id,
            "tool_failure": True,
        }
        if conversation_id is not None:
            extra["conversation_id"] = conversation_id
        text = describe_exception(error)
        if hook is not None:
            text = f"The {hook} hook of tool {spec.name!r} failed: {text}"
        logger.warning(
            "tool %r failed (conversation %s, call %s): %s",
            spec.name,
            conversation_id or "-",
            call.call_id,
            redact(text.splitlines()[0]),
            extra=extra,
        )
        if not isinstance(error, ToolError):
            logger.debug(
                "traceback of tool %r (call %s)",
                spec.name,
                call.call_id,
                exc_info=error,
                extra=extra,
            )
        if self.policy.errors == "raise":
            raise error
        if self.policy.errors == "hidden":
            return Settled(HIDDEN_ERROR, "tool_error")
        return Settled(redact(text), "tool_error")

    # --- record ------------------------------------------------------------------------------

    def record(
        self, call: ToolCall, started_at: datetime, began: float, settled: Settled
    ) -> ToolRun:
        """The `ToolRun` of a call that began at `began` (perf_counter) and ended now."""
        return ToolRun(
            call_id=call.call_id,
            name=call.name,
            arguments=call.arguments,
            # Text every journal, client and platform can take: a tool may return any str.
            output=valid_text(truncate(settled.output, self.policy.max_output_chars)),
            error=settled.error,
            started_at=started_at,
            duration_ms=(time.perf_counter() - began) * 1000,
            value=settled.value,
        )

    def reject(self, call: ToolCall, reason: str) -> ToolRun:
        """A "rejected" record for a call that was not run (e.g. a person said no)."""
        return ToolRun(
            call_id=call.call_id,
            name=call.name,
            arguments=call.arguments,
            output=truncate(f"The tool call was not run: {reason}", self.policy.max_output_chars),
            error="rejected",
            started_at=datetime.now(timezone.utc),
            duration_ms=0.0,
        )


# --- the function with its `after` hook --------------------------------------------------------


def _with_after(
    function: Callable[..., Any], after: Callable[[Any], Any] | None, is_async: bool
) -> Callable[..., Any]:
    """The function, then `after` on its result, in one step (one hand-off, not two).

    A sync function that returns an awaitable, and an async `after`, give an awaitable back,
    which the shell awaits on the loop; a failing `after` raises `_HookError`.
    """
    if after is None:
        return function
    hook = after
    if is_async:

        async def run_async(**kwargs: Any) -> Any:
            result = function(**kwargs)
            if inspect.isawaitable(result):
                result = await result
            return await _settle_after(hook, result)

        return run_async

    def run_sync(**kwargs: Any) -> Any:
        result = function(**kwargs)
        if inspect.isawaitable(result):
            return _await_then_after(result, hook)
        try:
            value = hook(result)
        except Exception as exc:
            raise _HookError("after", exc) from exc
        if inspect.isawaitable(value):
            return _awaited_hook(value)
        return value

    return run_sync


async def _await_then_after(awaitable: Awaitable[Any], after: Callable[[Any], Any]) -> Any:
    return await _settle_after(after, await awaitable)


async def _settle_after(after: Callable[[Any], Any], result: Any) -> Any:
    try:
        value = after(result)
    except Exception as exc:
        raise _HookError("after", exc) from exc
    if inspect.isawaitable(value):
        return await _awaited_hook(value)
    return value


async def _awaited_hook(awaitable: Awaitable[Any]) -> Any:
    try:
        return await awaitable
    except Exception as exc:
        raise _HookError("after", exc) from exc
