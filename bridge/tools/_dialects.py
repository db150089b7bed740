"""Dialects: thin transforms of a tool's canonical JSON Schema into what a platform accepts.

    appbuilder      $refs inlined, no titles, every object has properties, every array items
    appbuilder-sdk  the AppBuilder SDK's own (non-JSON-Schema) shape, byte for byte
    openai          Chat Completions function tool, canonical schema
    openai-strict   closed objects, every property required, optional ones nullable
    mcp             {name, description, inputSchema, outputSchema when the return is typed}

A typed return (`ToolSpec.output_schema`) is MCP's `outputSchema`; the other dialects (except
the SDK's, kept byte for byte) list a structured return's fields in the description.

Renderings are cached per spec (`to_dialect` returns a fresh copy of the cached one).
"""

from __future__ import annotations

import dataclasses
import json
import weakref
from collections.abc import Callable, Mapping
from typing import Any

from bridge.errors import UsageError
from bridge.tools._json import copy_json
from bridge.tools.returns import mcp_output_schema, with_returns
from bridge.tools.schema_walk import (
    SUB_LIST,
    SUB_MAP,
    SUB_ONE,
    is_null,
    kinds,
    types_of,
    unescape,
    walk,
)
from bridge.tools.spec import ToolSpec

__all__ = [
    "DIALECTS",
    "Fresh",
    "Rendering",
    "appbuilder_parameters",
    "remember_output",
    "render_spec",
    "replace_spec",
    "to_dialect",
]

DIALECTS = ("appbuilder", "appbuilder-sdk", "openai", "openai-strict", "mcp")
"""Every shape `to_dialect` can render a tool in; `appbuilder` is the default."""


def _inline(schema: dict[str, Any]) -> dict[str, Any]:
    """Replace every `$ref` by the definition it points to and drop `$defs`.

    A recursive type cannot be written without a reference: its second occurrence becomes an
    open object (validation still checks the full shape).
    """
    defs: dict[str, Any] = schema.get("$defs", {})

    def expand(node: Any, stack: tuple[str, ...]) -> Any:
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            key = unescape(ref[len("#/$defs/") :])
            siblings = {k: expand_children(k, v, stack) for k, v in node.items() if k != "$ref"}
            if key in stack or key not in defs:
                placeholder: dict[str, Any] = {"type": "object"}
                if key in stack:
                    placeholder["description"] = f"(recursive: the same shape as {key})"
                placeholder.update(siblings)
                return placeholder
            merged = dict(expand(defs[key], (*stack, key)))
            merged.update(siblings)
            return merged
        return {k: expand_children(k, v, stack) for k, v in node.items() if k != "$defs"}

    def expand_children(key: str, value: Any, stack: tuple[str, ...]) -> Any:
        if key in SUB_ONE:
            if isinstance(value, list):
                return [expand(v, stack) for v in value]
            return expand(value, stack)
        if key in SUB_LIST and isinstance(value, list):
            return [expand(v, stack) for v in value]
        if key in SUB_MAP and isinstance(value, dict):
            return {name: expand(v, stack) for name, v in value.items()}
        return value

    result: dict[str, Any] = expand(schema, ())
    return result


def _appbuilder_shape(node: dict[str, Any]) -> dict[str, Any]:
    """AppBuilder wants `properties` on every object and `items` on every array."""
    kinds = types_of(node)
    if "object" in kinds and "properties" not in node:
        node["properties"] = {}
    if "array" in kinds and "items" not in node:
        prefix = node.get("prefixItems")
        if isinstance(prefix, list) and prefix:
            unique = list({json.dumps(s, sort_keys=True): s for s in prefix}.values())
            node["items"] = unique[0] if len(unique) == 1 else {"anyOf": unique}
        else:
            node["items"] = {}
    return node


_STRICT_DROP = (
    "default",
    "examples",
    "minLength",
    "maxLength",
    "patternProperties",
    "unevaluatedProperties",
    "propertyNames",
    "minProperties",
    "maxProperties",
    "unevaluatedItems",
    "contains",
    "minContains",
    "maxContains",
    "uniqueItems",
    "prefixItems",
    "dependentSchemas",
    "dependentRequired",
)


_STRICT_FORMATS = frozenset(
    ("date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid")
)


