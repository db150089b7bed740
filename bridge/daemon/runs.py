"""One run in the daemon: its events as Server-Sent Events, its subscribers, its outcome.

The run itself happens on a worker thread (`bridge.daemon.service`); it hands each loop event
to `RunHandle.publish` there, which keeps a bounded history (so a client that connects late
replays the run so far) and, only when someone follows, has the event loop pass it on.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Literal

from bridge.daemon.hub import SseEvent
from bridge.daemon.models import MessageResult
from bridge.daemon.outbound import json_data
from bridge.errors import (
    BridgeError,
    MaxRoundsError,
    PlatformError,
    PlatformTimeoutError,
    RunFailedError,
    RunInterruptedError,
    UsageError,
    held_back,
    redact,
    redact_data,
)
from bridge.journal.records import JournalUnavailableError, LeaseLostError
from bridge.types import (
    Event,
    EventTally,
    HumanInputRequested,
    RunFailed,
    RunFinished,
    TextDelta,
    ToolCallFinished,
    ToolCallsRequested,
    ToolCallStarted,
)

__all__ = [
    "RunFailure",
    "RunHandle",
    "RunOutcome",
    "RunTally",
    "SseEvent",
    "StreamedText",
    "event_payload",
]

MAX_HISTORY = 5000
"""Events kept for late followers; past this, text deltas are only sent live."""


def event_payload(event: Event) -> tuple[str, dict[str, Any]] | None:
    """The SSE name and JSON data of a loop event (None for events clients do not need)."""
    if isinstance(event, TextDelta):
        return "text_delta", {"text": event.text}
    if isinstance(event, ToolCallsRequested):
        calls = [json_data(c, exclude={"raw_arguments"}) for c in event.batch.calls]
        return "tool_calls", {
            "batch_id": event.batch.batch_id,
            "calls": calls,
            "platform_request_id": event.batch.resume.get("request_id"),
        }
    if isinstance(event, ToolCallStarted):
        return "tool_call_started", json_data(event.call, exclude={"raw_arguments"})
    if isinstance(event, ToolCallFinished):
        return "tool_call_finished", json_data(event.run)
    if isinstance(event, RunFinished):
        return "finished", {"answer": event.answer, "platform_request_id": event.request_id}
    if isinstance(event, RunFailed):
        return "failed", {
            "code": event.code,
            "message": event.message,
            "platform_request_id": event.request_id,
        }
    if isinstance(event, HumanInputRequested):
        return "human_input", {"interrupt_id": event.interrupt_id, "prompt": event.prompt}
    return None


class StreamedText:
    """A run's answer text as it streams, cut so that no registered secret is split between
    two ``text_delta`` events (each event is redacted on its own, see `RunHandle.publish`).

    `feed` returns what may go out now and keeps back the end that could be the start of a
    secret (`bridge.errors.held_back`); `flush` returns what is kept (before any other
    event, and at the run's end).
    """

    def __init__(self) -> None:
        self._kept = ""

    def feed(self, text: str) -> str:
        """What of the text so far may be sent now."""
        # Masked before the cut: a whole secret whose end is the start of another one must not
        # be cut there (each piece is masked on its own, so a cut secret would go out).
        text = redact(self._kept + text)
        keep = held_back(text)
        self._kept = text[len(text) - keep :] if keep else ""
        return text[: len(text) - keep]

    def flush(self) -> str:
        """The text kept back (none is kept after this)."""
        text, self._kept = self._kept, ""
        return text


@dataclass(frozen=True)
class RunFailure:
    """Why a run did not finish, as an API error."""

    status: int
    code: str
    message: str
    platform_request_id: str | None = None

    @classmethod
    def from_exception(cls, exc: BaseException) -> RunFailure:
        """Map a loop error to an HTTP status and code."""
        request_id = getattr(exc, "request_id", None)
        message = redact(str(exc)) or type(exc).__name__
        if isinstance(exc, LeaseLostError):
            return cls(409, "lease_lost", message, request_id)
        if isinstance(exc, JournalUnavailableError):
            return cls(503, "journal_unavailable", message, request_id)
        if isinstance(exc, RunFailedError):
            return cls(502, "run_failed", message, request_id)
        if isinstance(exc, MaxRoundsError):
            return cls(502, "max_rounds", message, request_id)
        if isinstance(exc, RunInterruptedError):
            return cls(502, "interrupted", message, request_id)
        if isinstance(exc, PlatformTimeoutError):
            return cls(504, "platform_timeout", message, request_id)
        if isinstance(exc, PlatformError):
            return cls(502, "platform_error", message, request_id)
        if isinstance(exc, UsageError):
            return cls(400, "bad_request", message, request_id)
        if isinstance(exc, BridgeError):
            return cls(502, "run_error", message, request_id)
        return cls(500, "internal_error", "internal error; the daemon's log has the details")

    def to_json(self) -> dict[str, Any]:
        """The `ErrorInfo`-like body (without the request id, added by the route)."""
        return {
            "code": self.code,
            "message": self.message,
            "platform_request_id": self.platform_request_id,
        }


@dataclass(frozen=True)
class RunOutcome:
    """How a run ended: a result, or a failure."""

    status: Literal["finished", "waiting_input", "failed"]
    result: MessageResult | None = None
    failure: RunFailure | None = None


class RunTally(EventTally):
    """Collects what the HTTP result needs from a run's events (on the worker thread)."""

    def outcome(self, conversation_id: str, message_id: int | None, rounds: int) -> RunOutcome:
        """The outcome once the events ran out without an exception."""
        end = self.end
        if isinstance(end, RunFailed):
            failure = RunFailure(
                502, "run_failed", f"the agent run failed: {end.message}", end.request_id
            )
            return RunOutcome("failed", failure=failure)
        text = self.answer
        waiting = isinstance(end, HumanInputRequested)
        result = MessageResult(
            conversation_id=conversation_id,
            message_id=message_id,
            status="waiting_input" if waiting else "finished",
            answer=text,
            rounds=rounds,
            tool_runs=self.runs,
            usage=end.usage if isinstance(end, RunFinished) else None,
            request_ids=self.request_ids,
            human_input_prompt=end.prompt if isinstance(end, HumanInputRequested) else None,
        )
        return RunOutcome(result.status, result=result)


class RunHandle:
    """A run in progress: its events so far, its followers and, at the end, its outcome.

    Made on the event loop; `publish` may be called from any thread (the run's worker), the
    rest on the loop. An event gets its id and its place in the history under a lock, and
    is handed to the followers there is then by one callback on the loop, scheduled under
    the same lock: followers see the events in id order, and with none (a plain JSON
    answer) an event costs no hop to the loop.
    """

    def __init__(self, conversation_id: str, request_id: str, *, recovered: bool = False) -> None:
        self.conversation_id = conversation_id
        self.request_id = request_id
        self.recovered = recovered
        self.message_id: int | None = None
        self.began = time.monotonic()
        self.history: list[SseEvent] = []
        self.outcome: RunOutcome | None = None
        self.result_data: Any = None
        """The outcome's result as the ``done`` event holds it (JSON data, secrets masked):
        what a plain JSON answer sends, dumped and masked once for both."""
        self._done = asyncio.Event()
        self._followers: set[asyncio.Queue[SseEvent | None]] = set()
        self._next_id = 1
        self._lock = threading.Lock()
        self._loop = _running_loop()

    @property
    def done(self) -> bool:
        """True once the run has an outcome."""
        return self._done.is_set()

    def publish(self, name: str, data: dict[str, Any]) -> dict[str, Any]:
        """Record one event and send it to every follower (from any thread); its data's
        secrets are masked here (`redact_data`), as for the hub's events. Returns the masked
        data."""
        data = redact_data(data)
        with self._lock:
            event = SseEvent(self._next_id, name, data)
            self._next_id += 1
            if len(self.history) < MAX_HISTORY or name != "text_delta":
                self.history.append(event)
            if self._followers:
                self._schedule(event)
        return data

    def _schedule(self, event: SseEvent | None) -> None:
        """Have the loop hand `event` to the current followers (under `_lock`: in order)."""
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        followers = tuple(self._followers)
        if _running_loop() is loop:
            loop.call_soon(_deliver, followers, event)
        else:
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody listens
                loop.call_soon_threadsafe(_deliver, followers, event)

    def finish(self, outcome: RunOutcome) -> None:
        """Set the outcome, send the closing ``done`` event and release the followers."""
        self.outcome = outcome
        data: dict[str, Any] = {"status": outcome.status, "message_id": self.message_id}
        if outcome.result is not None:
            data["result"] = json_data(outcome.result)
        if outcome.failure is not None:
            data["error"] = {**outcome.failure.to_json(), "request_id": self.request_id}
        published = self.publish("done", data)
        self.result_data = published.get("result")
        with self._lock:
            self._done.set()
            if self._followers:
                self._schedule(None)

    async def wait(self) -> RunOutcome:
        """Wait for the outcome."""
        await self._done.wait()
        assert self.outcome is not None
        return self.outcome

    async def follow(self, keepalive: float | None = None) -> AsyncIterator[SseEvent | None]:
        """Every event of the run: the history first, then live ones until ``done``.

        With `keepalive`, None is yielded after that many quiet seconds (send a comment so
        proxies keep the connection open).
        """
        queue: asyncio.Queue[SseEvent | None] = asyncio.Queue()
        with self._lock:
            if self._loop is None:  # made outside the loop (tests): deliver on this one
                self._loop = asyncio.get_running_loop()
            replay = list(self.history)
            finished = self.done
            if not finished:
                self._followers.add(queue)
        try:
            for old in replay:
                yield old
            while not finished:
                try:
                    event = await asyncio.wait_for(queue.get(), keepalive)
                except asyncio.TimeoutError:
                    yield None
                    continue
                if event is None:
                    return
                yield event
        finally:
            self._followers.discard(queue)


def _deliver(followers: tuple[asyncio.Queue[SseEvent | None], ...], event: SseEvent | None) -> None:
    for queue in followers:
        queue.put_nowait(event)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
