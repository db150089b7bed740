"""The daemon's door: who a request's credentials name, what that caller may do, and its rate
limits. The one place the daemon turns an ``Authorization`` header into a `Principal`.

    open_door(settings)      the door `--api-key`, `--api-key-file`, `--callers` and the
                             identity provider's flags configure (every request is `ANONYMOUS`,
                             with every permission, when none is given)
    door.authenticate(h)     Principal, or UnauthenticatedError (401)
    door.check(p, perm)      ForbiddenError (403)
    door.limit(p, kind)      RateLimitedError (429, retry_after)
    door.reload()            SIGHUP: read the callers and key files again; a broken one keeps
                             the callers in use

Legacy keys (``--api-key``, ``--api-key-file``) are callers with every permission and every
tool. A callers file and a key file may be given together; their names and keys must differ.

The callers file (TOML)::

    [roles.support]                         # a role: permissions and tools
    permissions = ["converse", "read_all"]
    tools = ["crm_*", "source:tickets"]     # absent: every tool for admin, none otherwise

    [callers.alice]
    key_sha256 = "3f9c..."                  # or key = "${ALICE_KEY}" (from the environment)
    roles = ["support"]                     # "admin" is built in: every permission and tool
    rate = { messages = "30/minute", tool_calls = "10/minute" }
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import math
import os
import re
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from bridge.access import (
    ALL_TOOLS,
    ANONYMOUS,
    Decides,
    ForbiddenError,
    Permission,
    Principal,
    Rate,
    RateLimitedError,
    RateLimits,
    Records,
    ToolPatterns,
    UnauthenticatedError,
)
from bridge.daemon.keys import ApiKeys, KeyFileError
from bridge.daemon.settings import MIN_API_KEY_CHARS, DaemonSettings, SettingsError
from bridge.errors import UsageError, register_secret
from bridge.journal.base import Journal

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib  # type: ignore[import-not-found,unused-ignore]

__all__ = [
    "CallersFileError",
    "DaemonDoor",
    "RateKind",
    "door_principal",
    "load_policy",
    "open_audit",
    "open_door",
    "reloadable",
    "requires_credentials",
]

logger = logging.getLogger(__name__)

RateKind = Literal["messages", "tool_calls"]
_CALLER_NAME = re.compile(r"^[A-Za-z0-9_.@-]{1,64}$")
_ENV_REFERENCE = re.compile(r"^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$")
_EVERYTHING = frozenset(Permission)
_CHALLENGE = 'Bearer realm="toolbridge"'


class CallersFileError(SettingsError):
    """The callers file cannot be read or says something wrong (each problem named)."""


class DaemonDoor(Protocol):
    """What the daemon asks of its door (`bridge.access.door.Door` has the same methods)."""

    def authenticate(self, authorization: str | None) -> Principal: ...

    def check(self, principal: Principal, permission: Permission) -> None: ...

    def check_tool(self, principal: Principal, name: str, source: str = "") -> None: ...

    def limit(self, principal: Principal, kind: RateKind) -> None: ...

    def reload(self) -> bool: ...


def open_door(settings: DaemonSettings) -> DaemonDoor:
    """The door `settings` configure.

    Raises:
        SettingsError: a callers or key file that cannot be read or has bad entries.
    """
    if settings.oidc_issuer is not None:
        raise UsageError(
            "--oidc-issuer: this daemon cannot check identity-provider tokens yet; use "
            "--callers or --api-key-file"
        )
    keys = ApiKeys.from_settings(settings)
    return _KeysDoor(keys, Path(settings.callers) if settings.callers else None)


def load_policy(settings: DaemonSettings) -> Decides | None:
    """The `--policy` file's policy (None without one).

    Raises:
        UsageError: the policy cannot be loaded.
    """
    if settings.policy is None:
        return None
    raise UsageError(
        f"--policy {settings.policy}: this daemon cannot load Cedar policies yet; start it "
        "without --policy"
    )


def open_audit(settings: DaemonSettings, journal: Journal) -> Records | None:
    """The audit record the daemon appends to (None: it keeps none)."""
    del settings, journal
    return None


def reloadable(door: DaemonDoor) -> bool:
    """Whether SIGHUP is the door's (it reloads the callers; a door without files to read
    answers False and keeps its callers)."""
    return requires_credentials(door)


@dataclass(frozen=True)
class _Caller:
    digest: bytes
    principal: Principal


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8")).digest()


def _rate(text: object, where: str) -> Rate:
    units = {"second": 1.0, "minute": 60.0, "hour": 3600.0, "day": 86400.0}
    if isinstance(text, str):
        count, slash, unit = text.partition("/")
        unit = unit.strip().removesuffix("s") if unit.strip() != "s" else "second"
        if slash and count.strip().isdigit() and int(count) > 0 and unit in units:
            return Rate(int(count), units[unit])
    raise CallersFileError(f"{where}: expected a rate like '30/minute', got {text!r}")


def _strings(value: object, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise CallersFileError(f"{where}: expected a list of strings")
    return tuple(value)


def parse_callers(text: str, source: str) -> list[_Caller]:
    """The callers of a callers file's text.

    Raises:
        CallersFileError: naming the first problem (never a key).
    """
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise CallersFileError(f"{source}: not TOML: {exc}") from None
    unknown = sorted(set(data) - {"roles", "callers"})
    if unknown:
        raise CallersFileError(f"{source}: unknown table(s) {', '.join(unknown)}")
    # The built-in role: every permission and every tool.
    roles: dict[str, tuple[frozenset[Permission], tuple[str, ...]]] = {
        "admin": (_EVERYTHING, ("*",))
    }
    for name, role in dict(data.get("roles", {})).items():
        where = f"{source}: roles.{name}"
        if not isinstance(role, dict) or sorted(set(role) - {"permissions", "tools"}):
            raise CallersFileError(f"{where}: expected a table of permissions and tools")
        try:
            permissions = frozenset(
                Permission(p) for p in _strings(role.get("permissions", []), where)
            )
        except ValueError as exc:
            raise CallersFileError(
                f"{where}: {exc}; the permissions are {', '.join(map(str, Permission))}"
            ) from None
        if "tools" in role:
            tools = _strings(role["tools"], f"{where}.tools")
        else:  # absent: every tool for a role with admin, none otherwise
            tools = ("*",) if Permission.ADMIN in permissions else ()
        roles[name] = (permissions, tools)
    callers: list[_Caller] = []
    seen: dict[bytes, str] = {}
    for name, entry in dict(data.get("callers", {})).items():
        where = f"{source}: callers.{name}"
        if not _CALLER_NAME.fullmatch(name):
            raise CallersFileError(
                f"{where}: a name is 1 to 64 letters, digits, '_', '.', '@' or '-'"
            )
        if not isinstance(entry, dict):
            raise CallersFileError(f"{where}: expected a table")
        extra = sorted(set(entry) - {"key", "key_sha256", "roles", "rate"})
        if extra:
            raise CallersFileError(f"{where}: unknown field(s) {', '.join(extra)}")
        digest = _key_digest(entry, where)
        if digest in seen:
            raise CallersFileError(f"{where}: the key of callers.{seen[digest]} too")
        seen[digest] = name
        role_names = _strings(entry.get("roles", []), f"{where}.roles")
        if not role_names:
            raise CallersFileError(f'{where}: no roles; expected e.g. roles = ["support"]')
        granted_all: set[Permission] = set()
        patterns: list[str] = []
        for role_name in role_names:
            if role_name not in roles:
                raise CallersFileError(f"{where}: no role {role_name!r}")
            granted, tools = roles[role_name]
            granted_all |= granted
            patterns += tools
        rate = entry.get("rate", {})
        if not isinstance(rate, dict) or sorted(set(rate) - {"messages", "tool_calls"}):
            raise CallersFileError(f"{where}.rate: expected {{ messages, tool_calls }}")
        rates = RateLimits(
            messages=_rate(rate["messages"], f"{where}.rate") if "messages" in rate else None,
            tool_calls=_rate(rate["tool_calls"], f"{where}.rate") if "tool_calls" in rate else None,
        )
        principal = Principal(
            name=name,
            roles=frozenset(role_names),
            permissions=frozenset(granted_all),
            tools=ToolPatterns(tuple(dict.fromkeys(patterns))),
            via="key",
            rates=rates,
        )
        callers.append(_Caller(digest, principal))
    if not callers:
        raise CallersFileError(f"{source}: no callers; expected [callers.NAME] tables")
    return callers


def _key_digest(entry: dict[str, Any], where: str) -> bytes:
    """A caller's key digest: ``key_sha256``, or the key in the environment variable that
    ``key = "${NAME}"`` names (a callers file holds no secret)."""
    if ("key" in entry) == ("key_sha256" in entry):
        raise CallersFileError(
            f'{where}: expected one of key_sha256 = "<64 hex digits>" or key = "${{ENV_VAR}}"'
        )
    if "key_sha256" in entry:
        try:
            digest = bytes.fromhex(str(entry["key_sha256"]))
        except ValueError:
            digest = b""
        if len(digest) != 32:
            raise CallersFileError(f"{where}: key_sha256 must be 64 hexadecimal digits")
        return digest
    reference = _ENV_REFERENCE.fullmatch(str(entry["key"]))
    if reference is None:
        raise CallersFileError(
            f'{where}: a literal key is refused; expected key = "${{ENV_VAR}}" or key_sha256'
        )
    key = os.environ.get(reference.group(1))
    if key is None or len(key) < MIN_API_KEY_CHARS:
        raise CallersFileError(
            f"{where}: the environment variable {reference.group(1)} must hold a key of at "
            f"least {MIN_API_KEY_CHARS} characters"
        )
    register_secret(key)
    return _digest(key)


class _Window:
    """A sliding-window counter per (caller, kind)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: dict[tuple[str, str], deque[float]] = {}

    def take(self, who: str, kind: str, rate: Rate) -> int:
        """0 if one more event fits in `rate` (counted), else seconds until one does."""
        now = time.monotonic()
        with self._lock:
            times = self._seen.setdefault((who, kind), deque())
            while times and times[0] <= now - rate.seconds:
                times.popleft()
            if len(times) < rate.count:
                times.append(now)
                return 0
            return max(1, math.ceil(times[0] + rate.seconds - now))


