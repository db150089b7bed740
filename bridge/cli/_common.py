"""What every command shares: error reporting, exit codes, platform and toolbox building."""

from __future__ import annotations

import logging
import os
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
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

if TYPE_CHECKING:
    from bridge.emulator import Emulator
    from bridge.platforms.base import Platform
    from bridge.platforms.retry import RetryNotice
    from bridge.tools.toolbox import Toolbox

__all__ = [
    "EXIT_AUTH",
    "EXIT_FAILED",
    "EXIT_NETWORK",
    "EXIT_OK",
    "EXIT_USAGE",
    "AllowHostOpt",
    "ApiKeyOpt",
    "AppIdOpt",
    "BaseUrlOpt",
    "Connection",
    "EmulatorOpt",
    "ModelOpt",
    "PlatformOpt",
    "TokenOpt",
    "ToolProtocolOpt",
    "ToolsOpt",
    "build_toolbox",
    "check_appbuilder_settings",
    "check_openai_settings",
    "exit_code_for",
    "fail",
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
PlatformOpt = Annotated[
    str, typer.Option("--platform", help="Agent platform: appbuilder or openai.")
]
AppIdOpt = Annotated[
    str | None, typer.Option("--app-id", help="AppBuilder app id (env APPBUILDER_APP_ID).")
]
TokenOpt = Annotated[
    str | None,
    typer.Option("--token", help="AppBuilder token (env APPBUILDER_TOKEN).", show_default=False),
]
BaseUrlOpt = Annotated[
    str | None,
    typer.Option(
        "--base-url",
        help="AppBuilder gateway (env GATEWAY_URL_V2), or the server's /v1 URL with "
        "--platform openai (env OPENAI_BASE_URL).",
    ),
]
ModelOpt = Annotated[
    str | None,
    typer.Option("--model", help="Model name, with --platform openai (env OPENAI_MODEL)."),
]
EmulatorOpt = Annotated[
    bool,
    typer.Option(
        "--emulator",
        help="Talk to the embedded AppBuilder emulator (offline, no credentials) instead of "
        "an app; without it, a missing token or app id is an error.",
    ),
]
ToolProtocolOpt = Annotated[
    str | None,
    typer.Option(
        "--tool-protocol",
        metavar="native|text",
        help="With --platform openai: 'native' sends tools as the server's tool calls "
        "(default); 'text' describes them in the prompt and reads calls from the reply, for "
        "models without native tool calls.",
    ),
]
ApiKeyOpt = Annotated[
    str | None,
    typer.Option(
        "--api-key",
        help="API key, with --platform openai (env OPENAI_API_KEY).",
        show_default=False,
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
    """The platform flags every agent-facing command takes."""

    platform: str = "appbuilder"
    app_id: str | None = None
    base_url: str | None = None
    token: str | None = None
    model: str | None = None
    api_key: str | None = None
    emulator: bool = False
    on_retry: Callable[[RetryNotice], None] | None = None
    tool_protocol: str | None = None

    def open(self) -> Platform:
        """Build the platform adapter from these flags and the environment.

        With `emulator`, the embedded AppBuilder emulator is started and stops when the
        command ends.

        Raises:
            ConfigurationError: Settings are missing (all of them named, in flag and variable
                names) or contradict each other.
        """
        from bridge.platforms import create_platform
        from bridge.platforms.retry import RetryPolicy

        options: dict[str, Any] = {
            "app_id": self.app_id,
            "base_url": self.base_url,
            "token": self.token,
            "model": self.model,
            "api_key": self.api_key,
            "tool_protocol": self.tool_protocol,
        }
        if self.on_retry is not None:
            options["retry_policy"] = RetryPolicy(on_retry=self.on_retry)
        if not self.emulator:
            if self.platform == "appbuilder":
                check_appbuilder_settings(self.app_id, self.token)
            elif self.platform == "openai":
                check_openai_settings(self.base_url, self.model)
            return create_platform(self.platform, **options)
        server = self._emulator()
        try:
            options.update(app_id=server.app_id, token=server.token, base_url=server.base_url)
            platform = create_platform(self.platform, **options)
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

    def _emulator(self) -> Emulator:
        if self.platform != "appbuilder":
            raise ConfigurationError(
                "--emulator speaks AppBuilder's API: use it with --platform appbuilder"
            )
        given = [
            flag
            for flag, value in (
                ("--app-id", self.app_id),
                ("--token", self.token),
                ("--base-url", self.base_url),
            )
            if value
        ]
        if given:
            raise ConfigurationError(
                f"--emulator starts its own app, so {', '.join(given)} cannot be used with it; "
                "pass one or the other"
            )
        from bridge.emulator import Emulator

        server = Emulator().start()
        logger.info("using the embedded AppBuilder emulator at %s", server.base_url)
        return server


def check_appbuilder_settings(app_id: str | None, token: str | None) -> None:
    """Name every missing AppBuilder setting at once, as the command line spells them."""
    missing = []
    if not (token or os.environ.get("APPBUILDER_TOKEN")):
        missing.append("the token (--token or APPBUILDER_TOKEN; an API key bce-v3/ALTAK-…/…)")
    if not (app_id or os.environ.get("APPBUILDER_APP_ID")):
        missing.append(
            "the app id (--app-id or APPBUILDER_APP_ID; the id of a published app, shown in "
            "the AppBuilder console)"
        )
    if missing:
        raise ConfigurationError(
            f"AppBuilder is not configured: missing {' and '.join(missing)}. "
            "To try things offline, pass --emulator for the embedded emulator."
        )


def check_openai_settings(base_url: str | None, model: str | None) -> None:
    """Name every missing OpenAI-compatible setting at once, as the command line spells them."""
    missing = []
    if not (base_url or os.environ.get("OPENAI_BASE_URL")):
        missing.append(
            "the server's URL (--base-url or OPENAI_BASE_URL, e.g. http://127.0.0.1:8000/v1)"
        )
    if not (model or os.environ.get("OPENAI_MODEL")):
        missing.append("the model (--model or OPENAI_MODEL)")
    if missing:
        raise ConfigurationError(
            f"the OpenAI-compatible server is not configured: missing {' and '.join(missing)}"
        )
