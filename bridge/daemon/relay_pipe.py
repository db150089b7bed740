"""The relay's pipe (`bridge.daemon.relay`): this replica's end of the NOTIFY channel.

A sender thread takes the hub events handed to `tap`, joins queued text deltas, numbers them and
sends what arrived together (a run's step publishes a few events at once) as one statement,
``SELECT pg_notify(...) FROM unnest(...)``: one round trip, delivered in order. A listener
thread LISTENs (reconnecting with backoff, checking a quiet connection every
`HEARTBEAT_SECONDS`), drops its own process's notifications and hands the others' to the
serving loop. A gap in a sender's numbers, or a listening connection that came back, is
reported as lost (the caller resets what it shows).
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
        self.reconnects = 0
        self.sent = 0
        self.received = 0

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
        """Tell both threads to stop (the sender after what is queued)."""
        self._stop.set()
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

    def post(self, name: str, data: dict[str, Any], replay: bool) -> None:
        """Queue one hub event for the other replicas (sent by the sender thread)."""
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
                for name, data, replay in coalesce(batch):
                    self._seq += 1
                    try:
                        notice = Notice(self.replica, self.instance, self._seq, name, data, replay)
                        payloads.append(encode(notice))
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
                conn.execute(f"LISTEN {CHANNEL}")
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
            self._call_soon(self._on_lost, f"events of replica {notice.replica} were missed")
        self._call_soon(self._on_notice, notice)

    def _call_soon(self, fn: Callable[..., None], *args: Any) -> None:
        loop = self._loop
        if loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody listens
                loop.call_soon_threadsafe(fn, *args)
