"""OpenAPI import: each operation of an OpenAPI 3.0/3.1 document becomes a declarative HTTP tool.

    --tools "openapi:https://intranet/api/openapi.json --include tickets --server-url http://..."
    toolbridge import-openapi api.json -o manifests/api.yaml     # the same, as an editable file

`openapi_manifest` builds the same `HttpManifest` a hand-written file holds, so one code path
(`HttpToolSource`) makes every call. Per operation: the name comes from `operationId`
(sanitised to ``^[A-Za-z0-9_-]{1,64}$``; a collision gets a suffix and a note), the description
from `summary` and `description`, and the path, query, header and cookie parameters plus the
JSON request body are merged into one arguments schema, with local `$ref`s inlined (a cycle is
cut, with a note in the schema's description). An object body contributes its fields as
arguments; any other body (or one whose fields clash with a parameter) is one `body` argument.
"""

from __future__ import annotations

import logging
import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlsplit

import requests
from pydantic import ValidationError

from bridge.errors import UsageError
from bridge.sources._document import DocumentError, parse_document, read_document
from bridge.sources._http_manifest import (
    HttpManifest,
    HttpTool,
    Location,
    default_location,
)
from bridge.sources._openapi_security import operation_auth
from bridge.sources._outbound import host_of
from bridge.sources._schema import canonical_schema, resolve_pointer
from bridge.sources.http_tools import HttpToolSource

__all__ = ["OpenApiSpec", "open_openapi", "openapi_manifest", "parse_openapi_spec", "read_openapi"]

logger = logging.getLogger(__name__)

_WHAT = "OpenAPI document"
_METHODS = ("get", "put", "post", "delete", "patch", "head")
_IGNORED_HEADERS = frozenset(("accept", "content-type", "authorization"))
_MAX_DESCRIPTION = 1_000
FETCH_TIMEOUT = 30.0
"""Seconds to wait for a document fetched by URL."""


class OpenApiSpec:
    """What an ``openapi:`` SPEC asks for: the document and the options after it."""

    def __init__(
        self, source: str, *, include: Sequence[str] = (), server_url: str | None = None
    ) -> None:
        self.source = source
        self.include = tuple(include)
        self.server_url = server_url


def parse_openapi_spec(text: str) -> OpenApiSpec:
    """Parse ``PATH_OR_URL [--include OPERATION_ID_OR_TAG]... [--server-url URL]``.

    Raises:
        UsageError: No document, or an unknown or incomplete option.
    """
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise UsageError(f"cannot parse the SPEC openapi:{text} ({exc})") from None
    source: str | None = None
    include: list[str] = []
    server_url: str | None = None
    index = 0
    while index < len(words):
        word = words[index]
        if word in ("--include", "--server-url"):
            if index + 1 >= len(words):
                raise UsageError(f"openapi:{text}: {word} needs a value")
            value = words[index + 1]
            if word == "--include":
                include.extend(part for part in value.split(",") if part)
            else:
                server_url = value
            index += 2
            continue
        if word.startswith("--") or source is not None:
            raise UsageError(
                f"openapi:{text}: unexpected {word!r}; expected openapi:PATH_OR_URL "
                "[--include OPERATION_ID_OR_TAG]... [--server-url URL]"
            )
        source = word
        index += 1
    if source is None:
        raise UsageError("openapi: needs a document: openapi:PATH_OR_URL (a file or an http URL)")
    return OpenApiSpec(source, include=include, server_url=server_url)


def read_openapi(source: str, *, timeout: float = FETCH_TIMEOUT) -> dict[str, Any]:
    """Read an OpenAPI 3.x document (JSON or YAML) from a file or an http(s) URL.

    Raises:
        DocumentError: Unreachable, unreadable, not YAML/JSON, or not OpenAPI 3.x.
    """
    if source.startswith(("http://", "https://")):
        try:
            response = requests.get(source, timeout=timeout)
        except requests.RequestException as exc:
            raise DocumentError(
                f"cannot fetch the {_WHAT} {source}: {type(exc).__name__}"
            ) from None
        if response.status_code != 200:
            raise DocumentError(
                f"cannot fetch the {_WHAT} {source}: HTTP {response.status_code} {response.reason}"
            )
        data, _ = parse_document(response.text, source=source, what=_WHAT)
    else:
        data, _ = read_document(Path(source), what=_WHAT)
    if not isinstance(data, dict):
        raise DocumentError(f"{source}: expected an {_WHAT} (a mapping), got {_kind(data)}")
    version = data.get("openapi")
    if not isinstance(version, str) or not version.startswith("3."):
        found = f"swagger {data['swagger']}" if "swagger" in data else f"openapi {version!r}"
        raise DocumentError(
            f"{source}: expected an OpenAPI 3.0 or 3.1 document (an 'openapi: 3.x' key), found "
            f"{found}; convert Swagger 2.0 documents to OpenAPI 3 first"
        )
    if not isinstance(data.get("paths", {}), dict):
        raise DocumentError(f"{source}: 'paths' must be a mapping of paths to operations")
    return data


