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
Header, query and cookie parameters named like credentials are never arguments: they are sent
from environment variables named after them, and a note says which (see `_openapi_operation`).
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

from bridge.errors import UsageError
from bridge.sources._document import DocumentError, parse_document, read_document
from bridge.sources._http_manifest import (
    ApiKeyAuth,
    BasicAuth,
    BearerAuth,
    HttpManifest,
    HttpTool,
    env_names,
)
from bridge.sources._openapi_operation import SkipOperationError, deref, operation_tool
from bridge.sources._openapi_security import operation_auth
from bridge.sources._outbound import host_of
from bridge.sources.http_tools import HttpToolSource

__all__ = ["OpenApiSpec", "open_openapi", "openapi_manifest", "parse_openapi_spec", "read_openapi"]

logger = logging.getLogger(__name__)

_WHAT = "OpenAPI document"
_METHODS = ("get", "put", "post", "delete", "patch", "head")
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
            tool = operation_tool(document, method, path, item, op, name, is30, notes)
        except SkipOperationError as skip:
            notes.append(f"{label} skipped: {skip}")
            continue
        tools.append(tool)
        auths.append(operation_auth(document, op, label, notes))
    if not tools:
        raise UsageError(f"{source}: no operation could be turned into a tool ({'; '.join(notes)})")
    tools = [_without_auth_header(t, a) for t, a in zip(tools, auths, strict=True)]
    notes.extend(_credential_notes(tools))
    shared = auths[0] if all(auth == auths[0] for auth in auths) else None
    if shared is None:
        tools = [t.model_copy(update={"auth": a}) for t, a in zip(tools, auths, strict=True)]
    # Credentials every operation sends are written once, at the top of the manifest.
    headers = tools[0].headers if all(t.headers == tools[0].headers for t in tools) else {}
    query = tools[0].query if all(t.query == tools[0].query for t in tools) else {}
    update: dict[str, Any] = {k: {} for k, v in (("headers", headers), ("query", query)) if v}
    if update:
        tools = [t.model_copy(update=update) for t in tools]
    manifest = HttpManifest(
        base_url=base_url,
        allow_hosts=[host_of(base_url)],
        headers=headers,
        query=query,
        auth=shared,
        tools=tools,
    )
    return manifest, notes


def _without_auth_header(tool: HttpTool, auth: Any) -> HttpTool:
    """The tool without a credential header its security scheme already sends."""
    if isinstance(auth, BearerAuth | BasicAuth):
        covered = "authorization"
    elif isinstance(auth, ApiKeyAuth):
        covered = auth.header.lower()
    else:
        return tool
    headers = {k: v for k, v in tool.headers.items() if k.lower() != covered}
    return tool if headers == tool.headers else tool.model_copy(update={"headers": headers})


def _credential_notes(tools: Sequence[HttpTool]) -> list[str]:
    """One note per credential parameter that became an environment variable."""
    found: dict[tuple[str, str, str], list[str]] = {}
    for tool in tools:
        entries = [("query", wire, value) for wire, value in tool.query.items()]
        for wire, value in tool.headers.items():
            if wire.lower() != "cookie":
                entries.append(("header", wire, value))
                continue
            for part in value.split(";"):
                cookie, equals, reference = part.strip().partition("=")
                # A Cookie header parameter (no `name=`) is sent whole, as a header.
                entries.append(("cookie", cookie, reference) if equals else ("header", wire, part))
        for place, wire, value in entries:
            for env in env_names(value):
                found.setdefault((place, wire, env), []).append(tool.name)
    notes = []
    for (place, wire, env), names in found.items():
        whole = " (the whole header value, e.g. Bearer <token>)" if place == "header" else ""
        shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
        notes.append(
            f"the {place} parameter {wire!r} looks like a credential, so the model never sees "
            f"it: {shown} send{'s' if len(names) == 1 else ''} it from the environment "
            f"variable {env}{whole if wire.lower().endswith('authorization') else ''}; set "
            f"{env} where toolbridge runs"
        )
    return notes


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
        item = deref(document, item)
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


def _kind(value: Any) -> str:
    return "nothing" if value is None else f"a {type(value).__name__}"
