"""On start: finish or fail every message a crash (or an expired grace period) interrupted.

For each message the journal still shows "running":

- its latest tool batch was received but not submitted: the run is *resumed*. Finished calls
  send their recorded outputs, calls that never started run, calls that started and never
  finished run again only if their tool is idempotent (else they report the interruption);
  then the outputs are submitted and the run continues to its answer;
- otherwise the crash happened while the agent was answering (before a batch, or after the
  outputs were submitted): that stream is gone and outputs are never sent twice, so the
  message is marked *failed* with code "interrupted" and a message saying to ask again.

No message is dropped: every one ends finished or failed.
"""

from __future__ import annotations

import logging

from bridge.daemon.service import Service

__all__ = ["INTERRUPTED_CODE", "INTERRUPTED_MESSAGE", "recover"]

logger = logging.getLogger(__name__)

INTERRUPTED_CODE = "interrupted"
INTERRUPTED_MESSAGE = (
    "the bridge restarted while the agent was answering, so the answer was lost (tool outputs "
    "are never sent twice); ask again"
)


def recover(service: Service) -> tuple[int, int]:
    """Resume or fail each interrupted message; returns (resumed, failed)."""
    journal = service.journal
    resumed = failed = 0
    for message in journal.unfinished_messages():
        extra = {"conversation_id": message.conversation_id, "message_id": message.message_id}
        batch = journal.pending_batch(message.message_id)
        if batch is not None and service.active(message.conversation_id) is None:
            logger.warning(
                "resuming message %d of conversation %s: %d tool call(s) were pending",
                message.message_id,
                message.conversation_id,
                len(batch.calls),
                extra=extra,
            )
            service.start_recovery(message.message_id, message.conversation_id, batch)
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
            status="failed",
            answer=message.answer,
            error_code=INTERRUPTED_CODE,
            error_message=INTERRUPTED_MESSAGE,
            request_ids=message.request_ids,
        )
        service.metrics.recovered.inc("failed")
        failed += 1
    if resumed or failed:
        logger.info("recovery: %d message(s) resumed, %d marked failed", resumed, failed)
    return resumed, failed
