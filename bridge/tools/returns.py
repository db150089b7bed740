"""Typed returns: the JSON Schema of what a tool returns, and how each dialect shows it.

A return annotation (a pydantic model, dataclass, TypedDict, NamedTuple, builtins such as `int`
or `list[str]`, unions) or `@manifest_return(type=...)` gives the tool an output schema, built
with pydantic (`TypeAdapter(...).json_schema(mode="serialization")`). `str`, `None`, `Any` and
no annotation give none: the output is the text itself. An annotation pydantic cannot describe
never fails registration: one warning names the tool and the schema is skipped.

Dialects with an output schema (MCP `outputSchema`) get it, wrapped as `{"result": ...}` when it
is not an object (MCP requires an object; the official MCP SDK wraps the same way); the others
get the return's fields written once, compactly, in the description.
"""

from __future__ import annotations

import functools
import inspect
import logging
import re
from typing import Any, NoReturn

from pydantic import TypeAdapter
from pydantic_core import to_jsonable_python

from bridge.tools._json import compat_annotation, copy_json
from bridge.tools.schema_walk import strip_titles

__all__ = [
    "mcp_output_schema",
    "output_schema_of",
    "return_hint",
    "returns_text",
    "structured_content",
    "with_returns",
]

logger = logging.getLogger(__name__)

_NO_SCHEMA: tuple[Any, ...] = (inspect.Signature.empty, Any, None, type(None), str, NoReturn)
_MAX_FIELDS = 20


def return_hint(fn: Any, sig: inspect.Signature, hints: dict[str, Any]) -> Any:
    """The resolved return annotation of `fn` (`inspect.Signature.empty` when there is none)."""
    if "return" in hints:
        return hints["return"]
    annotation = sig.return_annotation
    if not isinstance(annotation, str):
        return annotation
    # Under `from __future__ import annotations` when another annotation could not be
    # resolved: resolve this one alone, in the function's namespace.
    from bridge.tools._describe import UNRESOLVED, resolve_hints

    probe = inspect.Signature(
        [inspect.Parameter("value", inspect.Parameter.KEYWORD_ONLY, annotation=annotation)]
    )
    problems: list[str] = []
    found = resolve_hints(fn, probe, problems).get("value", UNRESOLVED)
    if found is UNRESOLVED:
        where = getattr(fn, "__qualname__", None) or repr(fn)
        logger.warning(
            "%s: cannot resolve its return annotation %r; the tool has no output schema",
            where,
            annotation,
        )
        return inspect.Signature.empty
    return found


def output_schema_of(hint: Any, where: str) -> dict[str, Any] | None:
    """The JSON Schema of values of type `hint`, or None (no schema, or one pydantic refuses)."""
    if any(hint is plain for plain in _NO_SCHEMA) or isinstance(hint, str):
        return None
    try:
        schema = _cached(hint)
    except TypeError:  # an unhashable annotation (e.g. Annotated with a dict): not cached
        schema = _build(hint)
    if isinstance(schema, Exception):
        logger.warning(
            "%s: its return annotation %r cannot be described as JSON Schema (%s); the tool "
            "has no output schema",
            where,
            hint,
            schema,
        )
        return None
    return copy_json(schema) if schema else None  # `{}` (e.g. `object`) says nothing


def _build(hint: Any) -> dict[str, Any] | Exception:
    try:
        schema = TypeAdapter(compat_annotation(hint)).json_schema(mode="serialization")
    except Exception as exc:
        return exc
    return strip_titles(schema)


# Many tools share a return type (`dict`, `list[str]`, one model): build each schema once.
_cached = functools.lru_cache(maxsize=1024)(_build)


def _is_object(schema: dict[str, Any]) -> bool:
    return schema.get("type") == "object"


