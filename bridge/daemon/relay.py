"""Live events across replicas: daemons sharing a PostgreSQL journal hear each other's runs.

    replica A                                             replica B
    hub.publish(name, data)                               listener thread: LISTEN
      -> tap -> outbox -> sender thread                     -> hub.publish(forward=False)
         SELECT pg_notify('toolbridge_events', payload) ->     (data: "replica": "A")
                                                            -> RemoteRun: the run's own stream
                                                               (GET /v1/conversations/{id}/events)
                                                            -> ApprovalDesk.wake (a decision
                                                               taken on A, for a run on B)

Payloads stay under PostgreSQL's 8000-byte NOTIFY limit: long strings, lists and objects are
cut with a marker, and past that only the ids, names and status are kept (`encode`). The
journal is the truth: a follower that missed something reloads from it. A notification lost
(the listening connection dropped and came back, or a sender skipped one: each sender numbers
its notifications) makes this replica publish a ``reset`` hub event, which tells the console
to reload what it shows; runs followed from another replica are checked against the journal.

Text deltas travel too (live followers want the answer as it streams), coalesced: the sender
joins the deltas of one run queued while it was busy, so a fast stream costs one NOTIFY per
database round trip, not one per chunk.

Only a `PostgresJournal` has a relay; psycopg is imported lazily, by the journal.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import os
import queue
import socket
import threading
import time
import uuid
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bridge.daemon.models import MessageResult
from bridge.daemon.runs import RunFailure, RunHandle, RunOutcome
from bridge.errors import redact

if TYPE_CHECKING:
    from fastapi import Request

    from bridge.daemon.service import Service
    from bridge.journal.base import Journal
    from bridge.journal.records import MessageRecord

__all__ = [
    "CHANNEL",
    "PAYLOAD_LIMIT",
    "Notice",
    "Relay",
    "decode",
    "encode",
    "relay_of",
    "start_relay",
]

logger = logging.getLogger(__name__)

CHANNEL = "toolbridge_events"
PAYLOAD_LIMIT = 7900
"""Bytes of one payload at most (PostgreSQL refuses 8000 and more), with room to spare."""

NOT_FORWARDED = frozenset({"hello", "reset", "closing", "tools_reloaded", "tools_reload_failed"})
"""Hub events about this replica only: its stream, its shutdown, its own toolbox."""

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

KEPT = (
    "conversation_id",
    "message_id",
    "approval_id",
    "call_id",
    "batch_id",
    "name",
    "tool",
    "status",
    "code",
    "request_id",
    "recovered",
    "sent_by",
    "decided_by",
    "at",
)
"""What a payload keeps when even its cut strings do not fit: enough to know what happened."""

LEVELS = ((None, None), (2000, 200), (500, 50), (100, 10), (20, 3))
"""(characters per string, items per list or object) tried in turn until a payload fits."""

COALESCE_SECONDS = 0.05
"""How long the sender waits for more text deltas after one, to join them."""
BACKOFF_FIRST = 0.2
BACKOFF_MAX = 5.0
HEARTBEAT_SECONDS = 10.0
"""A quiet listening connection is checked this often (a dead server's socket may stay open)."""
WATCH_SECONDS = 2.0
"""How often a run followed from another replica is checked against the journal."""
READY_TIMEOUT = 10.0


@dataclass(frozen=True)
class Notice:
    """One notification: who sent it (replica id, process, sequence number) and the event."""

    replica: str
    instance: str
    seq: int
    name: str
    data: dict[str, Any]
    replay: bool = True


# --- payloads ---------------------------------------------------------------------------------


def encode(notice: Notice, limit: int = PAYLOAD_LIMIT) -> str:
    """The JSON text of `notice`, at most `limit` bytes (ASCII only: no NUL, no lone surrogate
    reaches PostgreSQL); what does not fit is cut, with markers saying how much."""
    head = {
        "r": _cut(notice.replica, 200, 3),
        "i": notice.instance[:64],
        "s": notice.seq,
        "n": _cut(notice.name, 100, 3),
        "p": notice.replay,
    }
    for chars, items in LEVELS:
        text = _dumps({**head, "d": _cut(notice.data, chars, items)})
        if len(text) <= limit:
            return text
    kept = {key: _cut(notice.data[key], 200, 3) for key in KEPT if key in notice.data}
    text = _dumps({**head, "d": {**kept, "truncated": True}})
    if len(text) <= limit:
        return text
    return _dumps({**head, "d": {"truncated": True}})


def decode(payload: str) -> Notice | None:
    """The `Notice` in a payload, or None for one that is not ours."""
    try:
        raw = json.loads(payload)
        notice = Notice(
            replica=str(raw["r"]),
            instance=str(raw["i"]),
            seq=int(raw["s"]),
            name=str(raw["n"]),
            data=dict(raw["d"]),
            replay=bool(raw.get("p", True)),
        )
    except (ValueError, TypeError, KeyError):
        return None
    return notice


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=True, allow_nan=False, separators=(",", ":"))


