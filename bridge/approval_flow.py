"""The approval flow of one tool batch: which calls run now, which are rejected, and which
wait for a person who answers later, without holding up the rest of the batch.

Two kinds of `approve` (`BridgeOptions.approve`): a function `approve(call) -> bool`, asked
before the batch runs (`decide`, the one shared rule), or a `DeferredApprover` (the daemon's
approvals), asked on a thread per call while the rest of the batch runs.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterator
from typing import cast

from bridge._interleave import interleave
from bridge.options import ApproveHook, BridgeOptions
from bridge.tools.approval import (
    ApprovalRequest,
    arguments_digest,
    ask_deferred,
    decide,
    needs_approval,
)
from bridge.tools.dispatch import Dispatcher
from bridge.tools.toolbox import Toolbox
from bridge.types import ToolCall, ToolCallFinished, ToolCallStarted, ToolRun

__all__ = ["run_with_approvals", "split_for_approval"]

CallUpdates = Iterator[ToolCallStarted | ToolCallFinished]


def split_for_approval(
    calls: list[ToolCall], toolbox: Toolbox, options: BridgeOptions, dispatcher: Dispatcher
) -> tuple[list[ToolCall], list[ToolRun], list[ToolCall]]:
    """Split calls into those allowed to run, rejection records, and calls that wait for
    a person who answers later (a `DeferredApprover`)."""
    if options.deferred_approver is not None:
        waiting = [call for call in calls if needs_approval(toolbox.get(call.name))]
        asked = {call.call_id for call in waiting}
        return [call for call in calls if call.call_id not in asked], [], waiting
    approve = cast("ApproveHook | None", options.approve)
    allowed: list[ToolCall] = []
    rejected: list[ToolRun] = []
    for call in calls:
        verdict = decide(toolbox.get(call.name), call, approve)  # the one shared rule
        if verdict.run:
            allowed.append(call)
        else:
            rejected.append(dispatcher.reject(call, verdict.reason))
    return allowed, rejected, []


def run_with_approvals(
    allowed: list[ToolCall],
    waiting: list[ToolCall],
    run: Callable[[list[ToolCall]], CallUpdates],
    *,
    options: BridgeOptions,
    dispatcher: Dispatcher,
    conversation_id: str,
    message_id: int | None,
) -> CallUpdates:
    """`run` the allowed calls now, and each waiting call once a person approved it (or
    report its rejection); the waits do not hold up the rest of the batch."""
    if not waiting:
        return run(allowed) if allowed else iter(())
    approver = options.deferred_approver
    assert approver is not None
    stop = threading.Event()

    def once_decided(call: ToolCall) -> CallUpdates:
        digest = arguments_digest(call.name, call.arguments)
        request = ApprovalRequest(conversation_id, message_id, call, digest, stop)
        verdict = ask_deferred(approver, request)
        if verdict.run:
            yield from run([call])
        else:
            yield ToolCallFinished(run=dispatcher.reject(call, verdict.reason))

    sources = [functools.partial(once_decided, call) for call in waiting]
    if allowed:
        sources.insert(0, functools.partial(run, allowed))
    return interleave(sources, stop=stop, name="toolbridge-approval")
