"""What the emulator's protocols share on the wire: JSON encoding, validation messages, the
tool-name rule, manifest checks and the check of submitted tool outputs.

Each protocol's own request models and response builders are in its package (for example
`bridge.emulator.appbuilder.wire`).
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError

__all__ = [
    "TOOL_NAME_PATTERN",
    "encode_json",
    "format_validation_error",
    "output_problems",
    "schema_problems",
]

TOOL_NAME_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"


def format_validation_error(exc: ValidationError) -> str:
    """One line per problem, `field.path: what was wrong`, joined with '; '."""
    parts = []
    for err in exc.errors(include_url=False):
        loc = _format_loc(err.get("loc", ()))
        # A validator's own message reads better without pydantic's prefix.
        msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
        if err.get("type") == "extra_forbidden":
            msg = "unknown field (not part of the AppBuilder API)"
        elif err.get("type") == "missing":
            msg = "required field is missing"
        parts.append(f"{loc}: {msg}" if loc else msg)
    return "; ".join(parts)


def _format_loc(loc: tuple[Any, ...] | list[Any]) -> str:
    text = ""
    for item in loc:
        if isinstance(item, int):
            text += f"[{item}]"
        else:
            text += f".{item}" if text else str(item)
    return text


def schema_problems(schema: Any, path: str) -> list[str]:
    """Places where a tool's parameter schema breaks AppBuilder's documented rules.

    Every `object` needs `properties` and every `array` needs `items`; anything else is left to
    the planner. Python-type-string manifests of the official SDK (`"type": "str"`) pass.
    """
    problems: list[str] = []
    if isinstance(schema, dict):
        kind = schema.get("type")
        if kind == "object" and not isinstance(schema.get("properties"), dict):
            problems.append(f"{path}: an object schema needs 'properties'")
        if kind == "array" and not isinstance(schema.get("items"), dict):
            problems.append(f"{path}: an array schema needs 'items'")
        for key, sub in schema.items():
            if key == "properties" and isinstance(sub, dict):
                for name, prop in sub.items():
                    problems.extend(schema_problems(prop, f"{path}.properties.{name}"))
            elif key in ("items", "additionalProperties") and isinstance(sub, dict):
                problems.extend(schema_problems(sub, f"{path}.{key}"))
            elif key in ("anyOf", "oneOf", "allOf") and isinstance(sub, list):
                for i, option in enumerate(sub):
                    problems.extend(schema_problems(option, f"{path}.{key}[{i}]"))
    return problems


def encode_json(value: Any) -> bytes:
    """Compact UTF-8 JSON, non-ASCII kept as is (as the platform sends it)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def output_problems(expected: list[str], given: list[str]) -> list[str]:
    """What keeps the call ids of submitted outputs (`given`) from answering exactly the
    pending calls (`expected`): unknown, missing and repeated ids; empty when they do."""
    problems = []
    unknown = [i for i in given if i not in expected]
    missing = [i for i in expected if i not in given]
    repeated = sorted({i for i in given if given.count(i) > 1})
    if unknown:
        problems.append(f"unknown tool_call_id(s) {', '.join(unknown)}")
    if missing:
        problems.append(f"missing output(s) for tool_call_id(s) {', '.join(missing)}")
    if repeated:
        problems.append(f"repeated tool_call_id(s) {', '.join(repeated)}")
    return problems
