"""The audit record: every decision at the door, appended to a hash chain in the journal.

Each entry (`AuditEvent` plus its place in the chain) is kept as canonical JSON (sorted keys,
no spaces, UTF-8) holding its chain, ``seq``, time, kind, outcome, caller, what it concerns, the
call's arguments *redacted* with the SHA-256 of the *unredacted* ones, the detail, and the
previous entry's hash. Its hash is SHA-256 (hex) of ``prev_hash + entry``; the first entry's
``prev_hash`` is 64 zeros. Changing an entry changes its hash; removing or moving one breaks
the link of the entry after it; the entry's own ``seq`` is hashed too, so renumbering rows is
seen: `verify_audit` names the first entry that does not hold.

Chains: one per writer, so that appending never waits for another process: "local" for a
memory or SQLite journal (one process owns it), the replica id on PostgreSQL (one live process
per id). `AuditLog` keeps its chain's tail in memory, read from the journal once.

Limit: entries cut off the *end* of a chain leave a shorter chain that holds together, and
someone able to rewrite the table can recompute every hash after an edit. Both are caught
only against a head kept elsewhere: `audit head` (or an export to a SIEM) records
``CHAIN:SEQ:HASH``, and ``audit verify --expect-head`` checks the chain still reaches it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Literal

from bridge.access.decision import AuditEvent
from bridge.errors import UsageError, redact, redact_data, valid_text
from bridge.journal.audit_store import AuditRow, AuditStore, audit_time
from bridge.journal.base import Journal
from bridge.journal.records import JournalUnavailableError

__all__ = [
    "GENESIS",
    "STRICT_KINDS",
    "AuditLog",
    "AuditProblem",
    "AuditWriteError",
    "ChainHead",
    "ExpectedHead",
    "VerifyReport",
    "canonical_json",
    "entry_hash",
    "export_audit",
    "verify_audit",
]

logger = logging.getLogger(__name__)

GENESIS = "0" * 64
"""The ``prev_hash`` of a chain's first entry."""

STRICT_KINDS = frozenset({"policy", "approval", "direct_call"})
"""Kinds whose entry must be written before the step goes on: a failed append raises
`AuditWriteError` (the call is not run, the decision not taken). The others (outcomes,
refusals at the door, messages) log an error and let the step finish."""


class AuditWriteError(JournalUnavailableError):
    """An audit entry could not be written: the step it records was not taken."""


def canonical_json(value: Any) -> str:
    """`value` as canonical JSON: sorted keys, no spaces, non-ASCII kept (UTF-8)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def _sha256(text: str) -> str:
    # A Python string may hold a lone surrogate (hostile arguments): hashed as its code unit.
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def entry_hash(prev_hash: str, entry: str) -> str:
    """The hash of an entry: SHA-256 (hex) of the previous hash followed by the entry's JSON."""
    return _sha256(prev_hash + entry)


def _plain(arguments: Any) -> Any:
    return dict(arguments) if isinstance(arguments, Mapping) else arguments


def _text(value: str | None) -> str | None:
    return redact(valid_text(value)) if value is not None else None


def _parsed(masked: str, text: str) -> Any:
    """The JSON value of `masked` (`text` with its secrets masked); when a mask cut through the
    JSON's syntax, `text`'s value masked string by string."""
    try:
        return json.loads(masked)
    except json.JSONDecodeError:
        return redact_data(json.loads(text))


def _texts(*values: str | None) -> list[str | None]:
    """`_text` of each value, masked in one pass over them joined by newlines (a mask never
    takes a newline away, so the values split back; at worst a value after one ending in
    "Bearer" is masked as well: more masked, never less); value by value when one holds a
    newline itself."""
    given = [valid_text(value) for value in values if value is not None]
    if any("\n" in value for value in given):
        return [_text(value) for value in values]
    masked = iter(redact("\n".join(given)).split("\n"))
    return [next(masked) if value is not None else None for value in values]


class _Pending:
    __slots__ = ("body", "done", "error", "event", "stamp")

    def __init__(self, event: AuditEvent) -> None:
        self.event = event
        self.stamp = time.time()
        self.body: dict[str, Any] | None = None
        self.done = False
        self.error: BaseException | None = None


