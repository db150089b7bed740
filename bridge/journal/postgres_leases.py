"""Leases in PostgreSQL (daemon replicas sharing one journal): `PostgresLeases`, the lease
half of `PostgresJournal`.

One row per conversation in ``leases`` (owner, generation, expires_at on the database's clock).
`acquire_lease` takes a free, expired or own lease and bumps its generation; `claim_orphans`
takes the expired leases of conversations with running messages under ``SELECT ... FOR UPDATE
SKIP LOCKED`` (two replicas scanning together never claim the same one); after `bind_replica`
every write of a conversation reads its lease row ``FOR SHARE`` at the generation this replica
took, in the statement that writes (`bridge.journal.postgres_steps`) or, for the rarer writes,
first in the same transaction (`_check_lease`), and refuses (`LeaseLostError`) when it finds
none: a takeover's UPDATE waits for a write in progress, and a write after a takeover sees the
new generation (fencing).

`acquire_lease` also reads, in its statement, what a run reads first: the conversation, its
platform state and its messages. Each is answered from there once (`get_conversation`,
`platform_state`, `messages`) while the generation taken is held and no write of the
conversation came from this process since: the lease's holder is the only one that writes
them, so they are what a read would find.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from bridge.journal._rows import (
    CONVERSATION_SELECT,
    conversation_record,
    message_record,
    platform_state_record,
)
from bridge.journal.leases import LeaseJournal
from bridge.journal.postgres_connect import pg_params, pg_text
from bridge.journal.records import (
    ConversationRecord,
    Lease,
    LeaseHeldError,
    LeaseLostError,
    MessageRecord,
    PlatformStateRecord,
)

if TYPE_CHECKING:
    import psycopg

__all__ = ["PostgresLeases"]

T = TypeVar("T")
Row = dict[str, Any]

PREFETCH_MAX = 10_000
"""At most this many conversations' reads are kept from `acquire_lease` (never read: dropped)."""
_PREFETCH = (
    "SELECT taken.generation, "
    f"(SELECT row_to_json(conv) FROM ({CONVERSATION_SELECT} WHERE c.id = %s) conv) "
    "AS conversation, "
    "(SELECT row_to_json(ps) FROM platform_states ps JOIN conversations c "
    "ON ps.conversation_id = c.id WHERE c.id = %s "
    "AND ps.platform_conversation_id = coalesce(c.platform_conversation_id, c.id)) AS state, "
    "(SELECT json_agg(m ORDER BY m.id) FROM messages m WHERE m.conversation_id = %s) "
    "AS messages FROM taken"
)


