"""Leases: daemon replicas sharing one journal run a conversation one at a time.

`LeaseJournal` is a journal with leases, what the daemon needs (`bridge.daemon.service`,
`bridge.daemon.recovery`); every store of this package is one. `acquire_lease` takes a
conversation's `Lease` (or raises `LeaseHeldError`), `renew_leases` keeps the running ones,
`claim_orphans` takes over the unfinished messages of replicas whose leases expired.

Two implementations: `LocalLeases`, the embedded stores' (memory, SQLite: one process owns the
store, so a lease never conflicts, never expires under a running message and needs no
fencing), and `bridge.journal.postgres_leases.PostgresLeases` (a shared store).
"""

from __future__ import annotations

import threading
from abc import abstractmethod
from collections.abc import Collection

from bridge.journal.base import Journal
from bridge.journal.records import Lease, MessageRecord

__all__ = ["LeaseJournal", "LocalLeases"]

_LOCAL_LOCK = threading.Lock()


class LeaseJournal(Journal):
    """A journal whose conversations daemon replicas take turns on, by leases."""

    shared: bool = False
    """True when several processes write the store at once (PostgreSQL): the daemon then
    renews its leases and claims the unfinished messages of replicas whose leases expired."""

    @abstractmethod
    def acquire_lease(self, conversation_id: str, owner: str, seconds: float) -> Lease:
        """Take the conversation's lease for `seconds` (renewed by `renew_leases`).

        Raises:
            LeaseHeldError: another replica holds it, or a message of the conversation that a
                dead replica left unfinished is still to be claimed and recovered.
        """

    @abstractmethod
    def renew_leases(self, owner: str, seconds: float) -> list[str]:
        """Extend every lease this replica holds by `seconds`; returns the conversations whose
        lease was lost (taken over by another replica) instead."""

    @abstractmethod
    def release_lease(self, lease: Lease) -> None:
        """Give the lease back (the run ended); nothing happens if it was lost."""

    @abstractmethod
    def lease_holder(self, conversation_id: str) -> str | None:
        """The replica holding a live lease on the conversation, if any."""

    @abstractmethod
    def claim_orphans(
        self,
        owner: str,
        seconds: float,
        *,
        exclude: Collection[str] = (),
        own: bool = False,
        limit: int = 100,
    ) -> list[tuple[MessageRecord, Lease]]:
        """Take over unfinished messages whose runs nobody runs any more: a conversation's
        lease expired (its replica died), or, with `own`, it is this replica's own from before
        a restart. Each comes as it was left (its `replica` the one that ran it) with the lease
        now held; the journal then records them as `owner`'s. Conversations in `exclude`
        (running here) are skipped.
        """


class LocalLeases(LeaseJournal):
    """The leases of a store one process owns (memory, SQLite): always granted."""

    def acquire_lease(self, conversation_id: str, owner: str, seconds: float) -> Lease:
        with _LOCAL_LOCK:
            generations: dict[str, int] = self.__dict__.setdefault("_local_generations", {})
            generation = generations[conversation_id] = generations.get(conversation_id, 0) + 1
        return Lease(conversation_id=conversation_id, owner=owner, generation=generation)

    def renew_leases(self, owner: str, seconds: float) -> list[str]:
        return []

    def release_lease(self, lease: Lease) -> None:
        """Nothing to release locally."""

    def lease_holder(self, conversation_id: str) -> str | None:
        return None

    def claim_orphans(
        self,
        owner: str,
        seconds: float,
        *,
        exclude: Collection[str] = (),
        own: bool = False,
        limit: int = 100,
    ) -> list[tuple[MessageRecord, Lease]]:
        """The embedded stores have one process: every unfinished message is an orphan."""
        claimed: list[tuple[MessageRecord, Lease]] = []
        leases: dict[str, Lease] = {}
        for message in self.unfinished_messages():
            cid = message.conversation_id
            if cid in exclude:
                continue
            if cid not in leases:
                if len(leases) >= limit:
                    break
                leases[cid] = self.acquire_lease(cid, owner, seconds)
            claimed.append((message, leases[cid]))
        return claimed