class AuditLog:
    """The audit record of one writer: appends `AuditEvent`s to its chain (`Records`).

    Args:
        journal: where the chain is kept.
        chain: the chain's name; default the journal's (`Journal.audit_chain`: "local", or
            the replica the journal is bound to, read on the first `record`: bind first).
        strict_kinds: kinds whose failed append raises (`STRICT_KINDS`).

    `record` is safe from any number of threads: entries waiting while one is written are
    appended together, in one transaction, and each `record` returns once its entry is
    durable. One writer per chain: the tail is read from the journal on the first `record`
    and kept; should another writer have appended meanwhile, the tail is read again and the
    append tried once more.
    """

    def __init__(
        self,
        journal: Journal,
        *,
        chain: str | None = None,
        strict_kinds: Iterable[str] = STRICT_KINDS,
    ) -> None:
        self.journal = journal
        self._chain = chain
        self.strict_kinds = frozenset(strict_kinds)
        self._turn = threading.Condition(threading.Lock())
        """Guards the queue and `_writing`; notified when a write ends."""
        self._queue: list[_Pending] = []
        self._writing = False
        """Whether a thread is writing (the tail and the journal are its own meanwhile)."""

    def __repr__(self) -> str:
        # Not `self.chain`: that would settle the chain before the journal is bound.
        return f"AuditLog({self.journal!r}, chain={self._chain!r})"

    @property
    def chain(self) -> str:
        """The chain this log appends to."""
        if self._chain is None:
            self._chain = self.journal.audit_chain()
        return self._chain

    def head(self) -> ChainHead | None:
        """The chain's last entry, as the journal holds it."""
        tail = self.journal.audit_tail(self.chain)
        return None if tail is None else ChainHead(tail.chain, tail.seq, tail.hash, tail.seq)

    def record(self, event: AuditEvent) -> None:
        """Append `event` to the chain; durable when this returns.

        Group commit: while one thread writes, the events recorded meanwhile wait; the next
        writer appends all of them in one transaction.

        Raises:
            AuditWriteError: the entry could not be written and its kind is strict
                (`STRICT_KINDS`); for other kinds the failure is logged as an error.
        """
        pending = _Pending(event)
        try:
            pending.body = self._body(event)  # redaction and hashing before waiting
        except Exception as exc:  # an event that cannot be written down, e.g. its detail
            self._failed(event, exc)
            return
        with self._turn:
            self._queue.append(pending)
            while not pending.done and self._writing:
                self._turn.wait()
            if not pending.done:  # nobody writing: this thread writes what waits
                self._writing = True
                batch, self._queue = self._queue, []
        if not pending.done:
            try:
                self._append(batch)
            finally:
                self._end_turn()
        if pending.error is not None:
            self._failed(event, pending.error)

    def stage(self, event: AuditEvent) -> None:
        """Append `event` in the same transaction as its conversation's next journal write
        (the call it concerns started or finished): the entry and that step are durable
        together or not at all, and it costs no commit of its own. An event outside a
        conversation is recorded now (`record`)."""
        if event.conversation_id is None:
            self.record(event)
            return
        pending = _Pending(event)
        try:
            pending.body = self._body(event)
        except Exception as exc:
            self._failed(event, exc)
            return
        chain = self.chain
        self.journal.stage_audit(
            event.conversation_id, chain, lambda tail: self._rows(chain, [pending], tail)
        )

    def _take_turn(self) -> None:
        with self._turn:
            while self._writing:
                self._turn.wait()
            self._writing = True

    def _end_turn(self) -> None:
        with self._turn:
            self._writing = False
            self._turn.notify_all()

    def _body(self, event: AuditEvent) -> dict[str, Any]:
        plain = _plain(event.arguments)
        arguments_json = canonical_json(plain) if plain is not None else None
        detail_json = canonical_json(dict(event.detail)) if event.detail else None
        arguments_text = (
            None
            if plain is None
            else valid_text(plain if isinstance(plain, str) else arguments_json or "")
        )
        # One masking pass over every text of the entry (they run once per tool call).
        caller, via, conversation_id, call_id, tool, arguments, detail = _texts(
            event.caller,
            event.via,
            event.conversation_id,
            event.call_id,
            event.tool,
            arguments_text,
            valid_text(detail_json) if detail_json is not None else None,
        )
        return {
            "kind": event.kind,
            "outcome": valid_text(event.outcome),
            "caller": caller,
            "via": via,
            "conversation_id": conversation_id,
            "call_id": call_id,
            "tool": tool,
            "arguments": (
                arguments
                if arguments is None or isinstance(plain, str)
                else _parsed(arguments, arguments_text or "")
            ),
            # The canonical JSON of the arguments as the tool received them (a string as a JSON
            # string): whoever holds them can prove which call an entry records, without the
            # record holding any secret.
            "arguments_sha256": _sha256(arguments_json) if arguments_json is not None else None,
            "detail": _parsed(detail, detail_json or "") if detail is not None else {},
        }

    def _append(self, batch: list[_Pending]) -> None:
        chain = self.chain
        try:
            # The rows follow the chain's tail as the journal reads it in the transaction
            # that inserts them: a second writer, or rows staged with a conversation's step,
            # can never fork the chain.
            self.journal.append_linked(chain, lambda tail: self._rows(chain, batch, tail))
        except BaseException as exc:
            for pending in batch:
                pending.error = exc
                pending.done = True
            if not isinstance(exc, Exception):
                raise
            return
        for pending in batch:
            pending.done = True

    def _rows(self, chain: str, batch: list[_Pending], tail: AuditRow | None) -> list[AuditRow]:
        rows: list[AuditRow] = []
        seq = tail.seq if tail is not None else 0
        prev = tail.hash if tail is not None else GENESIS
        last_at = tail.at if tail is not None else ""
        for pending in batch:
            assert pending.body is not None
            seq += 1
            # Times never go backwards along a chain (a clock stepped back keeps the last).
            at = max(audit_time(datetime.fromtimestamp(pending.stamp, timezone.utc)), last_at)
            entry = canonical_json(
                {**pending.body, "chain": chain, "seq": seq, "at": at, "prev_hash": prev}
            )
            digest = entry_hash(prev, entry)
            rows.append(AuditRow(chain, seq, at, pending.event.kind, entry, prev, digest))
            prev, last_at = digest, at
        return rows

    def _failed(self, event: AuditEvent, error: BaseException) -> None:
        what = f"{event.kind} {event.outcome}" + (f" of {event.tool}" if event.tool else "")
        message = f"the audit record could not be written ({what}): {redact(str(error))}"
        logger.error("%s", message)
        if event.kind in self.strict_kinds:
            raise AuditWriteError(message) from error


