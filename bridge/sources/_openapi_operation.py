"""One OpenAPI operation -> one declarative HTTP tool (`HttpTool`).

Path, query, header and cookie parameters and the JSON request body are merged into one
arguments schema. An object body (an `allOf` of objects is merged first) gives its writable
fields as arguments; any other body, or one whose fields clash with a parameter, is one `body`
argument sent as the whole JSON body. A parameter whose name is taken gets its location as a
prefix (`query_id`). A header, query or cookie parameter named like a credential (`X-API-Key`,
`Authorization`, `session_id`; see `bridge.sources._credentials`) is never an argument: the
tool sends it from an environment variable named after it (`headers: {X-API-Key:
"${X_API_KEY}"}`, `query:`, or a `Cookie` header). What cannot be called (a non-JSON required
body, an unknown parameter location) raises `SkipOperationError` with the reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from bridge.sources._credentials import env_name, looks_like_credential
from bridge.sources._http_manifest import HttpTool, Location, default_location
from bridge.sources._schema import canonical_schema, resolve_pointer

__all__ = ["SkipOperationError", "deref", "operation_tool"]

# OpenAPI says to ignore Authorization parameters too, but FastAPI's `Header()` declares them
# that way: it is sent from the environment like any other credential.
_IGNORED_HEADERS = frozenset(("accept", "content-type"))
_MAX_DESCRIPTION = 1_000


class SkipOperationError(Exception):
    """This operation cannot become a tool (the message says why)."""


def deref(document: Mapping[str, Any], node: Any) -> Any:
    seen = set()
    while isinstance(node, dict) and isinstance(node.get("$ref"), str):
        ref = node["$ref"]
        if ref in seen:
            raise SkipOperationError(f"the reference {ref} points to itself")
        seen.add(ref)
        try:
            node = resolve_pointer(document, ref)
        except KeyError:
            raise SkipOperationError(
                f"the reference {ref} points to nothing in the document"
            ) from None
    return node


def operation_tool(
    document: Mapping[str, Any],
    method: str,
    path: str,
    item: dict[str, Any],
    op: dict[str, Any],
    name: str,
    is30: bool,
    notes: list[str],
) -> HttpTool:
    props: dict[str, Any] = {}
    required: list[str] = []
    locations: dict[str, Location] = {}
    headers: dict[str, str] = {}
    query: dict[str, str] = {}
    cookies: list[str] = []
    params = _parameters(document, item, op)
    order = {"path": 0, "query": 1, "header": 2, "cookie": 3}
    for param in sorted(params, key=lambda p: order.get(str(p.get("in")), 9)):
        where, wire = str(param.get("in")), str(param.get("name"))
        if where not in order:
            raise SkipOperationError(f"parameter {wire!r} is in {where!r}, which is not supported")
        if where == "header" and wire.lower() in _IGNORED_HEADERS:
            continue
        if where != "path" and looks_like_credential(wire):
            reference = f"${{{env_name(wire)}}}"
            if where == "header":
                headers[wire] = reference
            elif where == "query":
                query[wire] = reference
            else:
                cookies.append(f"{wire}={reference}")
            continue
        prop = wire if wire not in props else f"{where}_{wire}"
        if prop in props:
            raise SkipOperationError(f"parameter {wire!r} appears twice in {where!r}")
        props[prop] = _param_schema(document, param, is30, notes, name)
        if where == "path" or param.get("required") is True:
            required.append(prop)
        locations[prop] = Location.at(where, wire if wire != prop else None)
    _body(document, method, op, props, required, locations, is30, notes, name)
    schema: dict[str, Any] = {"type": "object", "properties": props}
    if required:
        schema["required"] = required
    # Unvalidated: only its method and url matter here, and a DELETE's body field named like a
    # credential would be refused as a query parameter by the validation.
    draft = HttpTool.model_construct(method=method.upper(), url=path)
    # Only locations that differ from the defaults are kept: the written file stays short.
    kept = {
        prop: where
        for prop, where in locations.items()
        if where.name is not None or where.in_ != default_location(prop, draft).in_
    }
    try:
        return HttpTool(
            name=name,
            description=_description(op, method, path),
            method=method.upper(),  # type: ignore[arg-type]
            url=path,
            parameters=schema,
            locations=kept,
            headers=_with_cookies(headers, cookies),
            query=query,
        )
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        raise SkipOperationError(str(first["msg"]).removeprefix("Value error, ")) from None


def _with_cookies(headers: dict[str, str], cookies: list[str]) -> dict[str, str]:
    """The credential headers plus one Cookie header for the credential cookies."""
    if not cookies:
        return headers
    name = next((key for key in headers if key.lower() == "cookie"), "Cookie")
    parts = [headers[name], *cookies] if name in headers else cookies
    return {**headers, name: "; ".join(parts)}


def _parameters(
    document: Mapping[str, Any], item: dict[str, Any], op: dict[str, Any]
) -> list[dict[str, Any]]:
    merged: dict[tuple[str, str], dict[str, Any]] = {}
    for raw in [*(item.get("parameters") or []), *(op.get("parameters") or [])]:
        param = deref(document, raw)
        if isinstance(param, dict) and "name" in param and "in" in param:
            merged[(str(param["name"]), str(param["in"]))] = param
    return list(merged.values())


def _param_schema(
    document: Mapping[str, Any], param: dict[str, Any], is30: bool, notes: list[str], tool: str
) -> dict[str, Any]:
    raw = param.get("schema")
    if raw is None and isinstance(param.get("content"), dict) and param["content"]:
        raw = next(iter(param["content"].values())).get("schema")
    found: list[str] = []
    schema = canonical_schema(
        raw if raw is not None else {}, root=document, openapi30=is30, notes=found
    )
    notes.extend(f"{tool}: {note}" for note in dict.fromkeys(found))
    if param.get("description"):
        schema["description"] = str(param["description"])
    if param.get("deprecated") is True:
        schema["deprecated"] = True
    if "example" in param and "examples" not in schema:
        schema["examples"] = [param["example"]]
    return schema


def _body(
    document: Mapping[str, Any],
    method: str,
    op: dict[str, Any],
    props: dict[str, Any],
    required: list[str],
    locations: dict[str, Location],
    is30: bool,
    notes: list[str],
    tool: str,
) -> None:
    body = deref(document, op.get("requestBody"))
    if not isinstance(body, dict):
        return
    content = body.get("content") or {}
    media = next((m for m in content if m.split(";")[0].strip() == "application/json"), None)
    media = media or next((m for m in content if "json" in m or m == "*/*"), None)
    needed = body.get("required") is True
    if media is None or method in ("get", "head"):
        why = (
            f"its request body ({', '.join(content) or 'no media type'}) is not JSON"
            if media is None
            else f"a {method.upper()} request cannot carry a body"
        )
        if needed:
            raise SkipOperationError(why)
        notes.append(f"{tool}: the optional request body is left out: {why}")
        return
    found: list[str] = []
    raw = (content[media] or {}).get("schema", {})
    schema = _merged_all_of(canonical_schema(raw, root=document, openapi30=is30, notes=found))
    notes.extend(f"{tool}: {note}" for note in dict.fromkeys(found))
    fields = schema.get("properties") if schema.get("type") == "object" else None
    writable = {
        key: value
        for key, value in (fields or {}).items()
        if not (isinstance(value, dict) and value.get("readOnly") is True)
    }
    if writable and not set(writable) & set(props):
        props.update(writable)
        inner = set(schema.get("required") or [])
        required.extend(key for key in writable if needed and key in inner)
        for key in writable:
            locations[key] = Location.at("body")
        return
    prop = "body" if "body" not in props else "request_body"
    if body.get("description") and "description" not in schema:
        schema["description"] = str(body["description"])
    props[prop] = schema
    locations[prop] = Location.at("whole_body")
    if needed:
        required.append(prop)


def _merged_all_of(schema: dict[str, Any]) -> dict[str, Any]:
    """An `allOf` of plain object schemas (a common way to extend a model) as one object."""
    parts = schema.get("allOf")
    if not isinstance(parts, list) or not parts:
        return schema
    merged: dict[str, Any] = {k: v for k, v in schema.items() if k != "allOf"}
    props: dict[str, Any] = dict(merged.get("properties") or {})
    required: list[str] = list(merged.get("required") or [])
    for part in parts:
        plain = isinstance(part, dict) and (part.get("type") == "object" or "properties" in part)
        if not plain or {"anyOf", "oneOf", "not", "allOf"} & part.keys():
            return schema
        for key, value in (part.get("properties") or {}).items():
            if key in props and props[key] != value:
                return schema  # two different shapes for one field: keep the allOf as it is
            props[key] = value
        required.extend(r for r in part.get("required") or [] if r not in required)
        if part.get("description") and "description" not in merged:
            merged["description"] = part["description"]
    merged.update(type="object", properties=props)
    if required:
        merged["required"] = required
    return merged


def _description(op: Mapping[str, Any], method: str, path: str) -> str:
    parts = [str(op[key]).strip() for key in ("summary", "description") if op.get(key)]
    text = "\n\n".join(dict.fromkeys(part for part in parts if part)) or f"{method.upper()} {path}"
    if op.get("deprecated") is True:
        text = f"(deprecated) {text}"
    return text if len(text) <= _MAX_DESCRIPTION else text[: _MAX_DESCRIPTION - 3] + "..."
