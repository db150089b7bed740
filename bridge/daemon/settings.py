"""The daemon's settings: command-line flags > environment (``TOOLBRIDGE_*``) > TOML file.

    toolbridge serve --tools tools.py --port 8411          flags
    TOOLBRIDGE_PORT=8411 TOOLBRIDGE_API_KEY=...            environment
    toolbridge serve --config toolbridge.toml              file (or TOOLBRIDGE_CONFIG)

Every setting has the same name everywhere: ``--max-body-bytes``, ``TOOLBRIDGE_MAX_BODY_BYTES``,
``max_body_bytes`` (or ``max-body-bytes``) in the file, at the top level or in a ``[serve]``
table. A list in the environment (``TOOLBRIDGE_TOOLS``) is comma-separated. Errors name the
source of the bad value (never the value of a secret).
"""

from __future__ import annotations

import os
import re
import socket
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from bridge._connections import ConnectionLimits
from bridge._hosts import HostGate, is_loopback
from bridge.errors import UsageError
from bridge.journal.stores import db_password
from bridge.platforms.registry import DAEMON_RENAMES, DEFAULT_PLATFORM

if TYPE_CHECKING:
    from bridge.platforms.registry import Setting

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 (mypy checks as 3.10 but runs where tomli may be absent)
    import tomli as tomllib  # type: ignore[import-not-found,unused-ignore]

__all__ = [
    "DAEMON_RENAMES",
    "ENV_PREFIX",
    "FLAGS",
    "MIN_API_KEY_CHARS",
    "DaemonSettings",
    "SettingsError",
    "default_db",
    "flag_of",
    "load_settings",
    "platform_fields",
]

ENV_PREFIX = "TOOLBRIDGE_"
REPLICA_ID = re.compile(r"[A-Za-z0-9._:@-]{1,100}")
MIN_API_KEY_CHARS = 16


FLAGS = {
    "allow_hosts": "--allow-host",
    "server_names": "--server-name",
    "log_json": "--log-json/--log-text",
    "four_eyes": "--four-eyes/--no-four-eyes",
}
"""The `toolbridge serve` flags not spelled ``--name-with-dashes`` (one per value for a list;
on/off for a switch)."""


def flag_of(name: str) -> str:
    """The flag that sets setting `name` (``--max-body-bytes``, ``--allow-host``)."""
    return FLAGS.get(name, "--" + name.replace("_", "-")).split("/")[0]


class SettingsError(UsageError):
    """A setting is missing, unknown or out of range; the message names where it came from."""