# --- checking -------------------------------------------------------------------------------------

Problem = Literal["edited", "deleted", "reordered", "truncated"]


@dataclass(frozen=True)
class AuditProblem:
    """The first entry of a chain that does not hold.

    Attributes:
        chain, seq: Where (the row's seq as stored).
        kind: The row's kind ("" when the row is missing: truncation).
        problem: ``edited`` (its content no longer matches its hash, or a column its content),
            ``deleted`` (entries missing before it: a seq gap, a broken link), ``reordered``
            (rows renumbered or swapped, time going backwards), ``truncated`` (the chain ends
            before an expected head).
        what: In words.
    """

    chain: str
    seq: int
    kind: str
    problem: Problem
    what: str

    def describe(self) -> str:
        kind = f" ({self.kind})" if self.kind else ""
        return f"chain {self.chain}, entry {self.seq}{kind}: {self.problem}: {self.what}"


@dataclass(frozen=True)
class ChainHead:
    """A chain's last entry: what to keep elsewhere to detect truncation later."""

    chain: str
    seq: int
    hash: str
    entries: int

    def token(self) -> str:
        """``CHAIN:SEQ:HASH``, what ``audit verify --expect-head`` takes."""
        return f"{self.chain}:{self.seq}:{self.hash}"


@dataclass(frozen=True)
class ExpectedHead:
    """A head recorded earlier: the chain must still hold this entry with this hash."""

    chain: str | None
    seq: int
    hash: str

    @classmethod
    def parse(cls, text: str) -> ExpectedHead:
        """``[CHAIN:]SEQ:HASH`` (the chain may be left out when the record has one).

        Raises:
            UsageError: not of that form.
        """
        chain, sep, rest = text.strip().rpartition(":")
        chain, _, seq = chain.rpartition(":") if sep else ("", "", "")
        digest = rest.lower()
        if not (
            seq.isdigit()
            and int(seq) > 0
            and len(digest) == 64
            and all(c in "0123456789abcdef" for c in digest)
        ):
            raise UsageError(
                f"expected head {text!r}: expected [CHAIN:]SEQ:HASH as `toolbridge audit head` "
                "prints it (HASH: 64 hex digits)"
            )
        return cls(chain or None, int(seq), digest)


