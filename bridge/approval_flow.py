"""The approval flow of one tool batch: which calls run now, which are rejected, and which
wait for a person who answers later, without holding up the rest of the batch.

Before any of that, each call passes the door (`split_for_approval`): a tool the caller may not
run is answered as an unknown tool; with a policy (`BridgeOptions.policy`), the policy's
decision refuses the call (the model reads the policy and its reason), sends it to approval
(as a `confirm=True` tool's call is), or lets it go on. With an audit record
(`BridgeOptions.audit`) every decision and every finished call is recorded (`record_outcome`).

Two kinds of `approve` (`BridgeOptions.approve`): a function `approve(call) -> bool`, asked
before the batch runs (`decide`, the one shared rule), or a `DeferredApprover` (the daemon's
approvals), asked on a thread per call while the rest of the batch runs.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import cast

from bridge._interleave import interleave
from bridge.access.decision import (
    ALLOW,
    AuditEvent,
    CallFacts,
    PolicyDecision,
    decide_or_refuse,
    source_of,
)
from bridge.access.principal import Principal
from bridge.journal.base import Journal
from bridge.options import ApproveHook, BridgeOptions
from bridge.tools._spans import CallSpans
from bridge.tools.approval import (
    ApprovalRequest,
    arguments_digest,
    ask_deferred,
    decide,
    needs_approval,
)
from bridge.tools.dispatch import Dispatcher
from bridge.tools.spec import ToolSpec
from bridge.tools.toolbox import Toolbox
from bridge.types import ToolCall, ToolCallFinished, ToolCallStarted, ToolRun

__all__ = ["CallScope", "record_outcome", "run_with_approvals", "split_for_approval"]

logger = logging.getLogger(__name__)

CallUpdates = Iterator[ToolCallStarted | ToolCallFinished]


@dataclass(frozen=True)
class CallScope:
    """Who asks for a batch's calls, and where: what the policy and the audit record see."""

    caller: Principal
    platform: str = ""
    conversation: str = ""
    end_user: str = ""


def split_for_approval(
    calls: list[ToolCall],
    toolbox: Toolbox,
    options: BridgeOptions,
    dispatcher: Dispatcher,
    scope: CallScope | None = None,
    *,
    spans: CallSpans | None = None,
) -> tuple[list[ToolCall], list[ToolRun], list[ToolCall]]:
    """Split calls into those allowed to run, rejection records, and calls that wait for
    a person who answers later (a `DeferredApprover`).

    `scope`: who asks and where (default: `options.principal`, nowhere in particular).
    `spans`: the calls' spans (tracing on), which get the policy's decision and the answer
    of an `approve` function.
    """
    scope = scope if scope is not None else CallScope(options.principal)
    deferred = options.deferred_approver is not None
    approve = None if deferred else cast("ApproveHook | None", options.approve)
    allowed: list[ToolCall] = []
    rejected: list[ToolRun] = []
    waiting: list[ToolCall] = []
    for call in calls:
        spec = toolbox.get(call.name)
        refusal = _unavailable(call, spec, toolbox, scope)
        decision = ALLOW
        if refusal is None and spec is not None and options.policy is not None:
            decision = _decided(call, spec, options, scope)
            if spans is not None:
                spans.note(
                    call.call_id,
                    {
                        "toolbridge.policy.decision": decision.effect,
                        "toolbridge.policy.ids": list(decision.policies),
                        "toolbridge.policy.reason": decision.reason or None,
                    },
                )
            if decision.refused:
                refusal = dispatcher.reject(call, decision.refusal())
        if refusal is not None:
            rejected.append(refusal)
            continue
        if deferred:
            asked = decision.needs_approval or needs_approval(spec)
            (waiting if asked else allowed).append(call)
            continue
        # the one shared rule
        asking = (
            spans
            if approve is not None and (decision.needs_approval or needs_approval(spec))
            else None
        )
        began = time.monotonic()
        if asking is not None:
            asking.event(call, APPROVAL_REQUESTED, {"toolbridge.approval.asked": "approve hook"})
        verdict = decide(spec, call, approve, required=decision.needs_approval)
        if asking is not None:
            asking.event(
                call,
                APPROVAL_DECIDED,
                _decided_attributes(verdict.run, "approve hook", time.monotonic() - began),
            )
        if verdict.run:
            allowed.append(call)
        else:
            rejected.append(dispatcher.reject(call, verdict.reason))
    return allowed, rejected, waiting


def _unavailable(
    call: ToolCall, spec: ToolSpec | None, toolbox: Toolbox, scope: CallScope
) -> ToolRun | None:
    """The answer to a call of a tool the caller may not run: as if there were no such tool."""
    caller = scope.caller
    if spec is None or caller.may_run(call.name, source_of(spec)):
        return None
    names = caller.visible((s.name, s.source) for s in toolbox)
    available = f"Available tools: {', '.join(names)}." if names else "No tools are available."
    return ToolRun(
        call_id=call.call_id,
        name=call.name,
        arguments=call.arguments,
        output=f"Unknown tool {call.name!r}. {available}",
        error="unknown_tool",
        started_at=datetime.now(timezone.utc),
        duration_ms=0.0,
    )