class _KeysDoor:
    """The door over legacy keys and a callers file."""

    def __init__(self, keys: ApiKeys | None, callers_path: Path | None) -> None:
        self.keys = keys
        self.callers_path = callers_path
        self._lock = threading.Lock()
        self._window = _Window()
        self._callers: tuple[_Caller, ...] = self._load()

    @property
    def anonymous(self) -> bool:
        """True when no credentials are configured (every request is `ANONYMOUS`)."""
        return self.keys is None and self.callers_path is None

    def names(self) -> list[str]:
        return [c.principal.name for c in self._callers]

    def _load(self) -> tuple[_Caller, ...]:
        found: list[_Caller] = []
        if self.callers_path is not None:
            try:
                text = self.callers_path.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
                raise CallersFileError(
                    f"{self.callers_path}: cannot read the callers file: {reason}"
                ) from None
            found = parse_callers(text, str(self.callers_path))
        if self.keys is not None:
            named = {c.principal.name for c in found}
            digests = {c.digest for c in found}
            for name, digest in self.keys.digests().items():
                if name in named or digest in digests:
                    raise CallersFileError(
                        f"the key {name!r} of --api-key/--api-key-file is also a caller of "
                        f"{self.callers_path} (same name or same key); keep one"
                    )
                principal = Principal(
                    name=name,
                    roles=frozenset({"admin"}),
                    permissions=_EVERYTHING,
                    tools=ALL_TOOLS,
                    via="key",
                )
                found.append(_Caller(digest, principal))
        return tuple(found)

    def reload(self) -> bool:
        """Read the files again; on any error keep the callers in use (logged)."""
        if self.callers_path is None and (self.keys is None or self.keys.path is None):
            return False
        with self._lock:
            if self.keys is not None and self.keys.path is not None and not self.keys.reload():
                return False
            try:
                callers = self._load()
            except (CallersFileError, KeyFileError) as exc:
                logger.error("the callers were not reloaded, the previous ones stay: %s", exc)
                return False
            self._callers = callers
        logger.info("callers reloaded: %s", ", ".join(self.names()))
        return True

    def authenticate(self, authorization: str | None) -> Principal:
        if self.anonymous:
            return ANONYMOUS
        scheme, _, given = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not given.strip():
            # Phrased so that `redact` leaves it alone (it masks whatever follows "Bearer ").
            raise UnauthenticatedError(
                "missing API key: send it in the Authorization header, with the scheme Bearer"
            )
        digest = _digest(given.strip())
        found: Principal | None = None
        for caller in self._callers:  # every one compared, each in constant time
            if hmac.compare_digest(digest, caller.digest):
                found = caller.principal
        if found is None:
            raise UnauthenticatedError("invalid API key")
        return found

    def principal(self, name: str) -> Principal | None:
        """The caller named `name` now (None: no longer one)."""
        return next((c.principal for c in self._callers if c.principal.name == name), None)

    def check(self, principal: Principal, permission: Permission) -> None:
        if not principal.can(permission):
            raise ForbiddenError(
                f"the caller {principal.name!r} does not have the {permission} permission"
            )

    def check_tool(self, principal: Principal, name: str, source: str = "") -> None:
        if not principal.may_run(name, source):
            raise ForbiddenError(f"the caller {principal.name!r} may not run the tool {name!r}")

    def limit(self, principal: Principal, kind: RateKind) -> None:
        rate = getattr(principal.rates, kind)
        if rate is None:
            return
        wait = self._window.take(principal.name, kind, rate)
        if wait:
            raise RateLimitedError(
                f"the caller {principal.name!r} is over its {kind.replace('_', ' ')} rate "
                f"({rate}); retry in {wait} s",
                retry_after=wait,
            )


def door_principal(door: DaemonDoor, name: str | None) -> Principal | None:
    """The caller named `name` as the door knows it now (None: it knows none so named)."""
    if name is None:
        return None
    if not requires_credentials(door):
        return ANONYMOUS
    callers: Any = getattr(door, "callers", None)  # `bridge.access.door.Door.callers`
    lookup: Any = getattr(door, "principal", None) or getattr(callers, "get", None)
    found = lookup(name) if lookup is not None else None
    return found if isinstance(found, Principal) else None


def requires_credentials(door: DaemonDoor) -> bool:
    """Whether the door refuses requests without credentials (`anonymous` is False)."""
    return getattr(door, "anonymous", False) is not True
