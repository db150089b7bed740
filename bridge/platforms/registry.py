"""Every platform toolbridge speaks, described once: the CLI, the daemon, `create_platform`,
`open_platform`, `toolbridge doctor` and the settings table of docs/platforms.md all read it.

An entry names the adapter class ("module:Class", imported only when used), its settings and
the emulator protocol that imitates it (`bridge.emulator.protocols.PROTOCOLS`). A setting is one
value an operator gives: the adapter's keyword option, its command-line flag, its environment
variable (read by the adapter itself when the option is not given), the default, a help line
and whether it is a secret. One flag means one option on every platform that takes it (so
`--base-url` is `base_url` everywhere), which lets a command offer each flag once.

Adding a platform: write the adapter, then add one `PlatformEntry` to `PLATFORMS` below.
"""

from __future__ import annotations

import importlib
import logging
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from bridge.errors import ConfigurationError, UsageError
from bridge.platforms._limits import LIMITS, Limit

if TYPE_CHECKING:
    from bridge.emulator import Emulator
    from bridge.platforms.base import Platform

__all__ = [
    "COMMON_OPTIONS",
    "DAEMON_RENAMES",
    "DEFAULT_PLATFORM",
    "LIMIT_SETTINGS",
    "PLATFORMS",
    "PlatformEntry",
    "Setting",
    "flag_settings",
    "get_entry",
    "platforms_taking",
    "settings_table",
]

logger = logging.getLogger(__name__)

COMMON_OPTIONS = frozenset(
    {"connect_timeout", "idle_timeout", "max_retries", "retry_policy", "session"}
)
"""Python-only options every adapter takes (no flag, no variable: not platform settings)."""

DEFAULT_PLATFORM = "appbuilder"
"""The platform a command or the daemon uses when none is named."""

DAEMON_RENAMES: Mapping[str, str] = {"api_key": "platform_api_key"}
"""Options whose name differs in `toolbridge serve` and its settings: there ``--api-key`` is the
daemon's own key, so a platform's ``api_key`` is ``--platform-api-key``."""

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


class Setting(NamedTuple):
    """One value an operator gives a platform.

    The first six fields are the shared contract (option, flag, variable, default, help,
    secret); the rest refine checks and are optional.
    """

    option: str
    """The adapter's keyword argument, e.g. ``app_id``."""
    flag: str
    """The command-line flag, e.g. ``--app-id`` (``--store`` for a boolean: ``--no-store`` too)."""
    env: str | None
    """The environment variable the adapter reads when the option is not given."""
    default: str | None
    """The default as shown to a person; None when there is none."""
    help: str
    """What the value is, in one line (no trailing period)."""
    secret: bool = False
    """Never shown: doctor masks it, the daemon keeps it as a `SecretStr`."""
    required: bool = False
    """Without a value (option or variable) the platform cannot be used."""
    kind: Literal["text", "url", "bool", "choice", "seconds", "count"] = "text"
    """How a value is checked and parsed: a ``url`` must be http(s); a ``bool`` is a switch;
    ``seconds`` is a number > 0 and ``count`` an integer >= 1 (both parsed to numbers)."""
    choices: tuple[str, ...] = ()
    """The accepted values of a ``choice``."""
    shape: str | None = None
    """A regular expression that well-formed values match; `doctor` warns when one does not."""
    shape_hint: str = ""
    """What doctor says when `shape` does not match, e.g. "is not a UUID as app ids are"."""

    @property
    def label(self) -> str:
        """The setting as a person names it: ``app id`` for ``app_id``."""
        return self.option.replace("_", " ")

    @property
    def where(self) -> str:
        """Where the value comes from, for messages: ``--app-id or APPBUILDER_APP_ID``."""
        return f"{self.flag} or {self.env}" if self.env else self.flag

    def given(self, options: Mapping[str, Any], env: Mapping[str, str] | None = None) -> Any:
        """The value from `options`, else from the environment, else None."""
        value = options.get(self.option)
        if value is not None:
            return value
        if self.env is None:
            return None
        raw = (os.environ if env is None else env).get(self.env)
        return raw if raw else None

    def problem(self, value: Any) -> str | None:
        """Why `value` is malformed (what was wrong, what was expected), or None."""
        if self.kind == "bool":
            if isinstance(value, bool) or str(value).strip().lower() in _TRUE | _FALSE:
                return None
            return f"{value!r} is not a yes/no value; expected true or false"
        if self.kind in ("seconds", "count"):
            return _limit_of(self).problem(value)
        text = str(value)
        # A secret goes into an HTTP header whole: inner whitespace is a copy-paste accident
        # (but "Bearer KEY" is how some keys are written).
        inner = self.secret and any(ch.isspace() for ch in text.removeprefix("Bearer "))
        if inner or text != text.strip() or not text.isprintable():
            return (
                "contains spaces, newlines or control characters at its ends or inside; copy "
                "it again without surrounding whitespace"
            )
        if self.kind == "url" and not re.match(r"^https?://[^/\s]+", text):
            return f"{_shown(self, text)} is not an http:// or https:// URL"
        if self.kind == "choice" and text not in self.choices:
            expected = " or ".join(repr(choice) for choice in self.choices)
            return f"{text!r} is not accepted; should be {expected}"
        return None

    def parse(self, value: Any) -> Any:
        """`value` as the adapter takes it (a bool for a switch, else unchanged)."""
        if self.kind == "bool" and not isinstance(value, bool):
            return str(value).strip().lower() in _TRUE
        if self.kind in ("seconds", "count"):
            return _limit_of(self).parse(value)
        return value

    @property
    def shared(self) -> bool:
        """Whether every platform takes this setting (the stream limits)."""
        return self.option in _LIMIT_OPTIONS


