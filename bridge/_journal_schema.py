"""The SQLite journal's schema (versioned migrations) and how its rows become records."""

from __future__ import annotations

import json
import sqlite3
from datetime import datetime

from bridge.journal import (
    ApprovalRecord,
    CallRecord,
    ConversationRecord,
    MessageRecord,
    PlatformStateRecord,
    StateSnapshot,
    redacted_arguments,
    redacted_state,
)
from bridge.types import ToolCall

__all__ = [
    "CONVERSATION_SELECT",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "approval_record",
    "arguments_json",
    "call_record",
    "conversation_record",
    "message_record",
    "platform_state_record",
    "state_json",
]

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
]
SCHEMA_VERSION = len(MIGRATIONS)

CONVERSATION_SELECT = """
    SELECT c.id, c.end_user_id, c.created_at, c.updated_at,
           coalesce(c.platform_conversation_id, c.id) AS platform_conversation_id,
           (SELECT status FROM messages m WHERE m.conversation_id = c.id
            ORDER BY m.id DESC LIMIT 1) AS status,
           (SELECT count(*) FROM messages m WHERE m.conversation_id = c.id) AS messages
    FROM conversations c
"""


def arguments_json(call: ToolCall) -> str:
    return json.dumps(redacted_arguments(call.arguments), ensure_ascii=False, default=str)


def state_json(snapshot: StateSnapshot) -> str:
    return json.dumps(redacted_state(snapshot.state), ensure_ascii=False, allow_nan=False)


def _time(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


def conversation_record(row: sqlite3.Row) -> ConversationRecord:
    return ConversationRecord(
        conversation_id=row["id"],
        end_user_id=row["end_user_id"],
        created_at=datetime.fromisoformat(row["created_at"]),
        updated_at=datetime.fromisoformat(row["updated_at"]),
        status=row["status"] or "new",
        messages=row["messages"],
        platform_conversation_id=row["platform_conversation_id"],
    )


def message_record(row: sqlite3.Row) -> MessageRecord:
    return MessageRecord(
        message_id=row["id"],
        conversation_id=row["conversation_id"],
        query=row["query"],
        status=row["status"],
        answer=row["answer"],
        error_code=row["error_code"],
        error_message=row["error_message"],
        request_ids=json.loads(row["request_ids"]),
        rounds=row["rounds"],
        created_at=datetime.fromisoformat(row["created_at"]),
        finished_at=_time(row["finished_at"]),
        interrupt_id=row["interrupt_id"],
        platform_settled=bool(row["platform_settled"]),
        sent_by=row["sent_by"],
    )


def call_record(row: sqlite3.Row) -> CallRecord:
    return CallRecord(
        conversation_id=row["conversation_id"],
        call_id=row["call_id"],
        message_id=row["message_id"],
        name=row["name"],
        arguments=json.loads(row["arguments"]),
        state=row["state"],
        output=row["output"],
        error=row["error"],
        started_at=_time(row["started_at"]),
        duration_ms=row["duration_ms"],
        updated_at=datetime.fromisoformat(row["updated_at"]),
    )


def approval_record(row: sqlite3.Row) -> ApprovalRecord:
    return ApprovalRecord(
        approval_id=row["id"],
        conversation_id=row["conversation_id"],
        message_id=row["message_id"],
        call_id=row["call_id"],
        tool=row["tool"],
        arguments=json.loads(row["arguments"]),
        arguments_digest=row["arguments_digest"],
        requested_by=row["requested_by"],
        requested_at=datetime.fromisoformat(row["requested_at"]),
        deadline=datetime.fromisoformat(row["deadline"]),
        status=row["status"],
        decided_by=row["decided_by"],
        decided_at=_time(row["decided_at"]),
        note=row["note"],
    )


def platform_state_record(row: sqlite3.Row) -> PlatformStateRecord:
    return PlatformStateRecord(
        conversation_id=row["conversation_id"],
        platform_conversation_id=row["platform_conversation_id"],
        platform=row["platform"],
        state=json.loads(row["state"]),
        writer=row["writer"],
        updated_at=datetime.fromisoformat(row["updated_at"]),
    )
