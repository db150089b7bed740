"""What the loop uses: one conversation's `Ledger` and a message's `MessageTrail`."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from bridge.errors import BridgeError, RunInterruptedError
from bridge.journal.base import Journal
from bridge.journal.records import INTERRUPTED_CODE, MessageEnd, StateSnapshot, now
from bridge.types import EventTally, HumanInputRequested, RunFailed, ToolBatch, ToolCall, ToolRun

if TYPE_CHECKING:
    from bridge.types import Event

__all__ = ["INTERRUPTED_OUTPUT", "Ledger", "MessageTrail"]

logger = logging.getLogger(__name__)

INTERRUPTED_OUTPUT = (
    "The tool call {name!r} was interrupted by a restart of the bridge and was not run again: "
    "the tool is not marked idempotent, so running it twice could repeat its effect. Whether "
    "it completed is unknown."
)
"""The output a non-idempotent call gets when a crash interrupted it."""


class Ledger:
    """One conversation's tool calls in a journal: what ran, what to run, what was cut short.

    Args:
        journal: where the states are written.
        conversation_id: the conversation ("" before the platform gave it an id).
    """

    def __init__(self, journal: Journal, conversation_id: str) -> None:
        self.journal = journal
        self.conversation_id = conversation_id

    def get(self, call_id: str) -> ToolRun | None:
        """The recorded run of a call that finished, else None."""
        record = self.journal.get_call(self.conversation_id, call_id)
        return record.to_run() if record is not None and record.done else None

    def __contains__(self, call_id: object) -> bool:
        return isinstance(call_id, str) and self.get(call_id) is not None

    def __getitem__(self, call_id: str) -> ToolRun:
        run = self.get(call_id)
        if run is None:
            raise KeyError(call_id)
        return run

    def receive(
        self, batch: ToolBatch, message_id: int | None, state: StateSnapshot | None = None
    ) -> None:
        """Write the batch down ("received") before anything else happens to it, with the
        platform's state that has it pending (`state`, if the platform keeps any)."""
        self.journal.receive(self.conversation_id, batch, message_id=message_id, state=state)

    def plan(
        self, batch: ToolBatch, is_idempotent: Callable[[str], bool]
    ) -> tuple[list[ToolCall], list[ToolRun]]:
        """Split a received batch into calls to run now and records for interrupted calls.

        Finished calls are in neither list (their recorded output is sent); a call "started"
        but never finished is run again only if `is_idempotent(tool name)` says its tool is
        safe to repeat (`Toolbox.is_idempotent`): the journal knows calls, not tools.
        """
        fresh: list[ToolCall] = []
        interrupted: list[ToolRun] = []
        for call in batch.calls:
            record = self.journal.get_call(self.conversation_id, call.call_id)
            if record is not None and record.done:
                logger.info("call %s already ran; sending its recorded output", call.call_id)
            elif record is not None and record.state == "started":
                if is_idempotent(call.name):
                    logger.warning(
                        "call %s was interrupted; re-running idempotent tool %r",
                        call.call_id,
                        call.name,
                    )
                    fresh.append(call)
                else:
                    logger.warning(
                        "call %s was interrupted; tool %r is not idempotent, so it "
                        "is not run again",
                        call.call_id,
                        call.name,
                    )
                    interrupted.append(_interrupted_run(call, record.started_at))
            else:
                fresh.append(call)
        return fresh, interrupted

    def start(
        self, calls: Iterable[ToolCall], traceparents: Mapping[str, str] | None = None
    ) -> None:
        """Mark calls "started": each right before its function may run (`traceparents`:
        call id -> the trace context of its execution's span, written with it)."""
        ids = [call.call_id for call in calls]
        if ids:
            if traceparents:
                self.journal.start(self.conversation_id, ids, traceparents=traceparents)
            else:
                self.journal.start(self.conversation_id, ids)

    def finish(self, run: ToolRun) -> None:
        """Record a call's outcome."""
        self.journal.finish(self.conversation_id, run)

    def submitting(self, batch: ToolBatch) -> None:
        """Mark the batch "submitting" before its outputs are posted."""
        self.journal.submitting(self.conversation_id, batch)

    def submit(self, batch: ToolBatch, state: StateSnapshot | None = None) -> None:
        """Mark the batch "submitted" once the platform accepted its outputs, with the
        platform's state that holds them (`state`, if the platform keeps any)."""
        self.journal.submit(self.conversation_id, batch, state=state)


def _interrupted_run(call: ToolCall, started_at: datetime | None) -> ToolRun:
    return ToolRun(
        call_id=call.call_id,
        name=call.name,
        arguments=call.arguments,
        output=INTERRUPTED_OUTPUT.format(name=call.name),
        error="tool_error",
        started_at=started_at or now(),
        duration_ms=0.0,
    )


class MessageTrail:
    """Watches a run's events and writes how its message ended."""

    def __init__(self, journal: Journal, message_id: int, tally: EventTally | None = None) -> None:
        self.journal = journal
        self.message_id = message_id
        self._tally = EventTally() if tally is None else tally
        """Where the events are noted (`tally`: one the caller reads too, e.g. to build the
        run's result from the same events)."""

    def see(self, event: Event) -> None:
        """Take note of one event."""
        self._tally.see(event)

    def close(self, error: BaseException | None, *, rounds: int) -> None:
        """Write the message's end: from the terminal event, or from `error`."""
        end = self._tally.end
        if isinstance(error, GeneratorExit) and end is not None:
            error = None  # closed after its last event (e.g. a failed run): record that event
        if isinstance(error, GeneratorExit):
            # Nobody is left to tell: the caller abandoned the stream (or it is being
            # garbage-collected), so a failed write is logged rather than raised.
            try:
                self.journal.end_message(self.message_id, self._end(error, rounds))
            except Exception:
                logger.exception("could not record the end of message %s", self.message_id)
        else:
            self.journal.end_message(self.message_id, self._end(error, rounds))

    def _end(self, error: BaseException | None, rounds: int) -> MessageEnd:
        end = self._tally.end
        text = "".join(self._tally.text)
        common: dict[str, Any] = {"request_ids": self._tally.request_ids, "rounds": rounds}
        if isinstance(error, GeneratorExit):
            return MessageEnd(
                status="failed",
                answer=text,
                error_code="abandoned",
                error_message="the caller stopped reading the run before it ended",
                platform_settled=False,
                **common,
            )
        if error is not None:
            if isinstance(error, BridgeError) and not isinstance(error, RunInterruptedError):
                code = type(error).__name__
            else:
                code = INTERRUPTED_CODE
            return MessageEnd(
                status="failed",
                answer=text,
                error_code=code,
                error_message=str(error) or type(error).__name__,
                platform_settled=False,
                **common,
            )
        if isinstance(end, RunFailed):
            # A platform that fails a run may still wait for what it asked (an in-band error
            # answering tool outputs leaves their calls pending): not a state to build on.
            return MessageEnd(
                status="failed",
                answer=text,
                error_code=end.code,
                error_message=end.message,
                platform_settled=False,
                **common,
            )
        if isinstance(end, HumanInputRequested):
            return MessageEnd(
                status="waiting_input",
                answer=text or end.prompt,
                interrupt_id=end.interrupt_id,
                **common,
            )
        return MessageEnd(status="finished", answer=self._tally.answer, **common)
