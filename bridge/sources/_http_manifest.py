"""The file format of declarative HTTP tools: pydantic models of a YAML or JSON manifest.

    base_url: http://intranet.example:8080/api   # tool URLs that start with / are appended
    allow_hosts: [intranet.example:8080]          # default: the hosts named in this file
    headers: {X-Client: toolbridge}               # sent by every tool; ${ENV} allowed
    query: {api_key: "${INTRANET_API_KEY}"}       # added to every query string; ${ENV} allowed
    auth: {type: bearer, token: "${INTRANET_TOKEN}"}
    timeout: 30
    tools:
      - name: get_employee
        description: One employee of the directory, by id.
        method: GET
        url: /employees/{employee_id}
        parameters:                               # JSON Schema of the arguments object
          type: object
          properties:
            employee_id: {type: integer}
            fields: {type: string, description: Comma-separated fields to return.}
          required: [employee_id]
        locations: {fields: query}                # default: path if in the URL, else query
                                                  # (GET/HEAD/DELETE) or JSON body field
        response: {select: data.employee, max_chars: 4000}

Secrets are never written in a manifest: auth secrets must be `${ENV_NAME}` references,
resolved when a call is made (see `bridge.sources.http_tools`). Credentials are never the
model's to fill in: a header, query or cookie parameter whose name looks like one (see
`bridge.sources._credentials`) is refused, with the `headers:`/`query:` entry to use instead.
"""

from __future__ import annotations

import functools
import json
import re
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from bridge.sources._credentials import env_name, looks_like_credential, manifest_entry
from bridge.tools._describe import NAME_RULE

__all__ = [
    "ENV_REFERENCE",
    "ApiKeyAuth",
    "Auth",
    "BasicAuth",
    "BearerAuth",
    "HttpManifest",
    "HttpTool",
    "Location",
    "NoAuth",
    "ResponseSpec",
    "default_location",
    "env_names",
    "url_placeholders",
]

ENV_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
"""A `${NAME}` reference to an environment variable."""
_PLACEHOLDER = re.compile(r"\{([^{}/]+)\}")
_HOST_ENTRY = re.compile(r"(\*\.)?[A-Za-z0-9.\-_\[\]:]+")
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD")
_BODYLESS = ("GET", "HEAD")


def env_names(text: str) -> list[str]:
    """The environment variables `text` refers to with `${NAME}`."""
    return ENV_REFERENCE.findall(text)


def url_placeholders(url: str) -> list[str]:
    """The `{name}` placeholders of a URL template, in order."""
    return _PLACEHOLDER.findall(url)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


def _secret(value: str) -> str:
    if not ENV_REFERENCE.search(value):
        raise ValueError(
            "must be a ${ENV_NAME} reference to an environment variable, not the secret itself "
            "(secrets are never written in manifest files)"
        )
    return value


class BearerAuth(_Model):
    """``Authorization: Bearer <token>``."""

    type: Literal["bearer"]
    token: str
    """A `${ENV_NAME}` reference."""

    _check = field_validator("token")(_secret)


class BasicAuth(_Model):
    """HTTP basic authentication."""

    type: Literal["basic"]
    username: str
    """Literal or a `${ENV_NAME}` reference."""
    password: str
    """A `${ENV_NAME}` reference."""

    _check = field_validator("password")(_secret)


class ApiKeyAuth(_Model):
    """An API key sent in a request header."""

    type: Literal["api_key"]
    header: str = "X-API-Key"
    key: str
    """A `${ENV_NAME}` reference."""

    _check = field_validator("key")(_secret)


class NoAuth(_Model):
    """No authentication (a tool's way of opting out of the manifest's `auth`)."""

    type: Literal["none"]


Auth = Annotated[BearerAuth | BasicAuth | ApiKeyAuth | NoAuth, Field(discriminator="type")]


class Location(_Model):
    """Where one argument goes in the request."""

    in_: Literal["path", "query", "header", "cookie", "body", "whole_body"] = Field(alias="in")
    """`body` is a field of the JSON body object; `whole_body` is the whole JSON body."""
    name: str | None = None
    """The name on the wire (query key, header, body field); default: the argument's name."""

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        return {"in": data} if isinstance(data, str) else data

    @classmethod
    def at(cls, where: str, name: str | None = None) -> Location:
        """A location by its `in` value (``Location.at("query", "q")``)."""
        return cls.model_validate({"in": where, "name": name})


