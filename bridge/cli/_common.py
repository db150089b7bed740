"""What every command shares: error reporting, exit codes, platform and toolbox building."""

from __future__ import annotations

import logging
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer

from bridge.cli._app import state
from bridge.errors import (
    AuthenticationError,
    BridgeError,
    PlatformConnectionError,
    UsageError,
    redact,
)

if TYPE_CHECKING:
    from bridge.platforms.base import Platform
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
    "ModelOpt",
    "PlatformOpt",
    "TokenOpt",
    "ToolsOpt",
    "build_toolbox",
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
    from bridge.tools.loader import load_tools

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

    def open(self) -> Platform:
        """Build the platform adapter from these flags and the environment."""
        from bridge.platforms import create_platform

        return create_platform(
            self.platform,
            app_id=self.app_id,
            base_url=self.base_url,
            token=self.token,
            model=self.model,
            api_key=self.api_key,
        )
