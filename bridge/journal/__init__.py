"""The journal: what the loop writes down before each step, so a crash loses nothing.

    conversation ── message (a user query: running -> finished | failed | waiting_input)
                      └── tool call   received -> started -> finished(output)
                                        -> submitting -> submitted

Each state is written at the moment that makes recovery exact: a call is `received` when its
batch arrives, `started` right before its function may run (one call at a time, as each
really starts), `finished` with its output as soon as it returns, `submitting` before the
outputs are posted and `submitted` once the platform accepted them. After a crash (even
`kill -9`) the journal therefore says, for every call, what may have happened:

- `submitted`: the platform has its output; nothing is sent again;
- `submitting`: it ran; its output may or may not have reached the platform, so recovery posts
  the recorded output again, and a platform answer that the calls are no longer pending
  counts as delivered (the platform validates call ids, so it never accepts an output twice);
- `finished`: it ran; its recorded output is sent, it never runs twice;
- `started`: it may have run; it runs again only if its tool is `idempotent=True`, otherwise
  it gets an output saying it was interrupted by a restart (see `Ledger.plan`);
- `received`: it never ran; it simply runs.

A conversation's platform side can be lost with a crash (the agent may have asked for calls
in a stream nobody read, or a failed run left its calls pending): a message whose run did not
end with an answer or a question is recorded as not `platform_settled`, and the next message
may then continue in a new platform conversation (`Journal.replace_platform_conversation`);
the journal keeps that history.

A platform that keeps a conversation's state in the process (Chat Completions' history) has it
journaled too, the latest per platform conversation (`StateSnapshot`, `save_platform_state`):
with the batch that it has pending (in the same transaction as "received") and when a run ends
or pauses for a person, so that recovery and another process on the same journal continue
with it (`bridge.conversation`).

The package: `records` (what is written down), `base` (`Journal`, the interface every store
implements), `memory` (`MemoryJournal`, the library default), `_sql` (`SQLJournal`: the
statements of the two SQL stores, written once over a few hooks), `sqlite` (`SQLiteJournal`, the
durable one, its schema steps in `migrations`), `leases` (`LeaseJournal`, a journal with
leases, and `LocalLeases`, the embedded stores'), `postgres` (`PostgresJournal`, shared by
several processes; beside it `postgres_connect`, `postgres_migrations`, `postgres_leases` and
`postgres_replicas`; psycopg is imported only when one is opened), `stores` (`open_journal`: a
path or a ``postgresql://`` URL), `owner` (one daemon per SQLite file: `JournalLock`; the
refusals `JournalInUseError` and `ReplicaInUseError`, for a PostgreSQL replica id a live process
holds), `ledger` (`Ledger`, one conversation's view, and `MessageTrail`, used by
`bridge.conversation`), `audit_store` (the audit record's rows, one hash chain per writer) and
`audit_readers` (`open_audit_reader`: reads them without opening the journal). Every public name is
importable from here; the modules import each other only downwards (records <- base <- leases
<- stores, ledger), never from this package's `__init__`, so any of them can be imported alone.
Text written to a journal goes through `bridge.errors.redact`, so registered secrets (tokens,
API keys) are never stored.

Leases (`LeaseJournal`, which every store here is): daemon replicas sharing one journal run a
conversation one at a time. `acquire_lease`
takes a conversation's `Lease` (or raises `LeaseHeldError`), `renew_leases` keeps the running
ones, `claim_orphans` takes over the unfinished messages of replicas whose leases expired
(`FOR UPDATE SKIP LOCKED` in PostgreSQL: each is claimed by exactly one replica), and a store
bound to a replica (`bind_replica`) checks the lease's generation in every write of a
conversation (`LeaseLostError`: fencing). The embedded stores (memory, SQLite) belong to one
process: their leases never conflict and they do not fence.

Approvals: a call of a `confirm=True` tool that waits for a person is an `ApprovalRecord`,
pending -> approved | rejected | expired, bound to its call id and a hash of its exact arguments
(`bridge.tools.approval.arguments_digest`). Only a pending one can be decided
(`ApprovalDecidedError` otherwise), so a decision is taken once, and a restarted process finds
the same record for the same call and arguments (`find_approval`), never for other arguments.
"""

from bridge.journal.audit_readers import AuditReader, open_audit_reader
from bridge.journal.audit_store import AuditRow, AuditStore
from bridge.journal.base import Journal
from bridge.journal.leases import LeaseJournal
from bridge.journal.ledger import INTERRUPTED_OUTPUT, Ledger, MessageTrail
from bridge.journal.memory import MemoryJournal
from bridge.journal.postgres import PostgresJournal
from bridge.journal.records import (
    INTERRUPTED_CODE,
    INTERRUPTED_MESSAGE,
    ApprovalDecidedError,
    ApprovalRecord,
    ApprovalStatus,
    CallRecord,
    CallState,
    ConversationRecord,
    DirectCallRecord,
    JournalUnavailableError,
    Lease,
    LeaseHeldError,
    LeaseLostError,
    MessageEnd,
    MessageRecord,
    MessageStatus,
    PendingBatch,
    PlatformConversationRecord,
    PlatformStateRecord,
    StateSnapshot,
    now,
    redacted_arguments,
    redacted_state,
)
from bridge.journal.sqlite import SQLiteJournal
from bridge.journal.stores import open_journal

__all__ = [
    "INTERRUPTED_CODE",
    "INTERRUPTED_MESSAGE",
    "INTERRUPTED_OUTPUT",
    "ApprovalDecidedError",
    "ApprovalRecord",
    "ApprovalStatus",
    "AuditReader",
    "AuditRow",
    "AuditStore",
    "CallRecord",
    "CallState",
    "ConversationRecord",
    "DirectCallRecord",
    "Journal",
    "JournalUnavailableError",
    "Lease",
    "LeaseHeldError",
    "LeaseJournal",
    "LeaseLostError",
    "Ledger",
    "MemoryJournal",
    "MessageEnd",
    "MessageRecord",
    "MessageStatus",
    "MessageTrail",
    "PendingBatch",
    "PlatformConversationRecord",
    "PlatformStateRecord",
    "PostgresJournal",
    "SQLiteJournal",
    "StateSnapshot",
    "now",
    "open_audit_reader",
    "open_journal",
    "redacted_arguments",
    "redacted_state",
]
