"""What every command shares: error reporting, exit codes, platform and toolbox building."""

from __future__ import annotations

import functools
import inspect
import logging
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from bridge.cli._app import state
from bridge.errors import (
    AuthenticationError,
    BridgeError,
    ConfigurationError,
    PlatformConnectionError,
    UsageError,
    redact,
)
from bridge.platforms.registry import DEFAULT_PLATFORM

if TYPE_CHECKING:
    from bridge.platforms.base import Platform
    from bridge.platforms.registry import Setting
    from bridge.platforms.retry import RetryNotice
    from bridge.tools.toolbox import Toolbox

__all__ = [
    "EXIT_AUTH",
    "EXIT_FAILED",
    "EXIT_NETWORK",
    "EXIT_OK",
    "EXIT_USAGE",
    "FROM_FLAGS",
    "AllowHostOpt",
    "Connection",
    "EmulatorOpt",
    "ScenarioOpt",
    "ToolsOpt",
    "build_toolbox",
    "exit_code_for",
    "fail",
    "with_platform_flags",
]

logger = logging.getLogger(__name__)

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_AUTH = 3
EXIT_NETWORK = 4

ToolsOpt = Annotated[
    list[str],
    typer.Option(
        "--tools",
        "-t",
        help="Where tools come from: a .py file, a module name, a .yaml/.json HTTP tools "
        "manifest, 'openapi:PATH_OR_URL [--include X] [--server-url URL]', 'mcp:COMMAND ARGS' "
        "or mcp+http://HOST:PORT/PATH. Repeat for more.",
    ),
]
AllowHostOpt = Annotated[
    list[str],
    typer.Option(
        "--allow-host",
        help="Host ('host', 'host:port' or '*.domain') HTTP and OpenAPI tools may reach besides "
        "those their manifest names. Repeat for more; env TOOLBRIDGE_ALLOW_HOSTS adds more.",
    ),
]
EmulatorOpt = Annotated[
    bool,
    typer.Option(
        "--emulator",
        help="Talk to the platform's embedded emulator (offline, no credentials) instead of "
        "the real service; without it, a missing setting is an error.",
    ),
]

ScenarioOpt = Annotated[
    Path | None,
    typer.Option(
        "--scenario",
        help="With --emulator: a scenario file (YAML or JSON) that scripts the emulated agent, "
        "as for `toolbridge emulator --scenario`.",
    ),
]


def exit_code_for(exc: BaseException) -> int:
    """The documented exit code for an error."""
    if isinstance(exc, UsageError):
        return EXIT_USAGE
    if isinstance(exc, AuthenticationError):
        return EXIT_AUTH
    if isinstance(exc, PlatformConnectionError):
        return EXIT_NETWORK
    return EXIT_FAILED


def fail(exc: BaseException, *, code: int | None = None) -> NoReturn:
    """Print one clear red line (details with --verbose) and exit with the error's code."""
    from rich.console import Console
    from rich.markup import escape

    console = Console(stderr=True, highlight=False, soft_wrap=True)
    kind = "error" if isinstance(exc, BridgeError) else type(exc).__name__
    console.print(f"[red]{kind}:[/red] {escape(redact(str(exc)))}", markup=True)
    if state.get("verbose"):
        details = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        console.print(redact(details), markup=False)
    raise typer.Exit(code if code is not None else exit_code_for(exc)) from None


def build_toolbox(specs: Sequence[str], *, allow_hosts: Sequence[str] = ()) -> Toolbox:
    """Load every SPEC into one toolbox (UsageError on a bad spec); close it when done."""
    from bridge.loading import load_tools

    return load_tools(list(specs), allow_hosts=allow_hosts)


@dataclass(frozen=True)
class Connection:
    """The platform flags of an agent-facing command: which platform, its settings, --emulator.

    `settings` holds the adapter options by name (None or absent: from the environment).
    """

    platform: str = DEFAULT_PLATFORM
    settings: Mapping[str, Any] = field(default_factory=dict)
    emulator: bool = False
    on_retry: Callable[[RetryNotice], None] | None = None
    scenario: Path | None = None
    """``--scenario``: the file that scripts the embedded emulator's agent (with `emulator`)."""

    def check_scenario(self) -> None:
        """Refuse ``--scenario`` without ``--emulator`` (it scripts only the emulator).

        Raises:
            UsageError: ``--scenario`` was given without ``--emulator``.
        """
        if self.scenario is not None and not self.emulator:
            raise UsageError(
                f"--scenario {self.scenario} scripts the embedded emulator's agent; pass "
                "--emulator too (a real platform's agent is configured on the platform)"
            )

    def open(self, tools: Sequence[dict[str, Any]] = ()) -> Platform:
        """Build the platform adapter from these flags and the environment.

        With `emulator`, the platform's embedded emulator is started and stops when the
        adapter is closed (as every command does when it ends); a platform whose agent's tools
        are configured server-side (Coze) gets `tools` (Chat Completions function tools, the
        loaded ones) declared to the emulated agent.

        Raises:
            UsageError: Unknown platform, or a flag another platform takes.
            ConfigurationError: Settings are missing (all of them named, in flag and variable
                names), contradict each other, or the platform has no emulator.
        """
        from bridge.platforms.registry import get_entry
        from bridge.platforms.retry import RetryPolicy

        self.check_scenario()
        entry = get_entry(self.platform)
        options = {key: value for key, value in self.settings.items() if value is not None}
        entry.refuse_foreign(options)
        if self.on_retry is not None:
            options["retry_policy"] = RetryPolicy(on_retry=self.on_retry)
        if not self.emulator:
            entry.require(options)
            return entry.create(**options)
        from bridge._open import start_emulator

        server = start_emulator(entry, scenario=self.scenario, tools=tools)
        try:
            client_env = server.env()
            given = [
                entry.setting(option)
                for option in entry.emulated_options(client_env)
                if option in options
            ]
            if given:
                flags = ", ".join(setting.flag for setting in given if setting is not None)
                raise ConfigurationError(
                    f"--emulator starts its own {entry.short_title} service, so {flags} cannot be "
                    "used with it; pass one or the other"
                )
            platform = entry.create(**{**options, **entry.emulator_options(client_env)})
        except BaseException:
            server.stop()
            raise
        close = platform.close

        def close_both() -> None:
            try:
                close()
            finally:
                server.stop()

        # Closing the platform (as every command does) stops the emulator it talks to.
        platform.close = close_both  # type: ignore[method-assign]
        return platform


