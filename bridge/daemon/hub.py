"""The daemon-wide event hub: what happens in every conversation, for the console.

    worker threads, routes                 hub (event loop)                 GET /v1/events
    publish(name, data) --------------->   id = n + 1, history (bounded)  -> every follower
                    (call_soon_threadsafe)                                   (one per open page)

Each event gets the next id. A follower first gets a ``hello`` with the newest id; one that
reconnects with ``Last-Event-ID: n`` then gets the events after ``n`` still in the history,
then live ones. When ``n`` is older than the history, it gets a ``reset`` event instead: what
it missed is gone, so it should reload what it shows.
Chatty events (answer text as it streams) go to live followers only and are never replayed:
the run's end carries the whole answer.

A `tap` sees every event published here (the `bridge.daemon.relay` sends them to the other
replicas); events that came from another replica are published with ``forward=False`` so they
never travel back.

Every event's data passes `bridge.errors.redact_data` here, as it is made: registered secrets
(the platform token, the API keys, HTTP tools' credentials, the database password) are masked
in whatever a tool returned or the model sent, before the history, the followers or a tap see
it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import threading
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from bridge.errors import redact_data

__all__ = ["HUB_HISTORY", "ID_SPAN", "EventHub", "HubTap", "SseEvent"]

HUB_HISTORY = 2000
"""Events kept for followers that reconnect."""

ID_SPAN = 1 << 32
"""Ids one hub may give out; hubs start at different multiples of it."""
ID_BASES = 1 << 20
"""How many bases there are: ids stay below 2**52, exact in JavaScript numbers."""

FOLLOWER_BACKLOG = 5000
"""Events a slow follower may fall behind by before it is dropped (it reconnects and resumes)."""

HubTap = Callable[[str, dict[str, Any], bool], None]
"""Called with each event's name, data and `replay` flag, in id order; it must not block."""


@dataclass(frozen=True)
class SseEvent:
    """One Server-Sent Event of a stream (the hub's or a run's): an id, a name and JSON data."""

    id: int
    name: str
    data: dict[str, Any]

    def encode(self) -> bytes:
        """The wire form: ``id``, ``event`` and one ``data`` line of JSON."""
        payload = json.dumps(self.data, ensure_ascii=False, separators=(",", ":"))
        # Id 0 (the hub's hello, reset) is no position in a history: a client must not resume
        # from it, so it is sent without one.
        head = f"id: {self.id}\n" if self.id else ""
        return f"{head}event: {self.name}\ndata: {payload}\n\n".encode()