def _limit_of(setting: Setting) -> Limit:
    """The stream limit behind a ``seconds`` or ``count`` setting."""
    return next(limit for limit in LIMITS if limit.option == setting.option)


LIMIT_SETTINGS: tuple[Setting, ...] = tuple(
    Setting(
        limit.option,
        limit.flag,
        limit.env,
        str(limit.default) if isinstance(limit.default, int) else f"{limit.default:g}",
        limit.help,
        kind="seconds" if limit.kind == "seconds" else "count",
    )
    for limit in LIMITS
)
"""The bounds of every answer stream (`bridge.platforms._limits`): every platform takes them."""
_LIMIT_OPTIONS = frozenset(setting.option for setting in LIMIT_SETTINGS)


def _shown(setting: Setting, text: str) -> str:
    return "the value" if setting.secret else repr(text)


@dataclass(frozen=True)
class PlatformEntry:
    """One platform: how to build its adapter, what it needs, which emulator imitates it."""

    name: str
    """What ``--platform`` takes."""
    title: str
    """What people call it: "Baidu AppBuilder"."""
    factory: str
    """The adapter class as ``module:Class``; its keyword arguments are the settings' options."""
    settings: tuple[Setting, ...]
    emulator_protocol: str | None = None
    """The `bridge.emulator` protocol that speaks this platform's wire; None: no emulator."""
    emulator_defaults: Mapping[str, Any] = field(default_factory=dict)
    """Options used with the emulator besides those its client environment gives (a model
    name the emulator ignores, say)."""
    emulator_tools: Callable[[list[dict[str, Any]]], dict[str, Any]] | None = None
    """For a platform that takes no tool list per request (the agent's tools are configured
    server-side): the scenario that declares these tools (Chat Completions function tools) to
    its emulator's agent, so `--emulator` and the demo can call the loaded tools."""
    hints: Mapping[str, str] = field(default_factory=dict)
    """What to do when `check()` fails, by kind: ``auth`` (credentials refused), ``not_found``
    (404: a wrong id or URL), ``connect`` (unreachable); `toolbridge doctor` appends them."""

    @property
    def short_title(self) -> str:
        """The title without a leading article, to follow "the": "OpenAI Responses API"."""
        return self.title.removeprefix("the ")

    @property
    def options(self) -> tuple[str, ...]:
        """The settings' option names."""
        return tuple(setting.option for setting in self.settings)

    def setting(self, option: str) -> Setting | None:
        """The setting of `option`, or None."""
        return next((s for s in self.settings if s.option == option), None)

    def load(self) -> type[Any]:
        """The adapter class (its module imported now, not when the registry is)."""
        module, _, name = self.factory.partition(":")
        cls: type[Any] = getattr(importlib.import_module(module), name)
        return cls

    def missing(
        self, options: Mapping[str, Any], env: Mapping[str, str] | None = None
    ) -> list[Setting]:
        """The required settings given neither as an option nor in the environment."""
        return [s for s in self.settings if s.required and s.given(options, env) is None]

    def require(self, options: Mapping[str, Any], env: Mapping[str, str] | None = None) -> None:
        """Raise a `ConfigurationError` naming every missing required setting at once."""
        missing = self.missing(options, env)
        if not missing:
            return
        named = " and ".join(f"the {s.label} ({s.where}; {s.help})" for s in missing)
        hint = (
            " To try things offline, pass --emulator for the embedded emulator."
            if self.emulator_protocol
            else ""
        )
        raise ConfigurationError(f"{self.title} is not configured: missing {named}.{hint}")

    def create(self, **options: Any) -> Platform:
        """Build the adapter; `None` options fall back to its environment defaults.

        Raises:
            UsageError: An option belongs to other platforms only (named by flag, with the
                platforms that take it).
        """
        options = {key: value for key, value in options.items() if value is not None}
        self.refuse_foreign(options)
        for key, value in list(options.items()):
            setting = self.setting(key)
            if setting is not None:
                options[key] = setting.parse(value)
        platform: Platform = self.load()(**options)
        return platform

    def refuse_foreign(self, options: Mapping[str, Any]) -> None:
        """Raise a `UsageError` for each given option that only other platforms take, naming
        its flag and those platforms."""
        foreign = [
            key
            for key, value in options.items()
            if value is not None and key not in self.options and platforms_taking(key)
        ]
        if foreign:
            raise UsageError(
                "; ".join(
                    f"{_flag_of(key)} is for --platform {' or '.join(platforms_taking(key))} only"
                    for key in foreign
                )
            )

    def emulator_options(self, client_env: Mapping[str, str]) -> dict[str, Any]:
        """The options that point this platform at an emulator whose client environment is
        `client_env` (`Emulator.env`), plus `emulator_defaults`."""
        options = dict(self.emulator_defaults)
        for setting in self.settings:
            if setting.env is not None and setting.env in client_env:
                options[setting.option] = client_env[setting.env]
        return options

    def emulated_options(self, client_env: Mapping[str, str]) -> tuple[str, ...]:
        """The options an emulator gives (so a caller must not give them too)."""
        return tuple(s.option for s in self.settings if s.env is not None and s.env in client_env)

    def start_emulator(
        self,
        *,
        scenario: str | Path | Mapping[str, Any] | None = None,
        tools: Sequence[Mapping[str, Any]] = (),
        state_file: str | Path | None = None,
    ) -> Emulator:
        """Start this platform's embedded emulator (the one way every entry point does).

        `scenario` scripts its agent (a file or mapping, see `bridge.emulator.scenario`);
        `tools` (Chat Completions function tools) are declared to an agent whose tools are
        configured server-side (`emulator_tools`: a Coze bot's plugins) unless the scenario
        declares its own; `state_file` keeps its conversations across restarts
        (`bridge.emulator.saving`).

        Raises:
            ConfigurationError: This platform has no emulator.
            ScenarioError: The scenario cannot be loaded (a `UsageError`, naming the file).
        """
        protocol = self.require_emulator()
        from bridge.emulator import Emulator
        from bridge.emulator.scenario import with_sections

        declared = self.emulator_tools([dict(t) for t in tools]) if self.emulator_tools else {}
        source = with_sections(scenario, declared if tools else {})
        server = Emulator(protocol=protocol, scenario=source, state_file=state_file).start()
        logger.info("using the embedded %s emulator at %s", self.short_title, server.base_url)
        return server

    def require_emulator(self) -> str:
        """The emulator protocol, or a `ConfigurationError` naming the platforms that have one."""
        if self.emulator_protocol is None:
            having = [e.name for e in PLATFORMS.values() if e.emulator_protocol]
            raise ConfigurationError(
                f"--platform {self.name} has no embedded emulator; --emulator works with "
                f"--platform {' or '.join(having)}"
            )
        return self.emulator_protocol


