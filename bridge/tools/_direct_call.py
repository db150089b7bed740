"""One tool call made directly, without a platform: `Toolbox.call` / `await Toolbox.acall`.

The call goes through the same core and shells as a batch from an agent (`Dispatcher`), so
validation, hooks, timeouts, errors and the `ToolRun` are the same; it only gets a generated
call id ("direct-<uuid>") and runs on threads shared by every direct call of the process.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Mapping
from typing import Any

from bridge.errors import UsageError
from bridge.tools._aio import run_async
from bridge.tools._core import Core, ErrorsMode, Policy, ToolLookup
from bridge.tools._spans import CallSpans
from bridge.tools._threaded import run_threaded
from bridge.tools.approval import Approver, decide
from bridge.tools.context import ConversationScope
from bridge.tools.runtime import LoopThread, Workers
from bridge.tracing import Tracing
from bridge.types import ToolCall, ToolRun

__all__ = ["acall_tool", "call_tool"]

_ERRORS = ("message", "hidden", "raise")
_NOBODY = "a direct call runs a confirm=True tool only with Toolbox.call(..., approve=ask)"
_lock = threading.Lock()
_workers: Workers | None = None
_loop_thread: LoopThread | None = None


def _shared_workers() -> Workers:
    global _workers
    with _lock:
        if _workers is None:
            _workers = Workers("toolbridge-direct")
        return _workers


def _shared_loop() -> LoopThread:
    global _loop_thread
    with _lock:
        if _loop_thread is None:
            _loop_thread = LoopThread("toolbridge-direct-loop")
        return _loop_thread


def _prepare(
    toolbox: ToolLookup,
    name: object,
    arguments: object,
    timeout: object,
    errors: object,
    max_output_chars: object,
    call_id: object,
) -> tuple[Core, ToolCall]:
    if not callable(getattr(toolbox, "get", None)) or not callable(getattr(toolbox, "names", None)):
        raise UsageError(f"toolbox must be a bridge.Toolbox, got {type(toolbox).__name__}")
    if not isinstance(name, str):
        raise UsageError(f"the tool name must be a string, got {type(name).__name__}")
    if arguments is None:
        arguments = {}
    elif isinstance(arguments, Mapping):
        arguments = dict(arguments)
    elif not isinstance(arguments, str):
        raise UsageError(
            "arguments must be a mapping of argument names to values, a JSON object as text, "
            f"or None; got {type(arguments).__name__}"
        )
    if timeout is not None and (
        isinstance(timeout, bool)
        or not isinstance(timeout, (int, float))
        or not 0 < timeout < float("inf")
    ):
        raise UsageError(f"timeout must be a positive, finite number of seconds, got {timeout!r}")
    if errors not in _ERRORS:
        raise UsageError(f"errors must be one of {', '.join(map(repr, _ERRORS))}, got {errors!r}")
    if max_output_chars is not None and (
        isinstance(max_output_chars, bool) or not isinstance(max_output_chars, int)
    ):
        raise UsageError(f"max_output_chars must be an integer or None, got {max_output_chars!r}")
    if call_id is None:
        call_id = f"direct-{uuid.uuid4().hex}"
    elif not isinstance(call_id, str) or not call_id:
        raise UsageError(f"call_id must be a non-empty string, got {call_id!r}")
    policy = Policy(
        default_timeout=60.0 if timeout is None else float(timeout),
        errors=errors,  # type: ignore[arg-type]  # checked above
        max_output_chars=max_output_chars,
    )
    return Core(toolbox, policy), ToolCall(call_id=call_id, name=name, arguments=arguments)


def call_tool(
    toolbox: ToolLookup,
    name: str,
    arguments: Mapping[str, Any] | str | None = None,
    *,
    timeout: float | None = None,
    errors: ErrorsMode = "message",
    max_output_chars: int | None = 20_000,
    scope: ConversationScope | None = None,
    call_id: str | None = None,
    approve: Approver | None = None,
) -> ToolRun:
    """Run one tool now, exactly as a dispatched call, and return its `ToolRun`.

    Args:
        toolbox: Where `name` is looked up (an unknown name gives an "unknown_tool" run).
        name: The tool.
        arguments: A mapping, a JSON object as text (or the tuple form ``"(1, 2)"``), or None.
        timeout: Seconds the call may take when the tool sets no `timeout` of its own (a
            dispatcher's `default_timeout`); None: 60.
        errors: What the output says when the tool raises (see `Dispatcher`).
        max_output_chars: Longer outputs are cut with a marker; None: no limit.
        scope: The conversation whose state and resources the tool sees; None: a private one.
        call_id: The call's id; default "direct-<uuid>".
        approve: Asks a person about a call of a `confirm=True` tool (True runs it). Without
            it such a call is not run: the run is "rejected", as with nobody to ask anywhere
            else (confirm means a person decides at every entry point).

    Raises:
        UsageError: A bad option or `arguments` of another type; never for what the tool does
            (except with ``errors="raise"``).
    """
    core, call = _prepare(toolbox, name, arguments, timeout, errors, max_output_chars, call_id)
    verdict = decide(toolbox.get(name), call, approve, nobody=_NOBODY)
    if not verdict.run:
        return core.reject(call, verdict.reason)
    loop_thread = _loop_thread
    if loop_thread is not None and loop_thread.is_current():
        raise UsageError(
            "Toolbox.call() was called from an async tool run by a direct call; "
            "use `await toolbox.acall(...)` there"
        )
    updates = run_threaded(
        core, _shared_workers(), _shared_loop, [call], scope, 1, spans=_spans(toolbox)
    )
    while True:
        try:
            next(updates)
        except StopIteration as done:
            runs: list[ToolRun] = done.value
            return runs[0]


async def acall_tool(
    toolbox: ToolLookup,
    name: str,
    arguments: Mapping[str, Any] | str | None = None,
    *,
    timeout: float | None = None,
    errors: ErrorsMode = "message",
    max_output_chars: int | None = 20_000,
    scope: ConversationScope | None = None,
    call_id: str | None = None,
    approve: Approver | None = None,
) -> ToolRun:
    """`call_tool` on the running event loop (async tools and hooks run on it)."""
    core, call = _prepare(toolbox, name, arguments, timeout, errors, max_output_chars, call_id)
    # The approver may block on a person (a terminal prompt): off the loop.
    verdict = await asyncio.to_thread(decide, toolbox.get(name), call, approve, nobody=_NOBODY)
    if not verdict.run:
        return core.reject(call, verdict.reason)
    [run] = await run_async(core, _shared_workers(), [call], scope, 1, spans=_spans(toolbox))
    return run


_TRACING = Tracing()
"""Direct calls' spans go to the global provider (none while no SDK is configured)."""


def _spans(toolbox: ToolLookup) -> CallSpans | None:
    if not _TRACING.enabled:
        return None
    tool_type = getattr(toolbox, "tool_type", None)
    return CallSpans(_TRACING, tool_type=tool_type if callable(tool_type) else None)
