"""The SQLite journal's schema: numbered steps, each moving a file one version up.

`MIGRATIONS[i]` moves a file from version i to i + 1 (``PRAGMA user_version``); the comment
above each says its numbers. A step is only ever appended, never edited: files written by
every earlier toolbridge must keep opening (the tests build each older version from the
steps before it).
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
        updated_at TEXT NOT NULL
    );
    CREATE INDEX conversations_by_update ON conversations (updated_at DESC);
    CREATE TABLE messages (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
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
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        conversation_id TEXT NOT NULL REFERENCES conversations (id),
        batch_id TEXT NOT NULL,
        message_id INTEGER REFERENCES messages (id),
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
        seq INTEGER NOT NULL,
        message_id INTEGER REFERENCES messages (id),
        name TEXT NOT NULL,
        arguments TEXT NOT NULL,
        state TEXT NOT NULL,
        output TEXT,
        error TEXT,
        started_at TEXT,
        duration_ms REAL,
        updated_at TEXT NOT NULL,
        PRIMARY KEY (conversation_id, call_id)
    );
    CREATE INDEX calls_in_order ON calls (conversation_id, seq);
    """,
    # 1 -> 2: a human-input pause is journaled with its id, so any process can answer it.
    """
    ALTER TABLE messages ADD COLUMN interrupt_id TEXT;
    """,
    # 2 -> 3: outputs are "submitting" before the POST and "submitted" once accepted; a message
    # knows whether its run ended on a platform event; a conversation can move to a new
    # platform conversation (history kept).
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
        PRIMARY KEY (conversation_id, platform_conversation_id)
    );
    """,
    # 3 -> 4: who sent each message; approvals of confirm=True calls, bound to the call id and
    # a digest of the exact arguments (one record per pair), decided once.
    """
    ALTER TABLE messages ADD COLUMN sent_by TEXT;
    CREATE TABLE approvals (
        id TEXT PRIMARY KEY,
        conversation_id TEXT NOT NULL REFERENCES conversations (id),
        message_id INTEGER REFERENCES messages (id),
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
        UNIQUE (conversation_id, call_id, arguments_digest)
    );
    CREATE INDEX approvals_by_status ON approvals (status, requested_at);
    CREATE INDEX approvals_by_conversation ON approvals (conversation_id, requested_at);
    """,
    # 4 -> 5: what a platform adapter needs to continue a conversation in another process
    # (Chat Completions' messages, a Responses id...), the latest only, one per platform
    # conversation.
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
    # 5 -> 6: daemon replicas. Which replica ran a message; one lease per conversation (who
    # may run and write it, until when; the generation fences a replica that lost it). An
    # embedded store has one process, so its leases stay local (`Journal` defaults); the
    # table keeps the schema the same as PostgreSQL's at every version.
    """
    ALTER TABLE messages ADD COLUMN replica TEXT;
    CREATE TABLE leases (
        conversation_id TEXT PRIMARY KEY,
        owner TEXT,
        generation INTEGER NOT NULL DEFAULT 0,
        expires_at TEXT NOT NULL,
        taken_at TEXT
    );
    """,
    # 6 -> 7: tool calls made directly (`POST /v1/tools/{name}/call`), outside conversations:
    # who called, what (arguments redacted), who approved a confirm tool's call, the outcome.
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
        duration_ms REAL,
        finished_at TEXT
    );
    CREATE INDEX direct_calls_by_start ON direct_calls (started_at DESC);
    """,
    # 7 -> 8: one row per live daemon replica (PostgreSQL: who holds a replica id). An embedded
    # journal's owner is named by its lock file (`bridge.journal.owner`); the table keeps the
    # schema the same as PostgreSQL's at every version.
    """
    CREATE TABLE replicas (
        replica_id TEXT PRIMARY KEY,
        token TEXT NOT NULL,
        pid INTEGER,
        hostname TEXT NOT NULL DEFAULT '',
        address TEXT,
        started_at TEXT NOT NULL,
        renewed_at TEXT NOT NULL,
        expires_at TEXT NOT NULL
    );
    """,
    # 8 -> 9: who owns a conversation (the caller who created it), and the audit record: one
    # hash chain per writer (``chain``: "local" for a file journal, the replica id on
    # PostgreSQL), each entry carrying the previous entry's hash.
    """
    ALTER TABLE conversations ADD COLUMN created_by TEXT;
    CREATE TABLE audit (
        chain TEXT NOT NULL,
        seq INTEGER NOT NULL,
        at TEXT NOT NULL,
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