def _cut(value: Any, chars: int | None, items: int | None) -> Any:
    """`value` as plain JSON (non-finite numbers as text), its strings cut to `chars`, its lists
    and objects to `items` entries, each cut marked; None: no limit."""
    if isinstance(value, str):
        if chars is not None and len(value) > chars:
            return value[:chars] + f"…[{len(value) - chars} more characters]"
        return value
    if isinstance(value, bool) or value is None or isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, dict):
        pairs = list(value.items())
        out: dict[str, Any] = {}
        for key, item in pairs if items is None else pairs[:items]:
            out[_cut(str(key), chars, items)] = _cut(item, chars, items)
        if items is not None and len(pairs) > items:
            out["…"] = f"{len(pairs) - items} more fields"
        return out
    if isinstance(value, (list, tuple)):
        kept = [_cut(item, chars, items) for item in (value if items is None else value[:items])]
        if items is not None and len(value) > items:
            kept.append(f"…[{len(value) - items} more items]")
        return kept
    return _cut(str(value), chars, items)


def _coalesce(
    batch: list[tuple[str, dict[str, Any], bool]],
) -> list[tuple[str, dict[str, Any], bool]]:
    """`batch` with each run of consecutive text deltas of one message joined into one."""
    out: list[tuple[str, dict[str, Any], bool]] = []
    for name, data, replay in batch:
        if out and name == "text_delta" and out[-1][0] == "text_delta":
            last = out[-1][1]
            same = (last.get("conversation_id"), last.get("message_id")) == (
                data.get("conversation_id"),
                data.get("message_id"),
            )
            joined = str(last.get("text", "")) + str(data.get("text", ""))
            if same and len(joined) <= PAYLOAD_LIMIT // 8:  # \\uXXXX escapes: 6 bytes a char
                out[-1] = (name, {**last, "text": joined}, replay)
                continue
        out.append((name, data, replay))
    return out


# --- the relay --------------------------------------------------------------------------------