FROM_FLAGS = Connection()
"""The default of a command's `connection` parameter; `with_platform_flags` always passes one."""


def with_platform_flags(
    *, default: str | None = DEFAULT_PLATFORM, rename: Mapping[str, str] | None = None
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Give a command ``--platform``, ``--emulator`` and every platform's setting flags, all
    taken from the platform registry, handed to it as one ``connection: Connection`` argument.

    Args:
        default: The ``--platform`` default (None: the command finds one elsewhere).
        rename: Options whose flag differs in this command (``{"api_key": "platform_api_key"}``
            where ``--api-key`` already means something else); the option name is unchanged
            in `Connection.settings`.
    """
    from bridge.platforms.registry import PLATFORMS, flag_settings

    renamed = dict(rename or {})
    names = " | ".join(PLATFORMS)
    extra = [
        inspect.Parameter(
            "platform",
            inspect.Parameter.KEYWORD_ONLY,
            default=default,
            annotation=Annotated[
                str if default is not None else str | None,
                typer.Option("--platform", help=f"Agent platform: {names}."),
            ],
        )
    ]
    params: dict[str, str] = {}
    for flag, settings in flag_settings().items():
        option = settings[0].option
        name = renamed.get(option, option)
        if name != option:
            flag = "--" + name.replace("_", "-")
        params[name] = option
        takers = "; ".join(
            f"{_platforms_of(setting)}: {setting.help}"
            + (f" (env {setting.env})" if setting.env else "")
            for setting in _distinct(settings)
        )
        if settings[0].kind == "bool":
            decl = f"{flag}/--no-{flag.removeprefix('--')}"
            kind: Any = bool | None
        else:
            decl, kind = flag, str | None
        metavar = "|".join(settings[0].choices) if settings[0].choices else None
        extra.append(
            inspect.Parameter(
                name,
                inspect.Parameter.KEYWORD_ONLY,
                default=None,
                annotation=Annotated[
                    kind,
                    typer.Option(
                        decl,
                        help=f"With --platform {takers}.",
                        show_default=False,
                        metavar=metavar,
                    ),
                ],
            )
        )
    extra.append(
        inspect.Parameter(
            "emulator", inspect.Parameter.KEYWORD_ONLY, default=False, annotation=EmulatorOpt
        )
    )
    extra.append(
        inspect.Parameter(
            "scenario", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=ScenarioOpt
        )
    )

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        own = inspect.signature(command, eval_str=True)
        kept = [p for p in own.parameters.values() if p.name != "connection"]

        @functools.wraps(command)
        def wrapper(**kwargs: Any) -> Any:
            platform = kwargs.pop("platform")
            emulator = bool(kwargs.pop("emulator"))
            scenario = kwargs.pop("scenario")
            settings = {option: kwargs.pop(name) for name, option in params.items()}
            connection = Connection(platform or "", settings, emulator, scenario=scenario)
            return command(connection=connection, **kwargs)

        signature = own.replace(
            parameters=[
                *(p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in kept),
                *extra,
            ]
        )
        wrapper.__signature__ = signature  # type: ignore[attr-defined]
        wrapper.__annotations__ = {p.name: p.annotation for p in signature.parameters.values()}
        return wrapper

    return decorate


def _distinct(settings: list[Setting]) -> list[Setting]:
    """One setting per distinct help text (platforms sharing a meaning are named together)."""
    seen: dict[tuple[str, str | None], Setting] = {}
    for setting in settings:
        seen.setdefault((setting.help, setting.env), setting)
    return list(seen.values())


def _platforms_of(setting: Setting) -> str:
    from bridge.platforms.registry import PLATFORMS

    return " or ".join(
        entry.name
        for entry in PLATFORMS.values()
        if any(
            (s.flag, s.help, s.env) == (setting.flag, setting.help, setting.env)
            for s in entry.settings
        )
    )
