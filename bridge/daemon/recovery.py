"""On start: finish or fail every message a crash (or an expired grace period) interrupted.

For each message the journal still shows "running":

- its latest tool batch was received but its outputs were never posted: the run is *resumed*.
  Finished calls send their recorded outputs, calls that never started run, calls that
  started and never finished run again only if their tool is idempotent (else they report
  the interruption); then the outputs are submitted and the run continues to its answer;
- its outputs were being posted ("submitting"): they may or may not have arrived, so they are
  posted again. If the platform takes them, the run continues to its answer; if it answers that
  the calls are no longer pending, the first post had arrived: delivered, never twice, and the
  message fails with code "interrupted" because the answer stream was lost;
- otherwise the crash happened while the agent was answering (before a batch, or after the
  outputs were accepted): that stream is gone, so the message is marked *failed* with code
  "interrupted" and a message saying to ask again. Its platform conversation may still wait
  for calls the bridge never saw: the next message then continues in a new one
  (`bridge.conversation.Conversation`).

No message is dropped: every one ends finished or failed.

Replicas (a shared PostgreSQL journal): at start a replica recovers only the messages whose
conversations it can lease, its own from before a restart and those of replicas whose leases
expired, never one another replica is running. While it serves it looks every third of
`--lease-seconds` for more (`take_over`): a replica that died (kill -9, machine gone) stops
renewing its leases, and once they expire exactly one other replica claims each of its
unfinished messages (`LeaseJournal.claim_orphans`) and continues it by the same rules as above.

A resumed batch may hold a call waiting for a person's approval: the resumed run finds the
same pending request in the journal (same call id and arguments) and waits again until its
deadline (`bridge.daemon.approvals`). A pending request that no resumed run waits for expires.

Each claimed message gets a ``recover conversation`` span of its own (a trace of its own,
linked to the interrupted run's span when the journal kept its trace context): its outcome
(resumed or failed), whose message it was, and, for a resumed one, the run it queues, which
starts under it (the loop itself continues the interrupted run's trace, `bridge.conversation`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace

from bridge.daemon.service import Service
from bridge.journal.records import (
    INTERRUPTED_CODE,
    INTERRUPTED_MESSAGE,
    Lease,
    MessageEnd,
    MessageRecord,
    PendingBatch,
)
from bridge.tracing import RESUMED, link_to, record_error

__all__ = ["INTERRUPTED_CODE", "INTERRUPTED_MESSAGE", "keep_leases", "recover", "take_over"]

logger = logging.getLogger(__name__)


@dataclass
class _Plan:
    """What to do with claimed messages: the runs to resume (started on the event loop)."""

    resume: list[tuple[MessageRecord, PendingBatch, Lease]] = field(default_factory=list)
    failed: int = 0
    spans: dict[int, trace.Span] = field(default_factory=dict)
    """Message id -> its ``recover conversation`` span, ended once its run is queued."""


def recover(service: Service) -> tuple[int, int]:
    """On start: resume or fail each interrupted message this replica may take; returns
    (resumed, failed)."""
    journal = service.journal
    claimed = journal.claim_orphans(
        service.replica_id, service.settings.lease_seconds, own=True, exclude=service.running()
    )
    plan = _plan(service, claimed, takeover=False)
    running = _start(service, plan)
    # A pending approval whose message no run here resumes and no other replica runs has
    # nobody waiting for it any more.
    still_running = {m.message_id for m in journal.unfinished_messages()}
    service.approvals.expire_orphans(running | still_running)
    if plan.resume or plan.failed:
        logger.info(
            "recovery: %d message(s) resumed, %d marked failed", len(plan.resume), plan.failed
        )
    return len(plan.resume), plan.failed


async def take_over(service: Service) -> tuple[int, int]:
    """Claim and continue the unfinished messages of replicas whose leases expired (run
    periodically by the service on a shared journal); returns (resumed, failed)."""
    journal = service.journal
    claimed = await asyncio.to_thread(
        journal.claim_orphans,
        service.replica_id,
        service.settings.lease_seconds,
        exclude=service.running(),
    )
    if not claimed:
        return 0, 0
    before = sorted({m.replica or "(unknown)" for m, _ in claimed})
    logger.warning(
        "taking over %d unfinished message(s) in %d conversation(s) from replica(s) %s, whose "
        "leases expired",
        len(claimed),
        len({lease.conversation_id for _, lease in claimed}),
        ", ".join(before),
    )
    plan = await asyncio.to_thread(_plan, service, claimed, takeover=True)
    _start(service, plan)
    service.metrics.takeovers.inc(amount=len(claimed))
    return len(plan.resume), plan.failed


async def keep_leases(service: Service) -> None:
    """Renew this replica's leases every third of `lease_seconds`; claim and resume the
    messages of replicas whose leases expired (`take_over`).

    Runs until cancelled, on a shared journal only: the app starts it after `Service.start`
    and cancels it before `Service.close`.
    """
    seconds = service.settings.lease_seconds
    period = seconds / 3
    while True:
        await asyncio.sleep(period)
        try:
            lost = await asyncio.to_thread(
                service.journal.renew_leases, service.replica_id, seconds
            )
        except Exception as exc:
            logger.warning(
                "could not renew this replica's leases (%s); runs here stop writing if "
                "the database stays out of reach for %g s and another replica takes over",
                exc,
                seconds,
            )
            continue
        for cid in lost:
            service.metrics.leases_lost.inc()
            logger.warning(
                "lost the lease of conversation %s: another replica took it over (this one "
                "was paused or cut off from the database for more than %g s); its run here "
                "stops at its next write",
                cid,
                seconds,
                extra={"conversation_id": cid},
            )
        if service.draining:
            continue
        try:
            await take_over(service)
        except Exception as exc:
            logger.warning("could not look for conversations to take over: %s", exc)


def _recovery_span(service: Service, message: MessageRecord, takeover: bool) -> trace.Span:
    """The ``recover conversation`` span of one claimed message (not current: `_start` makes
    it so while the message's run is queued)."""
    attributes: dict[str, Any] = {
        "gen_ai.conversation.id": message.conversation_id,
        "toolbridge.message.id": message.message_id,
        "toolbridge.replica": service.replica_id,
        "toolbridge.recovery.takeover": takeover,
        "toolbridge.recovery.previous_replica": message.replica,
        RESUMED: True,
    }
    return service.tracing.start(
        "recover conversation",
        attributes=attributes,
        links=link_to(message.traceparent, **{RESUMED: True}),
        parent=otel_context.Context(),  # a trace of its own, whatever is current
    )


def _plan(
    service: Service, claimed: Sequence[tuple[MessageRecord, Lease]], *, takeover: bool
) -> _Plan:
    """Read what each claimed message left; fail those that cannot continue (journal I/O)."""
    journal = service.journal
    plan = _Plan()
    resuming: set[str] = set()
    leases: dict[str, Lease] = {}
    for message, lease in claimed:
        leases[lease.conversation_id] = lease
        extra = {"conversation_id": message.conversation_id, "message_id": message.message_id}
        span = _recovery_span(service, message, takeover)
        try:
            resumed = _plan_one(service, plan, message, lease, resuming, extra)
        except BaseException as exc:
            record_error(span, exc)
            span.end()
            raise
        span.set_attribute("toolbridge.recovery.outcome", "resumed" if resumed else "failed")
        if resumed:
            plan.spans[message.message_id] = span
        else:
            span.end()
    for cid, lease in leases.items():
        if cid not in resuming:
            journal.release_lease(lease)  # nothing runs: the next message may take it
    return plan


def _plan_one(
    service: Service,
    plan: _Plan,
    message: MessageRecord,
    lease: Lease,
    resuming: set[str],
    extra: dict[str, Any],
) -> bool:
    """Plan one claimed message: True when its run is to be resumed, False when it was
    marked failed."""
    journal = service.journal
    pending = journal.pending(message.message_id)
    cid = message.conversation_id
    if pending is not None and cid not in resuming and service.active(cid) is None:
        logger.warning(
            "resuming message %d of conversation %s: %d tool call(s) were pending%s",
            message.message_id,
            cid,
            len(pending.batch.calls),
            " (their outputs were being posted: posting them again)" if pending.submitting else "",
            extra=extra,
        )
        plan.resume.append((message, pending, lease))
        resuming.add(cid)
        return True
    logger.warning(
        "message %d of conversation %s was interrupted while the agent was answering; "
        "marking it failed",
        message.message_id,
        cid,
        extra=extra,
    )
    journal.end_message(
        message.message_id,
        MessageEnd(
            status="failed",
            answer=message.answer,
            error_code=INTERRUPTED_CODE,
            error_message=INTERRUPTED_MESSAGE,
            request_ids=tuple(message.request_ids),
            platform_settled=False,
        ),
    )
    service.metrics.recovered.inc("failed")
    plan.failed += 1
    return False


def _start(service: Service, plan: _Plan) -> set[int]:
    """Queue the resumed runs (on the event loop); returns their message ids."""
    running: set[int] = set()
    for message, pending, lease in plan.resume:
        span = plan.spans.pop(message.message_id, trace.INVALID_SPAN)
        try:
            # The run is queued under its recovery span (its worker copies the context).
            with trace.use_span(
                span, end_on_exit=False, record_exception=False, set_status_on_exception=False
            ):
                service.start_recovery(message.message_id, message.conversation_id, pending, lease)
        except Exception as exc:
            # Full (503) or already running here: give the lease back so it is claimed again.
            record_error(span, exc)
            span.set_attribute("toolbridge.recovery.outcome", "deferred")
            span.end()
            logger.warning(
                "could not resume message %d of conversation %s now (%s); it is taken up again "
                "on a later pass",
                message.message_id,
                message.conversation_id,
                exc,
            )
            service.journal.release_lease(lease)
            continue
        span.end()
        running.add(message.message_id)
        service.metrics.recovered.inc("resumed")
    return running
