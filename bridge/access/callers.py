"""The callers a door lets in: a TOML caller file (roles, callers, their keys and rate limits),
the older ``name: key`` key file, and ``--api-key``.

    [roles.support]
    permissions = ["converse"]          # converse, read_all, call_tools, approve, observe, admin
    tools = ["crm_*", "lookup_order"]   # names, globs, or "source:NAME" for a whole source

    [callers.alice]
    key_sha256 = "9f86d0..."            # printf %s "$KEY" | sha256sum
    roles = ["support"]
    rate = { messages = "30/minute", tool_calls = "120/minute" }

    [callers.bot]
    key = "${BOT_KEY}"                  # read from the environment (the file holds no secret)
    roles = ["admin"]                   # built in: every permission and every tool

Keys are kept only as SHA-256 digests and compared in constant time. `Callers.reload` reads
the files again (the daemon calls it on SIGHUP); a broken file then keeps the callers in use
and logs what is wrong, with the file and line, never a key.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import logging
import os
import re
import sys
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from bridge.access.principal import (
    ALL_TOOLS,
    Permission,
    Principal,
    Rate,
    RateLimits,
    RoleGrant,
    ToolPatterns,
)
from bridge.errors import ConfigurationError, register_secret

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 (mypy checks as 3.10 but runs where tomli may be absent)
    import tomli as tomllib  # type: ignore[import-not-found,unused-ignore]

__all__ = [
    "ADMIN_ROLE",
    "CALLER_NAME_PATTERN",
    "DEFAULT_CALLER",
    "KEY_NAME_PATTERN",
    "MIN_KEY_CHARS",
    "CallerFileError",
    "Callers",
    "parse_callers",
    "parse_key_file",
    "parse_rate",
]

logger = logging.getLogger(__name__)

DEFAULT_CALLER = "default"
"""The name of the caller whose key is given with ``--api-key``."""
ADMIN_ROLE = "admin"
"""The built-in role (every permission, every tool) of key-file callers and ``--api-key``;
a caller file may name it without defining it."""
CALLER_NAME_PATTERN = re.compile(r"^[A-Za-z0-9_.@-]{1,64}$")
"""Caller and role names of a caller file (``@`` for identity-provider names like e-mails)."""
KEY_NAME_PATTERN = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
"""Names in a ``name: key`` key file."""
MIN_KEY_CHARS = 16
"""The shortest key accepted (printable ASCII without spaces)."""

_NAMES = "1 to 64 letters, digits, '_', '.', '@' or '-'"
_HEX_DIGEST = re.compile(r"^[0-9a-fA-F]{64}$")
_NO_KEY = bytes(32)
"""Compared against for a caller without a key, so every caller costs the same time."""
_ENV_REFERENCE = re.compile(r"^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$")
_RATE = re.compile(r"^\s*(\d+)\s*/\s*(second|minute|hour|day)\s*$")
_UNITS = {"second": 1.0, "minute": 60.0, "hour": 3600.0, "day": 86400.0}
_PERMISSIONS = ", ".join(p.value for p in Permission)
# A line a TOML file has and a `name: key` file has not: a table header or `key = value`.
_TOML_LINE = re.compile(r"""^\s*(\[|[A-Za-z0-9_."'-]+\s*=)""")


class CallerFileError(ConfigurationError):
    """A caller or key file cannot be read or is wrong; the message names the file and each
    bad line (what is wrong and what was expected), never a key."""


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8")).digest()


def _usable_key(key: str) -> bool:
    # Printable ASCII without spaces: HTTP clients send the key as an ASCII header value, so
    # any other character makes a key nobody can present.
    return len(key) >= MIN_KEY_CHARS and all("!" <= c <= "~" for c in key)


def parse_rate(text: str) -> Rate:
    """A rate written ``N/second``, ``N/minute``, ``N/hour`` or ``N/day`` (N at least 1).

    Raises:
        ValueError: saying what was expected.
    """
    match = _RATE.fullmatch(text) if isinstance(text, str) else None
    if match is None or int(match.group(1)) < 1:
        raise ValueError(
            f"the rate {text!r} is not N/second, N/minute, N/hour or N/day "
            'with N a whole number of at least 1 (e.g. "30/minute")'
        )
    return Rate(int(match.group(1)), _UNITS[match.group(2)])


# -- the legacy key file -------------------------------------------------------------------


def parse_key_file(text: str, *, source: str = "the key file") -> dict[str, bytes]:
    """The names and key digests of a ``name: key`` key file's text.

    Raises:
        CallerFileError: naming every bad line (its number and what is wrong; never the key).
    """
    keys: dict[str, bytes] = {}
    seen: dict[bytes, int] = {}
    where: dict[str, int] = {}
    problems: list[str] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, colon, key = line.partition(":")
        name, key = name.strip(), key.strip()
        if not colon:
            problems.append(f"line {number}: expected 'name: key'")
            continue
        if not KEY_NAME_PATTERN.fullmatch(name):
            problems.append(
                f"line {number}: the name {name[:64]!r} is not 1 to 64 letters, digits, '_', "
                "'.' or '-'"
            )
            continue
        if not _usable_key(key):
            problems.append(
                f"line {number}: the key of {name!r} must be at least {MIN_KEY_CHARS} "
                "printable ASCII characters without spaces (e.g. from `openssl rand -hex 24`)"
            )
            continue
        digest = _digest(key)
        register_secret(key)  # masked wherever it might show (logs, events, responses)
        if name in where:
            problems.append(f"line {number}: the name {name!r} is used on line {where[name]} too")
            continue
        if digest is not None and digest in seen:
            problems.append(
                f"line {number}: the key of {name!r} is used on line {seen[digest]} too"
            )
            continue
        keys[name], where[name], seen[digest] = digest, number, number
    if problems:
        raise CallerFileError(f"{source}: " + "; ".join(problems))
    if not keys:
        raise CallerFileError(f"{source}: no keys; expected one 'name: key' line per key")
    return keys


def _looks_like_key_file(text: str) -> bool:
    lines = [
        line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")
    ]
    return bool(lines) and not any(_TOML_LINE.match(line) for line in lines)


# -- the caller file -----------------------------------------------------------------------


class _Rates(BaseModel):
    model_config = ConfigDict(extra="forbid")

    messages: str | None = None
    tool_calls: str | None = None

    @field_validator("messages", "tool_calls")
    @classmethod
    def _rate(cls, value: str | None) -> str | None:
        if value is not None:
            parse_rate(value)
        return value

    def limits(self) -> RateLimits:
        return RateLimits(
            messages=parse_rate(self.messages) if self.messages is not None else None,
            tool_calls=parse_rate(self.tool_calls) if self.tool_calls is not None else None,
        )


class _Role(BaseModel):
    model_config = ConfigDict(extra="forbid")

    permissions: list[str] = Field(default_factory=list)
    tools: list[str] | None = None

    @field_validator("permissions")
    @classmethod
    def _permissions(cls, values: list[str]) -> list[str]:
        known = {p.value for p in Permission}
        unknown = [value for value in values if value not in known]
        if unknown:
            listed = ", ".join(repr(value) for value in unknown)
            raise ValueError(f"unknown permission {listed}; expected some of: {_PERMISSIONS}")
        return values

    @field_validator("tools")
    @classmethod
    def _tools(cls, values: list[str] | None) -> list[str] | None:
        for value in values or ():
            if not value.strip() or value.strip() == "source:":
                raise ValueError(
                    f"the tool pattern {value!r} is empty; expected a tool name, a glob "
                    '("crm_*") or "source:NAME"'
                )
        return values

    def permission_set(self) -> frozenset[Permission]:
        return frozenset(Permission(value) for value in self.permissions)

    def patterns(self) -> tuple[str, ...]:
        if self.tools is not None:
            return tuple(self.tools)
        # Absent: every tool for a role with `admin`, none otherwise.
        return ("*",) if Permission.ADMIN.value in self.permissions else ()


class _Caller(BaseModel):
    model_config = ConfigDict(extra="forbid")

    key_sha256: str | None = None
    key: str | None = None
    roles: list[str]
    rate: _Rates | None = None

    @field_validator("key_sha256")
    @classmethod
    def _hex(cls, value: str | None) -> str | None:
        if value is not None and not _HEX_DIGEST.fullmatch(value):
            raise ValueError(
                f"not a SHA-256 digest ({len(value)} characters); expected 64 hex digits, "
                'as printed by: printf %s "$KEY" | sha256sum'
            )
        return value

    @field_validator("key")
    @classmethod
    def _reference(cls, value: str | None) -> str | None:
        # Never echo the value: it may be a key written where a reference belongs.
        if value is not None and not _ENV_REFERENCE.fullmatch(value):
            raise ValueError(
                "a literal key is refused: the caller file must not hold secrets; expected "
                'key = "${ENV_VAR}" (an environment variable holding the key) or '
                'key_sha256 = "<64 hex digits>"'
            )
        return value

    @field_validator("roles")
    @classmethod
    def _some_roles(cls, values: list[str]) -> list[str]:
        if not values:
            raise ValueError('no roles; expected at least one, e.g. roles = ["support"]')
        return values

    @model_validator(mode="after")
    def _one_key(self) -> _Caller:
        # Neither: a caller only an identity provider's token names (its roles and rates
        # come from here).
        if self.key_sha256 is not None and self.key is not None:
            raise ValueError("both key_sha256 and key; expected one of them")
        return self


class _CallerFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    roles: dict[str, _Role] = Field(default_factory=dict)
    callers: dict[str, _Caller] = Field(default_factory=dict)


def _key_pattern(name: str) -> str:
    escaped = re.escape(name)
    return rf"""(?:"{escaped}"|'{escaped}'|{escaped})"""


def _line_of(text: str, table: str, name: str | None = None, key: str | None = None) -> int | None:
    """The line of ``[table.name]`` (or of `key` inside it), or of ``name = ...`` under
    ``[table]``; None when it cannot be found."""
    lines = text.splitlines()
    if name is None:
        header = re.compile(rf"^\s*\[\s*{re.escape(table)}\s*\]")
    else:
        header = re.compile(rf"^\s*\[\s*{re.escape(table)}\s*\.\s*{_key_pattern(name)}\s*[\].]")
    for index, line in enumerate(lines):
        if header.match(line):
            if key is not None:
                field = re.compile(rf"^\s*{_key_pattern(key)}\s*[=.]")
                for offset, inner in enumerate(lines[index + 1 :], start=index + 2):
                    if inner.lstrip().startswith("["):
                        break
                    if field.match(inner):
                        return offset
            return index + 1
    if name is not None:
        # `name = {...}` under `[table]`, or a dotted `table.name.key = ...`
        dotted = re.compile(rf"^\s*(?:{re.escape(table)}\s*\.\s*)?{_key_pattern(name)}\s*[=.]")
        for index, line in enumerate(lines):
            if dotted.match(line):
                return index + 1
    return None


def _where(text: str, loc: tuple[int | str, ...]) -> str:
    """``line N: [callers.alice] roles`` for a location in the file."""
    parts = [str(part) for part in loc]
    line: int | None = None
    label = ""
    if len(parts) >= 2 and parts[0] in ("roles", "callers"):
        line = _line_of(text, parts[0], parts[1], parts[2] if len(parts) > 2 else None)
        label = f"[{parts[0]}.{parts[1]}]"
        rest = [part for part in parts[2:] if not part.isdigit()]
        if rest:
            label += " " + ".".join(rest)
    elif parts:
        line = _line_of(text, parts[0])
        label = f"[{parts[0]}]"
    prefix = f"line {line}: " if line is not None else ""
    return prefix + label


def _describe(text: str, exc: ValidationError) -> list[str]:
    problems = []
    for error in exc.errors():
        loc = tuple(error["loc"])
        kind = error["type"]
        if kind == "extra_forbidden":
            parent = loc[:-1]
            if not parent:
                expected = "[roles.NAME] and [callers.NAME] tables"
            elif len(parent) == 2 and parent[0] == "roles":
                expected = "permissions, tools"
            elif len(parent) == 2 and parent[0] == "callers":
                expected = "key_sha256 or key, roles, rate"
            else:
                expected = "messages, tool_calls"
            where = _where(text, parent) if parent else ""
            message = f"unknown setting {str(loc[-1])!r}; expected {expected}"
            problems.append(f"{where}: {message}" if where else message)
            continue
        if kind == "missing":
            message = f"missing {str(loc[-1])!r}"
            if loc[-1] == "roles":
                message += ', expected e.g. roles = ["support"]'
            problems.append(f"{_where(text, loc[:-1])}: {message}")
            continue
        message = str(error["msg"]).removeprefix("Value error, ")
        if kind != "value_error":
            message = f"{message} (got {type(error.get('input')).__name__})"
        problems.append(f"{_where(text, loc)}: {message}")
    return problems


@dataclass(frozen=True)
class _Entry:
    principal: Principal
    digest: bytes | None
    """None for a caller only an identity provider's token names."""
    origin: str
    """Where it was written (``file: line N``), for duplicate-key messages."""


def _builtin_roles() -> dict[str, _Role]:
    return {ADMIN_ROLE: _Role(permissions=[Permission.ADMIN.value])}


def _union(patterns: Iterable[tuple[str, ...]]) -> ToolPatterns:
    merged: list[str] = []
    for group in patterns:
        for pattern in group:
            if pattern not in merged:
                merged.append(pattern)
    return ALL_TOOLS if "*" in merged else ToolPatterns(tuple(merged))


def _entries(text: str, *, source: str, environ: Mapping[str, str] | None = None) -> list[_Entry]:
    environ = os.environ if environ is None else environ
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise CallerFileError(f"{source}: not valid TOML: {exc}") from None
    try:
        model = _CallerFile.model_validate(data)
    except ValidationError as exc:
        raise CallerFileError(f"{source}: " + "; ".join(_describe(text, exc))) from None
    problems: list[str] = []
    roles = {**_builtin_roles(), **model.roles}
    for name in model.roles:
        if not CALLER_NAME_PATTERN.fullmatch(name):
            where = _where(text, ("roles", name))
            problems.append(f"{where}: the role name {name[:64]!r} is not {_NAMES}")
    entries: list[_Entry] = []
    seen: dict[bytes, str] = {}
    for name, caller in model.callers.items():
        where = _where(text, ("callers", name))
        line = _line_of(text, "callers", name)
        origin = f"line {line}" if line is not None else f"[callers.{name}]"
        if not CALLER_NAME_PATTERN.fullmatch(name):
            problems.append(f"{where}: the caller name {name[:64]!r} is not {_NAMES}")
            continue
        unknown = [role for role in caller.roles if role not in roles]
        if unknown:
            listed = ", ".join(repr(role) for role in unknown)
            known = ", ".join(sorted(roles))
            problems.append(
                f"{_where(text, ('callers', name, 'roles'))}: unknown role {listed}; "
                f"expected one of the [roles.NAME] tables: {known}"
            )
            continue
        digest: bytes | None
        if caller.key_sha256 is not None:
            digest = bytes.fromhex(caller.key_sha256)
        elif caller.key is None:
            digest = None  # named only by an identity provider's token
        else:
            reference = _ENV_REFERENCE.fullmatch(caller.key or "")
            assert reference is not None  # checked by the model
            variable = reference.group(1)
            key = environ.get(variable)
            at = _where(text, ("callers", name, "key"))
            if not key:
                problems.append(
                    f"{at}: the environment variable {variable} is not set; expected it to "
                    f"hold the key of {name!r}"
                )
                continue
            register_secret(key)  # masked wherever it might show (logs, events, responses)
            if not _usable_key(key):
                problems.append(
                    f"{at}: the key in the environment variable {variable} must be at least "
                    f"{MIN_KEY_CHARS} printable ASCII characters without spaces"
                )
                continue
            digest = _digest(key)
        if digest in seen:
            problems.append(
                f"{where}: the key of {name!r} is the key of {seen[digest]} too; every caller "
                "needs its own key"
            )
            continue
        if digest is not None:
            seen[digest] = f"{name!r} ({origin})"
        chosen = [roles[role] for role in caller.roles]
        principal = Principal(
            name=name,
            roles=frozenset(caller.roles),
            permissions=frozenset().union(*(role.permission_set() for role in chosen)),
            tools=_union(role.patterns() for role in chosen),
            via="key",
            rates=caller.rate.limits() if caller.rate is not None else RateLimits(),
        )
        entries.append(_Entry(principal, digest, f"{source}, {origin}"))
    if problems:
        raise CallerFileError(f"{source}: " + "; ".join(problems))
    if not entries:
        raise CallerFileError(
            f"{source}: no callers; expected at least one [callers.NAME] table with a key and roles"
        )
    return entries


def _everyone(name: str) -> Principal:
    return Principal(
        name=name,
        roles=frozenset({ADMIN_ROLE}),
        permissions=frozenset(Permission),
        tools=ALL_TOOLS,
        via="key",
    )


def parse_callers(
    text: str, *, source: str = "the caller file", environ: Mapping[str, str] | None = None
) -> dict[str, Principal]:
    """The callers a caller file's text names (a TOML caller file, or a ``name: key`` key
    file whose callers hold every permission), by name.

    Args:
        text: The file's text.
        source: What to call it in messages (its path).
        environ: Where ``key = "${VAR}"`` is read (the process environment by default).

    Raises:
        CallerFileError: naming the file and every bad line, never a key.
    """
    return {entry.principal.name: entry.principal for entry in _parse(text, source, environ)}


def parse_roles(text: str) -> dict[str, RoleGrant]:
    """The roles of a caller file's text (checked already), with the built-in ``admin``; only
    ``admin`` for a ``name: key`` key file."""
    roles = dict(_builtin_roles())
    # A key file is not TOML: its callers are admins.
    with contextlib.suppress(tomllib.TOMLDecodeError, ValidationError):
        roles.update(_CallerFile.model_validate(tomllib.loads(text)).roles)
    return {
        name: RoleGrant(role.permission_set(), ToolPatterns(role.patterns()))
        for name, role in roles.items()
    }


def _parse(text: str, source: str, environ: Mapping[str, str] | None = None) -> list[_Entry]:
    try:
        tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        if _looks_like_key_file(text):
            return _legacy(text, source)
    return _entries(text, source=source, environ=environ)


def _legacy(text: str, source: str) -> list[_Entry]:
    named = parse_key_file(text, source=source)
    return [_Entry(_everyone(name), digest, source) for name, digest in named.items()]


def _read(path: Path, what: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise CallerFileError(f"{path}: cannot read the {what}: {reason}") from None


class Callers:
    """The callers a door lets in, by key.

    Args:
        callers_file: A TOML caller file (or a ``name: key`` key file), if any.
        api_key: The ``--api-key`` key (the caller ``default``, every permission), if any.
        api_key_file: A ``name: key`` key file (``--api-key-file``; every permission), if any.
        environ: Where ``key = "${VAR}"`` is read (the process environment by default).

    Raises:
        CallerFileError: a file cannot be read or is wrong, or two callers share a name or key.
    """

    def __init__(
        self,
        callers_file: str | Path | None = None,
        *,
        api_key: str | None = None,
        api_key_file: str | Path | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.callers_file = Path(callers_file) if callers_file is not None else None
        self.api_key_file = Path(api_key_file) if api_key_file is not None else None
        self._environ = environ
        self._default: _Entry | None = None
        if api_key is not None:
            register_secret(api_key)
            self._default = _Entry(_everyone(DEFAULT_CALLER), _digest(api_key), "--api-key")
        self._lock = threading.Lock()
        self._entries: tuple[_Entry, ...] = ()
        self._by_name: dict[str, Principal] = {}
        self._roles: dict[str, RoleGrant] = {}
        self._install(self._load())

    @classmethod
    def from_files(
        cls,
        callers_file: str | Path | None = None,
        api_key: str | None = None,
        api_key_file: str | Path | None = None,
    ) -> Callers | None:
        """The callers these options name; None when none is given (no credentials needed)."""
        if callers_file is None and api_key is None and api_key_file is None:
            return None
        return cls(callers_file, api_key=api_key, api_key_file=api_key_file)

    def __repr__(self) -> str:
        return f"Callers(names={self.names()})"

    def __len__(self) -> int:
        return len(self._entries)

    def _load(self) -> tuple[_Entry, ...]:
        entries: list[_Entry] = [self._default] if self._default is not None else []
        if self.api_key_file is not None:
            text = _read(self.api_key_file, "key file")
            entries += _legacy(text, str(self.api_key_file))
        if self.callers_file is not None:
            text = _read(self.callers_file, "caller file")
            entries += _parse(text, str(self.callers_file), self._environ)
        names: dict[str, _Entry] = {}
        keys: dict[bytes, _Entry] = {}
        for entry in entries:
            name = entry.principal.name
            if name in names:
                raise CallerFileError(
                    f"{entry.origin}: the caller {name!r} is named in {names[name].origin} "
                    "too; rename one of them"
                )
            if entry.digest is not None and entry.digest in keys:
                raise CallerFileError(
                    f"{entry.origin}: the key of {name!r} is the key of "
                    f"{keys[entry.digest].principal.name!r} ({keys[entry.digest].origin}) too; "
                    "every caller needs its own key"
                )
            names[name] = entry
            if entry.digest is not None:
                keys[entry.digest] = entry
        return tuple(entries)

    def _install(self, entries: tuple[_Entry, ...]) -> None:
        by_name = {entry.principal.name: entry.principal for entry in entries}
        text = _read(self.callers_file, "caller file") if self.callers_file is not None else ""
        roles = parse_roles(text)
        with self._lock:
            self._entries, self._by_name, self._roles = entries, by_name, roles

    def roles(self) -> dict[str, RoleGrant]:
        """The caller file's roles (with the built-in ``admin``), by name: what an identity
        provider's token grants through its roles claim."""
        return self._roles

    def names(self) -> list[str]:
        """The names of the callers in use, in file order (never a key)."""
        return [entry.principal.name for entry in self._entries]

    def get(self, name: str) -> Principal | None:
        """The caller named `name` (its roles, permissions, tools and rates), or None.

        For a caller an identity provider names that the caller file names too: its roles
        come from the file (``dataclasses.replace(principal, via="oidc")``).
        """
        return self._by_name.get(name)

    def identify(self, given: str) -> Principal | None:
        """The caller whose key `given` is, or None.

        Every key is compared, each in constant time, so the time taken tells nothing about
        which key (or how much of one) matched.
        """
        digest = _digest(given)
        found: Principal | None = None
        for entry in self._entries:
            if hmac.compare_digest(digest, entry.digest or _NO_KEY) and entry.digest:
                found = entry.principal
        return replace(found, via="key") if found is not None else None

    def reload(self) -> bool:
        """Read the files again; on any error keep the callers in use and log one line naming
        the file and line. True if reloaded."""
        if self.callers_file is None and self.api_key_file is None:
            return False
        try:
            entries = self._load()
        except CallerFileError as exc:
            logger.error("the callers were not reloaded, the previous ones stay: %s", exc)
            return False
        self._install(entries)
        logger.info("callers reloaded: %s", ", ".join(self.names()))
        return True