class PostgresLeases(LeaseJournal):
    """The lease methods of `PostgresJournal`, over its transactions (`_run`)."""

    _held: dict[str, int]
    """Conversation -> the lease generation this replica holds (what writes check)."""
    _held_lock: threading.Lock
    _conversation_of: dict[int, str]
    """Message -> its conversation, for the messages this process writes (`PostgresSteps`)."""

    if TYPE_CHECKING:  # provided by PostgresJournal

        def _run(self, fn: Callable[[psycopg.Connection[Row]], T]) -> T: ...

        def _autocommit(self, fn: Callable[[psycopg.Connection[Row]], T]) -> T: ...

        def _read(self, sql: str, params: Sequence[Any] = ()) -> list[Any]: ...

    shared = True

    def _check_lease(
        self, db: psycopg.Connection[Row], conversation: str | None, message: int | None
    ) -> None:
        if conversation is None:
            row = db.execute(
                "SELECT conversation_id FROM messages WHERE id = %s", (message,)
            ).fetchone()
            if row is None:
                return  # no such message: the write changes nothing
            conversation = str(row["conversation_id"])
        # FOR SHARE: a takeover (an UPDATE of this row) waits until this write commits.
        lease = db.execute(
            "SELECT owner, generation FROM leases WHERE conversation_id = %s FOR SHARE",
            pg_params((conversation,)),
        ).fetchone()
        with self._held_lock:
            held = self._held.get(conversation)
        if (
            held is None
            or lease is None
            or lease["owner"] != self.replica
            or int(lease["generation"]) != held
        ):
            owner = lease["owner"] if lease is not None else None
            raise LeaseLostError(conversation, held, owner)

    def _lease_owner(self, conversation_id: str) -> str | None:
        """Who last took `conversation_id`'s lease (for a fenced writer's error message)."""
        rows = self._read("SELECT owner FROM leases WHERE conversation_id = %s", (conversation_id,))
        return str(rows[0]["owner"]) if rows and rows[0]["owner"] is not None else None

    def _hold(self, lease: Lease) -> Lease:
        with self._held_lock:
            self._held[lease.conversation_id] = lease.generation
        return lease

    _prefetched: dict[str, tuple[int, dict[str, Any]]]
    """Conversation -> the generation taken and what `acquire_lease` read with it, each
    answered once: ``conversation``, ``state`` (platform conversation id, record) and
    ``messages``."""

    def _keep_prefetched(self, conversation_id: str, generation: int, row: Row) -> None:
        raw = row["conversation"]
        conversation = conversation_record(raw) if raw is not None else None
        platform_id = conversation.platform_id if conversation is not None else conversation_id
        state = platform_state_record(row["state"]) if row["state"] is not None else None
        kept = {
            "conversation": conversation,
            "state": (pg_text(platform_id), state),
            "messages": [message_record(m) for m in row["messages"] or ()],
        }
        with self._held_lock:
            if len(self._prefetched) >= PREFETCH_MAX:
                self._prefetched.clear()
            self._prefetched[conversation_id] = (generation, kept)

    def _drop_prefetched(self, conversation_id: str | None) -> None:
        """A write of `conversation_id` (None: of a message, any) by this process: what was
        read with its lease is no longer what a read would find."""
        if self._prefetched:
            with self._held_lock:
                if conversation_id is None:
                    self._prefetched.clear()
                else:
                    self._prefetched.pop(conversation_id, None)

    def _hold_prefetched(self, conversation_id: str) -> tuple[int, dict[str, Any]] | None:
        """Take out what was read with the lease while a message is begun (reads meanwhile
        go to the database); `_prefetch_begun` puts it back, brought up to date."""
        if not self._prefetched:
            return None
        with self._held_lock:
            return self._prefetched.pop(conversation_id, None)

    def _prefetch_begun(
        self, conversation_id: str, begun: tuple[int, dict[str, Any]], stamp: str
    ) -> None:
        """A message was begun in the conversation: its row now says so (updated, running,
        one message more), its platform state is as it was; its messages are read again."""
        generation, kept = begun
        kept.pop("messages", None)
        conversation = kept.pop("conversation", None)
        if conversation is not None:
            kept["conversation"] = conversation.model_copy(
                update={
                    "updated_at": datetime.fromisoformat(stamp),
                    "status": "running",
                    "messages": conversation.messages + 1,
                }
            )
        if kept:
            with self._held_lock:
                if self._held.get(conversation_id) == generation:
                    self._prefetched[conversation_id] = (generation, kept)

    def _take_prefetched(self, conversation_id: str, what: str) -> tuple[bool, Any]:
        """(True, value) once per `what` while the generation read with is held."""
        if not self._prefetched:
            return False, None
        with self._held_lock:
            kept = self._prefetched.get(conversation_id)
            if kept is None or what not in kept[1]:
                return False, None
            if self._held.get(conversation_id) != kept[0]:
                del self._prefetched[conversation_id]
                return False, None
            value = kept[1].pop(what)
            if not kept[1]:
                del self._prefetched[conversation_id]
        return True, value

    def get_conversation(self, conversation_id: str) -> ConversationRecord | None:
        found, record = self._take_prefetched(conversation_id, "conversation")
        if found:
            return record  # type: ignore[no-any-return]
        return super().get_conversation(conversation_id)  # type: ignore[safe-super]

    def platform_state(
        self, conversation_id: str, platform_conversation_id: str
    ) -> PlatformStateRecord | None:
        found, kept = self._take_prefetched(conversation_id, "state")
        if found and kept[0] == pg_text(platform_conversation_id):
            return kept[1]  # type: ignore[no-any-return]
        return super().platform_state(  # type: ignore[safe-super]
            conversation_id, platform_conversation_id
        )

    def messages(self, conversation_id: str) -> list[MessageRecord]:
        found, records = self._take_prefetched(conversation_id, "messages")
        if found:
            return list(records)
        return super().messages(conversation_id)  # type: ignore[safe-super]

    def acquire_lease(self, conversation_id: str, owner: str, seconds: float) -> Lease:
        def op(db: psycopg.Connection[Row]) -> Lease:
            # One statement. A message a dead replica left running is claimed and recovered
            # first (`claim_orphans`), never overtaken by a new one.
            taken = db.execute(
                "WITH taken AS ("
                "INSERT INTO leases (conversation_id, owner, generation, expires_at, taken_at) "
                "SELECT %s, %s, 1, clock_timestamp() + make_interval(secs => %s), "
                "clock_timestamp() WHERE NOT EXISTS (SELECT 1 FROM messages "
                "WHERE conversation_id = %s AND status = 'running') "
                "ON CONFLICT (conversation_id) DO UPDATE SET "
                "owner = excluded.owner, generation = leases.generation + 1, "
                "expires_at = excluded.expires_at, taken_at = excluded.taken_at "
                "WHERE leases.owner IS NULL OR leases.owner = excluded.owner "
                "OR leases.expires_at < clock_timestamp() RETURNING generation) " + _PREFETCH,
                pg_params((conversation_id, owner, float(seconds), *[conversation_id] * 4)),
            ).fetchone()
            if taken is not None:
                generation = int(taken["generation"])
                self._keep_prefetched(conversation_id, generation, taken)
                return Lease(conversation_id=conversation_id, owner=owner, generation=generation)
            holder = db.execute(
                "SELECT owner, extract(epoch FROM expires_at - clock_timestamp()) AS left_s "
                "FROM leases WHERE conversation_id = %s",
                pg_params((conversation_id,)),
            ).fetchone()
            if holder is None:
                raise LeaseHeldError(conversation_id, None, 0.0)
            raise LeaseHeldError(conversation_id, holder["owner"], float(holder["left_s"]))

        return self._hold(self._autocommit(op))

    def renew_leases(self, owner: str, seconds: float) -> list[str]:
        with self._held_lock:
            held = dict(self._held)
        if not held:
            return []
        rows = self._autocommit(
            lambda db: db.execute(
                "UPDATE leases SET expires_at = clock_timestamp() + make_interval(secs => %s) "
                "FROM unnest(%s::text[], %s::bigint[]) AS mine (cid, gen) "
                "WHERE leases.conversation_id = mine.cid AND leases.generation = mine.gen "
                "AND leases.owner = %s RETURNING leases.conversation_id",
                (float(seconds), [pg_text(c) for c in held], list(held.values()), pg_text(owner)),
            ).fetchall()
        )
        renewed = {pg_text(c) for c in (row["conversation_id"] for row in rows)}
        lost: list[str] = []
        with self._held_lock:
            for cid, generation in held.items():
                # Released (or taken again) meanwhile: not lost, just not ours at that generation.
                if pg_text(cid) not in renewed and self._held.get(cid) == generation:
                    del self._held[cid]
                    lost.append(cid)
        return lost

    def release_lease(self, lease: Lease) -> None:
        with self._held_lock:
            if self._held.get(lease.conversation_id) == lease.generation:
                del self._held[lease.conversation_id]
        self._autocommit(
            lambda db: db.execute(
                # The owner stays: who last ran it, for a fenced writer's error message.
                "UPDATE leases SET expires_at = clock_timestamp() "
                "WHERE conversation_id = %s AND owner = %s AND generation = %s",
                pg_params((lease.conversation_id, lease.owner, lease.generation)),
            )
        )

    def lease_holder(self, conversation_id: str) -> str | None:
        rows = self._read(
            "SELECT owner FROM leases WHERE conversation_id = %s AND owner IS NOT NULL "
            "AND expires_at >= clock_timestamp()",
            (conversation_id,),
        )
        return str(rows[0]["owner"]) if rows else None

    def claim_orphans(
        self,
        owner: str,
        seconds: float,
        *,
        exclude: Collection[str] = (),
        own: bool = False,
        limit: int = 100,
    ) -> list[tuple[MessageRecord, Lease]]:
        def op(db: psycopg.Connection[Row]) -> list[tuple[MessageRecord, Lease]]:
            # Running messages without a lease row (written before leases existed) get a
            # free one, so the scan below can claim them like any other.
            db.execute(
                "INSERT INTO leases (conversation_id, owner, generation, expires_at) "
                "SELECT DISTINCT conversation_id, NULL, 0, clock_timestamp() FROM messages "
                "WHERE status = 'running' ON CONFLICT (conversation_id) DO NOTHING"
            )
            found = db.execute(
                "SELECT l.conversation_id FROM leases l WHERE (l.owner IS NULL "
                "OR l.expires_at < clock_timestamp() OR (%s AND l.owner = %s)) "
                "AND NOT (l.conversation_id = ANY(%s)) AND EXISTS (SELECT 1 FROM messages m "
                "WHERE m.conversation_id = l.conversation_id AND m.status = 'running') "
                "ORDER BY l.expires_at LIMIT %s FOR UPDATE OF l SKIP LOCKED",
                (own, pg_text(owner), [pg_text(c) for c in exclude], limit),
            ).fetchall()
            claimed: list[tuple[MessageRecord, Lease]] = []
            for row in found:
                cid = row["conversation_id"]
                taken = db.execute(
                    "UPDATE leases SET owner = %s, generation = generation + 1, "
                    "expires_at = clock_timestamp() + make_interval(secs => %s), "
                    "taken_at = clock_timestamp() WHERE conversation_id = %s "
                    "RETURNING generation",
                    (pg_text(owner), float(seconds), cid),
                ).fetchone()
                assert taken is not None
                lease = Lease(conversation_id=cid, owner=owner, generation=int(taken["generation"]))
                # Read before they are marked as this replica's: the caller tells whose they were.
                left = db.execute(
                    "SELECT * FROM messages WHERE conversation_id = %s AND status = 'running' "
                    "ORDER BY id",
                    (cid,),
                ).fetchall()
                claimed.extend((message_record(message), lease) for message in left)
                db.execute(
                    "UPDATE messages SET replica = %s WHERE conversation_id = %s "
                    "AND status = 'running'",
                    (pg_text(owner), cid),
                )
            return claimed

        claimed = self._run(op)
        for message, lease in claimed:
            self._hold(lease)
            with self._held_lock:
                self._conversation_of[message.message_id] = lease.conversation_id
        return claimed
