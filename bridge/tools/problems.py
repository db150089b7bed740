"""How problems with outside input are worded: one vocabulary for tool arguments (pydantic or
JSON Schema validated) and manifest files, so every error reads alike. Public: the tool
sources (HTTP, OpenAPI, MCP) word their problems with it too.

Arguments sent as JSON text are read by `load_json_arguments`, which refuses, with a sentence
for the model, what `json.loads` lets through or raises on unexpectedly: ``NaN`` and
``Infinity`` and numbers that overflow a double (JSON has none of them, and a tool must not
get an infinity it never asked for), integers past Python's digit limit (a ValueError that
is not a JSONDecodeError), and nesting past the recursion limit (a RecursionError).
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Iterable
from typing import Any

from bridge.tools.spec import ArgumentError

__all__ = [
    "dotted_path",
    "load_json_arguments",
    "parse_json_arguments",
    "shown_value",
    "tidy_message",
    "trim",
]


class _NotJSONNumberError(ValueError):
    pass


def _no_constant(name: str) -> Any:
    raise _NotJSONNumberError(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NotJSONNumberError(f"the number {trim(text, 24)} does not fit in a double")
    return value


def load_json_arguments(text: str) -> Any:
    """The value of JSON text sent as arguments.

    Raises:
        json.JSONDecodeError: The text is not JSON (each caller words it).
        ValueError: With a sentence saying what is wrong and what is expected.
    """
    try:
        return json.loads(text, parse_float=_finite, parse_constant=_no_constant)
    except json.JSONDecodeError:
        raise  # a ValueError too: kept from the catch-all below, callers word it
    except _NotJSONNumberError as exc:
        raise ValueError(f"the arguments hold a value JSON cannot carry: {exc}") from None
    except RecursionError:
        raise ValueError(
            "the arguments are nested too deeply to read; send a flatter JSON object"
        ) from None
    except ValueError:
        # int("9" * 5000): Python refuses integers past its digit limit.
        raise ValueError(
            f"the arguments hold an integer of more than {sys.get_int_max_str_digits()} "
            "digits; send it as a string"
        ) from None


def parse_json_arguments(raw: str | bytes) -> Any:
    """Arguments sent as JSON text; empty text means no arguments."""
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    if not text.strip():
        return {}
    try:
        return load_json_arguments(text)
    except json.JSONDecodeError as exc:
        raise ArgumentError([f"arguments are not valid JSON ({exc}); send a JSON object"]) from None
    except ValueError as exc:
        raise ArgumentError([str(exc)]) from None


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
