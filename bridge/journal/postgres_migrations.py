"""The PostgreSQL journal's schema: numbered steps, each moving a database one version up.

Same numbering as the SQLite steps (`bridge.journal.migrations`): `MIGRATIONS[i]` moves a
database from version i to i + 1, so version N means the same tables and semantics in both
stores. Differences, and why:

- times are ISO-8601 text, as in SQLite, so orderings (``updated_at DESC``) compare the same;
- JSON columns are text, not jsonb: tool arguments may hold NaN or Infinity (Python's json
  writes them), which jsonb rejects; the journal never queries inside them;
- SQLite's implicit ``rowid`` (the tie-breaker of several orderings) is an explicit ``rid``.

The version lives in ``toolbridge_schema`` (one row); steps run under ``pg_advisory_lock``
(`migrate`). A step is only ever appended, never edited. `schema_status` reads the version
without changing anything.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from bridge.errors import UsageError
from bridge.journal._sql import migrated_message
from bridge.journal.postgres_connect import clean_error, connect, load_psycopg, safe_dsn

if TYPE_CHECKING:
    import psycopg

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "SchemaStatus", "migrate", "schema_status"]

logger = logging.getLogger(__name__)

# One key for every toolbridge migration, on any database: pg_advisory_lock is per database.
MIGRATION_LOCK = 0x746F6F6C62726467  # "toolbrdg"

MIGRATIONS: list[str] = [
    # 0 -> 1: the first schema.
    """
    CREATE TABLE conversations (
        id TEXT PRIMARY KEY,
        end_user_id TEXT,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        rid BIGSERIAL NOT NULL
    );
    CREATE INDEX conversations_by_update ON conversations (updated_at DESC, rid DESC);
    CREATE TABLE messages (
        id BIGSERIAL PRIMARY KEY,
        conversation_id TEXT NOT NULL REFERENCES conversations (id),
        query TEXT NOT NULL,
        status TEXT NOT NULL,
        answer TEXT NOT NULL DEFAULT '',
        error_code TEXT,
        error_message TEXT,
        request_ids TEXT NOT NULL DEFAULT '[]',
        rounds INTEGER NOT NULL DEFAULT 0,
        created_at TEXT NOT NULL,
        finished_at TEXT
    );
    CREATE INDEX messages_by_conversation ON messages (conversation_id, id);
    CREATE INDEX messages_running ON messages (status) WHERE status = 'running';
    CREATE TABLE batches (
        seq BIGSERIAL PRIMARY KEY,
        conversation_id TEXT NOT NULL REFERENCES conversations (id),
        batch_id TEXT NOT NULL,
        message_id BIGINT REFERENCES messages (id),
        calls TEXT NOT NULL,
        resume TEXT NOT NULL,
        received_at TEXT NOT NULL,
        submitted_at TEXT
    );
    CREATE INDEX batches_by_conversation ON batches (conversation_id, seq);
    CREATE INDEX batches_by_message ON batches (message_id, seq);
    CREATE TABLE calls (
        conversation_id TEXT NOT NULL REFERENCES conversations (id),
        call_id TEXT NOT NULL,
        seq BIGINT NOT NULL,
        message_id BIGINT REFERENCES messages (id),
        name TEXT NOT NULL,
        arguments TEXT NOT NULL,
        state TEXT NOT NULL,
        output TEXT,
        error TEXT,
        started_at TEXT,
        duration_ms DOUBLE PRECISION,
        updated_at TEXT NOT NULL,
        rid BIGSERIAL NOT NULL,
        PRIMARY KEY (conversation_id, call_id)
    );
    CREATE INDEX calls_in_order ON calls (conversation_id, seq, rid);
    """,
    # 1 -> 2: a human-input pause is journaled with its id, so any process can answer it.
    """
    ALTER TABLE messages ADD COLUMN interrupt_id TEXT;
    """,
    # 2 -> 3: submitting before the POST; platform_settled; platform conversation history.
    """
    ALTER TABLE batches ADD COLUMN submitting_at TEXT;
    ALTER TABLE messages ADD COLUMN platform_settled INTEGER NOT NULL DEFAULT 1;
    UPDATE messages SET platform_settled = 0
        WHERE status = 'failed' AND error_code IN ('interrupted', 'abandoned');
    ALTER TABLE conversations ADD COLUMN platform_conversation_id TEXT;
    CREATE TABLE platform_conversations (
        conversation_id TEXT NOT NULL REFERENCES conversations (id),
        platform_conversation_id TEXT NOT NULL,
        created_at TEXT NOT NULL,
        reason TEXT NOT NULL DEFAULT '',
        rid BIGSERIAL NOT NULL,
        PRIMARY KEY (conversation_id, platform_conversation_id)
    );
    """,
    # 3 -> 4: who sent each message; approvals bound to a call id and an arguments digest.
    """
    ALTER TABLE messages ADD COLUMN sent_by TEXT;
    CREATE TABLE approvals (
        id TEXT PRIMARY KEY,
        conversation_id TEXT NOT NULL REFERENCES conversations (id),
        message_id BIGINT REFERENCES messages (id),
        call_id TEXT NOT NULL,
        tool TEXT NOT NULL,
        arguments TEXT NOT NULL,
        arguments_digest TEXT NOT NULL,
        requested_by TEXT,
        requested_at TEXT NOT NULL,
        deadline TEXT NOT NULL,
        status TEXT NOT NULL,
        decided_by TEXT,
        decided_at TEXT,
        note TEXT NOT NULL DEFAULT '',
        rid BIGSERIAL NOT NULL,
        UNIQUE (conversation_id, call_id, arguments_digest)
    );
    CREATE INDEX approvals_by_status ON approvals (status, requested_at);
    CREATE INDEX approvals_by_conversation ON approvals (conversation_id, requested_at);
    """,
    # 4 -> 5: the latest platform state per platform conversation.
    """
    CREATE TABLE platform_states (
        conversation_id TEXT NOT NULL REFERENCES conversations (id),
        platform_conversation_id TEXT NOT NULL,
        platform TEXT NOT NULL,
        state TEXT NOT NULL,
        writer TEXT NOT NULL DEFAULT '',
        updated_at TEXT NOT NULL,
        PRIMARY KEY (conversation_id, platform_conversation_id)
    );
    """,
    # 5 -> 6: daemon replicas (see `bridge.journal.postgres_leases`). Expiry is the
    # database's clock (timestamptz against clock_timestamp()), so replicas' clocks never
    # matter; the index keeps the failover scan for expired leases cheap.
    """
    ALTER TABLE messages ADD COLUMN replica TEXT;
    CREATE TABLE leases (
        conversation_id TEXT PRIMARY KEY,
        owner TEXT,
        generation BIGINT NOT NULL DEFAULT 0,
        expires_at TIMESTAMPTZ NOT NULL,
        taken_at TIMESTAMPTZ
    );
    CREATE INDEX leases_by_expiry ON leases (expires_at);
    """,
    # 6 -> 7: tool calls made directly, outside conversations.
    """
    CREATE TABLE direct_calls (
        call_id TEXT PRIMARY KEY,
        tool TEXT NOT NULL,
        arguments TEXT NOT NULL,
        called_by TEXT,
        approved_by TEXT,
        state TEXT NOT NULL,
        output TEXT,
        error TEXT,
        started_at TEXT NOT NULL,
        duration_ms DOUBLE PRECISION,
        finished_at TEXT,
        rid BIGSERIAL NOT NULL
    );
    CREATE INDEX direct_calls_by_start ON direct_calls (started_at DESC, rid DESC);
    """,
    # 7 -> 8: one row per live replica id (`bridge.journal.postgres_replicas.claim_replica`):
    # who holds it (a random token per process, pid, host, address), renewed every third of
    # the lease; a row not renewed for a lease is stale. Times on the database's clock, as
    # leases.
    """
    CREATE TABLE replicas (
        replica_id TEXT PRIMARY KEY,
        token TEXT NOT NULL,
        pid INTEGER,
        hostname TEXT NOT NULL DEFAULT '',
        address TEXT,
        started_at TIMESTAMPTZ NOT NULL,
        renewed_at TIMESTAMPTZ NOT NULL,
        expires_at TIMESTAMPTZ NOT NULL
    );
    """,
    # 8 -> 9: who owns a conversation (the caller who created it), and the audit record: one
    # hash chain per writer (``chain``: "local" for a file journal, the replica id on
    # PostgreSQL), each entry carrying the previous entry's hash.
    """
    ALTER TABLE conversations ADD COLUMN created_by TEXT;
    CREATE TABLE audit (
        chain TEXT NOT NULL,
        seq BIGINT NOT NULL,
        at TIMESTAMPTZ NOT NULL,
        kind TEXT NOT NULL,
        entry TEXT NOT NULL,
        prev_hash TEXT NOT NULL,
        hash TEXT NOT NULL,
        PRIMARY KEY (chain, seq)
    );
    CREATE INDEX audit_by_time ON audit (at);
    """,
    # 9 -> 10: the trace context (W3C ``traceparent``) of each message's run span and of each
    # call's execution span, written with the step that already happens (the message's
    # insert, the call's "started"), so a run resumed after a crash stays in its trace.
    """
    ALTER TABLE messages ADD COLUMN traceparent TEXT;
    ALTER TABLE calls ADD COLUMN traceparent TEXT;
    """,
]
SCHEMA_VERSION = len(MIGRATIONS)


def _version(conn: psycopg.Connection[Any]) -> int:
    # Created only when missing: CREATE ... IF NOT EXISTS still needs CREATE on the schema,
    # which a daemon's role (DML only, after an admin's `toolbridge db upgrade`) may lack.
    found = conn.execute("SELECT to_regclass('toolbridge_schema')").fetchone()
    if found is None or found[0] is None:
        conn.execute(
            "CREATE TABLE toolbridge_schema (one BOOLEAN PRIMARY KEY DEFAULT TRUE "
            "CHECK (one), version INTEGER NOT NULL)"
        )
    row = conn.execute("SELECT version FROM toolbridge_schema").fetchone()
    return int(row[0]) if row else 0


class SchemaStatus:
    """A database's schema version and the steps this toolbridge would apply."""

    def __init__(self, version: int) -> None:
        self.version = version
        self.latest = SCHEMA_VERSION
        self.pending = list(range(version + 1, SCHEMA_VERSION + 1))

    @property
    def newer(self) -> bool:
        return self.version > self.latest


