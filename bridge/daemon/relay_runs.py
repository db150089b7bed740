"""Runs of other replicas, followed from this one (`bridge.daemon.relay`).

A run another replica does is announced on the relay (``run_started`` ... ``run_ended``); here
it becomes a `RunHandle` that this replica's clients can follow (the run's own event stream),
fed with the run's events as they arrive, and ended from the journal (the truth) when its end
is heard, or when a check finds its message no longer running (its ``run_ended`` may never
come: a notification lost, the replica dead).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

from bridge.daemon.models import MessageResult
from bridge.daemon.runs import RunFailure, RunHandle, RunOutcome

if TYPE_CHECKING:
    from bridge.journal.base import Journal
    from bridge.journal.records import MessageRecord

__all__ = ["RUN_EVENTS", "RemoteRuns"]

logger = logging.getLogger(__name__)

RUN_EVENTS = frozenset(
    {
        "tool_calls",
        "tool_call_started",
        "tool_call_finished",
        "text_delta",
        "finished",
        "failed",
        "human_input",
        "approval_requested",
        "approval_decided",
    }
)
"""Hub events that are also events of a run's own stream (`RunHandle`)."""

WATCH_SECONDS = 2.0
"""How often a run followed from another replica is checked against the journal."""


class RemoteRuns:
    """The runs other replicas are doing, by conversation, as heard on the relay (loop only)."""

    def __init__(self, journal: Journal) -> None:
        self.journal = journal
        self._remote: dict[str, RunHandle] = {}
        """Conversation id -> the run another replica is doing in it (loop only)."""
        self._watched: set[str] = set()
        self._tasks: set[asyncio.Task[Any]] = set()

    def __len__(self) -> int:
        return len(self._remote)

    def see(self, name: str, data: dict[str, Any]) -> None:
        """Follow one event another replica published (on the loop)."""
        cid = data.get("conversation_id")
        if not isinstance(cid, str):
            return
        if name == "run_started":
            handle = self._remote.get(cid)
            if handle is None or handle.done:
                handle = RunHandle(cid, str(data.get("request_id") or f"remote-{cid}"))
                self._remote[cid] = handle
            _set_message_id(handle, data)
        elif name == "run_ended":
            handle = self._remote.pop(cid, None)
            if handle is not None:
                _set_message_id(handle, data)
                self._spawn(self._finish(handle, data))
        elif name in RUN_EVENTS:
            handle = self._remote.get(cid)
            if handle is None:
                return
            _set_message_id(handle, data)
            handle.publish(name, data)

    def _spawn(self, work: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)  # held until done: the loop keeps only weak references
        task.add_done_callback(self._tasks.discard)

    def settle_all(self) -> None:
        """Check every followed run against the journal (events of them may have been missed)."""
        for cid, handle in list(self._remote.items()):
            self._spawn(self._settle(cid, handle))

    def cancel(self) -> None:
        """Cancel the checks under way (the relay is closing)."""
        for task in list(self._tasks):
            task.cancel()

    async def _finish(self, handle: RunHandle, ended: dict[str, Any]) -> None:
        outcome = await asyncio.to_thread(self._outcome, handle, ended)
        if not handle.done:
            handle.finish(outcome)

    async def _settle(self, cid: str, handle: RunHandle) -> bool:
        """End `handle` from the journal if its message is no longer running; True if it did."""
        messages = await asyncio.to_thread(self.journal.messages, cid)
        message = _message(messages, handle.message_id)
        if message is None or message.status == "running" or handle.done:
            return handle.done
        if self._remote.get(cid) is handle:
            del self._remote[cid]
        ended: dict[str, Any] = {"status": message.status, "message_id": message.message_id}
        if message.status not in ("finished", "waiting_input"):
            ended["status"] = "failed"
            ended["error"] = {
                "code": message.error_code or message.status,
                "message": message.error_message or f"the run ended: {message.status}",
            }
        await self._finish(handle, ended)
        return True

    def _outcome(self, handle: RunHandle, ended: dict[str, Any]) -> RunOutcome:
        """How a remote run ended, its result read from the journal (worker thread)."""
        cid = handle.conversation_id
        status = ended.get("status")
        if status not in ("finished", "waiting_input"):
            error = ended.get("error") if isinstance(ended.get("error"), dict) else {}
            assert isinstance(error, dict)
            return RunOutcome(
                "failed",
                failure=RunFailure(
                    502,
                    str(error.get("code") or "run_failed"),
                    str(error.get("message") or "the run failed on another replica"),
                    error.get("platform_request_id"),
                ),
            )
        message = _message(self.journal.messages(cid), handle.message_id)
        runs = [
            call.to_run()
            for call in self.journal.calls(cid)
            if call.done and handle.message_id is not None and call.message_id == handle.message_id
        ]
        prompt = next(
            (
                str(e.data.get("prompt"))
                for e in reversed(handle.history)
                if e.name == "human_input"
            ),
            None,
        )
        answer = message.answer if message is not None else str(ended.get("answer") or "")
        result = MessageResult(
            conversation_id=cid,
            message_id=handle.message_id,
            status="waiting_input" if status == "waiting_input" else "finished",
            answer=answer,
            rounds=message.rounds if message is not None else 0,
            tool_runs=runs,
            request_ids=message.request_ids if message is not None else [],
            human_input_prompt=prompt if status == "waiting_input" else None,
        )
        return RunOutcome(result.status, result=result)

    def busy(self, conversation_id: str) -> bool:
        """Whether another replica is known to run the conversation now."""
        handle = self._remote.get(conversation_id)
        return handle is not None and not handle.done

    async def remote_run(self, conversation_id: str) -> RunHandle | None:
        """The run another replica is doing in the conversation, to follow from here (its
        events from when this replica heard of it), or None when the journal says none runs."""
        handle = self._remote.get(conversation_id)
        if handle is None:
            messages = await asyncio.to_thread(self.journal.messages, conversation_id)
            last = messages[-1] if messages else None
            if last is None or last.status != "running":
                return None
            # Running in the journal: a replica holds its lease, or one that died did (another
            # takes the message over when the lease expires, and its events come here too).
            # Begun before this replica listened, or its run_started is still on the way.
            handle = self._remote.get(conversation_id)
            if handle is None:
                handle = RunHandle(conversation_id, f"remote-{last.message_id}")
                handle.message_id = last.message_id
                self._remote[conversation_id] = handle
        if conversation_id not in self._watched:
            self._watched.add(conversation_id)
            self._spawn(self._watch(conversation_id, handle))
        return handle

    async def _watch(self, cid: str, handle: RunHandle) -> None:
        """Check a followed remote run against the journal until it ends: its run_ended may
        never come (a notification lost, the replica dead)."""
        try:
            while not handle.done:
                await asyncio.sleep(WATCH_SECONDS)
                if handle.done or await self._settle(cid, handle):
                    return
        except Exception:
            logger.exception("relay: checking the run of conversation %s failed", cid)
        finally:
            self._watched.discard(cid)


def _set_message_id(handle: RunHandle, data: dict[str, Any]) -> None:
    mid = data.get("message_id")
    if isinstance(mid, int) and not isinstance(mid, bool):
        handle.message_id = mid


def _message(messages: list[MessageRecord], message_id: int | None) -> MessageRecord | None:
    if message_id is None:
        return messages[-1] if messages else None
    return next((m for m in messages if m.message_id == message_id), None)
