"""The audit table's rows, as every store keeps them, and the statements that read them.

The journal only stores rows: one hash chain per writer (``chain``: "local" for a memory or
SQLite journal, the replica id on PostgreSQL), each row an entry's sequence number, time,
kind, canonical JSON text and the hashes linking it to the previous row. What the hashes are
and how a chain is checked belongs to `bridge.access.audit`.

`bridge.journal.audit_readers` reads them without opening a journal (for the commands that
check or export the record).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from datetime import datetime, timezone
from typing import Any, NamedTuple, Protocol, runtime_checkable

__all__ = [
    "AUDIT_PAGE",
    "AuditRow",
    "AuditStore",
    "Query",
    "audit_row",
    "audit_time",
    "chains_of",
    "iter_rows",
    "page_query",
    "tail_of",
]

AUDIT_PAGE = 1000
"""Rows read per query when walking a chain (a long chain is never held in memory at once)."""


COLUMNS = "chain, seq, at, kind, entry, prev_hash, hash"
TAIL_SQL = f"SELECT {COLUMNS} FROM audit WHERE chain = ? ORDER BY seq DESC LIMIT 1"
CHAINS_SQL = "SELECT DISTINCT chain FROM audit ORDER BY chain"
INSERT_SQL = f"INSERT INTO audit ({COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)"

Query = Callable[[str, Sequence[Any]], list[Any]]

Link = Callable[["AuditRow | None"], "list[AuditRow]"]
"""Makes the rows to append from the chain's last row (None for an empty chain): the store
calls it inside the transaction that inserts them, so the rows always follow the real tail."""
"""Runs one read statement (``?`` placeholders) and returns its rows (mappings by column)."""


class AuditRow(NamedTuple):
    """One stored entry of the audit record.

    Attributes:
        chain: Whose chain ("local", or a replica id on PostgreSQL).
        seq: Its number in the chain, from 1.
        at: When it was appended (UTC, ISO 8601 with microseconds).
        kind: The event's kind (``policy``, ``tool``...).
        entry: The entry as canonical JSON text (what is hashed).
        prev_hash: The previous entry's hash (64 zeros for the first).
        hash: SHA-256 (hex) of ``prev_hash + entry``.
    """

    chain: str
    seq: int
    at: str
    kind: str
    entry: str
    prev_hash: str
    hash: str


def audit_time(value: datetime) -> str:
    """`value` as the audit record writes times: UTC, ISO 8601, microseconds (a naive time is
    taken as UTC). Written this way, times compare as text too."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return value.astimezone(timezone.utc).isoformat(timespec="microseconds")


def audit_row(row: Any) -> AuditRow:
    """A row read back (SQLite text times; PostgreSQL ``timestamptz``) as an `AuditRow`."""
    at = row["at"]
    return AuditRow(
        chain=row["chain"],
        seq=int(row["seq"]),
        at=audit_time(at) if isinstance(at, datetime) else str(at),
        kind=row["kind"],
        entry=row["entry"],
        prev_hash=row["prev_hash"],
        hash=row["hash"],
    )


def page_query(
    chain: str | None, since: datetime | None, after: tuple[str, int] | None
) -> tuple[str, list[Any]]:
    """One page of rows ordered by chain and seq, after the (chain, seq) `after`."""
    where: list[str] = []
    params: list[Any] = []
    if chain is not None:
        where.append("chain = ?")
        params.append(chain)
    if since is not None:
        where.append("at >= ?")
        params.append(audit_time(since))
    if after is not None:
        where.append("(chain > ? OR (chain = ? AND seq > ?))")
        params.extend((after[0], after[0], after[1]))
    clause = (" WHERE " + " AND ".join(where)) if where else ""
    return (
        f"SELECT {COLUMNS} FROM audit{clause} ORDER BY chain, seq LIMIT {AUDIT_PAGE}",
        params,
    )


def iter_rows(query: Query, chain: str | None, since: datetime | None) -> Iterator[AuditRow]:
    """Every row matching, ordered by chain and seq, read a page at a time."""
    after: tuple[str, int] | None = None
    while True:
        sql, params = page_query(chain, since, after)
        rows = [audit_row(row) for row in query(sql, params)]
        yield from rows
        if len(rows) < AUDIT_PAGE:
            return
        after = (rows[-1].chain, rows[-1].seq)


def tail_of(query: Query, chain: str) -> AuditRow | None:
    rows = query(TAIL_SQL, [chain])
    return audit_row(rows[0]) if rows else None


def chains_of(query: Query) -> list[str]:
    return [str(row["chain"]) for row in query(CHAINS_SQL, [])]


@runtime_checkable
class AuditStore(Protocol):
    """What reads an audit record: every `Journal`, and the readers of
    `bridge.journal.audit_readers.open_audit_reader`."""

    def audit_chains(self) -> list[str]:
        """The chains the record holds, sorted."""
        ...

    def audit_tail(self, chain: str) -> AuditRow | None:
        """The last row of `chain`, or None when it is empty."""
        ...

    def audit_entries(
        self, *, chain: str | None = None, since: datetime | None = None
    ) -> Iterator[AuditRow]:
        """Rows ordered by chain then seq (only `chain`'s; only those at or after `since`)."""
        ...
