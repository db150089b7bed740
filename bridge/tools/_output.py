"""Turn what a tool returned (or how it failed) into the text the model reads."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from pydantic import BaseModel
from pydantic_core import to_jsonable_python

__all__ = ["HIDDEN_ERROR", "describe_exception", "serialize", "truncate"]

HIDDEN_ERROR = "The tool failed; details were logged."
"""The output of a failed call with `errors="hidden"`."""


def _dump(value: Any) -> str:
    # to_jsonable_python knows models, dataclasses, datetimes, UUIDs, Decimals, enums, sets,
    # bytes, paths...; str() is the last resort for anything it does not.
    return json.dumps(to_jsonable_python(value, fallback=str), ensure_ascii=False)


def serialize(result: Any) -> str:
    """The text for a tool result.

    `str` as is; None as ""; dict, list, tuple, set, pydantic models and dataclass instances as
    JSON (non-ASCII kept); anything else through `str()`.
    """
    if isinstance(result, str):
        return result
    if result is None:
        return ""
    if isinstance(result, BaseModel):
        return json.dumps(result.model_dump(mode="json"), ensure_ascii=False)
    if isinstance(result, (dict, list, tuple, set, frozenset)) or (
        dataclasses.is_dataclass(result) and not isinstance(result, type)
    ):
        return _dump(result)
    return str(result)


def _marker(cut: int, total: int) -> str:
    return f"\n[... output truncated: {cut} of {total} characters cut ...]"


def truncate(text: str, limit: int | None) -> str:
    """Cut `text` to at most `limit` characters, ending with a marker that says how many went."""
    if limit is None or len(text) <= limit:
        return text
    total = len(text)
    keep = limit - len(_marker(total, total))  # the widest marker this text can need
    return text[:keep] + _marker(total - keep, total)


def describe_exception(exc: BaseException) -> str:
    """``"<ExceptionType>: <message>"`` (just the type when the message is empty)."""
    message = str(exc)
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__
