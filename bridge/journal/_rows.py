"""How the SQL journals' rows become records (and records become column values)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Protocol

from bridge.journal.records import (
    ApprovalRecord,
    CallRecord,
    ConversationRecord,
    DirectCallRecord,
    MessageRecord,
    PlatformStateRecord,
    StateSnapshot,
    redacted_arguments,
    redacted_state_json,
)
from bridge.types import ToolCall

__all__ = [
    "CONVERSATION_SELECT",
    "approval_record",
    "arguments_json",
    "call_record",
    "conversation_record",
    "direct_call_record",
    "message_record",
    "platform_state_record",
    "state_json",
]

CONVERSATION_SELECT = """
    SELECT c.id, c.end_user_id, c.created_at, c.updated_at, c.created_by,
           coalesce(c.platform_conversation_id, c.id) AS platform_conversation_id,
           (SELECT status FROM messages m WHERE m.conversation_id = c.id
            ORDER BY m.id DESC LIMIT 1) AS status,
           (SELECT count(*) FROM messages m WHERE m.conversation_id = c.id) AS messages
    FROM conversations c
"""


class Row(Protocol):
    """A row by column name: a `sqlite3.Row` or a psycopg dict row (both stores share these)."""

    def __getitem__(self, key: str, /) -> Any: ...


def arguments_json(call: ToolCall) -> str:
    return json.dumps(redacted_arguments(call.arguments), ensure_ascii=False, default=str)


def state_json(snapshot: StateSnapshot) -> str:
    return redacted_state_json(snapshot)


def _time(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


def conversation_record(row: Row) -> ConversationRecord:
    return ConversationRecord(
        conversation_id=row["id"],
        end_user_id=row["end_user_id"],
        created_at=datetime.fromisoformat(row["created_at"]),
        updated_at=datetime.fromisoformat(row["updated_at"]),
        status=row["status"] or "new",
        messages=row["messages"],
        platform_conversation_id=row["platform_conversation_id"],
        created_by=row["created_by"],
    )


def message_record(row: Row) -> MessageRecord:
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
        replica=row["replica"],
        traceparent=row["traceparent"],
    )


def call_record(row: Row) -> CallRecord:
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
        traceparent=row["traceparent"],
    )


def approval_record(row: Row) -> ApprovalRecord:
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


def direct_call_record(row: Row) -> DirectCallRecord:
    return DirectCallRecord(
        call_id=row["call_id"],
        tool=row["tool"],
        arguments=json.loads(row["arguments"]),
        called_by=row["called_by"],
        approved_by=row["approved_by"],
        state=row["state"],
        output=row["output"],
        error=row["error"],
        started_at=datetime.fromisoformat(row["started_at"]),
        duration_ms=row["duration_ms"],
        finished_at=_time(row["finished_at"]),
    )


def platform_state_record(row: Row) -> PlatformStateRecord:
    return PlatformStateRecord(
        conversation_id=row["conversation_id"],
        platform_conversation_id=row["platform_conversation_id"],
        platform=row["platform"],
        state=json.loads(row["state"]),
        writer=row["writer"],
        updated_at=datetime.fromisoformat(row["updated_at"]),
    )