def _strict(node: Any, path: str, problems: list[str]) -> Any:
    """OpenAI strict mode: closed objects, every property required, optional ones nullable."""
    if not isinstance(node, dict):
        problems.append(f"{path}: boolean schemas are not supported")
        return node
    out: dict[str, Any] = {}
    hints: list[str] = []
    for key, value in node.items():
        if key in _STRICT_DROP or (key == "format" and value not in _STRICT_FORMATS):
            if key == "prefixItems" and isinstance(value, list):
                hints.append(f"exactly {len(value)} items")
            elif key not in ("examples", "dependentSchemas"):
                hints.append(f"{key}: {json.dumps(value, ensure_ascii=False)}")
            continue
        out[key] = value
    if "oneOf" in out:
        out["anyOf"] = out.pop("oneOf")
    if "allOf" in out and isinstance(out["allOf"], list) and len(out["allOf"]) == 1:
        merged = dict(out.pop("allOf")[0])
        merged.update(out)
        return _strict(merged, path, problems)
    kinds = types_of(out)
    if "object" in kinds:
        extra = out.get("additionalProperties")
        if extra not in (None, False):
            problems.append(
                f"{path}: a free-form object (a dict) cannot be expressed in openai-strict; "
                "use a model with fixed fields or the 'openai' dialect"
            )
        props = out.get("properties", {})
        required = set(out.get("required", []))
        new_props = {}
        for name, sub in props.items():
            converted = _strict(sub, f"{path}.{name}", problems)
            new_props[name] = converted if name in required else _nullable(converted)
        out["properties"] = new_props
        out["required"] = list(new_props)
        out["additionalProperties"] = False
    if "array" in kinds:
        items = out.get("items")
        out["items"] = _strict(items if items is not None else {}, f"{path}[]", problems)
    if isinstance(out.get("anyOf"), list):
        out["anyOf"] = [_strict(s, path, problems) for s in out["anyOf"]]
    if not ({"type", "anyOf", "enum", "const"} & out.keys()):
        problems.append(
            f"{path}: openai-strict needs a type for every value; annotate it (an unannotated "
            "parameter or a bare list/Any accepts anything)"
        )
    if hints:
        note = f"({', '.join(hints)})"
        out["description"] = f"{out['description']} {note}" if out.get("description") else note
    return out


def _nullable(node: dict[str, Any]) -> dict[str, Any]:
    kinds = types_of(node)
    if isinstance(node.get("anyOf"), list):
        if not any(is_null(s) for s in node["anyOf"]):
            node = {**node, "anyOf": [*node["anyOf"], {"type": "null"}]}
        return node
    if "null" in kinds:
        return node
    if kinds and not kinds & {"object", "array"} and "const" not in node:
        node = dict(node)
        kind = node["type"]
        node["type"] = [*kind, "null"] if isinstance(kind, list) else [kind, "null"]
        if isinstance(node.get("enum"), list) and None not in node["enum"]:
            node["enum"] = [*node["enum"], None]
        return node
    outer = {"anyOf": [{k: v for k, v in node.items() if k != "description"}, {"type": "null"}]}
    if "description" in node:
        outer["description"] = node["description"]
    return outer


_JSON_TO_PY = {
    "string": "str",
    "integer": "int",
    "number": "float",
    "boolean": "bool",
    "array": "List",
    "object": "Dict",
    "null": "NoneType",
}


def _sdk_from_schema(name: str, description: str, parameters: Mapping[str, Any]) -> dict[str, Any]:
    """The SDK's shape for a tool that has no Python signature (a schema from elsewhere)."""
    props = parameters.get("properties", {})
    required = set(parameters.get("required", []))
    defs = parameters.get("$defs", {})
    properties = {}
    for key, prop in props.items():
        found = sorted(kinds(prop, defs) - {"null"})
        type_ = _JSON_TO_PY.get(found[0], "Any") if len(found) == 1 else "Any"
        properties[key] = {
            "name": key,
            "type": type_,
            "description": prop.get("description") if isinstance(prop, dict) else None,
            "required": key in required,
        }
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description or None,
            "parameters": {
                "type": "object",
                "properties": properties,
                "required": [key for key in props if key in required],
            },
        },
    }


def appbuilder_parameters(parameters: dict[str, Any]) -> dict[str, Any]:
    """The arguments schema as the appbuilder dialect shows it (a new object)."""
    shaped: dict[str, Any] = walk(_inline(parameters), _appbuilder_shape)
    shaped.setdefault("required", [])
    return shaped


def _render(
    name: str,
    description: str,
    parameters: dict[str, Any],
    dialect: str,
    output_schema: dict[str, Any] | None = None,
    *,
    shaped: dict[str, Any] | None = None,
) -> Any:
    if dialect == "mcp":
        described = {"name": name, "description": description, "inputSchema": parameters}
        if output_schema:
            described["outputSchema"] = mcp_output_schema(output_schema)
        return described
    if dialect != "appbuilder-sdk":
        # These take no output schema: a structured return's fields go in the description.
        description = with_returns(description, output_schema)
    if dialect == "appbuilder":
        if shaped is None:
            shaped = appbuilder_parameters(parameters)
        return {
            "type": "function",
            "function": {"name": name, "description": description, "parameters": shaped},
        }
    if dialect == "openai":
        plain = {"name": name, "description": description, "parameters": parameters}
        return {"type": "function", "function": plain}
    if dialect == "openai-strict":
        problems: list[str] = []
        strict = _strict(_inline(parameters), "arguments", problems)
        if problems:
            raise UsageError(
                f"tool '{name}' cannot be described in the openai-strict dialect: "
                + "; ".join(problems)
            )
        function = {
            "name": name,
            "description": description,
            "parameters": strict,
            "strict": True,
        }
        return {"type": "function", "function": function}
    return _sdk_from_schema(name, description, parameters)


Rendering = Callable[[ToolSpec], dict[str, Any]]
"""Renders a spec in one dialect when first asked (see `remember_output`)."""