def mcp_output_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` as an MCP `outputSchema`: an object schema, wrapping anything else in `result`."""
    if _is_object(schema):
        return schema
    inner = {k: v for k, v in schema.items() if k != "$defs"}
    wrapped: dict[str, Any] = {
        "type": "object",
        "properties": {"result": inner},
        "required": ["result"],
    }
    if "$defs" in schema:
        wrapped["$defs"] = schema["$defs"]
    return wrapped


def structured_content(schema: dict[str, Any], value: Any) -> dict[str, Any]:
    """MCP `structuredContent` for `value`, shaped like `mcp_output_schema(schema)`."""
    plain = to_jsonable_python(value, fallback=str)
    return plain if _is_object(schema) and isinstance(plain, dict) else {"result": plain}


def _kind(node: Any, defs: dict[str, Any]) -> str:
    if not isinstance(node, dict):
        return "any"
    ref = node.get("$ref")
    if isinstance(ref, str):
        return "object"
    for key in ("anyOf", "oneOf"):
        if isinstance(node.get(key), list):
            return " or ".join(dict.fromkeys(_kind(sub, defs) for sub in node[key]))
    kind = node.get("type")
    if isinstance(kind, list):
        return " or ".join(str(k) for k in kind)
    if kind == "array":
        return f"array of {_kind(node.get('items'), defs)}"
    if "enum" in node:
        return "one of " + ", ".join(repr(v) for v in node["enum"])
    if "const" in node:
        return repr(node["const"])
    return str(kind) if kind else "any"


def _resolve(node: Any, defs: dict[str, Any]) -> Any:
    if isinstance(node, dict) and isinstance(node.get("$ref"), str):
        key = node["$ref"].rsplit("/", 1)[-1]
        return defs.get(key, node)
    return node


def _fields(node: Any, defs: dict[str, Any]) -> str | None:
    node = _resolve(node, defs)
    if not isinstance(node, dict) or not isinstance(node.get("properties"), dict):
        return None
    props = node["properties"]
    if not props:
        return None
    required = set(node.get("required", []))
    parts = []
    for name, sub in list(props.items())[:_MAX_FIELDS]:
        optional = "" if name in required else ", optional"
        text = f"{name} ({_kind(_resolve(sub, defs), defs)}{optional})"
        description = sub.get("description") if isinstance(sub, dict) else None
        parts.append(f"{text}: {description.strip()}" if description else text)
    if len(props) > _MAX_FIELDS:
        parts.append(f"and {len(props) - _MAX_FIELDS} more")
    return "; ".join(parts)


def returns_text(schema: dict[str, Any] | None) -> str | None:
    """The members of a structured return, in a sentence; None for unstructured ones."""
    if not schema:
        return None
    defs = schema.get("$defs", {})
    top = _resolve(schema, defs)
    nullable = ""
    options = top.get("anyOf") if isinstance(top, dict) else None
    if isinstance(options, list):
        rest = [s for s in options if s != {"type": "null"}]
        if len(rest) != 1:
            return None
        nullable = " (or null)"
        top = _resolve(rest[0], defs)
    fields = _fields(top, defs)
    if fields is not None:
        return f"an object{nullable} with fields {fields}"
    if isinstance(top, dict) and top.get("type") == "array":
        fields = _fields(top.get("items"), defs)
        if fields is not None:
            return f"a list{nullable} of objects with fields {fields}"
    return None


_RETURNS_PARAGRAPH = re.compile(r"(?:^|\n\n)Returns: [^\n]*(?:\n(?!\n)[^\n]*)*")


def with_returns(description: str, schema: dict[str, Any] | None) -> str:
    """`description` with the return's members written once (into its "Returns:" paragraph)."""
    members = returns_text(schema)
    if members is None:
        return description
    members = members if members.endswith((".", "!", "?")) else f"{members}."
    found = None
    for match in _RETURNS_PARAGRAPH.finditer(description):
        found = match  # the last one: a wrapper may add text after the function's own
    if found is None:
        return f"{description}\n\nReturns: {members}" if description else f"Returns: {members}"
    paragraph = found.group(0).rstrip()
    joiner = " " if paragraph.endswith((".", "!", "?", ":")) else ". "
    addition = f"{joiner}{members[0].upper()}{members[1:]}"
    return description[: found.end()].rstrip() + addition + description[found.end() :]
