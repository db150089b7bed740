"""Live events across replicas: daemons sharing a PostgreSQL journal hear each other's runs.

    replica A                                             replica B
    hub.publish(name, data)                               listener thread: LISTEN
      -> tap -> outbox -> sender thread                     -> hub.publish(forward=False)
         SELECT pg_notify('toolbridge_events', payload) ->     (data: "replica": "A")
                                                            -> RemoteRun: the run's own stream
                                                               (GET /v1/conversations/{id}/events)
                                                            -> ApprovalDesk.wake (a decision
                                                               taken on A, for a run on B)

Payloads stay under PostgreSQL's 8000-byte NOTIFY limit (`bridge.daemon.relay_codec`). The
journal is the truth: a follower that missed something reloads from it. A notification lost
(the listening connection dropped and came back, or a sender skipped one: each sender numbers
its notifications) makes this replica publish a ``reset`` hub event, which tells the console
to reload what it shows; runs followed from another replica are checked against the journal.

Text deltas travel too (live followers want the answer as it streams), coalesced: the sender
joins the deltas of one run queued while it was busy, so a fast stream costs one NOTIFY per
database round trip, not one per chunk. A replica that hears no other one sends nothing (the
replicas announce themselves when they start listening: `relay_pipe`).

The jobs, one module each: `relay_codec` (payloads), `relay_pipe` (the sender and listener
threads), `relay_runs` (runs of other replicas followed from here); this module joins them to
the daemon's hub and approvals. Only a `PostgresJournal` has a relay; psycopg is imported
lazily, by the journal.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from bridge.daemon.relay_codec import CHANNEL, Notice
from bridge.daemon.relay_pipe import RelayPipe
from bridge.daemon.relay_runs import RemoteRuns
from bridge.daemon.runs import RunHandle

if TYPE_CHECKING:
    from fastapi import Request

    from bridge.daemon.service import Service

__all__ = ["Relay", "relay_of", "start_relay"]

logger = logging.getLogger(__name__)

NOT_FORWARDED = frozenset({"hello", "reset", "closing", "tools_reloaded", "tools_reload_failed"})
"""Hub events about this replica only: its stream, its shutdown, its own toolbox."""

READY_TIMEOUT = 10.0


class Relay:
    """Sends this replica's hub events to the others and publishes theirs here.

    Args:
        service: the daemon's core (its hub, approvals, journal and loop).
        connect: opens a new autocommit connection to the journal's database.
        replica: this replica's id, shown to the others' followers.
    """

    def __init__(self, service: Service, connect: Callable[[], Any], replica: str) -> None:
        self.service = service
        self.replica = replica
        self.runs = RemoteRuns(service.journal)
        self.pipe = RelayPipe(connect, replica, on_notice=self._deliver, on_lost=self._lost)

    def __repr__(self) -> str:
        return (
            f"Relay(replica={self.replica!r}, listening={self.pipe.listening}, "
            f"peers={self.pipe.peers}, remote_runs={len(self.runs)})"
        )

    async def start(self) -> None:
        """Start listening and sending (on the serving loop); returns once listening, or after
        `READY_TIMEOUT` seconds (then the listener keeps trying in the background)."""
        self.pipe.start(asyncio.get_running_loop())
        self.service.hub.tap(self._tap)
        ready = await asyncio.to_thread(self.pipe.wait_listening, READY_TIMEOUT)
        if ready:
            logger.info("relay: replica %s follows the other replicas on %s", self.replica, CHANNEL)
        else:
            logger.warning("relay: not listening yet; live events of other replicas are late")

    async def close(self) -> None:
        """Stop sending and listening (on the loop; a few seconds at most)."""
        self.service.hub.untap(self._tap)
        self.pipe.stop()
        self.runs.cancel()
        await self.pipe.join()

    @property
    def listening(self) -> bool:
        """Whether notifications are being received right now."""
        return self.pipe.listening

    def busy(self, conversation_id: str) -> bool:
        """Whether another replica is known to run the conversation now."""
        return self.runs.busy(conversation_id)

    async def remote_run(self, conversation_id: str) -> RunHandle | None:
        """The run another replica is doing in the conversation, to follow from here (its
        events from when this replica heard of it), or None when the journal says none runs."""
        return await self.runs.remote_run(conversation_id)

    def _tap(self, name: str, data: dict[str, Any], replay: bool) -> None:
        if name not in NOT_FORWARDED:
            self.pipe.post(name, data, replay)

    def _deliver(self, notice: Notice) -> None:
        """Publish another replica's event here (on the loop)."""
        data = {**notice.data, "replica": notice.replica}
        name = notice.name
        self.service.hub.publish(name, data, replay=notice.replay, forward=False)
        if name == "approval_decided" and isinstance(data.get("approval_id"), str):
            self.service.approvals.wake(data["approval_id"])
        self.runs.see(name, data)

    def _lost(self, reason: str) -> None:
        """Something was missed: followers reload, remote runs are checked in the journal."""
        self.service.hub.publish(
            "reset", {"reason": reason, "last_id": self.service.hub.last_id}, forward=False
        )
        self.runs.settle_all()


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
        lambda: relay.pipe.sent,
    )
    metrics.count_from(
        "toolbridge_relay_received",
        "Events this replica received from the others.",
        lambda: relay.pipe.received,
    )
    metrics.count_from(
        "toolbridge_relay_skipped",
        "Events this replica did not send: no other replica was listening.",
        lambda: relay.pipe.skipped,
    )
    metrics.count_from(
        "toolbridge_relay_reconnects",
        "Times the relay's listening connection was lost and opened again (each one a reset).",
        lambda: relay.pipe.reconnects,
    )
    return relay


def relay_of(request: Request) -> Relay | None:
    """The app's relay, if it has one."""
    relay = getattr(request.app.state, "relay", None)
    return relay if isinstance(relay, Relay) else None