def _flag_of(option: str) -> str:
    for entry in PLATFORMS.values():
        setting = entry.setting(option)
        if setting is not None:
            return setting.flag
    return "--" + option.replace("_", "-")


def platforms_taking(option: str) -> list[str]:
    """The names of the platforms that have a setting called `option`."""
    return [entry.name for entry in PLATFORMS.values() if option in entry.options]


def get_entry(name: str) -> PlatformEntry:
    """The platform called `name`, or a `UsageError` listing the known ones."""
    try:
        return PLATFORMS[name]
    except KeyError:
        raise UsageError(
            f"unknown platform {name!r}; expected one of: {', '.join(PLATFORMS)}"
        ) from None


def flag_settings(entries: Iterable[PlatformEntry] | None = None) -> dict[str, list[Setting]]:
    """Each flag with the settings that use it, in registry order (for building commands).

    Raises:
        UsageError: One flag stands for two different options (a registry mistake).
    """
    found: dict[str, list[Setting]] = {}
    for entry in PLATFORMS.values() if entries is None else entries:
        for setting in entry.settings:
            same = found.setdefault(setting.flag, [])
            if same and (same[0].option, same[0].kind) != (setting.option, setting.kind):
                raise UsageError(
                    f"platform registry: {setting.flag} is {same[0].option} on one platform "
                    f"and {setting.option} on {entry.name}; one flag must mean one option"
                )
            same.append(setting)
    return found


