"""The daemon's approvals: a `confirm=True` call waits here for a person's decision.

    run (worker thread)                           operator (API, console, chat-ops)
    Conversation._dispatch -> ApprovalDesk.ask
        journal: pending, with a deadline
        approval_requested -> run stream, hub, webhook
        waits (the rest of the batch runs)         POST /v1/approvals/{id} -> ApprovalDesk.decide
                                                      journal: decided, once (409 after that)
        <- woken; reads the decision                  approval_decided -> run stream, hub
    approved: the call runs; rejected: the model reads the person's note;
    past the deadline: expired, the model reads that nobody answered in time

The journal is the truth: a restarted daemon resumes the message, `ask` finds the same request
(same conversation, call id and argument digest) and waits again until its original deadline;
a decision is never found for other arguments.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any, Literal

from bridge.daemon.errors import ApiError
from bridge.daemon.hub import EventHub
from bridge.daemon.outbound import json_data
from bridge.daemon.webhook import ApprovalWebhook
from bridge.journal.base import Journal
from bridge.journal.records import ApprovalDecidedError, ApprovalRecord, now
from bridge.tools.approval import (
    ApprovalRequest,
    Verdict,
    describe_seconds,
    verdict_for_decision,
)

__all__ = ["ANONYMOUS", "ApprovalDesk"]

logger = logging.getLogger(__name__)

ANONYMOUS = "anonymous"
"""Who decided, when the daemon takes requests without API keys."""

POLL_SECONDS = 1.0
"""How often a waiting call looks at the journal besides being woken (a stopped run, a
decision written by another process that no notification brought)."""

POLL_ENV = "TOOLBRIDGE_APPROVAL_POLL_SECONDS"
"""Overrides `POLL_SECONDS` (tests make it long to show that a decision taken on another
replica wakes the waiting call through `bridge.daemon.relay`, not through the poll)."""


def _poll_seconds() -> float:
    try:
        value = float(os.environ.get(POLL_ENV, ""))
    except ValueError:
        return POLL_SECONDS
    return value if value > 0 else POLL_SECONDS


ORPHANED = "the run that asked for it ended before anyone decided"


class ApprovalDesk:
    """Asks the daemon's operators about confirm calls, and takes their decisions.

    Args:
        journal: where requests and decisions are written.
        timeout: seconds a request waits before it expires.
        publish_run: sends an event to the SSE stream of a conversation's run in progress.
        hub: the daemon-wide event hub.
        count: counts a decision by outcome ("approved", "rejected", "expired").
        webhook: told about each new request, if configured.
        base_url: the daemon's URL, for the webhook's ``approve_url`` ("" gives a path).
    """

    def __init__(
        self,
        journal: Journal,
        *,
        timeout: float,
        publish_run: Callable[[str, str, dict[str, Any]], None],
        hub: EventHub,
        count: Callable[[str], None],
        webhook: ApprovalWebhook | None = None,
        base_url: Callable[[], str] = lambda: "",
    ) -> None:
        self.journal = journal
        self.timeout = timeout
        self.publish_run = publish_run
        self.hub = hub
        self.count = count
        self.webhook = webhook
        self.base_url = base_url
        self._lock = threading.Lock()
        self._waiting: dict[str, tuple[str, threading.Event]] = {}
        """Approval id -> (conversation id, wakeup) of each call waiting in this process."""
        self.poll_seconds = _poll_seconds()

    def __repr__(self) -> str:
        return f"ApprovalDesk(timeout={self.timeout:g}, waiting={len(self._waiting)})"

    def pending(self) -> int:
        """How many requests wait for a decision."""
        return self.journal.list_approvals(status="pending", limit=1)[1]

    def waiting_in(self, conversation_id: str) -> list[str]:
        """The ids of the approvals a conversation's run waits for now."""
        with self._lock:
            return [a for a, (cid, _) in self._waiting.items() if cid == conversation_id]

    # --- the run's side (worker threads) ----------------------------------------------------------

    def ask(self, request: ApprovalRequest) -> Verdict:
        """Request (or find) the approval of one call and wait for its decision."""
        call = request.call
        record = self.journal.find_approval(
            request.conversation_id, call.call_id, request.arguments_digest
        )
        if record is None:
            record = self.journal.request_approval(
                request.conversation_id,
                call,
                message_id=request.message_id,
                arguments_digest=request.arguments_digest,
                requested_by=self._sender(request),
                deadline=now() + timedelta(seconds=self.timeout),
            )
            logger.info(
                "call %s of tool %r waits for approval %s (deadline %s)",
                call.call_id,
                call.name,
                record.approval_id,
                record.deadline.isoformat(timespec="seconds"),
                extra={"conversation_id": request.conversation_id},
            )
            self._announce(record, tell_webhook=True)
        elif record.status == "pending":
            logger.info(
                "call %s of tool %r still waits for approval %s",
                call.call_id,
                call.name,
                record.approval_id,
                extra={"conversation_id": request.conversation_id},
            )
            self._announce(record, tell_webhook=False)
        decided = self._wait(record, request.cancelled)
        return verdict_for_decision(
            decided.status, decided_by=decided.decided_by, note=decided.note
        )

    def _sender(self, request: ApprovalRequest) -> str | None:
        for message in self.journal.messages(request.conversation_id):
            if message.message_id == request.message_id:
                return message.sent_by
        return None

    def _wait(self, record: ApprovalRecord, cancelled: threading.Event) -> ApprovalRecord:
        wakeup = threading.Event()
        with self._lock:
            self._waiting[record.approval_id] = (record.conversation_id, wakeup)
        try:
            while True:
                current = self.journal.get_approval(record.approval_id) or record
                if current.status != "pending":
                    return current
                remaining = (current.deadline - now()).total_seconds()
                if remaining <= 0:
                    return self._expire(current, _expired_note(current))
                if cancelled.is_set():
                    return self._expire(current, ORPHANED)
                wakeup.wait(min(remaining, self.poll_seconds))
                wakeup.clear()
        finally:
            with self._lock:
                self._waiting.pop(record.approval_id, None)

    def _expire(self, record: ApprovalRecord, note: str) -> ApprovalRecord:
        try:
            expired = self.journal.decide_approval(
                record.approval_id, status="expired", decided_by=None, note=note
            )
        except ApprovalDecidedError as exc:
            return exc.record  # a person decided just before the deadline: theirs stands
        assert expired is not None
        self._decided(expired)
        return expired

    # --- the operators' side (API) ----------------------------------------------------------------

    def get(self, approval_id: str) -> ApprovalRecord:
        """One approval (404 when unknown)."""
        record = self.journal.get_approval(approval_id)
        if record is None:
            raise ApiError(
                404,
                "approval_not_found",
                f"no approval {approval_id!r}; list them with GET /v1/approvals",
            )
        return record

    def decide(
        self,
        approval_id: str,
        decision: Literal["approve", "reject"],
        *,
        note: str = "",
        decided_by: str | None,
    ) -> ApprovalRecord:
        """Approve or reject a pending request (404 unknown; 409 decided or expired)."""
        record = self.get(approval_id)
        if record.status == "pending" and record.deadline <= now():
            record = self._expire(record, _expired_note(record))
        try:
            decided = self.journal.decide_approval(
                approval_id,
                status="approved" if decision == "approve" else "rejected",
                decided_by=decided_by or ANONYMOUS,
                note=note,
            )
        except ApprovalDecidedError as exc:
            raise ApiError(
                409,
                "approval_decided",
                f"{exc}; a decision is taken once (the run has gone on with it)",
                details={"status": exc.record.status},
            ) from None
        assert decided is not None
        self.wake(approval_id)
        self._decided(decided)
        return decided

    def wake(self, approval_id: str) -> bool:
        """Have the call waiting here for `approval_id` read the journal now (a decision was
        written, here or by another replica); False when no call here waits for it."""
        with self._lock:
            waiting = self._waiting.get(approval_id)
        if waiting is None:
            return False
        waiting[1].set()
        return True

    def expire_orphans(self, running: set[int]) -> int:
        """Expire pending requests that no run waits for (their message is not `running`).

        Called on start, after recovery queued the runs it resumes.
        """
        pending, _ = self.journal.list_approvals(status="pending", limit=100_000)
        orphans = [r for r in pending if r.message_id is None or r.message_id not in running]
        for record in orphans:
            logger.warning(
                "approval %s (call %s of tool %r) has no run waiting for it; it expires",
                record.approval_id,
                record.call_id,
                record.tool,
            )
            self._expire(record, ORPHANED)
        return len(orphans)

    # --- telling people ---------------------------------------------------------------------------

    def _announce(self, record: ApprovalRecord, *, tell_webhook: bool) -> None:
        data = json_data(record)
        self.publish_run(record.conversation_id, "approval_requested", data)
        self.hub.publish("approval_requested", data)
        if tell_webhook and self.webhook is not None:
            self.webhook.send(
                {
                    "event": "approval_requested",
                    "approval": data,
                    "approve_url": f"{self.base_url()}/v1/approvals/{record.approval_id}",
                }
            )

    def _decided(self, record: ApprovalRecord) -> None:
        logger.info(
            "approval %s (call %s of tool %r): %s%s",
            record.approval_id,
            record.call_id,
            record.tool,
            record.status,
            f" by {record.decided_by}" if record.decided_by else "",
            extra={"conversation_id": record.conversation_id},
        )
        self.count(record.status)
        data = json_data(record)
        self.publish_run(record.conversation_id, "approval_decided", data)
        self.hub.publish("approval_decided", data)


def _expired_note(record: ApprovalRecord) -> str:
    waited = round((record.deadline - record.requested_at).total_seconds())
    return (
        f"no one approved within {describe_seconds(waited)}; the call was not run (an "
        "operator answers approvals in the console or at /v1/approvals; the daemon's "
        "--approval-timeout sets how long they have)"
    )
