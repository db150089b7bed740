"""Declarative HTTP tools: endpoints described in a YAML or JSON manifest become tools.

    toolbox = Toolbox()
    source = HttpToolSource.from_file("manifests/intranet.yaml", allow_hosts=["10.0.0.5"])
    toolbox.add_source(source)          # closed (its session too) by toolbox.close()

or, from the command line, ``--tools manifests/intranet.yaml``. The file format is described
in `bridge.sources._http_manifest`. A call validates its arguments against the tool's JSON
Schema, builds the request (path, query, header, cookie, JSON body), sends it through one
pooled session guarded by the host allowlist, and turns the response into the output: the JSON
(or the field `response.select` names) or the text, cut to the size limit. A non-2xx status
raises `HttpToolError` ("HTTP 404 Not Found from GET ...: <trimmed body>"), which the
dispatcher reports as a `tool_error` output. Secrets come from `${ENV_NAME}` references,
resolved at call time and registered with `bridge.errors.register_secret`, so no output, log
line or error ever shows them.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote

from pydantic import ValidationError

from bridge.errors import redact, register_secret
from bridge.sources._arguments import SchemaArguments
from bridge.sources._document import DocumentError, describe_errors, read_document
from bridge.sources._http_manifest import (
    ENV_REFERENCE,
    ApiKeyAuth,
    BasicAuth,
    BearerAuth,
    HttpManifest,
    HttpTool,
    NoAuth,
    default_location,
    env_names,
)
from bridge.sources._outbound import (
    HostAllowlist,
    HttpToolError,
    Outbound,
    Reply,
    env_allow_hosts,
    host_of,
)
from bridge.sources._schema import canonical_schema
from bridge.tools.output import truncate
from bridge.tools.spec import ToolOptions, ToolSpec
from bridge.tracing import Tracing

__all__ = ["HttpToolError", "HttpToolSource", "load_http_manifest"]

logger = logging.getLogger(__name__)

_WHAT = "HTTP tools manifest"
_SELECT_PART = re.compile(r"([^.\[\]]+)|\[(\d+)\]")
_ERROR_BODY_CHARS = 500
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
"""Characters no header value may hold (a tab may)."""


def load_http_manifest(path: str | Path) -> HttpManifest:
    """Read and validate a manifest file.

    Raises:
        DocumentError: The file is missing, is not YAML/JSON, or does not fit the format; the
            message names the file, the line and key of each problem, and what was expected.
    """
    data, positions = read_document(path, what=_WHAT)
    if not isinstance(data, dict):
        kind = "empty" if data is None else f"a {type(data).__name__}"
        raise DocumentError(
            f"{path}: invalid {_WHAT}: the file is {kind}; expected a mapping with a 'tools' "
            "list (and optionally base_url, allow_hosts, headers, auth, timeout)"
        )
    try:
        return HttpManifest.model_validate(data)
    except ValidationError as exc:
        raise DocumentError(
            describe_errors(exc, positions, source=str(path), what=_WHAT, model=HttpManifest)
        ) from None


class HttpToolSource:
    """The tools of one manifest; they share one `requests.Session` and one host allowlist.

    Args:
        manifest: The validated manifest.
        origin: Where it came from (a file, ``openapi:...``), for messages.
        allow_hosts: Hosts allowed on top of the manifest's (e.g. from ``--allow-host``); the
            `TOOLBRIDGE_ALLOW_HOSTS` environment variable adds more.
        tracing: Where each request's CLIENT span goes (default: the global tracer provider;
            a bridge hands its own with `use_tracing`). Each request sends its
            ``traceparent`` to the service, whose spans then join the trace.
    """

    def __init__(
        self,
        manifest: HttpManifest,
        *,
        origin: str,
        allow_hosts: Iterable[str] = (),
        tracing: Tracing | None = None,
    ) -> None:
        self.manifest = manifest
        self.origin = origin
        base = manifest.allow_hosts if manifest.allow_hosts is not None else _named_hosts(manifest)
        self.allowlist = HostAllowlist([*base, *allow_hosts, *env_allow_hosts()])
        self._outbound = Outbound(self.allowlist, tracing=tracing)
        self._specs = [self._spec(tool) for tool in manifest.tools]
        if any(env_names(value) for value in _query_values(manifest)):
            _redact_urllib3_request_lines()
        references = _env_references(manifest)
        for name in references:
            # Known from the start, not only once a call sends it: a tool of another source
            # that returns the variable (a prompt-injected `read`) is redacted too.
            register_secret(os.environ.get(name))
        missing = sorted({name for name in references if name not in os.environ})
        if missing:
            users = _env_users(manifest)
            # One line for the manifest, each variable with the tools that send it.
            logger.warning(
                "%s: environment variable%s %s not set; calls of %s will fail until %s",
                origin,
                "s" if len(missing) > 1 else "",
                ", ".join(
                    f"{name} (used by {', '.join(users.get(name, [])) or 'no tool'})"
                    for name in missing
                ),
                "these tools" if sum(len(users.get(n, [])) for n in missing) > 1 else "this tool",
                "they are set" if len(missing) > 1 else "it is set",
            )

    @classmethod
    def from_file(cls, path: str | Path, *, allow_hosts: Iterable[str] = ()) -> HttpToolSource:
        """Load a manifest file (see `load_http_manifest` for its errors)."""
        return cls(load_http_manifest(path), origin=str(path), allow_hosts=allow_hosts)

    def __repr__(self) -> str:
        names = [spec.name for spec in self._specs]
        return f"HttpToolSource({self.origin!r}, tools={names!r}, allow_hosts={self.allowlist})"

    def specs(self) -> list[ToolSpec]:
        """One spec per tool of the manifest."""
        return list(self._specs)

    def use_tracing(self, tracing: Tracing) -> None:
        """Send the client spans of its requests to `tracing` (the bridge's provider)."""
        self._outbound.tracing = tracing

    def close(self) -> None:
        """Close the pooled connections."""
        self._outbound.close()

    # --- building the specs --------------------------------------------------------------------

    def _spec(self, tool: HttpTool) -> ToolSpec:
        parameters = canonical_schema(tool.parameters)

        def call(**arguments: Any) -> str:
            return self.call(tool, arguments)

        timeout = tool.timeout or self.manifest.timeout
        return ToolSpec(
            name=tool.name,
            description=tool.description or f"{tool.method} {tool.url}",
            parameters=parameters,
            function=call,
            validate=SchemaArguments(parameters),
            options=ToolOptions(
                timeout=timeout,
                idempotent=tool.method in ("GET", "HEAD", "PUT", "DELETE"),
                confirm=tool.confirm,
                read_only=tool.method in ("GET", "HEAD"),
            ),
            origin=f"{self.origin}:{tool.name}",
        )

    # --- one call ----------------------------------------------------------------------------

    def call(self, tool: HttpTool, arguments: Mapping[str, Any]) -> str:
        """Send the request for validated `arguments` and return the output text.

        Raises:
            HttpToolError: Refused host, unreachable host, non-2xx status, missing environment
                variable, or a response selector that finds nothing.
        """
        path: dict[str, str] = {}
        query: list[tuple[str, str]] = []
        headers: dict[str, str] = {}
        cookies: dict[str, str] = {}
        body: Any = None
        has_body = False
        for name, value in arguments.items():
            where = tool.locations.get(name) or default_location(name, tool)
            wire = where.name or name
            if where.in_ == "path":
                path[name] = quote(_text(value), safe="")
            elif where.in_ == "query":
                values = value if isinstance(value, list) else [value]
                query.extend((wire, _text(item)) for item in values if item is not None)
            elif where.in_ == "header":
                headers[wire] = _text(value)
            elif where.in_ == "cookie":
                cookies[wire] = _text(value)
            elif where.in_ == "whole_body":
                body, has_body = value, True
            else:
                body = body if isinstance(body, dict) else {}
                body[wire] = value
                has_body = True
        for name, value in {**self.manifest.query, **tool.query}.items():
            query.append((name, self._expand(value, f"query {name}")))
        url = self._url(tool, path)
        static, secret = self._headers(tool)
        cookies = _into_cookie_header(cookies, static, secret)
        reply = self._outbound.send(
            tool.method,
            url,
            params=query,
            headers={**static, **headers},
            secret_headers=secret,
            cookies=cookies,
            json_body=body,
            has_body=has_body,
            timeout=tool.timeout or self.manifest.timeout,
            max_bytes=self.manifest.max_response_bytes,
        )
        logger.debug("%s %s -> %s", tool.method, reply.url, reply.status)
        limit = tool.response.max_chars or self.manifest.max_output_chars
        return truncate(redact(self._output(tool, reply)), limit)

    def _url(self, tool: HttpTool, path: Mapping[str, str]) -> str:
        url = tool.url
        if url.startswith("/"):
            url = (self.manifest.base_url or "").rstrip("/") + url
        return re.sub(r"\{([^{}/]+)\}", lambda m: path.get(m.group(1), m.group(0)), url)

    def _headers(self, tool: HttpTool) -> tuple[dict[str, str], dict[str, str]]:
        """Plain headers, and those that carry secrets (dropped on cross-host redirects)."""
        plain: dict[str, str] = {}
        secret: dict[str, str] = {}
        for name, value in {**self.manifest.headers, **tool.headers}.items():
            if ENV_REFERENCE.search(value):
                secret[name] = self._expand(value, f"header {name}")
            else:
                plain[name] = value
        auth = tool.auth or self.manifest.auth
        if isinstance(auth, BearerAuth):
            secret["Authorization"] = "Bearer " + self._expand(auth.token, "auth.token")
        elif isinstance(auth, BasicAuth):
            user = self._expand(auth.username, "auth.username")
            password = self._expand(auth.password, "auth.password")
            token = base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
            register_secret(token)
            secret["Authorization"] = f"Basic {token}"
        elif isinstance(auth, ApiKeyAuth):
            secret[auth.header] = self._expand(auth.key, "auth.key")
        else:
            assert auth is None or isinstance(auth, NoAuth)
        return plain, secret

    def _expand(self, text: str, where: str) -> str:
        def value(match: re.Match[str]) -> str:
            name = match.group(1)
            found = os.environ.get(name)
            if found is None:
                raise HttpToolError(
                    f"The environment variable {name} is not set ({where} in {self.origin} "
                    "needs it); set it where toolbridge runs and try again."
                )
            register_secret(found)
            bad = next((i for i, char in enumerate(found) if _CONTROL.match(char)), None)
            if bad is not None:
                # Never sent (a line break would end the header) and never shown: the HTTP
                # stack's own error quotes the value escaped, where redaction cannot find it.
                raise HttpToolError(
                    f"The environment variable {name} holds a control character (U+"
                    f"{ord(found[bad]):04X}, character {bad + 1} of {len(found)}; {where} in "
                    f"{self.origin} needs it); remove it where toolbridge runs (a file with "
                    "Windows line endings leaves a carriage return at the end)."
                )
            return found

        return ENV_REFERENCE.sub(value, text)

    def _output(self, tool: HttpTool, reply: Reply) -> str:
        status = f"HTTP {reply.status} {reply.reason}".rstrip()
        if not 200 <= reply.status < 300:
            text = " ".join(reply.text().split())
            if len(text) > _ERROR_BODY_CHARS:
                text = text[:_ERROR_BODY_CHARS] + "..."
            raise HttpToolError(
                f"{status} from {tool.method} {_without_query(reply.url)}: {text or '(empty body)'}"
            )
        note = (
            f"\n[only the first {len(reply.body)} bytes of the response were read]"
            if reply.truncated
            else ""
        )
        if tool.method == "HEAD" or not reply.body:
            return f"{status} (no content)"
        data = _json(reply)
        if data is _NOT_JSON:
            if tool.response.select:
                raise HttpToolError(
                    f"{status} but the response is not JSON, so response.select "
                    f"{tool.response.select!r} cannot apply; content type: "
                    f"{reply.headers.get('Content-Type', 'unknown')}"
                )
            return reply.text() + note
        if tool.response.select:
            data = _select(data, tool.response.select)
        text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
        return text + note


_NOT_JSON: Any = object()


def _json(reply: Reply) -> Any:
    kind = reply.headers.get("Content-Type", "").lower()
    text = reply.text()
    if "json" not in kind and text.lstrip()[:1] not in ("{", "["):
        return _NOT_JSON
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return _NOT_JSON


def _select(data: Any, path: str) -> Any:
    """The value at a field path: ``data.items[0].name`` (``items.0`` works too)."""
    current = data
    walked = ""
    for match in _SELECT_PART.finditer(path):
        key, index = match.group(1), match.group(2)
        if index is None and key.isdigit() and isinstance(current, list):
            index = key
        if index is not None:
            position = int(index)
            if not isinstance(current, list) or position >= len(current):
                size = f"a list of {len(current)}" if isinstance(current, list) else _kind(current)
                raise HttpToolError(
                    f"the response has no item [{position}] at {walked or 'the top'} "
                    f"(response.select {path!r}); found {size}"
                )
            current = current[position]
            walked += f"[{position}]"
            continue
        if not isinstance(current, dict) or key not in current:
            keys = ", ".join(list(current)[:20]) if isinstance(current, dict) else ""
            found = f"keys: {keys}" if keys else f"found {_kind(current)}"
            raise HttpToolError(
                f"the response has no field {key!r} at {walked or 'the top'} "
                f"(response.select {path!r}); {found}"
            )
        current = current[key]
        walked += f".{key}" if walked else key
    return current


def _kind(value: Any) -> str:
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    return "null" if value is None else f"a {type(value).__name__}"


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return ""
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return str(value)


def _without_query(url: str) -> str:
    return url.split("?", 1)[0]


def _named_hosts(manifest: HttpManifest) -> list[str]:
    urls = [manifest.base_url or ""] + [tool.url for tool in manifest.tools]
    # A URL the gate cannot parse (a template such as http://{region}.example/) names no host.
    hosts = (host_of(url) for url in urls if url.startswith(("http://", "https://")))
    return [host for host in hosts if host]


def _query_values(manifest: HttpManifest) -> list[str]:
    return [*manifest.query.values(), *(v for tool in manifest.tools for v in tool.query.values())]


class _RedactingFilter(logging.Filter):
    """Masks registered secrets in a record (urllib3 logs each request line with its query)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        masked = redact(message)
        if masked != message:
            record.msg, record.args = masked, None
        return True


def _redact_urllib3_request_lines() -> None:
    """A key sent in the query string must not reach DEBUG logs through urllib3's own logger."""
    pool_logger = logging.getLogger("urllib3.connectionpool")
    if not any(isinstance(f, _RedactingFilter) for f in pool_logger.filters):
        pool_logger.addFilter(_RedactingFilter())


def _into_cookie_header(
    cookies: dict[str, str], static: dict[str, str], secret: dict[str, str]
) -> dict[str, str]:
    """Cookie arguments, moved into a Cookie header of the manifest when there is one.

    requests leaves out `cookies=` when a Cookie header is set, and a credential cookie is
    such a header (`headers: {Cookie: "sid=${SID}"}`). The arguments' values are
    percent-encoded so that a model cannot add a cookie of its own with `;`.
    """
    for headers in (secret, static):
        name = next((key for key in headers if key.lower() == "cookie"), None)
        if name is not None and cookies:
            extra = "; ".join(f"{key}={quote(value, safe='')}" for key, value in cookies.items())
            headers[name] = f"{headers[name]}; {extra}"
            return {}
    return cookies


def _env_users(manifest: HttpManifest) -> dict[str, list[str]]:
    """The tools that send each ``${VAR}`` (their own values or the manifest's), in order."""
    users: dict[str, list[str]] = {}
    for tool in manifest.tools:
        texts = [
            *{**manifest.headers, **tool.headers}.values(),
            *{**manifest.query, **tool.query}.values(),
            *_auth_texts(tool.auth or manifest.auth),
        ]
        for name in dict.fromkeys(name for text in texts for name in env_names(text)):
            users.setdefault(name, []).append(tool.name)
    return users


def _auth_texts(auth: Any) -> list[str]:
    if isinstance(auth, BearerAuth):
        return [auth.token]
    if isinstance(auth, BasicAuth):
        return [auth.username, auth.password]
    if isinstance(auth, ApiKeyAuth):
        return [auth.key]
    return []


def _env_references(manifest: HttpManifest) -> set[str]:
    texts: list[str] = [*manifest.headers.values(), *manifest.query.values()]
    auths: list[Any] = [manifest.auth]
    for tool in manifest.tools:
        texts.extend((*tool.headers.values(), *tool.query.values()))
        auths.append(tool.auth)
    for auth in auths:
        if isinstance(auth, BearerAuth):
            texts.append(auth.token)
        elif isinstance(auth, BasicAuth):
            texts.extend((auth.username, auth.password))
        elif isinstance(auth, ApiKeyAuth):
            texts.append(auth.key)
    return {name for text in texts for name in env_names(text)}
