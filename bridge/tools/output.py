"""Turn what a tool returned (or how it failed) into the text the model reads."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from pydantic import BaseModel
from pydantic_core import to_jsonable_python

from bridge.errors import cut_outside_secrets
from bridge.tools.problems import load_json_arguments
from bridge.tools.spec import ToolSpec

__all__ = [
    "HIDDEN_ERROR",
    "describe_exception",
    "invalid_arguments",
    "parse_arguments",
    "serialize",
    "truncate",
]

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
    # Never keep part of a registered secret: masking later needs the whole of it.
    keep = cut_outside_secrets(text, keep)
    return text[:keep] + _marker(total - keep, total)


def describe_exception(exc: BaseException) -> str:
    """``"<ExceptionType>: <message>"`` (just the type when the message is empty)."""
    message = str(exc)
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


_JSON_TYPES = {dict: "object", list: "array", str: "string", int: "number", float: "number"}


def parse_arguments(arguments: dict[str, Any] | str) -> dict[str, Any] | str:
    """The arguments as a dict, or a sentence saying why they are not a JSON object."""
    if isinstance(arguments, dict):
        return arguments
    if not arguments.strip():
        return {}  # some servers send "" for a call without arguments
    try:
        value = load_json_arguments(arguments)
    except json.JSONDecodeError as exc:
        return f"the arguments are not valid JSON ({exc}); expected a JSON object"
    except ValueError as exc:
        return str(exc)
    if not isinstance(value, dict):
        kind = "null" if value is None else "boolean" if isinstance(value, bool) else None
        kind = kind or _JSON_TYPES.get(type(value), type(value).__name__)
        return f"the arguments must be a JSON object, got a JSON {kind}"
    return value


def invalid_arguments(spec: ToolSpec, problems: list[str]) -> str:
    """The output for arguments that do not fit: each problem, then the compact schema."""
    schema = json.dumps(spec.parameters, ensure_ascii=False, separators=(",", ":"))
    lines = "\n".join(f"- {problem}" for problem in problems)
    return (
        f"Invalid arguments for tool {spec.name!r}; it was not run.\n{lines}\n"
        f"Expected arguments (JSON Schema): {schema}"
    )