@dataclass(frozen=True)
class VerifyReport:
    """What `verify_audit` found.

    Attributes:
        entries: Rows read.
        heads: Each chain's last row.
        problems: The first bad entry of each chain that has one (empty: intact).
    """

    entries: int
    heads: tuple[ChainHead, ...]
    problems: tuple[AuditProblem, ...]

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        """``intact: N entries in K chains, head CHAIN:SEQ:HASH`` or the first problem."""
        if self.problems:
            return "tampered: " + "; ".join(p.describe() for p in self.problems)
        chains = len(self.heads)
        text = f"intact: {self.entries} entries in {chains} chain{'' if chains == 1 else 's'}"
        if self.heads:
            word = "head" if chains == 1 else "heads"
            text += f", {word} " + ", ".join(h.token() for h in self.heads)
        return text


def _time(value: Any) -> datetime | None:
    try:
        return datetime.fromisoformat(str(value))
    except ValueError:
        return None


def _check(row: AuditRow, prev: AuditRow | None) -> AuditProblem | None:
    """What is wrong with `row` after `prev` (None: the chain's first row), if anything."""

    def bad(problem: Problem, what: str) -> AuditProblem:
        return AuditProblem(row.chain, row.seq, row.kind, problem, what)

    try:
        entry = json.loads(row.entry)
    except json.JSONDecodeError:
        entry = None
    if not isinstance(entry, dict):
        return bad("edited", "its content is not a JSON object")
    if entry_hash(row.prev_hash, row.entry) != row.hash:
        return bad("edited", "its hash does not match its content (the entry or its hash changed)")
    if entry.get("seq") != row.seq:
        return bad(
            "reordered",
            f"stored as entry {row.seq} but its hashed content says entry {entry.get('seq')} "
            "(rows renumbered or swapped)",
        )
    for column, value in (("chain", row.chain), ("kind", row.kind), ("prev_hash", row.prev_hash)):
        if entry.get(column) != value:
            return bad("edited", f"its {column} column differs from its hashed content")
    at = _time(entry.get("at"))
    if at is None or at != _time(row.at):
        return bad("edited", "its time column differs from its hashed content")
    if prev is None:
        if row.seq != 1:
            return bad(
                "deleted", f"the chain starts at entry {row.seq}: entries before it are gone"
            )
        if row.prev_hash != GENESIS:
            return bad("deleted", "the chain's first entry does not link to the chain's start")
        return None
    if row.seq != prev.seq + 1:
        missing = (
            f"entry {prev.seq + 1} is"
            if row.seq == prev.seq + 2
            else f"entries {prev.seq + 1} to {row.seq - 1} are"
        )
        return bad("deleted", f"{missing} missing (seq goes from {prev.seq} to {row.seq})")
    if row.prev_hash != prev.hash:
        return bad(
            "deleted",
            f"it does not link to entry {prev.seq} (its prev_hash is not that entry's hash: "
            "entries were removed or replaced)",
        )
    before = _time(prev.at)
    if before is not None and at < before:
        return bad("reordered", f"its time {entry.get('at')} is before entry {prev.seq}'s")
    return None