def schema_status(dsn: str) -> SchemaStatus:
    """Read the schema version without changing anything (creates no tables)."""
    psycopg = load_psycopg()
    conn = connect(dsn)
    try:
        row = conn.execute("SELECT to_regclass('toolbridge_schema')").fetchone()
        if row is None or row[0] is None:
            return SchemaStatus(0)
        got = conn.execute("SELECT version FROM toolbridge_schema").fetchone()
        return SchemaStatus(int(got[0]) if got else 0)
    except psycopg.Error as exc:
        raise UsageError(
            f"cannot read the journal {safe_dsn(dsn)}: {clean_error(dsn, exc)}"
        ) from None
    finally:
        conn.close()


def migrate(dsn: str) -> list[int]:
    """Apply missing schema steps; returns the versions applied (empty: already current).

    Holds a session advisory lock meanwhile, so of two processes starting together one waits
    and then finds the schema current. Each step commits with its version.

    Raises:
        UsageError: unreachable database, or a schema newer than this toolbridge.
    """
    psycopg = load_psycopg()
    conn = connect(dsn)
    applied: list[int] = []
    try:
        conn.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK,))
        try:
            version = _version(conn)
            if version > SCHEMA_VERSION:
                raise UsageError(
                    f"the journal {safe_dsn(dsn)} has schema version {version}, newer than "
                    f"this toolbridge understands ({SCHEMA_VERSION}); upgrade toolbridge"
                )
            for target in range(version + 1, SCHEMA_VERSION + 1):
                with conn.transaction():
                    conn.execute(MIGRATIONS[target - 1])
                    conn.execute(
                        "INSERT INTO toolbridge_schema (one, version) VALUES (TRUE, %s) "
                        "ON CONFLICT (one) DO UPDATE SET version = excluded.version",
                        (target,),
                    )
                applied.append(target)
            if applied:  # one line, not one per step
                logger.info(migrated_message(version), safe_dsn(dsn), SCHEMA_VERSION)
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK,))
    except psycopg.Error as exc:
        raise UsageError(
            f"cannot migrate the journal {safe_dsn(dsn)}: {clean_error(dsn, exc)}"
        ) from None
    finally:
        conn.close()
    return applied
