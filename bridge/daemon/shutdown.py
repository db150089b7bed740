"""The end of a SIGTERM's grace period, as seen by the requests still waiting for a run.

When the grace runs out, the runs still going are left to the journal (the next start recovers
them). The HTTP requests waiting for them must still get an answer, before the server stops
waiting for its connections: a waiting request gets a JSON 503 ``shutting_down``, an SSE
follower a ``failed`` event and then ``done``. Without this the server would cancel them, which
answers a plain-text 500 and logs a traceback.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from bridge.daemon.runs import RunHandle, RunOutcome, SseEvent

__all__ = ["SHUTTING_DOWN", "GraceClock"]

SHUTTING_DOWN = "shutting_down"


class GraceClock:
    """Fires once, when the grace period of a shutdown is over.

    Args:
        grace: the daemon's ``--grace`` in seconds.
    """

    def __init__(self, grace: float) -> None:
        self.grace = grace
        self._over = asyncio.Event()
        self._timer: asyncio.TimerHandle | None = None

    @property
    def over(self) -> bool:
        """True once the grace period ended."""
        return self._over.is_set()

    def arm(self, deadline: float | None = None) -> None:
        """Fire at `deadline` (`time.monotonic()` seconds; default: `grace` from now).

        Call it on the serving loop; a second call changes nothing.
        """
        if self._timer is not None or self.over:
            return
        if deadline is None:
            deadline = time.monotonic() + self.grace
        delay = max(0.0, deadline - time.monotonic())
        self._timer = asyncio.get_running_loop().call_later(delay, self._over.set)

    def message(self, conversation_id: str) -> str:
        """What the clients of an abandoned run are told."""
        return (
            f"the daemon is shutting down and its grace period ({self.grace:g} s) ended before "
            "this message was answered; the message is kept in the journal and is resumed by "
            "the next start on the same journal (see GET "
            f"/v1/conversations/{conversation_id} then)"
        )

    async def wait_for(self, handle: RunHandle) -> RunOutcome | None:
        """The run's outcome, or None if the grace period ends first."""
        if handle.done:
            return await handle.wait()
        waiter = asyncio.ensure_future(handle.wait())
        stop = asyncio.ensure_future(self._over.wait())
        try:
            await asyncio.wait({waiter, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()
            stop.cancel()
        return handle.outcome if handle.done else None

    async def follow(
        self, handle: RunHandle, keepalive: float | None = None
    ) -> AsyncIterator[SseEvent | None]:
        """`RunHandle.follow`, ended by a ``failed`` + ``done`` pair if the grace period ends.

        The two closing events have the shape the run's own would have (code
        ``shutting_down``), so a client handles them as any failed run.
        """
        events = handle.follow(keepalive).__aiter__()
        stop = asyncio.ensure_future(self._over.wait())
        step: asyncio.Future[SseEvent | None] | None = None
        last_id = 0
        try:
            while True:
                step = asyncio.ensure_future(_next(events))
                await asyncio.wait({step, stop}, return_when=asyncio.FIRST_COMPLETED)
                if step.done():  # checked first: what the run already said comes before us
                    try:
                        event = step.result()
                    except StopAsyncIteration:
                        return
                    if event is not None:
                        last_id = event.id
                    yield event
                    continue
                error: dict[str, Any] = {
                    "code": SHUTTING_DOWN,
                    "message": self.message(handle.conversation_id),
                    "platform_request_id": None,
                }
                yield SseEvent(last_id + 1, "failed", error)
                done = {
                    "status": "failed",
                    "message_id": handle.message_id,
                    "error": {**error, "request_id": handle.request_id},
                }
                yield SseEvent(last_id + 2, "done", done)
                return
        finally:
            stop.cancel()
            if step is not None and not step.done():
                step.cancel()  # the generator cannot be closed while a step runs it
                await asyncio.wait({step})
            close = getattr(events, "aclose", None)  # typed as an iterator, is a generator
            if close is not None:
                await close()


async def _next(events: AsyncIterator[SseEvent | None]) -> SseEvent | None:
    return await events.__anext__()
