"""Replica ids on a PostgreSQL journal: one live process each (`claim_replica`), and what
``toolbridge db replicas`` shows (`replica_status`)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from bridge.errors import UsageError
from bridge.journal.owner import Owner, ReplicaInUseError
from bridge.journal.postgres_connect import (
    CONNECT_TIMEOUT,
    clean_error,
    connect,
    load_psycopg,
    pg_text,
    safe_dsn,
)
from bridge.journal.postgres_migrations import migrate
from bridge.journal.records import JournalUnavailableError

if TYPE_CHECKING:
    import psycopg

__all__ = ["ReplicaClaim", "ReplicaStatus", "claim_replica", "replica_status"]

logger = logging.getLogger(__name__)

Row = dict[str, Any]

REPLICA_LOCK_PREFIX = "toolbridge replica:"
"""Hashed with the replica id into the key of the session advisory lock its process holds."""
_LOCK_KEY = f"hashtextextended('{REPLICA_LOCK_PREFIX}' || %s, 0)"


class ReplicaClaim:
    """This process's hold on a replica id: a row in ``replicas`` renewed every third of the
    lease, and a session advisory lock on a connection of its own (see `claim_replica`).

    `start_renewing` starts the keeper thread; `release` (a clean stop) deletes the row and
    closes the connection. A process that dies just closes the connection: the database drops
    its advisory lock at once, which is how a restart knows the old process is gone.
    """

    def __init__(
        self, dsn: str, replica: str, seconds: float, conn: psycopg.Connection[Any], token: str
    ) -> None:
        self.dsn = dsn
        self.replica = replica
        self.seconds = seconds
        self.token = token
        self.locked = True
        self.lost = False
        self.note: str | None = None
        """What became of a previous process that held the id (for the daemon's log, which
        is set up after the claim)."""
        self._conn: psycopg.Connection[Any] | None = conn
        self._mutex = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def set_address(self, address: str) -> None:
        """Record where this process listens (named when another process is refused)."""
        self._execute(
            "UPDATE replicas SET address = %s WHERE replica_id = %s AND token = %s",
            (address, pg_text(self.replica), self.token),
        )

    def _execute(self, sql: str, params: Sequence[Any]) -> int:
        psycopg = load_psycopg()
        with self._mutex:
            if self._conn is None or self._conn.closed:
                # A new session (the server restarted): its advisory lock is taken again.
                self._conn = connect(self.dsn)
                self.locked = False
            conn = self._conn
            try:
                if not self.locked:
                    row = conn.execute(
                        f"SELECT pg_try_advisory_lock({_LOCK_KEY})", (pg_text(self.replica),)
                    ).fetchone()
                    self.locked = bool(row and row[0])
                return int(conn.execute(sql, params).rowcount)
            except psycopg.Error as exc:
                conn.close()
                raise JournalUnavailableError(
                    f"journal {safe_dsn(self.dsn)}: {clean_error(self.dsn, exc)}"
                ) from None

    def renew(self) -> bool:
        """Extend the claim by a lease; False once another process took the replica id over
        (this one was frozen for longer than a lease)."""
        if self.lost:
            return False
        renewed = self._execute(
            "UPDATE replicas SET renewed_at = clock_timestamp(), expires_at = clock_timestamp() "
            "+ make_interval(secs => %s) WHERE replica_id = %s AND token = %s",
            (float(self.seconds), pg_text(self.replica), self.token),
        )
        if not renewed:
            self.lost = True
            logger.error(
                "replica %s was taken over by another process while this one did not renew it "
                "for %g s (paused or cut off from the database); this process no longer holds "
                "the replica id: stop it",
                self.replica,
                self.seconds,
            )
        return bool(renewed)

    def start_renewing(self) -> None:
        """Renew every third of the lease on a thread of its own, until `release`."""
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._keep, name="toolbridge-replica", daemon=True
            )
            self._thread.start()

    def _keep(self) -> None:
        while not self._stop.wait(self.seconds / 3):
            try:
                if not self.renew():
                    return
            except Exception as exc:
                logger.warning("could not renew replica %s's claim: %s", self.replica, exc)

    def release(self) -> None:
        """Give the replica id back (a clean stop); a second call does nothing."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=CONNECT_TIMEOUT)
        with self._mutex:
            conn, self._conn = self._conn, None
        if conn is None or conn.closed:
            return
        try:
            if not self.lost:
                conn.execute(
                    "DELETE FROM replicas WHERE replica_id = %s AND token = %s",
                    (pg_text(self.replica), self.token),
                )
        except Exception as exc:
            logger.warning("could not give replica %s back: %s", self.replica, exc)
        finally:
            conn.close()


def _owner(row: Row) -> Owner:
    started = row.get("started_at")
    return Owner(
        pid=int(row["pid"]) if row.get("pid") is not None else None,
        host=str(row.get("hostname") or ""),
        address=row.get("address"),
        since=started.isoformat(timespec="seconds") if started is not None else None,
    )