class ResponseSpec(_Model):
    """What the model reads of the response."""

    select: str | None = Field(default=None, min_length=1)
    """A field path into the JSON response: ``data.items``, ``items[0].name``."""
    max_chars: int | None = Field(default=None, ge=100)
    """Longer outputs are cut with a marker (default: the manifest's `max_output_chars`)."""


def default_location(name: str, tool: HttpTool) -> Location:
    """Where an argument without an entry in `locations` goes."""
    if name in url_placeholders(tool.url):
        return Location.at("path")
    if tool.method in ("GET", "HEAD", "DELETE"):
        return Location.at("query")
    return Location.at("body")


def _plain(value: Any, depth: int) -> bool:
    """Plain JSON data, which a JSON text stands for exactly (no tuples, no subclasses)."""
    kind = type(value)
    if kind is dict:
        return depth < 100 and all(
            type(k) is str and _plain(v, depth + 1) for k, v in value.items()
        )
    if kind is list:
        return depth < 100 and all(_plain(v, depth + 1) for v in value)
    return kind in (str, int, float, bool) or value is None


@functools.lru_cache(maxsize=1024)
def _schema_problem(schema: Any) -> str | None:
    """Why a JSON Schema (given as its JSON text) is not valid, or None. Checked once per
    text: checking against the meta-schema takes milliseconds, and the operations of one API
    document repeat the same few argument schemas."""
    try:
        Draft202012Validator.check_schema(json.loads(schema) if isinstance(schema, str) else schema)
    except SchemaError as exc:
        where = "/".join(map(str, exc.path)) or "top level"
        return f"is not a valid JSON Schema at {where}: {exc.message}"
    return None


class HttpTool(_Model):
    """One HTTP endpoint, described as a tool."""

    name: str = Field(pattern=NAME_RULE)
    description: str = ""
    method: Literal["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD"] = "GET"
    url: str = Field(min_length=1)
    """Absolute (``http(s)://...``) or a path appended to `base_url`; ``{arg}`` placeholders."""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    """JSON Schema of the arguments object."""
    locations: dict[str, Location] = Field(default_factory=dict)
    headers: dict[str, str] = Field(default_factory=dict)
    query: dict[str, str] = Field(default_factory=dict)
    """Query parameters sent with every call (`${ENV}` allowed): a key an API wants there."""
    auth: Auth | None = None
    """None uses the manifest's auth."""
    timeout: float | None = Field(default=None, gt=0, le=3600)
    response: ResponseSpec = Field(default_factory=ResponseSpec)
    confirm: bool = False
    """A person must approve each call."""

    @field_validator("method", mode="before")
    @classmethod
    def _upper(cls, value: Any) -> Any:
        return value.upper() if isinstance(value, str) else value

    @field_validator("parameters")
    @classmethod
    def _schema(cls, value: dict[str, Any]) -> dict[str, Any]:
        if _plain(value, 0):
            problem = _schema_problem(json.dumps(value))
        else:
            problem = _schema_problem.__wrapped__(value)
        if problem is not None:
            raise ValueError(problem)
        if value.get("type") != "object":
            raise ValueError('must be a JSON Schema with "type": "object" (the arguments object)')
        return value

    @model_validator(mode="after")
    def _consistent(self) -> HttpTool:
        props = self.parameters.get("properties", {})
        required = set(self.parameters.get("required", []))
        for name in url_placeholders(self.url):
            if name not in props:
                raise ValueError(
                    f"url placeholder {{{name}}} has no parameter {name!r} in parameters.properties"
                )
            if name not in required:
                raise ValueError(f"path parameter {name!r} must be listed in parameters.required")
            where = self.locations.get(name)
            if where is not None and where.in_ != "path":
                raise ValueError(
                    f"locations.{name}: {name!r} fills the url placeholder {{{name}}}, so it "
                    f"goes in 'path', not {where.in_!r}"
                )
        whole = []
        for name, where in self.locations.items():
            if name not in props:
                raise ValueError(
                    f"locations.{name}: no parameter {name!r} in parameters.properties "
                    f"(parameters: {', '.join(props) or 'none'})"
                )
            if where.in_ == "path" and (
                where.name not in (None, name) or name not in url_placeholders(self.url)
            ):
                raise ValueError(
                    f"locations.{name}: in 'path' needs a {{{name}}} placeholder in url (a path "
                    "parameter is named like its placeholder)"
                )
            if where.in_ in ("body", "whole_body") and self.method in _BODYLESS:
                raise ValueError(
                    f"locations.{name}: a {self.method} request has no body; use 'query' instead"
                )
            if where.in_ == "whole_body":
                whole.append(name)
        _refuse_credential_parameters(self)
        body = [
            n for n in props if (self.locations.get(n) or default_location(n, self)).in_ == "body"
        ]
        if whole and (len(whole) > 1 or body):
            raise ValueError(
                "at most one parameter can be the whole_body, and then no other parameter can "
                "be a body field"
            )
        return self


