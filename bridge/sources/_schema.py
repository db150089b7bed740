"""Make JSON Schemas written elsewhere (OpenAPI documents, MCP servers, manifests) canonical.

A canonical tool schema holds no `$ref` at all: every local reference (any JSON pointer into
the document the schema came from: `#/$defs/X`, `#/definitions/X`, `#/components/schemas/X`)
is inlined, and a reference that leads back into itself is cut with a note in the description,
since a schema sent to an agent platform cannot refer to itself. OpenAPI 3.0's dialect
(`nullable`, boolean `exclusiveMinimum`, `example`) becomes JSON Schema 2020-12. Titles and
vendor extensions (`x-*`) go: they cost the model tokens and tell it nothing.
"""

from __future__ import annotations

import copy
import marshal
from collections.abc import Mapping
from typing import Any

from bridge.tools.schema_walk import SUB_LIST, SUB_MAP, SUB_ONE, types_of, unescape, walk

__all__ = ["MAX_NODES", "canonical_schema", "resolve_pointer"]

MAX_NODES = 20_000
"""Most subschemas one inlined schema may hold; past it, references are cut with a note."""

_DROP = frozenset(
    ("$schema", "$id", "$anchor", "$comment", "$dynamicAnchor", "discriminator", "xml")
)


def resolve_pointer(root: Any, ref: str) -> Any:
    """The value a local reference (``#/a/b``) points to in `root`.

    Raises:
        KeyError: The pointer leads nowhere; the message is the pointer.
    """
    if ref == "#":
        return root
    if not ref.startswith("#/"):
        raise KeyError(ref)
    node = root
    for raw in ref[2:].split("/"):
        part = unescape(raw)
        if isinstance(node, Mapping) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            raise KeyError(ref)
    return node


def _ref_name(ref: str) -> str:
    return unescape(ref.rsplit("/", 1)[-1]) if "/" in ref else ref


class _Inliner:
    """Replaces references by their targets, depth first, remembering the path to cut cycles."""

    def __init__(self, root: Any, notes: list[str]) -> None:
        self.root = root
        self.notes = notes
        self.nodes = 0

    def schema(self, node: Any, stack: tuple[str, ...]) -> Any:
        if not isinstance(node, Mapping):
            return node
        self.nodes += 1
        ref = node.get("$ref")
        if isinstance(ref, str):
            siblings = {k: v for k, v in node.items() if k != "$ref"}
            return self._reference(ref, siblings, stack)
        return {
            key: self.child(key, value, stack)
            for key, value in node.items()
            if key not in ("$defs", "definitions")  # inlined where used; dropped here
        }

    def child(self, key: str, value: Any, stack: tuple[str, ...]) -> Any:
        if key in SUB_ONE:
            if isinstance(value, list):
                return [self.schema(v, stack) for v in value]
            return self.schema(value, stack)
        if key in SUB_LIST and isinstance(value, list):
            return [self.schema(v, stack) for v in value]
        if key in SUB_MAP and isinstance(value, Mapping):
            return {name: self.schema(v, stack) for name, v in value.items()}
        return value

    def _reference(self, ref: str, siblings: dict[str, Any], stack: tuple[str, ...]) -> Any:
        name = _ref_name(ref)
        if not ref.startswith("#"):
            self.notes.append(f"the external reference {ref!r} was not followed")
            return self._placeholder(
                siblings, f"(the external reference {ref} was not followed: any value)", None
            )
        try:
            target = resolve_pointer(self.root, ref)
        except KeyError:
            self.notes.append(f"the reference {ref!r} points to nothing in the document")
            return self._placeholder(siblings, f"(unresolved reference {ref}: any value)", None)
        kind = target.get("type") if isinstance(target, Mapping) else None
        if ref in stack:
            self.notes.append(f"the recursive reference to {name!r} was cut")
            return self._placeholder(
                siblings,
                f"(recursive: the same shape as {name}, cut here because a tool schema cannot "
                "refer to itself)",
                kind,
            )
        if self.nodes > MAX_NODES:
            self.notes.append(f"the reference to {name!r} was cut: the schema grew too large")
            return self._placeholder(siblings, f"(a {name}; cut: the schema is too large)", kind)
        expanded = self.schema(target, (*stack, ref))
        if not siblings:
            return expanded
        if not isinstance(expanded, dict):  # a boolean schema with siblings: keep both
            return {"allOf": [expanded], **self.schema(siblings, stack)}
        merged = dict(expanded)
        merged.update({k: self.child(k, v, stack) for k, v in siblings.items()})
        return merged

    def _placeholder(self, siblings: dict[str, Any], note: str, kind: Any) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if isinstance(kind, (str, list)):
            out["type"] = kind
        out.update(siblings)
        given = out.get("description")
        out["description"] = f"{given} {note}" if isinstance(given, str) and given else note
        return out


def _openapi30(node: dict[str, Any]) -> dict[str, Any]:
    """OpenAPI 3.0 schema object -> JSON Schema 2020-12 (one node; `walk` does the rest)."""
    if node.pop("nullable", False) is True:
        kinds = types_of(node)
        if kinds and "null" not in kinds:
            node["type"] = [*sorted(kinds), "null"] if len(kinds) > 1 else [*kinds, "null"]
            if isinstance(node.get("enum"), list) and None not in node["enum"]:
                node["enum"] = [*node["enum"], None]
        elif not kinds:
            node = {"anyOf": [node, {"type": "null"}]} if node else node
    for bound, exclusive in (("minimum", "exclusiveMinimum"), ("maximum", "exclusiveMaximum")):
        flag = node.get(exclusive)
        if isinstance(flag, bool):
            del node[exclusive]
            if flag and bound in node:
                node[exclusive] = node.pop(bound)
    return node


def _tidy(node: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROP or key == "title" or key.startswith("x-"):
            continue
        if key == "example":
            if "examples" not in node:
                out["examples"] = [value]
            continue
        out[key] = value
    if out.get("type") == "array" and "items" not in out and "prefixItems" not in out:
        out["items"] = {}
    if "object" in types_of(out) and "properties" not in out:
        out["properties"] = {}
    return out


def _copy(value: Any) -> Any:
    try:  # plain data (the usual case) copies several times faster through marshal
        return marshal.loads(marshal.dumps(value, 2))
    except ValueError:
        return copy.deepcopy(value)


def canonical_schema(
    schema: Any,
    *,
    root: Any = None,
    openapi30: bool = False,
    notes: list[str] | None = None,
) -> dict[str, Any]:
    """A self-contained copy of `schema`, ready for `ToolSpec.parameters`.

    Args:
        schema: The schema (never changed).
        root: The document local references point into; None means `schema` itself.
        openapi30: Translate OpenAPI 3.0 keywords to JSON Schema 2020-12.
        notes: Receives one line per reference that was cut or not followed.

    Returns:
        A schema without `$ref`, titles, `x-*` keys or `$defs`, where every object has
        `properties` and every array has `items`.
    """
    found: list[str] = notes if notes is not None else []
    inliner = _Inliner(schema if root is None else root, found)
    # Deep-copied so that data (enum lists, defaults) is never shared with the document.
    inlined = _copy(inliner.schema(schema, ()))
    if not isinstance(inlined, dict):
        inlined = {} if inlined is True else {"not": {}}
    if openapi30:
        inlined = walk(inlined, _openapi30)
    result: dict[str, Any] = walk(inlined, _tidy)
    return result