def _decided(
    call: ToolCall, spec: ToolSpec, options: BridgeOptions, scope: CallScope
) -> PolicyDecision:
    """The policy's decision on `call`, recorded in the audit record (a decision that cannot be
    recorded refuses the call)."""
    assert options.policy is not None
    facts = CallFacts.of(
        call.name,
        spec,
        call.arguments if isinstance(call.arguments, dict) else None,
        platform=scope.platform,
        conversation=scope.conversation,
        end_user=scope.end_user,
    )
    decision = decide_or_refuse(options.policy, scope.caller, facts)
    if options.audit is None:
        return decision
    event = AuditEvent(
        kind="policy",
        outcome=decision.effect,
        caller=scope.caller.name,
        via=scope.caller.via,
        conversation_id=scope.conversation or None,
        call_id=call.call_id,
        tool=call.name,
        arguments=call.arguments,
        detail={"policies": list(decision.policies), "reason": decision.reason},
    )
    try:
        # Written with the call's next step (started, or finished if refused): the decision
        # and that step are durable together, and the call never runs without it.
        options.audit.stage(event)
    except Exception as exc:
        logger.exception("the audit record refused the policy decision on %s", call.call_id)
        return PolicyDecision(
            "refuse", (), f"the audit record could not be written ({type(exc).__name__})"
        )
    return decision


def record_outcome(
    options: BridgeOptions, scope: CallScope, run: ToolRun, toolbox: Toolbox | None = None
) -> None:
    """Record a finished call in `options.audit` (if any): ``ok``, ``error`` or ``refused``
    (rejected, or a tool of `toolbox` hidden from the caller)."""
    if options.audit is None:
        return
    hidden = run.error == "unknown_tool" and toolbox is not None and run.name in toolbox.names()
    if run.error is None:
        outcome = "ok"
    elif run.error == "rejected" or hidden:
        outcome = "refused"
    else:
        outcome = "error"
    event = AuditEvent(
        kind="tool",
        outcome=outcome,
        caller=scope.caller.name,
        via=scope.caller.via,
        conversation_id=scope.conversation or None,
        call_id=run.call_id,
        tool=run.name,
        arguments=run.arguments,
        detail={"error": run.error} if run.error else {},
    )
    try:
        options.audit.stage(event)  # written with the journal's "finished" of the call
    except Exception:
        logger.exception("the audit record refused the outcome of call %s", run.call_id)


APPROVAL_REQUESTED = "toolbridge.approval.requested"
APPROVAL_DECIDED = "toolbridge.approval.decided"
"""The events of a call's span that wait for a person's decision."""


def _decided_attributes(
    approved: bool, by: str | None, waited: float, outcome: str | None = None
) -> dict[str, object]:
    return {
        "toolbridge.approval.outcome": outcome or ("approved" if approved else "rejected"),
        "toolbridge.approval.decided_by": by,
        "toolbridge.approval.waited_ms": round(waited * 1000, 3),
    }


def run_with_approvals(
    allowed: list[ToolCall],
    waiting: list[ToolCall],
    run: Callable[[list[ToolCall]], CallUpdates],
    *,
    options: BridgeOptions,
    dispatcher: Dispatcher,
    conversation_id: str,
    message_id: int | None,
    spans: CallSpans | None = None,
    journal: Journal | None = None,
) -> CallUpdates:
    """`run` the allowed calls now, and each waiting call once a person approved it (or
    report its rejection); the waits do not hold up the rest of the batch.

    `spans`: the calls' spans (tracing on): a waiting call's span begins when the person is
    asked and records the wait (requested, decided: by whom, after how long; who decided is
    read from `journal`'s approval record, when there is one)."""
    if not waiting:
        return run(allowed) if allowed else iter(())
    approver = options.deferred_approver
    assert approver is not None
    stop = threading.Event()

    def once_decided(call: ToolCall) -> CallUpdates:
        digest = arguments_digest(call.name, call.arguments)
        request = ApprovalRequest(conversation_id, message_id, call, digest, stop)
        began = time.monotonic()
        if spans is not None:
            spans.event(call, APPROVAL_REQUESTED, {"toolbridge.approval.asked": "approver"})
        verdict = ask_deferred(approver, request)
        if spans is not None:
            record = None
            if journal is not None:
                try:
                    record = journal.find_approval(conversation_id, call.call_id, digest)
                except Exception:  # a span's detail must not fail the call
                    logger.debug("reading the approval of %s failed", call.call_id, exc_info=True)
            decided = record is not None and record.status != "pending"
            spans.event(
                call,
                APPROVAL_DECIDED,
                _decided_attributes(
                    verdict.run,
                    record.decided_by if record is not None else None,
                    time.monotonic() - began,
                    record.status if record is not None and decided else None,
                ),
            )
        if verdict.run:
            yield from run([call])
        else:
            rejected = dispatcher.reject(call, verdict.reason)
            if spans is not None:
                spans.close(rejected)
            yield ToolCallFinished(run=rejected)

    sources = [functools.partial(once_decided, call) for call in waiting]
    if allowed:
        sources.insert(0, functools.partial(run, allowed))
    return interleave(sources, stop=stop, name="toolbridge-approval")