class HttpManifest(_Model):
    """A manifest file: shared settings and one or more tools."""

    version: Literal[1] = 1
    base_url: str | None = None
    allow_hosts: list[str] | None = None
    """Hosts (``host``, ``host:port``, ``*.domain``) requests may go to; None: the hosts named
    by `base_url` and the tools' absolute URLs."""
    headers: dict[str, str] = Field(default_factory=dict)
    query: dict[str, str] = Field(default_factory=dict)
    """Query parameters sent by every tool (`${ENV}` allowed)."""
    auth: Auth | None = None
    timeout: float = Field(default=30.0, gt=0, le=3600)
    max_output_chars: int = Field(default=20_000, ge=100)
    max_response_bytes: int = Field(default=2_000_000, ge=1_000)
    """Bytes of a response body read at most (the rest is dropped with a note)."""
    tools: list[HttpTool] = Field(min_length=1)

    @field_validator("base_url")
    @classmethod
    def _base(cls, value: str | None) -> str | None:
        if value is not None:
            _check_http_url(value)
        return value

    @field_validator("allow_hosts")
    @classmethod
    def _hosts(cls, value: list[str] | None) -> list[str] | None:
        for entry in value or []:
            if not _HOST_ENTRY.fullmatch(entry):
                raise ValueError(
                    f"{entry!r} is not a host: write 'host', 'host:port' or '*.domain' "
                    "(no scheme, no path)"
                )
        return value

    @model_validator(mode="after")
    def _urls(self) -> HttpManifest:
        seen: set[str] = set()
        for index, tool in enumerate(self.tools):
            if tool.name in seen:
                raise ValueError(f"tools[{index}]: the tool name {tool.name!r} is used twice")
            seen.add(tool.name)
            if tool.url.startswith("/"):
                if self.base_url is None:
                    raise ValueError(
                        f"tools[{index}] ({tool.name}): url {tool.url!r} is a path, so the "
                        "manifest needs a base_url (or write an absolute http(s):// URL)"
                    )
            else:
                try:
                    _check_http_url(tool.url)
                except ValueError as exc:
                    raise ValueError(f"tools[{index}] ({tool.name}): url {exc}") from None
        return self


def _refuse_credential_parameters(tool: HttpTool) -> None:
    """A credential among the model's arguments is refused, with the entry to write instead."""
    found = []
    for name in tool.parameters.get("properties", {}):
        where = tool.locations.get(name) or default_location(name, tool)
        wire = where.name or name
        if where.in_ in ("header", "query", "cookie") and looks_like_credential(wire):
            found.append((name, where.in_, wire))
    if not found:
        return
    problems = "; ".join(
        f"parameters.properties.{name}: the {place} {wire!r} looks like a credential; remove "
        f"it from parameters and write {manifest_entry(place, wire)}"
        for name, place, wire in found
    )
    envs = ", ".join(dict.fromkeys(env_name(wire) for _, _, wire in found))
    raise ValueError(
        f"{problems}. The model must never fill in a credential (whoever steers the agent "
        f"could read or replace it): it is sent from the environment instead, so set {envs} "
        "where toolbridge runs (or use an auth: entry). Pagination cursors such as page_token "
        "or next_page_token are not credentials."
    )


def _check_http_url(value: str) -> None:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(
            f"{value!r} must be an absolute http:// or https:// URL (or, for a tool, a path "
            "starting with /)"
        )
