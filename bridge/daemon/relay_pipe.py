"""The relay's pipe (`bridge.daemon.relay`): this replica's end of the NOTIFY channel.

A sender thread takes the hub events handed to `tap`, joins queued text deltas, numbers them and
sends what arrived together (a run's step publishes a few events at once) as one statement,
``SELECT pg_notify(...) FROM unnest(...)``: one round trip, delivered in order. A listener
thread LISTENs (reconnecting with backoff, checking a quiet connection every
`HEARTBEAT_SECONDS`), drops its own process's notifications and hands the others' to the
serving loop. A gap in a sender's numbers, or a listening connection that came back, is
reported as lost (the caller resets what it shows).

A replica that hears no other one sends nothing: events nobody listens to cost a statement,
the server's notification queue and this replica's own listener decoding its own payloads.
Listeners announce themselves: once listening, a pipe sends `HELLO` (asking for replies) and
waits, before it says it is listening, for a reply from each relay listener the server shows
(``application_name`` `APPLICATION`, at most `REPLY_SECONDS`); every pipe answers a hello
asking for one, says `HELLO` again every `ANNOUNCE_SECONDS` and `BYE` when it stops, and
forgets a replica not heard from for `PEER_SECONDS`. So a replica that starts listening is
heard by the others before it serves, and a sender that skipped events marks the first one it
sends after that (`Notice.gap`): its listeners then reset what they show, as after a lost
notification (the journal is the truth; the relay is live-only).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from bridge.daemon.relay_codec import CHANNEL, Notice, coalesce, decode, encode
from bridge.errors import redact

__all__ = ["RelayPipe"]

logger = logging.getLogger(__name__)

COALESCE_SECONDS = 0.05
"""How long the sender waits for more text deltas after one, to join them."""
GATHER_SECONDS = 0.003
"""How long the sender waits for more events after another one, to send them together."""
BACKOFF_FIRST = 0.2
BACKOFF_MAX = 5.0
HEARTBEAT_SECONDS = 10.0
"""A quiet listening connection is checked this often (a dead server's socket may stay open)."""
HELLO = "relay_hello"
"""A pipe's announcement: it listens (``{"reply": true}``: the others answer with theirs)."""
BYE = "relay_bye"
"""A pipe stops listening (a clean stop; a dead one is forgotten after `PEER_SECONDS`)."""
CONTROL = frozenset({HELLO, BYE})
APPLICATION = "toolbridge-relay"
"""The ``application_name`` of listening connections (counted by a pipe that starts)."""
REPLY_SECONDS = 2.0
"""How long a starting pipe waits for the other listeners' replies to its hello."""
ANNOUNCE_SECONDS = 30.0
PEER_SECONDS = 3 * ANNOUNCE_SECONDS


class RelayPipe:
    """Sends hub events to the other replicas and hands theirs to the serving loop.

    Args:
        connect: opens a new autocommit connection to the journal's database.
        replica: this replica's id, shown to the others' followers.
        on_notice: called on the loop with each notice of another process.
        on_lost: called on the loop with the reason when notifications may have been missed.
    """

    def __init__(
        self,
        connect: Callable[[], Any],
        replica: str,
        *,
        on_notice: Callable[[Notice], None],
        on_lost: Callable[[str], None],
    ) -> None:
        self.connect = connect
        self.replica = replica
        self.instance = uuid.uuid4().hex
        """This process: two processes given one replica id still ignore only their own."""
        self._on_notice = on_notice
        self._on_lost = on_lost
        self._loop: asyncio.AbstractEventLoop | None = None
        self._outbox: queue.Queue[tuple[str, dict[str, Any], bool] | None] = queue.Queue()
        self._seq = 0
        self._seen: dict[str, int] = {}
        """Sender process -> the last sequence number heard from it."""
        self._stop = threading.Event()
        self._listening = threading.Event()
        self._threads: list[threading.Thread] = []
        self._peers: dict[str, float] = {}
        """Other listening processes -> when last heard (monotonic); empty: send nothing."""
        self._peers_lock = threading.Lock()
        self._skipped = False
        """Events were skipped (no peer) since the last one sent: the next one says so."""
        self.reconnects = 0
        self.sent = 0
        self.received = 0
        self.skipped = 0

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start the listener and sender threads; what they receive goes to `loop`."""
        self._loop = loop
        for target, name in ((self._listen, "relay-listen"), (self._send, "relay-send")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def wait_listening(self, timeout: float) -> bool:
        """Block until notifications are being received (True) or `timeout` seconds passed."""
        return self._listening.wait(timeout)

    def stop(self) -> None:
        """Tell both threads to stop (the sender after what is queued, and a `BYE`)."""
        self._stop.set()
        if self._peers:
            self._outbox.put((BYE, {}, False))
        self._outbox.put(None)

    async def join(self) -> None:
        """Wait for both threads to end (on the loop; a few seconds at most)."""
        for thread in self._threads:
            await asyncio.to_thread(thread.join, 10)

    @property
    def listening(self) -> bool:
        """Whether notifications are being received right now."""
        return self._listening.is_set()

    # --- sending ----------------------------------------------------------------------------------

    @property
    def peers(self) -> int:
        """Other listening processes heard from (0: this pipe sends no events)."""
        return len(self._peers)

    def post(self, name: str, data: dict[str, Any], replay: bool) -> None:
        """Queue one hub event for the other replicas (sent by the sender thread); skipped
        while no other replica listens."""
        if not self._peers:
            with self._peers_lock:
                if not self._peers:
                    self._skipped = True
                    self.skipped += 1
                    return
        self._outbox.put((name, data, replay))

    def _send(self) -> None:
        conn: Any = None
        try:
            while True:
                first = self._outbox.get()
                if first is None:
                    return
                batch = [first]
                time.sleep(COALESCE_SECONDS if first[0] == "text_delta" else GATHER_SECONDS)
                stop = self._drain(batch)
                payloads: list[str] = []
                with self._peers_lock:
                    gap, self._skipped = self._skipped, False
                for name, data, replay in coalesce(batch):
                    self._seq += 1
                    try:
                        notice = Notice(
                            self.replica, self.instance, self._seq, name, data, replay, gap
                        )
                        payloads.append(encode(notice))
                        gap = False
                    except Exception:  # never expected; the number left out tells the others
                        logger.exception("relay: a %s event could not be encoded", name)
                if payloads:
                    conn = self._notify(conn, payloads)
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

    def _notify(self, conn: Any, payloads: list[str]) -> Any:
        """Send `payloads` in one statement (one transaction: delivered together, in order),
        reconnecting once; payloads that cannot be sent are dropped (the others see the gap in
        the numbers and reload from the journal)."""
        for attempt in (1, 2):
            try:
                if conn is None or conn.closed:
                    conn = self.connect()
                conn.execute(
                    "SELECT pg_notify(%s, p.payload) FROM unnest(%s::text[]) "
                    "WITH ORDINALITY AS p (payload, n) ORDER BY p.n",
                    (CHANNEL, payloads),
                )
                self.sent += len(payloads)
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
                conn.execute(f"SET application_name = '{APPLICATION}'")
                conn.execute(f"LISTEN {CHANNEL}")
                self._announce(conn)
                self._listening.set()
                delay = BACKOFF_FIRST
                if connected_before:
                    self.reconnects += 1
                    gone = time.monotonic() - down_since if down_since is not None else 0.0
                    logger.info("relay: listening again after %.1f s", gone)
                    self._call_soon(self._on_lost, "the link to the other replicas was restored")
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

    def _announce(self, conn: Any) -> None:
        """Say `HELLO` on the freshly listening `conn` and wait (at most `REPLY_SECONDS`) for
        a reply from each other listener the server shows: once they heard it, they send
        their events here."""
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s "
            "AND pid <> pg_backend_pid()",
            (APPLICATION,),
        ).fetchone()
        others = int(row[0]) if row else 0
        self._outbox.put((HELLO, {"reply": True}, False))
        deadline = time.monotonic() + REPLY_SECONDS
        heard: set[str] = set()
        while len(heard) < others and not self._stop.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                break
            for notify in conn.notifies(timeout=min(left, 0.5)):
                instance = self._receive(notify.payload)
                if instance is not None:
                    heard.add(instance)
                if len(heard) >= others:
                    break

    def _receive_until_error(self, conn: Any) -> None:
        quiet_since = announced = time.monotonic()
        while not self._stop.is_set():
            got = False
            for notify in conn.notifies(timeout=0.5):
                got = True
                self._receive(notify.payload)
            clock = time.monotonic()
            if got:
                quiet_since = clock
            elif clock - quiet_since > HEARTBEAT_SECONDS:
                conn.execute("SELECT 1")
                quiet_since = clock
            if clock - announced > ANNOUNCE_SECONDS:
                announced = clock
                self._outbox.put((HELLO, {"reply": False}, False))
                self._forget(clock - PEER_SECONDS)

    def _forget(self, before: float) -> None:
        """Forget the peers not heard from since `before` (they died without a `BYE`)."""
        with self._peers_lock:
            for instance, heard in list(self._peers.items()):
                if heard < before:
                    del self._peers[instance]

    def _receive(self, payload: str) -> str | None:
        """Handle one payload; the sending process's instance, when it is another's."""
        notice = decode(payload)
        if notice is None:
            logger.debug("relay: a payload that is not ours on %s", CHANNEL)
            return None
        if notice.instance == self.instance:
            return None
        self.received += 1
        last = self._seen.get(notice.instance)
        self._seen[notice.instance] = notice.seq
        if notice.name == BYE:
            with self._peers_lock:
                self._peers.pop(notice.instance, None)
            return notice.instance
        with self._peers_lock:
            if not self._peers and notice.name == HELLO and notice.data.get("reply"):
                # A replica that starts listening: it shows nothing of what was skipped.
                self._skipped = False
            self._peers[notice.instance] = time.monotonic()
        if (last is not None and notice.seq != last + 1) or notice.gap:
            self._call_soon(self._on_lost, f"events of replica {notice.replica} were missed")
        if notice.name == HELLO:
            if notice.data.get("reply"):
                self._outbox.put((HELLO, {"reply": False}, False))
            return notice.instance
        self._call_soon(self._on_notice, notice)
        return notice.instance

    def _call_soon(self, fn: Callable[..., None], *args: Any) -> None:
        loop = self._loop
        if loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody listens
                loop.call_soon_threadsafe(fn, *args)