@dataclasses.dataclass(frozen=True)
class Fresh:
    """A rendering that builds a new dict, sharing nothing, every time: `render(spec, data)`
    is called for each request instead of cached, and its result handed out without a copy
    (as cheap as copying a cached one, and nothing is kept)."""

    render: Callable[[ToolSpec, Any], dict[str, Any]]
    data: Any = None


_OUTPUTS: dict[int, dict[str, dict[str, Any] | Rendering | Fresh]] = {}
_ALIVE: dict[int, _Ref] = {}
"""The weak reference that drops a spec's `_OUTPUTS` entry when the spec goes, by its id."""


class _Ref(weakref.ref):  # type: ignore[type-arg]
    # One object per spec (a `weakref.finalize` makes five, each walked by the garbage
    # collector while a thousand tools are registered).
    __slots__ = ("key",)
    key: int


def _forget(ref: _Ref) -> None:
    if _ALIVE.get(ref.key) is ref:
        del _ALIVE[ref.key]
        _OUTPUTS.pop(ref.key, None)


def _outputs_of(spec: ToolSpec) -> dict[str, dict[str, Any] | Rendering | Fresh]:
    key = id(spec)
    outputs = _OUTPUTS.get(key)
    if outputs is None:
        ref = _Ref(spec, _forget)
        ref.key = key
        _ALIVE[key] = ref
        outputs = _OUTPUTS[key] = {}
    return outputs


def remember_output(
    spec: ToolSpec, dialect: str, output: dict[str, Any] | Rendering | Fresh
) -> None:
    """Store a ready rendering of `spec`, or how to make it when first asked (used for the SDK
    shape, which needs the signature, and for a rendering shared by tools of one shape)."""
    _outputs_of(spec)[dialect] = output


def _output(spec: ToolSpec, dialect: str) -> dict[str, Any] | None:
    """The cached rendering of `spec` in `dialect`, made now if it was left for later."""
    outputs = _outputs_of(spec)
    output = outputs.get(dialect)
    if isinstance(output, Fresh):
        return output.render(spec, output.data)
    if callable(output):
        output = outputs[dialect] = output(spec)
    return output


def replace_spec(spec: ToolSpec, **changes: Any) -> ToolSpec:
    """`dataclasses.replace` that keeps the renderings cached for `spec` (name and description
    changes drop them, since they show in every dialect)."""
    new = dataclasses.replace(spec, **changes)
    outputs = _OUTPUTS.get(id(spec))
    if outputs and not {"name", "description", "parameters", "output_schema"} & changes.keys():
        _outputs_of(new).update(outputs)
    elif outputs and "appbuilder-sdk" in outputs:
        sdk = json.loads(json.dumps(_output(spec, "appbuilder-sdk")))
        if "name" in changes:
            sdk["function"]["name"] = changes["name"]
        if "description" in changes:
            sdk["function"]["description"] = changes["description"]
        _outputs_of(new)["appbuilder-sdk"] = sdk
    return new


def render_spec(
    spec: ToolSpec, dialect: str, *, shaped: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A new rendering of `spec` (not cached); `shaped`: its appbuilder parameters, if known."""
    output: dict[str, Any] = _render(
        spec.name, spec.description, spec.parameters, dialect, spec.output_schema, shaped=shaped
    )
    return output


def to_dialect(spec_or_parts: ToolSpec | Mapping[str, Any], dialect: str = "appbuilder") -> Any:
    """Describe a tool as one platform expects it.

    Args:
        spec_or_parts: A `ToolSpec`, or a mapping with `name`, `description` and `parameters`
            (a JSON Schema of the arguments object), optionally `output_schema` (of the return).
        dialect: One of `DIALECTS`.

    Returns:
        A fresh JSON-ready dict (callers may change it).

    Raises:
        UsageError: For an unknown dialect, or a schema the dialect cannot express.
    """
    if dialect not in DIALECTS:
        raise UsageError(f"unknown dialect {dialect!r}; valid dialects: {', '.join(DIALECTS)}")
    if isinstance(spec_or_parts, ToolSpec):
        stored = _outputs_of(spec_or_parts).get(dialect)
        if isinstance(stored, Fresh):
            return stored.render(spec_or_parts, stored.data)
        output = _output(spec_or_parts, dialect)
        if output is None:
            output = _render(
                spec_or_parts.name,
                spec_or_parts.description,
                spec_or_parts.parameters,
                dialect,
                spec_or_parts.output_schema,
            )
            _outputs_of(spec_or_parts)[dialect] = output
        return copy_json(output)
    missing = [key for key in ("name", "parameters") if key not in spec_or_parts]
    if missing:
        raise UsageError(
            f"to_dialect needs a ToolSpec or a mapping with name, description and parameters "
            f"(missing: {', '.join(missing)})"
        )
    return copy_json(
        _render(
            str(spec_or_parts["name"]),
            str(spec_or_parts.get("description") or ""),
            dict(spec_or_parts["parameters"]),
            dialect,
            spec_or_parts.get("output_schema"),
        )
    )