class EventHub:
    """Where the daemon publishes what happens (conversations, runs, tool calls, approvals).

    `publish` may be called from any thread, before or after the serving loop is bound;
    followers live on the loop.

    Args:
        history: how many events are kept for followers that reconnect.
        base: where this hub's ids start (after it); default: a random multiple of
            `ID_SPAN`, so that an id from another hub (before a restart, or another replica
            behind a load balancer) is recognised as foreign and answered with a ``reset``,
            never with a replay of unrelated events that happen to follow that number here.
    """

    def __init__(self, history: int = HUB_HISTORY, *, base: int | None = None) -> None:
        self._history: deque[SseEvent] = deque(maxlen=history)
        self._lock = threading.Lock()
        if base is None:
            base = secrets.randbelow(ID_BASES - 1) * ID_SPAN + ID_SPAN
        self._base = base
        self._next_id = base + 1
        self._forgotten = base
        """The id of the newest event pushed out of the history."""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._followers: set[asyncio.Queue[SseEvent | None]] = set()
        self._closed = False
        self._taps: list[HubTap] = []

    def __repr__(self) -> str:
        return f"EventHub(last_id={self.last_id}, followers={len(self._followers)})"

    @property
    def last_id(self) -> int:
        """The id of the newest event (the hub's base before the first)."""
        return self._next_id - 1

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """Deliver to followers on `loop` (the serving loop) from now on."""
        self._loop = loop

    def tap(self, listener: HubTap) -> None:
        """Hand every event published from now on (except ``forward=False`` ones) to `listener`."""
        with self._lock:
            self._taps.append(listener)

    def untap(self, listener: HubTap) -> None:
        """Stop handing events to `listener`."""
        with self._lock:
            if listener in self._taps:
                self._taps.remove(listener)

    def publish(
        self,
        name: str,
        data: dict[str, Any],
        *,
        replay: bool = True,
        forward: bool = True,
        masked: bool = False,
    ) -> None:
        """Publish one event (thread-safe; callable from worker threads).

        Args:
            name: the event's name, e.g. ``run_started``.
            data: its JSON data, secrets masked here (`redact_data`); ``at`` (now, ISO 8601)
                is added when missing.
            replay: False for chatty events that followers reconnecting need not see again.
            forward: False for an event another replica sent: the taps do not see it.
            masked: True when every string of `data` already passed `redact_data` (a run's
                event, masked by its `bridge.daemon.runs.RunHandle`): not masked again.
        """
        body = data if masked else redact_data(data)
        if "at" not in body:
            body["at"] = _now()
        with self._lock:
            event = SseEvent(self._next_id, name, body)
            self._next_id += 1
            if replay:
                if len(self._history) == self._history.maxlen:
                    self._forgotten = self._history[0].id
                self._history.append(event)
            if forward:
                # Under the lock, so a tap sees the events in id order.
                for listener in self._taps:
                    listener(name, body, replay)
        if not self._followers:
            # Nobody follows (the usual case without an open console): no hop to the loop.
            # A follower registering now gets a hello whose last_id already covers this
            # event (its id was taken above), and a replay from the history, which holds it.
            return
        loop = self._loop
        if loop is None:
            return
        if _running_loop() is loop:
            self._deliver(event)
        else:
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody listens
                loop.call_soon_threadsafe(self._deliver, event)

    def close(self, reason: str) -> None:
        """Say goodbye (a ``closing`` event) and end every stream; new followers end at once."""
        self.publish("closing", {"reason": reason})
        self._closed = True
        loop = self._loop
        if loop is None:
            return
        if _running_loop() is loop:
            self._end_all()
        else:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self._end_all)

    def _end_all(self) -> None:
        for queue in list(self._followers):
            queue.put_nowait(None)
        self._followers.clear()

    def _deliver(self, event: SseEvent) -> None:
        for queue in list(self._followers):
            if queue.qsize() >= FOLLOWER_BACKLOG:
                # Too slow: end its stream; the page reconnects with Last-Event-ID.
                self._followers.discard(queue)
                queue.put_nowait(None)
            else:
                queue.put_nowait(event)

    def since(self, last_id: int) -> tuple[list[SseEvent], bool]:
        """The kept events after `last_id` (0: from the first), and whether some after it are
        no longer kept (always, for an id this hub never gave out)."""
        if last_id == 0:
            last_id = self._base
        if not self._base <= last_id < self._base + ID_SPAN:
            return [], True
        with self._lock:
            kept = list(self._history)
            forgotten = self._forgotten
        return [e for e in kept if e.id > last_id], last_id < forgotten

    def follow(
        self, last_id: int | None = None, keepalive: float | None = None
    ) -> AsyncIterator[SseEvent | None]:
        """A new follower's events: a ``hello`` (its data's ``last_id`` is the newest event's
        id), then the kept events after `last_id` when given, then live ones.

        The follower is registered by this call, before the first event is read: a route that
        calls it before answering misses nothing published after its ``hello``. With
        `keepalive`, None is yielded after that many quiet seconds. A `last_id` older than the
        history (or from before a restart) gets a ``reset`` event instead of the replay.
        """
        queue: asyncio.Queue[SseEvent | None] = asyncio.Queue()
        if self._closed:
            queue.put_nowait(None)
        else:
            self._followers.add(queue)  # before reading the history: nothing falls in between
        hello = SseEvent(0, "hello", {"last_id": self.last_id, "at": _now()})
        return self._events(queue, hello, last_id, keepalive)

    async def _events(
        self,
        queue: asyncio.Queue[SseEvent | None],
        hello: SseEvent,
        last_id: int | None,
        keepalive: float | None,
    ) -> AsyncIterator[SseEvent | None]:
        try:
            yield hello
            seen = 0
            if last_id is not None:
                replay, lost = self.since(last_id)
                if lost or last_id > hello.data["last_id"]:
                    yield SseEvent(0, "reset", {"last_id": hello.data["last_id"], "at": _now()})
                    replay = []
                for old in replay:
                    seen = old.id
                    yield old
            while True:
                try:
                    event = await asyncio.wait_for(queue.get(), keepalive)
                except asyncio.TimeoutError:
                    yield None
                    continue
                if event is None:
                    return
                if event.id > seen:
                    yield event
        finally:
            self._followers.discard(queue)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