class Relay:
    """Sends this replica's hub events to the others and publishes theirs here.

    Args:
        service: the daemon's core (its hub, approvals, journal and loop).
        connect: opens a new autocommit connection to the journal's database.
        replica: this replica's id, shown to the others' followers.
    """

    def __init__(self, service: Service, connect: Callable[[], Any], replica: str) -> None:
        self.service = service
        self.journal: Journal = service.journal
        self.connect = connect
        self.replica = replica
        self.instance = uuid.uuid4().hex
        """This process: two processes given one replica id still ignore only their own."""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._outbox: queue.Queue[tuple[str, dict[str, Any], bool] | None] = queue.Queue()
        self._seq = 0
        self._seen: dict[str, int] = {}
        """Sender process -> the last sequence number heard from it."""
        self._stop = threading.Event()
        self._listening = threading.Event()
        self._remote: dict[str, RunHandle] = {}
        """Conversation id -> the run another replica is doing in it (loop only)."""
        self._watched: set[str] = set()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._threads: list[threading.Thread] = []
        self.reconnects = 0
        self.sent = 0
        self.received = 0

    def __repr__(self) -> str:
        return (
            f"Relay(replica={self.replica!r}, listening={self._listening.is_set()}, "
            f"remote_runs={len(self._remote)})"
        )

    # --- lifecycle --------------------------------------------------------------------------------

    async def start(self) -> None:
        """Start listening and sending (on the serving loop); returns once listening, or after
        `READY_TIMEOUT` seconds (then the listener keeps trying in the background)."""
        self._loop = asyncio.get_running_loop()
        for target, name in ((self._listen, "relay-listen"), (self._send, "relay-send")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)
        self.service.hub.tap(self._tap)
        ready = await asyncio.to_thread(self._listening.wait, READY_TIMEOUT)
        if ready:
            logger.info("relay: replica %s follows the other replicas on %s", self.replica, CHANNEL)
        else:
            logger.warning("relay: not listening yet; live events of other replicas are late")

    async def close(self) -> None:
        """Stop sending and listening (on the loop; a few seconds at most)."""
        self.service.hub.untap(self._tap)
        self._stop.set()
        self._outbox.put(None)
        for task in list(self._tasks):
            task.cancel()
        for thread in self._threads:
            await asyncio.to_thread(thread.join, 10)

    @property
    def listening(self) -> bool:
        """Whether notifications are being received right now."""
        return self._listening.is_set()

    # --- sending ----------------------------------------------------------------------------------

    def _tap(self, name: str, data: dict[str, Any], replay: bool) -> None:
        if name not in NOT_FORWARDED:
            self._outbox.put((name, data, replay))

    def _send(self) -> None:
        conn: Any = None
        try:
            while True:
                first = self._outbox.get()
                if first is None:
                    return
                batch = [first]
                if first[0] == "text_delta":
                    time.sleep(COALESCE_SECONDS)
                stop = self._drain(batch)
                for name, data, replay in _coalesce(batch):
                    self._seq += 1
                    try:
                        payload = encode(
                            Notice(self.replica, self.instance, self._seq, name, data, replay)
                        )
                    except Exception:  # never expected; the number left out tells the others
                        logger.exception("relay: a %s event could not be encoded", name)
                        continue
                    conn = self._notify(conn, payload)
                if stop:
                    return
        finally:
            if conn is not None:
                with contextlib.suppress(Exception):
                    conn.close()

    def _drain(self, batch: list[tuple[str, dict[str, Any], bool]]) -> bool:
        """Move what is queued into `batch`; True if the stop marker was among it."""
        while len(batch) < 1000:
            try:
                item = self._outbox.get_nowait()
            except queue.Empty:
                return False
            if item is None:
                return True
            batch.append(item)
        return False

    def _notify(self, conn: Any, payload: str) -> Any:
        """Send one payload, reconnecting once; a payload that cannot be sent is dropped (the
        others see the gap in the numbers and reload from the journal)."""
        for attempt in (1, 2):
            try:
                if conn is None or conn.closed:
                    conn = self.connect()
                conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, payload))
                self.sent += 1
                return conn
            except Exception as exc:
                with contextlib.suppress(Exception):
                    if conn is not None:
                        conn.close()
                conn = None
                if attempt == 2 or self._stop.is_set():
                    logger.warning(
                        "relay: an event could not be sent to the other replicas: %s",
                        redact(str(exc)) or type(exc).__name__,
                    )
        return conn

    # --- listening --------------------------------------------------------------------------------

    def _listen(self) -> None:
        delay = BACKOFF_FIRST
        connected_before = False
        down_since: float | None = None
        while not self._stop.is_set():
            try:
                conn = self.connect()
            except Exception as exc:
                if down_since is None:
                    down_since = time.monotonic()
                    logger.warning(
                        "relay: cannot listen for the other replicas' events, retrying: %s",
                        redact(str(exc)) or type(exc).__name__,
                    )
                self._stop.wait(delay)
                delay = min(BACKOFF_MAX, delay * 2)
                continue
            try:
                conn.execute(f"LISTEN {CHANNEL}")
                self._listening.set()
                delay = BACKOFF_FIRST
                if connected_before:
                    self.reconnects += 1
                    gone = time.monotonic() - down_since if down_since is not None else 0.0
                    logger.info("relay: listening again after %.1f s", gone)
                    self._call_soon(self._lost, "the link to the other replicas was restored")
                connected_before = True
                down_since = None
                self._receive_until_error(conn)
            except Exception as exc:
                if not self._stop.is_set():
                    logger.warning(
                        "relay: the listening connection was lost, reconnecting: %s",
                        redact(str(exc)) or type(exc).__name__,
                    )
                    down_since = time.monotonic()
            finally:
                self._listening.clear()
                with contextlib.suppress(Exception):
                    conn.close()

    def _receive_until_error(self, conn: Any) -> None:
        quiet_since = time.monotonic()
        while not self._stop.is_set():
            got = False
            for notify in conn.notifies(timeout=0.5):
                got = True
                self._receive(notify.payload)
            if got:
                quiet_since = time.monotonic()
            elif time.monotonic() - quiet_since > HEARTBEAT_SECONDS:
                conn.execute("SELECT 1")
                quiet_since = time.monotonic()

    def _receive(self, payload: str) -> None:
        notice = decode(payload)
        if notice is None:
            logger.debug("relay: a payload that is not ours on %s", CHANNEL)
            return
        if notice.instance == self.instance:
            return
        self.received += 1
        last = self._seen.get(notice.instance)
        self._seen[notice.instance] = notice.seq
        if last is not None and notice.seq != last + 1:
            self._call_soon(self._lost, f"events of replica {notice.replica} were missed")
        self._call_soon(self._deliver, notice)

    def _call_soon(self, fn: Callable[..., None], *args: Any) -> None:
        loop = self._loop
        if loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody listens
                loop.call_soon_threadsafe(fn, *args)

    # --- delivering (on the loop) -----------------------------------------------------------------

    def _deliver(self, notice: Notice) -> None:
        data = {**notice.data, "replica": notice.replica}
        name = notice.name
        self.service.hub.publish(name, data, replay=notice.replay, forward=False)
        cid = data.get("conversation_id")
        if name == "approval_decided" and isinstance(data.get("approval_id"), str):
            self.service.approvals.wake(data["approval_id"])
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

    def _lost(self, reason: str) -> None:
        """Something was missed: followers reload, remote runs are checked in the journal."""
        self.service.hub.publish(
            "reset", {"reason": reason, "last_id": self.service.hub.last_id}, forward=False
        )
        for cid, handle in list(self._remote.items()):
            self._spawn(self._settle(cid, handle))

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

    # --- followers (on the loop) ------------------------------------------------------------------

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


def _default_replica() -> str:
    """This process's replica id when the service has none: host name and process id."""
    return f"{socket.gethostname()}:{os.getpid()}"


async def start_relay(service: Service) -> Relay | None:
    """Start a relay for `service` when its journal is a `PostgresJournal` (else None)."""
    connect = getattr(service.journal, "notify_connection", None)
    if connect is None:
        return None
    replica = getattr(service, "replica_id", None) or _default_replica()
    relay = Relay(service, connect, str(replica))
    await relay.start()
    metrics = service.metrics
    metrics.count_from(
        "toolbridge_relay_sent",
        "Events this replica sent to the others (NOTIFY).",
        lambda: relay.sent,
    )
    metrics.count_from(
        "toolbridge_relay_received",
        "Events this replica received from the others.",
        lambda: relay.received,
    )
    metrics.count_from(
        "toolbridge_relay_reconnects",
        "Times the relay's listening connection was lost and opened again (each one a reset).",
        lambda: relay.reconnects,
    )
    return relay


def relay_of(request: Request) -> Relay | None:
    """The app's relay, if it has one."""
    relay = getattr(request.app.state, "relay", None)
    return relay if isinstance(relay, Relay) else None