def verify_audit(
    store: AuditStore, *, chain: str | None = None, expect: Iterable[ExpectedHead] = ()
) -> VerifyReport:
    """Recompute every chain (or `chain` alone) of `store` (a `Journal`, or a reader of
    `bridge.journal.open_audit_reader`): the first bad entry of each, its head, and whether
    it still holds each `expect`ed head.

    Raises:
        UsageError: an expected head without a chain while the record has several chains.
    """
    expected = list(expect)
    if any(e.chain is None for e in expected):
        names = store.audit_chains() if chain is None else [chain]
        if len(names) > 1:
            raise UsageError(
                "the audit record has several chains (" + ", ".join(names) + "): "
                "name the chain of each expected head (CHAIN:SEQ:HASH)"
            )
        only = names[0] if names else "local"
        expected = [ExpectedHead(e.chain or only, e.seq, e.hash) for e in expected]
    wanted: dict[str, list[ExpectedHead]] = {}
    for e in expected:
        wanted.setdefault(e.chain or "", []).append(e)

    entries = 0
    heads: list[ChainHead] = []
    problems: list[AuditProblem] = []
    current: str | None = None
    prev: AuditRow | None = None
    count = 0
    bad = False
    seen: dict[tuple[str, int], str] = {}

    def close_chain() -> None:
        if current is None or prev is None:
            return
        heads.append(ChainHead(current, prev.seq, prev.hash, count))
        if not bad:
            problem = _expected(current, prev, wanted.get(current, []), seen)
            if problem is not None:
                problems.append(problem)

    for row in store.audit_entries(chain=chain):
        if row.chain != current:
            close_chain()
            current, prev, count, bad = row.chain, None, 0, False
        entries += 1
        count += 1
        if any(e.seq == row.seq for e in wanted.get(row.chain, ())):
            seen[(row.chain, row.seq)] = row.hash
        if not bad:
            problem = _check(row, prev)
            if problem is not None:
                problems.append(problem)
                bad = True
        prev = row
    close_chain()
    for name, heads_wanted in wanted.items():
        if (chain is None or name == chain) and name not in {h.chain for h in heads}:
            first = min(heads_wanted, key=lambda e: e.seq)
            problems.append(
                AuditProblem(
                    name, 1, "", "truncated", f"the chain is empty, expected entry {first.seq}"
                )
            )
    return VerifyReport(entries, tuple(heads), tuple(problems))


def _expected(
    chain: str, last: AuditRow, wanted: list[ExpectedHead], seen: dict[tuple[str, int], str]
) -> AuditProblem | None:
    for expected in sorted(wanted, key=lambda e: e.seq):
        if expected.seq > last.seq:
            return AuditProblem(
                chain,
                last.seq + 1,
                "",
                "truncated",
                f"the chain ends at entry {last.seq}, but entry {expected.seq} was its head "
                f"(entries {last.seq + 1} to {expected.seq} are gone)",
            )
        found = seen.get((chain, expected.seq))
        if found != expected.hash:
            return AuditProblem(
                chain,
                expected.seq,
                "",
                "edited",
                f"entry {expected.seq}'s hash is not the expected head's: the chain was "
                "rewritten from there or before",
            )
    return None


# --- export ---------------------------------------------------------------------------------------


def export_audit(
    store: AuditStore, *, since: datetime | None = None, chain: str | None = None
) -> Iterator[dict[str, Any]]:
    """Every entry (of `chain`; at or after `since`) as a JSON object: the hashed entry's
    fields (arguments masked, their SHA-256 always) and the entry's ``hash``, in chain order.
    Secrets registered in this process are masked again, for entries written before they
    were."""
    for row in store.audit_entries(chain=chain, since=since):
        try:
            entry = json.loads(row.entry)
        except json.JSONDecodeError:
            entry = None
        if not isinstance(entry, dict):
            entry = {"chain": row.chain, "seq": row.seq, "at": row.at, "kind": row.kind}
            entry["unreadable"] = True
        entry["hash"] = row.hash
        for key in ("arguments", "detail"):
            if key in entry:
                entry[key] = redact_data(entry[key])
        yield entry
