"""Small helpers over JSON Schema documents, shared by the builder, the validator, dialects and
the tool sources (HTTP, OpenAPI, MCP), which is why they are public.

Only subschema positions are ever visited: `default`, `enum`, `examples` and `const` hold data
that must never be rewritten, even when it happens to contain a "title" or "$ref" key.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

__all__ = [
    "SUB_LIST",
    "SUB_MAP",
    "SUB_ONE",
    "describe",
    "is_null",
    "kinds",
    "resolve",
    "strip_titles",
    "types_of",
    "unescape",
    "walk",
]

# The keywords whose values are one subschema, a list of them, or a name -> subschema map.
SUB_ONE = (
    "items",
    "additionalProperties",
    "not",
    "if",
    "then",
    "else",
    "contains",
    "propertyNames",
    "unevaluatedItems",
    "unevaluatedProperties",
    "additionalItems",
    "contentSchema",
)
SUB_LIST = ("anyOf", "allOf", "oneOf", "prefixItems")
SUB_MAP = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")


def walk(node: Any, visit: Callable[[dict[str, Any]], dict[str, Any]]) -> Any:
    """Rebuild a schema bottom-up, calling `visit` on every subschema (never on data)."""
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in SUB_ONE:
            out[key] = (
                [walk(v, visit) for v in value] if isinstance(value, list) else walk(value, visit)
            )
        elif key in SUB_LIST and isinstance(value, list):
            out[key] = [walk(v, visit) for v in value]
        elif key in SUB_MAP and isinstance(value, dict):
            out[key] = {name: walk(v, visit) for name, v in value.items()}
        else:
            out[key] = value
    return visit(out)


def strip_titles(schema: dict[str, Any]) -> dict[str, Any]:
    def visit(node: dict[str, Any]) -> dict[str, Any]:
        node.pop("title", None)
        return node

    result: dict[str, Any] = walk(schema, visit)
    return result


def is_null(schema: Any) -> bool:
    return isinstance(schema, dict) and schema.get("type") == "null" and len(schema) == 1


def types_of(node: dict[str, Any]) -> set[str]:
    kind = node.get("type")
    if isinstance(kind, str):
        return {kind}
    return set(kind) if isinstance(kind, list) else set()


def unescape(pointer: str) -> str:
    return pointer.replace("~1", "/").replace("~0", "~")


def resolve(schema: dict[str, Any], defs: Mapping[str, Any]) -> dict[str, Any]:
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        target = defs.get(unescape(ref[len("#/$defs/") :]))
        if isinstance(target, dict):
            return target
    return schema


def kinds(schema: Any, defs: Mapping[str, Any], depth: int = 0) -> set[str]:
    """The JSON types a schema admits at its top level ("any" when it does not say)."""
    if not isinstance(schema, dict) or depth > 20:
        return {"any"}
    schema = resolve(schema, defs)
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list):
            found: set[str] = set()
            for sub in schema[key]:
                found |= kinds(sub, defs, depth + 1)
            return found
    kind = schema.get("type")
    if isinstance(kind, str):
        return {kind}
    if isinstance(kind, list):
        return set(kind)
    if "enum" in schema or "const" in schema:
        values = schema.get("enum", [schema.get("const")])
        return {value_kind(v) for v in values}
    if isinstance(schema.get("allOf"), list) and schema["allOf"]:
        return kinds(schema["allOf"][0], defs, depth + 1)
    return {"any"}


def value_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


_KIND_WORDS = {
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "true or false",
    "array": "an array",
    "object": "an object",
    "null": "null",
}


def describe(schema: Any, defs: Mapping[str, Any]) -> str:
    """A short English description of what a schema accepts, for error messages."""
    if not isinstance(schema, dict):
        return "any value"
    schema = resolve(schema, defs)
    if "enum" in schema:
        return "one of " + ", ".join(json.dumps(v, ensure_ascii=False) for v in schema["enum"])
    if "const" in schema:
        return json.dumps(schema["const"], ensure_ascii=False)
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list):
            return " or ".join(dict.fromkeys(describe(s, defs) for s in schema[key]))
    kind = schema.get("type")
    if isinstance(kind, list):
        return " or ".join(str(_KIND_WORDS.get(k, k)) for k in kind)
    if isinstance(kind, str):
        return _KIND_WORDS.get(kind, kind)
    return "any value"