class DaemonSettings(BaseModel):
    """Everything `toolbridge serve` can be told."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # Each setting's `description` is its `toolbridge serve --help` text too (the flags are
    # made from these fields, their defaults and variables added); `FLAGS` names the flags
    # that are not simply ``--name-with-dashes``.
    tools: list[str] = Field(
        default_factory=list,
        description="Tool SPECs: .py files, module names, HTTP manifests, openapi:..., mcp:...",
    )
    allow_hosts: list[str] = Field(
        default_factory=list,
        description="Hosts HTTP and OpenAPI tools may call besides those their manifests name.",
    )
    server_names: list[str] = Field(
        default_factory=list,
        description="A name (host or host:port) clients reach the daemon by, besides the bound "
        "address, localhost, 127.0.0.1 and [::1]; requests for other Host names get 421. "
        "Repeat for more.",
    )
    platform: str = Field(
        default=DEFAULT_PLATFORM,
        description="A name from the platform registry (`bridge.platforms.registry.PLATFORMS`).",
    )
    host: str = Field(default="127.0.0.1", description="Address to bind; others need --api-key.")
    port: int = Field(default=8411, ge=0, le=65535, description="Port; 0 picks a free one.")
    db: str = Field(
        default_factory=lambda: default_db(),
        description="Journal: a SQLite file (default $XDG_STATE_HOME/toolbridge/toolbridge.db, "
        "i.e. ~/.local/state/toolbridge/toolbridge.db), ':memory:' for none, or a "
        "postgresql://user@host/db URL (password from the URL, PGPASSWORD or ~/.pgpass).",
    )
    # The default is the user's state directory (`default_db`), not wherever the daemon
    # happens to be started; ":memory:" keeps nothing across restarts.
    sqlite_sync: str = Field(
        default="full",
        pattern="^(full|normal)$",
        description="A SQLite journal's fsync policy: 'full' (each step is on disk before it "
        "counts: survives a killed process and a power loss) or 'normal' (survives a killed "
        "process; a power loss may undo the last steps).",
    )
    # SQLite's `synchronous` in WAL mode. NORMAL skips the fsync at each commit: safe against
    # kill -9 (the WAL is in the OS's cache), not against the machine losing power.
    api_key: SecretStr | None = Field(
        default=None,
        description="Key clients must send as 'Authorization: Bearer KEY'.",
    )
    # Every /v1 request and /metrics must carry it; required off loopback (or
    # `api_key_file`). Its name is "default".
    api_key_file: str | None = Field(
        default=None,
        description="File of named keys, one 'name: key' per line; the name attributes messages "
        "and approval decisions. Reloaded on SIGHUP.",
    )
    callers: str | None = Field(
        default=None,
        description="Callers file (TOML): each caller's key or identity-provider name, roles, "
        "tools and rate limits. Reloaded on SIGHUP.",
    )
    policy: str | None = Field(
        default=None,
        description="Cedar policy file deciding each tool call on its arguments (allow, refuse, "
        "or send to a person's approval).",
    )
    oidc_issuer: str | None = Field(
        default=None,
        description="Identity provider (its issuer URL) whose tokens name callers; needs "
        "--oidc-audience.",
    )
    oidc_audience: str | None = Field(
        default=None,
        description="The audience the identity provider's tokens must be for; needs --oidc-issuer.",
    )
    oidc_caller_claim: str = Field(
        default="sub", description="The token claim naming the caller.", min_length=1
    )
    oidc_roles_claim: str = Field(
        default="roles", description="The token claim listing the caller's roles.", min_length=1
    )
    four_eyes: bool = Field(
        default=False,
        description="The caller whose message asked for a call cannot approve it; another "
        "approver must.",
    )
    approval_timeout: float = Field(
        default=600.0,
        gt=0,
        le=7 * 86_400,
        description="Seconds a confirm=True call waits for a person's decision before it is "
        "rejected.",
    )
    approval_webhook: str | None = Field(
        default=None,
        description="URL to POST each new approval request to (chat-ops); decisions still come "
        "through the API.",
    )
    workers: int = Field(
        default=16, ge=1, le=1024, description="Conversations answered at once; more wait."
    )
    queue_limit: int = Field(
        default=256,
        ge=0,
        le=100_000,
        description="Messages that may wait for a worker; more get 503.",
    )
    grace: float = Field(
        default=30.0,
        ge=0,
        le=3600,
        description="Seconds SIGTERM/SIGINT waits for running tool calls.",
    )
    log_json: bool = Field(default=False, description="Log JSON lines to stderr.")
    max_body_bytes: int = Field(
        default=64 * 1024, ge=1024, le=16 * 1024 * 1024, description="Largest request body."
    )
    header_timeout: float = Field(
        default=10.0,
        gt=0,
        le=3600,
        description="Seconds a client has to send a request's headers; later it gets 408 and is "
        "disconnected.",
    )
    # From connecting, or from the end of the previous response.
    body_timeout: float = Field(
        default=30.0,
        gt=0,
        le=3600,
        description="Seconds a request body may pause before the request gets 408 and is not run.",
    )
    max_connections: int = Field(
        default=1000,
        ge=1,
        le=1_000_000,
        description="Open connections at most; more get 503.",
    )
    max_rounds: int = Field(default=10, ge=1, le=1000, description="Most tool rounds per message.")
    tool_timeout: float = Field(
        default=60.0, gt=0, le=86_400, description="Default seconds per tool call."
    )
    idle_timeout: float = Field(
        default=900.0,
        gt=0,
        le=30 * 86_400,
        description="Idle seconds before a conversation's tools let go.",
    )
    replica_id: str | None = Field(
        default=None,
        description="Name among replicas sharing a PostgreSQL journal (default host:port); a "
        "name a live process holds is refused.",
    )
    # Used in logs, /healthz, /metrics, message records and as the lease owner. Must be
    # stable across restarts (a restarted replica takes its own leases back at once).
    lease_seconds: float = Field(
        default=15.0,
        ge=1,
        le=3600,
        description="Seconds a dead replica's conversations wait before another takes them.",
    )
    # A lease is renewed every third of it: after a replica dies, others take its messages
    # over within about this long.
    platform_settings: dict[str, Any] = Field(default_factory=dict)
    """The platform's settings by adapter option (`bridge.platforms.registry`), secrets as
    `SecretStr`. Given under their own names: ``--app-id``, ``TOOLBRIDGE_APP_ID``, ``app_id`` in
    the file (the platform's ``api_key`` is ``platform_api_key``, as ``api_key`` is the
    daemon's own key); unset ones fall back to the platform's variables (``APPBUILDER_TOKEN``)."""

    @field_validator("replica_id")
    @classmethod
    def _replica_name(cls, value: str | None) -> str | None:
        if value is not None and not REPLICA_ID.fullmatch(value):
            raise ValueError(
                f"{value[:80]!r} is not a replica id: use 1-100 letters, digits and . _ : @ - "
                "(e.g. the host name, or host:port)"
            )
        return value

    @field_validator("api_key")
    @classmethod
    def _long_enough(cls, value: SecretStr | None) -> SecretStr | None:
        secret = value.get_secret_value() if value is not None else None
        if secret is not None and not secret.strip():
            raise ValueError(
                "empty or only whitespace; give a key of at least "
                f"{MIN_API_KEY_CHARS} random characters, or none at all to serve loopback "
                "without one"
            )
        if secret is not None and secret != secret.strip():
            # Clients would have to send the whitespace too (a stray newline from a file).
            raise ValueError(
                "has leading or trailing whitespace (a newline from a file or a shell "
                "variable?); remove it"
            )
        odd = next((i for i, c in enumerate(secret or "") if not " " <= c <= "~"), None)
        if secret is not None and odd is not None:
            # HTTP clients send header values as ASCII: such a key could never be presented.
            raise ValueError(
                f"character {odd + 1} is U+{ord(secret[odd]):04X}; a key must be only printable "
                "ASCII characters (clients send it in an HTTP header), e.g. from `openssl rand "
                "-hex 24`"
            )
        size = len(secret) if secret is not None else MIN_API_KEY_CHARS
        if size < MIN_API_KEY_CHARS:
            raise ValueError(
                f"too short ({size} characters); use at least {MIN_API_KEY_CHARS} random "
                "characters, e.g. from `openssl rand -hex 24`"
            )
        return value

    @field_validator("approval_webhook")
    @classmethod
    def _webhook(cls, value: str | None) -> str | None:
        if value is None:
            return None
        from urllib.parse import urlsplit

        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(
                "expected an http:// or https:// URL with a host, e.g. "
                "https://chat.example/hooks/toolbridge"
            )
        return value

    @field_validator("server_names")
    @classmethod
    def _server_names(cls, value: list[str]) -> list[str]:
        HostGate.for_server("127.0.0.1", value)  # raises ValueError naming the bad entry
        return value

    @model_validator(mode="after")
    def _check(self) -> DaemonSettings:
        if (self.oidc_issuer is None) != (self.oidc_audience is None):
            given, missing = (
                ("--oidc-issuer", "--oidc-audience")
                if self.oidc_issuer is not None
                else ("--oidc-audience", "--oidc-issuer")
            )
            raise ValueError(
                f"{given} needs {missing} too: tokens are checked for both their issuer and "
                "their audience"
            )
        if not self.authenticates and not is_loopback(self.host):
            raise ValueError(
                f"binding {self.host} exposes the daemon beyond this machine, so it needs an "
                "API key: pass --api-key (or set TOOLBRIDGE_API_KEY), --api-key-file or "
                "--callers (or name an identity provider with --oidc-issuer), or bind 127.0.0.1"
            )
        foreign = _foreign(self.platform, self.platform_settings)
        if foreign:
            raise ValueError("; ".join(foreign.values()))
        return self

    @field_validator("platform")
    @classmethod
    def _known_platform(cls, value: str) -> str:
        from bridge.platforms.registry import PLATFORMS

        if value not in PLATFORMS:
            raise ValueError(f"unknown platform {value!r}; expected one of: {', '.join(PLATFORMS)}")
        return value

    @property
    def authenticates(self) -> bool:
        """Whether requests must name a caller (keys, a callers file or an identity
        provider); without any, every request is the anonymous caller with every permission."""
        return any(
            value is not None
            for value in (self.api_key, self.api_key_file, self.callers, self.oidc_issuer)
        )

    def replica(self) -> str:
        """`replica_id`, or the host name and port (the pid with ``--port 0``)."""
        if self.replica_id:
            return self.replica_id
        host = socket.gethostname() or "localhost"
        return f"{host}:{self.port}" if self.port else f"{host}:pid{os.getpid()}"

    def connection_limits(self) -> ConnectionLimits:
        """The bounds on slow and surplus connections (`bridge._connections`)."""
        return ConnectionLimits(
            header_timeout=self.header_timeout,
            body_timeout=self.body_timeout,
            max_connections=self.max_connections,
        )

    def platform_options(self) -> dict[str, Any]:
        """Keyword arguments for `bridge.platforms.create_platform` (absent: from the env)."""
        return {
            option: value.get_secret_value() if isinstance(value, SecretStr) else value
            for option, value in self.platform_settings.items()
        }

    def with_platform_options(self, options: Mapping[str, Any]) -> DaemonSettings:
        """These settings with `options` (adapter options, e.g. an emulator's) added."""
        merged = {**self.platform_settings, **_wrapped(self.platform, options)}
        return self.model_copy(update={"platform_settings": merged})

    def secrets(self) -> list[str]:
        """Every secret value in these settings (for log redaction)."""
        values = [self.api_key, *self.platform_settings.values()]
        found = [value.get_secret_value() for value in values if isinstance(value, SecretStr)]
        password = db_password(self.db)  # a postgresql:// journal URL may carry one
        return [*found, password] if password else found


def platform_fields() -> dict[str, Setting]:
    """Every platform setting by its daemon name (``app_id``, ``platform_api_key``...)."""
    from bridge.platforms.registry import flag_settings

    return {
        DAEMON_RENAMES.get(same[0].option, same[0].option): same[0]
        for same in flag_settings().values()
    }


def _daemon_name(option: str) -> str:
    return DAEMON_RENAMES.get(option, option)


def _foreign(platform: str, options: Mapping[str, Any]) -> dict[str, str]:
    """For each option `platform` does not take, by option: which platforms take it."""
    from bridge.platforms.registry import PLATFORMS, platforms_taking

    entry = PLATFORMS.get(platform)
    if entry is None:
        return {}
    return {
        option: f"{_daemon_name(option)} is for platform "
        f"{' or '.join(platforms_taking(option)) or 'none'} only"
        for option in options
        if option not in entry.options
    }


def _wrapped(platform: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """`options` with the platform's secrets as `SecretStr`."""
    from bridge.platforms.registry import PLATFORMS

    entry = PLATFORMS.get(platform)
    result: dict[str, Any] = {}
    for option, value in options.items():
        setting = entry.setting(option) if entry is not None else None
        secret = setting.secret if setting is not None else False
        result[option] = SecretStr(value) if secret and isinstance(value, str) else value
    return result


def default_db(env: Mapping[str, str] | None = None) -> str:
    """``$XDG_STATE_HOME/toolbridge/toolbridge.db`` (default ``~/.local/state/...``).

    The XDG base directory rules: a relative XDG_STATE_HOME is ignored.
    """
    env = os.environ if env is None else env
    state = env.get("XDG_STATE_HOME", "")
    base = Path(state) if state and Path(state).is_absolute() else Path.home() / ".local/state"
    return str(base / "toolbridge" / "toolbridge.db")


_LISTS = {"tools", "allow_hosts", "server_names"}
_SECRETS = {"api_key", "approval_webhook"}


def _fields() -> tuple[str, ...]:
    """Every setting's name: the daemon's own, then the platforms' (read when called, so a
    platform registered later is known)."""
    own = tuple(name for name in DaemonSettings.model_fields if name != "platform_settings")
    return own + tuple(name for name in platform_fields() if name not in own)


def load_settings(
    flags: Mapping[str, Any],
    *,
    env: Mapping[str, str] | None = None,
    config: str | Path | None = None,
) -> DaemonSettings:
    """Merge the three sources (flags win, then the environment, then the file) and validate.

    Args:
        flags: values from the command line; None (and an empty tools list) means "not given".
        env: the environment (default `os.environ`); only ``TOOLBRIDGE_*`` names are read.
        config: a TOML file; None reads ``TOOLBRIDGE_CONFIG`` if set.

    Raises:
        SettingsError: naming the source and the setting of each problem.
    """
    env = os.environ if env is None else env
    fields = _fields()
    platform_names = platform_fields()
    secrets = _SECRETS | {name for name, setting in platform_names.items() if setting.secret}
    values: dict[str, Any] = {}
    origin: dict[str, str] = {}
    path = config or env.get(ENV_PREFIX + "CONFIG") or None
    if path is not None:
        for key, value in _read_toml(Path(path), fields).items():
            values[key], origin[key] = value, f"{key} in {path}"
    for name in fields:
        raw = env.get(ENV_PREFIX + name.upper())
        if name == "api_key" and raw is not None and not raw.strip():
            # Unlike other settings, a key set to "" must not silently mean "no key".
            values[name], origin[name] = raw, f"{ENV_PREFIX}{name.upper()}"
            continue
        if raw is not None and raw != "":
            value = [p.strip() for p in raw.split(",") if p.strip()] if name in _LISTS else raw
            shown = "" if name in secrets else f"={raw!r}"
            values[name], origin[name] = value, f"{ENV_PREFIX}{name.upper()}{shown}"
    for name, value in flags.items():
        if name not in fields:
            raise SettingsError(f"unknown setting {name!r}")
        if value is None or (name in _LISTS and not value):
            continue
        values[name], origin[name] = value, flag_of(name)
    values.setdefault("db", default_db(env))
    values["platform_settings"] = _platform_values(values, origin, platform_names)
    try:
        return DaemonSettings.model_validate(values)
    except ValidationError as exc:
        raise SettingsError(_describe(exc, origin)) from None


def _platform_values(
    values: dict[str, Any], origin: Mapping[str, str], names: Mapping[str, Setting]
) -> dict[str, Any]:
    """Take the platform's settings out of `values`: checked (each problem named with where
    the value came from), parsed, secrets wrapped, keyed by adapter option."""
    found: dict[str, Any] = {}
    problems: list[str] = []
    for name, setting in names.items():
        if name not in values:
            continue
        raw = values.pop(name)
        problem = setting.problem(raw)
        numeric = setting.kind in ("seconds", "count") and isinstance(raw, (int, float))
        if problem is None and setting.kind != "bool" and not isinstance(raw, str) and not numeric:
            problem = f"expected text, got {type(raw).__name__}"
        if problem is not None:
            # The source names the setting; "token: ..." would be masked by `redact`.
            problems.append(f"{problem} (from {origin[name]})")
            continue
        found[setting.option] = setting.parse(raw)
    platform = values.get("platform", DEFAULT_PLATFORM)
    for option, message in _foreign(str(platform), found).items():
        problems.append(f"{message} (from {origin[_daemon_name(option)]})")
    if problems:
        raise SettingsError("; ".join(problems))
    return _wrapped(str(platform), found)


def _read_toml(path: Path, fields: tuple[str, ...]) -> dict[str, Any]:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SettingsError(f"{path}: config file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SettingsError(f"{path}: cannot read the config file: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise SettingsError(f"{path}: not valid TOML: {exc}") from None
    table = data.get("serve", data) if isinstance(data.get("serve"), dict) else data
    result: dict[str, Any] = {}
    for key, value in table.items():
        name = key.replace("-", "_")
        if name not in fields:
            raise SettingsError(
                f"{path}: unknown setting {key!r}; expected one of: {', '.join(fields)}"
            )
        result[name] = value
    return result


def _describe(exc: ValidationError, origin: Mapping[str, str]) -> str:
    lines = []
    for error in exc.errors():
        loc = error.get("loc") or ()
        name = str(loc[0]) if loc else ""
        where = origin.get(name, name or "settings")
        message = str(error.get("msg", "invalid")).removeprefix("Value error, ")
        # "(from X)" after the message: "api_key: ..." would be masked by `redact`.
        lines.append(f"{message} (from {where})" if name else message)
    return "; ".join(lines)