def open_openapi(spec: str | OpenApiSpec, *, allow_hosts: Iterable[str] = ()) -> HttpToolSource:
    """The tool source for an ``openapi:`` SPEC (the text after ``openapi:``, or parsed)."""
    parsed = parse_openapi_spec(spec) if isinstance(spec, str) else spec
    document = read_openapi(parsed.source)
    manifest, notes = openapi_manifest(
        document, source=parsed.source, include=parsed.include, server_url=parsed.server_url
    )
    for note in notes:
        logger.warning("openapi:%s: %s", parsed.source, note)
    return HttpToolSource(manifest, origin=f"openapi:{parsed.source}", allow_hosts=allow_hosts)


def openapi_manifest(
    document: Mapping[str, Any],
    *,
    source: str,
    include: Sequence[str] = (),
    server_url: str | None = None,
) -> tuple[HttpManifest, list[str]]:
    """The declarative manifest equivalent to the selected operations of `document`.

    Args:
        document: A parsed OpenAPI 3.x document.
        source: Its path or URL (relative server URLs are resolved against a URL).
        include: operationIds (or sanitised tool names) and tags to keep; empty keeps all.
        server_url: Overrides the document's first server.

    Returns:
        The manifest and notes: skipped operations, renamed tools, cut references.

    Raises:
        UsageError: No usable server URL, an `include` entry that matches nothing, or no
            operation left.
    """
    notes: list[str] = []
    base_url = _server(document, source, server_url)
    is30 = str(document.get("openapi", "")).startswith("3.0")
    operations = list(_operations(document, notes))
    chosen = _select(operations, include, source)
    tools: list[HttpTool] = []
    auths: list[Any] = []
    used: dict[str, str] = {}
    for method, path, item, op in chosen:
        label = f"{method.upper()} {path}"
        name = _unique(_tool_name(op.get("operationId"), method, path), label, used, notes)
        try:
            tool = _tool(document, method, path, item, op, name, is30, notes)
        except _SkipError as skip:
            notes.append(f"{label} skipped: {skip}")
            continue
        tools.append(tool)
        auths.append(operation_auth(document, op, label, notes))
    if not tools:
        raise UsageError(f"{source}: no operation could be turned into a tool ({'; '.join(notes)})")
    shared = auths[0] if all(auth == auths[0] for auth in auths) else None
    if shared is None:
        tools = [t.model_copy(update={"auth": a}) for t, a in zip(tools, auths, strict=True)]
    manifest = HttpManifest(
        base_url=base_url,
        allow_hosts=[host_of(base_url)],
        auth=shared,
        tools=tools,
    )
    return manifest, notes


class _SkipError(Exception):
    """This operation cannot become a tool (the message says why)."""


def _server(document: Mapping[str, Any], source: str, override: str | None) -> str:
    url = override
    if url is None:
        servers = document.get("servers") or [{"url": "/"}]
        first = servers[0] if isinstance(servers, list) and servers else {}
        url = str(first.get("url", "/")) if isinstance(first, dict) else "/"
        for name, var in (first.get("variables") or {}).items():
            if isinstance(var, dict) and "default" in var:
                url = url.replace("{" + name + "}", str(var["default"]))
    if not urlsplit(url).scheme:
        if source.startswith(("http://", "https://")):
            url = urljoin(source, url)
        else:
            raise UsageError(
                f"{source}: the document's server URL {url!r} is relative and the document is a "
                f"file; pass --server-url http://HOST:PORT{url if url != '/' else ''}"
            )
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"{source}: the server URL {url!r} is not an http(s) URL")
    return url.rstrip("/") or url


