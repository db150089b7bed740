"""The PostgreSQL journal's schema: numbered steps, each moving a database one version up.

Same numbering as the SQLite steps (`bridge.journal.migrations`): `MIGRATIONS[i]` moves a
database from version i to i + 1, so version N means the same tables and semantics in both
stores. Differences, and why:

- times are ISO-8601 text, as in SQLite, so orderings (``updated_at DESC``) compare the same;
- JSON columns are text, not jsonb: tool arguments may hold NaN or Infinity (Python's json
  writes them), which jsonb rejects; the journal never queries inside them;
- SQLite's implicit ``rowid`` (the tie-breaker of several orderings) is an explicit ``rid``.

The version lives in ``toolbridge_schema`` (one row); steps run under ``pg_advisory_lock``
(`bridge.journal.postgres.migrate`). A step is only ever appended, never edited.
"""

from __future__ import annotations

__all__ = ["MIGRATIONS", "SCHEMA_VERSION"]

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
    # 5 -> 6: daemon replicas (see `bridge.journal.postgres`: leases). Expiry is the
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
    # 7 -> 8: one row per live replica id (`bridge.journal.postgres.claim_replica`): who holds
    # it (a random token per process, pid, host, address), renewed every third of the lease;
    # a row not renewed for a lease is stale. Times on the database's clock, as leases.
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
]
SCHEMA_VERSION = len(MIGRATIONS)
