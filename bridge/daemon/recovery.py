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

A resumed batch may hold a call waiting for a person's approval: the resumed run finds the
same pending request in the journal (same call id and arguments) and waits again until its
deadline (`bridge.daemon.approvals`). A pending request that no resumed run waits for expires.
"""

from __future__ import annotations

import logging

from bridge.daemon.service import Service
from bridge.journal.records import INTERRUPTED_CODE, INTERRUPTED_MESSAGE, MessageEnd

__all__ = ["INTERRUPTED_CODE", "INTERRUPTED_MESSAGE", "recover"]

logger = logging.getLogger(__name__)


def recover(service: Service) -> tuple[int, int]:
    """Resume or fail each interrupted message; returns (resumed, failed)."""
    journal = service.journal
    resumed = failed = 0
    running: set[int] = set()
    for message in journal.unfinished_messages():
        extra = {"conversation_id": message.conversation_id, "message_id": message.message_id}
        pending = journal.pending(message.message_id)
        if pending is not None and service.active(message.conversation_id) is None:
            logger.warning(
                "resuming message %d of conversation %s: %d tool call(s) were pending%s",
                message.message_id,
                message.conversation_id,
                len(pending.batch.calls),
                " (their outputs were being posted: posting them again)"
                if pending.submitting
                else "",
                extra=extra,
            )
            service.start_recovery(message.message_id, message.conversation_id, pending)
            running.add(message.message_id)
            service.metrics.recovered.inc("resumed")
            resumed += 1
            continue
        logger.warning(
            "message %d of conversation %s was interrupted while the agent was answering; "
            "marking it failed",
            message.message_id,
            message.conversation_id,
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
        failed += 1
    service.approvals.expire_orphans(running)
    if resumed or failed:
        logger.info("recovery: %d message(s) resumed, %d marked failed", resumed, failed)
    return resumed, failed
