"""How problems with outside input are worded: one vocabulary for tool arguments (pydantic or
JSON Schema validated) and manifest files, so every error reads alike. Public: the tool
sources (HTTP, OpenAPI, MCP) word their problems with it too."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from bridge.tools.spec import ArgumentError

__all__ = ["dotted_path", "parse_json_arguments", "shown_value", "tidy_message", "trim"]


def parse_json_arguments(raw: str | bytes) -> Any:
    """Arguments sent as JSON text; empty text means no arguments."""
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    if not text.strip():
        return {}
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ArgumentError([f"arguments are not valid JSON ({exc}); send a JSON object"]) from None


def tidy_message(msg: str) -> str:
    """A pydantic error message as the tail of a sentence ("should be a valid integer")."""
    for prefix in ("Value error, ", "Assertion failed, "):
        if msg.startswith(prefix):
            return msg[len(prefix) :]
    if msg.startswith("Input should"):
        return "should" + msg[len("Input should") :]
    return msg[:1].lower() + msg[1:]


def dotted_path(parts: Iterable[int | str]) -> str:
    """`tools[0].method` from `("tools", 0, "method")`; "" for the top level."""
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def trim(text: str, limit: int = 300) -> str:
    """At most `limit` characters, with an ellipsis when cut."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def shown_value(value: Any, limit: int = 80) -> str:
    """A value as JSON, short enough for a one-line message."""
    try:
        text = json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        text = repr(value)
    return trim(text, limit)