def settings_table() -> str:
    """The table of every platform's settings in docs/platforms.md, as Markdown."""
    lines = [
        "| platform | flag | environment variable | default | what |",
        "| --- | --- | --- | --- | --- |",
    ]
    rows = [(f"`{entry.name}`", s) for entry in PLATFORMS.values() for s in entry.settings]
    rows = [row for row in rows if not row[1].shared]
    rows += [("every platform", s) for s in LIMIT_SETTINGS]
    for name, s in rows:
        default = "required" if s.required else (f"`{s.default}`" if s.default else "none")
        env = f"`{s.env}`" if s.env else "–"
        flag = f"`{s.flag}` / `--no-{s.flag[2:]}`" if s.kind == "bool" else f"`{s.flag}`"
        what = s.help + ("; secret, never shown" if s.secret else "")
        lines.append(f"| {name} | {flag} | {env} | {default} | {what} |")
    return "\n".join(lines)


_UUID = r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"

PLATFORMS: dict[str, PlatformEntry] = {
    "appbuilder": PlatformEntry(
        name="appbuilder",
        title="AppBuilder",
        factory="bridge.platforms.appbuilder:AppBuilderPlatform",
        settings=(
            Setting(
                "token",
                "--token",
                "APPBUILDER_TOKEN",
                None,
                "an API key from the AppBuilder console; it looks like bce-v3/ALTAK-…/…",
                secret=True,
                required=True,
                shape=r"^(Bearer )?bce-v3/ALTAK-[A-Za-z0-9]+/[0-9a-f]+$",
                shape_hint=(
                    "does not look like an AppBuilder key (bce-v3/ALTAK-…/…); fine for the emulator"
                ),
            ),
            Setting(
                "app_id",
                "--app-id",
                "APPBUILDER_APP_ID",
                None,
                "the id of a published app, shown in the AppBuilder console",
                required=True,
                shape=_UUID,
                shape_hint="is not a UUID as console app ids are",
            ),
            Setting(
                "base_url",
                "--base-url",
                "GATEWAY_URL_V2",
                "https://qianfan.baidubce.com",
                "the gateway",
                kind="url",
            ),
            *LIMIT_SETTINGS,
        ),
        emulator_protocol="appbuilder",
        hints={
            "auth": "the token was refused: check APPBUILDER_TOKEN/--token",
            "not_found": "check the app id (is the app published?) and the gateway URL",
            "connect": "check the gateway/base URL, proxies and the network",
        },
    ),
    "openai": PlatformEntry(
        name="openai",
        title="the OpenAI-compatible server",
        factory="bridge.platforms.openai_chat:OpenAIChatPlatform",
        settings=(
            Setting(
                "base_url",
                "--base-url",
                "OPENAI_BASE_URL",
                None,
                "the server's API root, e.g. http://127.0.0.1:8000/v1",
                required=True,
                kind="url",
                shape=r"/v1/?$",
                shape_hint=(
                    "does not end in /v1, as OpenAI-compatible API roots usually do (chat "
                    "completions are POSTed to BASE_URL/chat/completions)"
                ),
            ),
            Setting(
                "model",
                "--model",
                "OPENAI_MODEL",
                None,
                "a model name the server serves (its GET /v1/models lists them)",
                required=True,
            ),
            Setting(
                "api_key",
                "--api-key",
                "OPENAI_API_KEY",
                None,
                "sent as a bearer token when set (local servers usually need none)",
                secret=True,
            ),
            Setting(
                "tool_protocol",
                "--tool-protocol",
                None,
                "native",
                "native: the server's tool calls; text: tools described in the prompt, calls "
                "read from the reply",
                kind="choice",
                choices=("native", "text"),
            ),
            *LIMIT_SETTINGS,
        ),
        hints={
            "auth": "the API key was refused: check OPENAI_API_KEY/--api-key",
            "not_found": (
                "check --base-url/OPENAI_BASE_URL: it is the API root ending in /v1 (e.g. "
                "http://127.0.0.1:8000/v1), and the model name"
            ),
            "connect": (
                "start the server (vLLM, Ollama, llama.cpp...) or fix --base-url/OPENAI_BASE_URL"
            ),
        },
    ),
    "coze": PlatformEntry(
        name="coze",
        title="Coze",
        factory="bridge.platforms.coze:CozePlatform",
        settings=(
            Setting(
                "token",
                "--token",
                "COZE_API_TOKEN",
                None,
                "a personal access token (pat_…) with the chat and submitToolChat permissions",
                secret=True,
                required=True,
            ),
            Setting(
                "bot_id",
                "--bot-id",
                "COZE_BOT_ID",
                None,
                "the bot's id (the number in its URL), published as an API",
                required=True,
                shape=r"^\d+$",
                shape_hint="is not a number as Coze bot ids are; fine for the emulator",
            ),
            Setting(
                "base_url",
                "--base-url",
                "COZE_API_BASE",
                "https://api.coze.cn",
                "the API root (https://api.coze.com for coze.com)",
                kind="url",
            ),
            Setting(
                "region",
                "--region",
                None,
                None,
                "cn (api.coze.cn) or com (api.coze.com), instead of --base-url",
                kind="choice",
                choices=("cn", "com"),
            ),
            Setting(
                "user_id",
                "--user-id",
                "COZE_USER_ID",
                "toolbridge",
                "Coze's user_id for runs that name no end user",
            ),
            *LIMIT_SETTINGS,
        ),
        emulator_protocol="coze",
        emulator_tools=lambda tools: {"coze": {"plugins": tools}},
        hints={
            "auth": "the token was refused: check COZE_API_TOKEN/--token and its permissions",
            "not_found": "check the bot id (is the bot published as an API?) and the base URL",
            "connect": "check the base URL (api.coze.cn or api.coze.com), proxies and the network",
        },
    ),
    "responses": PlatformEntry(
        name="responses",
        title="OpenAI Responses",
        factory="bridge.platforms.openai_responses:OpenAIResponsesPlatform",
        settings=(
            Setting(
                "base_url",
                "--base-url",
                "OPENAI_BASE_URL",
                None,
                "the API root, e.g. https://api.openai.com/v1",
                required=True,
                kind="url",
                shape=r"/v[0-9]+/?$",
                shape_hint=(
                    "does not end in a version such as /v1 (or Ark's /api/v3), as Responses API "
                    "roots do (responses are POSTed to BASE_URL/responses)"
                ),
            ),
            Setting(
                "model",
                "--model",
                "OPENAI_MODEL",
                None,
                "a model name the server serves (its GET /v1/models lists them)",
                required=True,
            ),
            Setting(
                "api_key",
                "--api-key",
                "OPENAI_API_KEY",
                None,
                "sent as a bearer token",
                secret=True,
            ),
            Setting(
                "store",
                "--store",
                None,
                "true",
                "true: rounds chained by previous_response_id (kept server-side); false: "
                "nothing stored, every item resent (zero data retention, vLLM)",
                kind="bool",
            ),
            *LIMIT_SETTINGS,
        ),
        emulator_protocol="responses",
        hints={
            "auth": "the API key was refused: check OPENAI_API_KEY/--api-key",
            "not_found": (
                "check --base-url/OPENAI_BASE_URL (the API root before /responses, e.g. "
                "https://api.openai.com/v1) and the model name; the server may not serve the "
                "Responses API (use --platform openai for Chat Completions)"
            ),
            "connect": "check --base-url/OPENAI_BASE_URL, proxies and the network",
        },
    ),
}