def _operations(
    document: Mapping[str, Any], notes: list[str]
) -> Iterable[tuple[str, str, dict[str, Any], dict[str, Any]]]:
    for path, item in (document.get("paths") or {}).items():
        item = _deref(document, item)
        if not isinstance(item, dict):
            continue
        for method in (*_METHODS, "options", "trace"):
            op = item.get(method)
            if not isinstance(op, dict):
                continue
            if method not in _METHODS:
                notes.append(f"{method.upper()} {path} skipped: {method.upper()} is not supported")
                continue
            yield method, str(path), item, op


def _select(
    operations: list[tuple[str, str, dict[str, Any], dict[str, Any]]],
    include: Sequence[str],
    source: str,
) -> list[tuple[str, str, dict[str, Any], dict[str, Any]]]:
    if not include:
        return operations
    wanted = set(include)
    chosen = []
    matched: set[str] = set()
    for method, path, item, op in operations:
        keys = {str(op.get("operationId", "")), _tool_name(op.get("operationId"), method, path)}
        keys |= {str(tag) for tag in op.get("tags") or []}
        hit = wanted & keys
        if hit:
            matched |= hit
            chosen.append((method, path, item, op))
    missing = [entry for entry in include if entry not in matched]
    if missing:
        ids = sorted({str(op.get("operationId")) for *_, op in operations if op.get("operationId")})
        tags = sorted({str(t) for *_, op in operations for t in op.get("tags") or []})
        raise UsageError(
            f"{source}: --include {', '.join(missing)} matches no operationId or tag; "
            f"operationIds: {', '.join(ids) or 'none'}; tags: {', '.join(tags) or 'none'}"
        )
    return chosen


def _tool_name(operation_id: Any, method: str, path: str) -> str:
    raw = str(operation_id) if operation_id else f"{method}_{path}"
    name = re.sub(r"_{2,}", "_", re.sub(r"[^A-Za-z0-9_-]+", "_", raw)).strip("_-")
    return name[:64] or method


def _unique(name: str, label: str, used: dict[str, str], notes: list[str]) -> str:
    if name not in used:
        used[name] = label
        return name
    number = 2
    while (candidate := f"{name[: 64 - len(str(number)) - 1]}_{number}") in used:
        number += 1
    notes.append(
        f"{label} and {used[name]} both become the tool name {name!r}; {label} is named "
        f"{candidate!r} (rename it in the manifest, or use --include)"
    )
    used[candidate] = label
    return candidate


def _deref(document: Mapping[str, Any], node: Any) -> Any:
    seen = set()
    while isinstance(node, dict) and isinstance(node.get("$ref"), str):
        ref = node["$ref"]
        if ref in seen:
            raise _SkipError(f"the reference {ref} points to itself")
        seen.add(ref)
        try:
            node = resolve_pointer(document, ref)
        except KeyError:
            raise _SkipError(f"the reference {ref} points to nothing in the document") from None
    return node


def _tool(
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
    params = _parameters(document, item, op)
    order = {"path": 0, "query": 1, "header": 2, "cookie": 3}
    for param in sorted(params, key=lambda p: order.get(str(p.get("in")), 9)):
        where, wire = str(param.get("in")), str(param.get("name"))
        if where not in order:
            raise _SkipError(f"parameter {wire!r} is in {where!r}, which is not supported")
        if where == "header" and wire.lower() in _IGNORED_HEADERS:
            continue
        prop = wire if wire not in props else f"{where}_{wire}"
        if prop in props:
            raise _SkipError(f"parameter {wire!r} appears twice in {where!r}")
        props[prop] = _param_schema(document, param, is30, notes, name)
        if where == "path" or param.get("required") is True:
            required.append(prop)
        locations[prop] = Location.at(where, wire if wire != prop else None)
    _body(document, method, op, props, required, locations, is30, notes, name)
    schema: dict[str, Any] = {"type": "object", "properties": props}
    if required:
        schema["required"] = required
    draft = HttpTool(name=name, method=method.upper(), url=path, parameters=schema)  # type: ignore[arg-type]
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
        )
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        raise _SkipError(str(first["msg"]).removeprefix("Value error, ")) from None


def _parameters(
    document: Mapping[str, Any], item: dict[str, Any], op: dict[str, Any]
) -> list[dict[str, Any]]:
    merged: dict[tuple[str, str], dict[str, Any]] = {}
    for raw in [*(item.get("parameters") or []), *(op.get("parameters") or [])]:
        param = _deref(document, raw)
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
    body = _deref(document, op.get("requestBody"))
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
            raise _SkipError(why)
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


def _kind(value: Any) -> str:
    return "nothing" if value is None else f"a {type(value).__name__}"
