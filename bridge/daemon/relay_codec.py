"""The payloads of the relay (`bridge.daemon.relay`): one `Notice` as JSON text that fits in
one PostgreSQL NOTIFY.

Payloads stay under PostgreSQL's 8000-byte NOTIFY limit: long strings, lists and objects are
cut with a marker, and past that only the ids, names and status are kept (`encode`). Text
deltas of one run queued together are joined into one notification (`coalesce`).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

__all__ = ["CHANNEL", "PAYLOAD_LIMIT", "Notice", "coalesce", "decode", "encode"]

CHANNEL = "toolbridge_events"
PAYLOAD_LIMIT = 7900
"""Bytes of one payload at most (PostgreSQL refuses 8000 and more), with room to spare."""

KEPT = (
    "conversation_id",
    "message_id",
    "approval_id",
    "call_id",
    "batch_id",
    "name",
    "tool",
    "status",
    "code",
    "request_id",
    "recovered",
    "sent_by",
    "created_by",
    "decided_by",
    "at",
)
"""What a payload keeps when even its cut strings do not fit: enough to know what happened."""

LEVELS = ((None, None), (2000, 200), (500, 50), (100, 10), (20, 3))
"""(characters per string, items per list or object) tried in turn until a payload fits."""


@dataclass(frozen=True)
class Notice:
    """One notification: who sent it (replica id, process, sequence number) and the event."""

    replica: str
    instance: str
    seq: int
    name: str
    data: dict[str, Any]
    replay: bool = True
    gap: bool = False
    """The sender skipped events before this one: it heard no other replica then."""


def encode(notice: Notice, limit: int = PAYLOAD_LIMIT) -> str:
    """The JSON text of `notice`, at most `limit` bytes (ASCII only: no NUL, no lone surrogate
    reaches PostgreSQL); what does not fit is cut, with markers saying how much."""
    head = {
        "r": _cut(notice.replica, 200, 3),
        "i": notice.instance[:64],
        "s": notice.seq,
        "n": _cut(notice.name, 100, 3),
        "p": notice.replay,
    }
    if notice.gap:
        head["g"] = True
    for chars, items in LEVELS:
        text = _dumps({**head, "d": _cut(notice.data, chars, items)})
        if len(text) <= limit:
            return text
    kept = {key: _cut(notice.data[key], 200, 3) for key in KEPT if key in notice.data}
    text = _dumps({**head, "d": {**kept, "truncated": True}})
    if len(text) <= limit:
        return text
    return _dumps({**head, "d": {"truncated": True}})


def decode(payload: str) -> Notice | None:
    """The `Notice` in a payload, or None for one that is not ours."""
    try:
        raw = json.loads(payload)
        notice = Notice(
            replica=str(raw["r"]),
            instance=str(raw["i"]),
            seq=int(raw["s"]),
            name=str(raw["n"]),
            data=dict(raw["d"]),
            replay=bool(raw.get("p", True)),
            gap=bool(raw.get("g", False)),
        )
    except (ValueError, TypeError, KeyError):
        return None
    return notice


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=True, allow_nan=False, separators=(",", ":"))


def _cut(value: Any, chars: int | None, items: int | None) -> Any:
    """`value` as plain JSON (non-finite numbers as text), its strings cut to `chars`, its lists
    and objects to `items` entries, each cut marked; None: no limit."""
    if isinstance(value, str):
        if chars is not None and len(value) > chars:
            return value[:chars] + f"…[{len(value) - chars} more characters]"
        return value
    if isinstance(value, bool) or value is None or isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, dict):
        pairs = list(value.items())
        out: dict[str, Any] = {}
        for key, item in pairs if items is None else pairs[:items]:
            out[_cut(str(key), chars, items)] = _cut(item, chars, items)
        if items is not None and len(pairs) > items:
            out["…"] = f"{len(pairs) - items} more fields"
        return out
    if isinstance(value, (list, tuple)):
        kept = [_cut(item, chars, items) for item in (value if items is None else value[:items])]
        if items is not None and len(value) > items:
            kept.append(f"…[{len(value) - items} more items]")
        return kept
    return _cut(str(value), chars, items)


def coalesce(
    batch: list[tuple[str, dict[str, Any], bool]],
) -> list[tuple[str, dict[str, Any], bool]]:
    """`batch` with each run of consecutive text deltas of one message joined into one."""
    out: list[tuple[str, dict[str, Any], bool]] = []
    for name, data, replay in batch:
        if out and name == "text_delta" and out[-1][0] == "text_delta":
            last = out[-1][1]
            same = (last.get("conversation_id"), last.get("message_id")) == (
                data.get("conversation_id"),
                data.get("message_id"),
            )
            joined = str(last.get("text", "")) + str(data.get("text", ""))
            if same and len(joined) <= PAYLOAD_LIMIT // 8:  # \\uXXXX escapes: 6 bytes a char
                out[-1] = (name, {**last, "text": joined}, replay)
                continue
        out.append((name, data, replay))
    return out