def claim_replica(dsn: str, replica: str, seconds: float, owner: Owner) -> ReplicaClaim:
    """Hold `replica` for this process, or refuse because a live process holds it.

    A process holds its replica id by two things: a session advisory lock (held by a
    connection of its own; the database drops it the moment the process dies, kill -9
    included) and a row in ``replicas`` it renews every third of `seconds`. The rule:

    - the lock is free: no process holds the id (the last one stopped or died): take it, at
      once, even if the dead process's row has not expired yet;
    - the lock is held and the row was renewed within `seconds`: a live process holds it:
      refuse (`ReplicaInUseError`, naming its pid, host and address);
    - the lock is held but the row was not renewed for `seconds` (the process is frozen, or
      its machine vanished and its connection lingers): the same rule that lets other
      replicas take its leases lets this process take the id; the lock is taken when the old
      connection goes.

    Raises:
        ReplicaInUseError: a live process holds `replica`.
        UsageError: the database is unreachable or its schema cannot be brought up to date.
    """
    import secrets

    psycopg = load_psycopg()
    migrate(dsn)
    conn = connect(dsn)
    token = secrets.token_hex(16)
    label = safe_dsn(dsn)
    try:
        from psycopg.rows import dict_row

        got = conn.execute(
            f"SELECT pg_try_advisory_lock({_LOCK_KEY})", (pg_text(replica),)
        ).fetchone()
        locked = bool(got and got[0])
        with conn.transaction(), conn.cursor(row_factory=dict_row) as cur:
            row = cur.execute(
                "SELECT *, expires_at < clock_timestamp() AS expired, "
                "extract(epoch FROM clock_timestamp() - renewed_at) AS silent_s "
                "FROM replicas WHERE replica_id = %s FOR UPDATE",
                (pg_text(replica),),
            ).fetchone()
            advice = (
                "stop it first, or give this process another --replica-id (each process "
                "sharing a journal needs its own)"
            )
            if not locked and (row is None or not row["expired"]):
                raise ReplicaInUseError(
                    replica, label, _owner(row) if row is not None else None, advice
                )
            note = None
            if row is not None and not locked:
                note = (
                    f"replica {replica}: its previous process ({_owner(row).describe()}) has "
                    f"not renewed it for {float(row['silent_s']):.0f} s; taking its place"
                )
            elif row is not None and not row["expired"]:
                note = (
                    f"replica {replica}: its previous process ({_owner(row).describe()}) is "
                    "gone; taking its leases back"
                )
            cur.execute(
                "INSERT INTO replicas (replica_id, token, pid, hostname, address, started_at, "
                "renewed_at, expires_at) VALUES (%s, %s, %s, %s, %s, clock_timestamp(), "
                "clock_timestamp(), clock_timestamp() + make_interval(secs => %s)) "
                "ON CONFLICT (replica_id) DO UPDATE SET token = excluded.token, "
                "pid = excluded.pid, hostname = excluded.hostname, address = excluded.address, "
                "started_at = excluded.started_at, renewed_at = excluded.renewed_at, "
                "expires_at = excluded.expires_at",
                (
                    pg_text(replica),
                    token,
                    owner.pid,
                    pg_text(owner.host),
                    owner.address,
                    float(seconds),
                ),
            )
    except psycopg.Error as exc:
        conn.close()
        raise UsageError(
            f"cannot claim replica {replica} on {label}: {clean_error(dsn, exc)}"
        ) from None
    except BaseException:
        conn.close()
        raise
    claim = ReplicaClaim(dsn, replica, seconds, conn, token)
    claim.locked = locked
    claim.note = note
    return claim


class ReplicaStatus:
    """One row of ``replicas`` as ``toolbridge db status`` shows it."""

    def __init__(self, replica: str, owner: Owner, live: bool, reason: str) -> None:
        self.replica = replica
        self.owner = owner
        self.live = live
        self.reason = reason


def replica_status(dsn: str) -> list[ReplicaStatus]:
    """Every replica id the journal knows, live or not, without changing anything.

    Live: its process's advisory lock is held and it renewed within its lease (the rule of
    `claim_replica`, read from ``pg_locks`` rather than by taking the lock).
    """
    psycopg = load_psycopg()
    conn = connect(dsn)
    try:
        from psycopg.rows import dict_row

        found = conn.execute("SELECT to_regclass('replicas')").fetchone()
        if found is None or found[0] is None:
            return []
        with conn.cursor(row_factory=dict_row) as cur:
            rows = cur.execute(
                "SELECT r.*, r.expires_at < clock_timestamp() AS expired, "
                "extract(epoch FROM clock_timestamp() - r.renewed_at) AS silent_s, "
                "EXISTS (SELECT 1 FROM pg_locks l, (SELECT "
                f"{_LOCK_KEY.replace('%s', 'r.replica_id')} AS k) key "
                "WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 "
                "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
                "AND l.classid::bigint = ((key.k >> 32) & 4294967295) "
                "AND l.objid::bigint = (key.k & 4294967295)) AS locked "
                "FROM replicas r ORDER BY r.replica_id"
            ).fetchall()
    except psycopg.Error as exc:
        raise UsageError(
            f"cannot read the journal {safe_dsn(dsn)}: {clean_error(dsn, exc)}"
        ) from None
    finally:
        conn.close()
    statuses: list[ReplicaStatus] = []
    for row in rows:
        silent = float(row["silent_s"])
        if row["locked"] and not row["expired"]:
            live, reason = True, f"renewed {silent:.0f} s ago"
        elif row["locked"]:
            live, reason = False, f"not renewed for {silent:.0f} s (frozen?)"
        else:
            live, reason = False, "its process is gone"
        statuses.append(ReplicaStatus(str(row["replica_id"]), _owner(row), live, reason))
    return statuses
