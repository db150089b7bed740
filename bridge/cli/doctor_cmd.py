"""`toolbridge doctor`: check the configuration and say what is wrong and how to fix it."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Literal

import typer

from bridge.cli._app import app
from bridge.cli._common import (
    EXIT_OK,
    ApiKeyOpt,
    AppIdOpt,
    BaseUrlOpt,
    Connection,
    ModelOpt,
    PlatformOpt,
    TokenOpt,
    ToolsOpt,
    exit_code_for,
)
from bridge.errors import BridgeError, redact

__all__ = ["Check", "doctor"]

_TOKEN_SHAPE = re.compile(r"^(Bearer )?bce-v3/ALTAK-[A-Za-z0-9]+/[0-9a-f]+$")
_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", re.I)


@dataclass
class Check:
    """One line of the report."""

    name: str
    status: Literal["ok", "warn", "fail"]
    detail: str
    exit_code: int = EXIT_OK


def _token_checks(token: str | None) -> list[Check]:
    if not token:
        return [
            Check(
                "token",
                "fail",
                "no token: set APPBUILDER_TOKEN or pass --token (AppBuilder console → "
                "API Key; it looks like bce-v3/ALTAK-…/…)",
                2,
            )
        ]
    if any(ch.isspace() for ch in token.removeprefix("Bearer ")) or not token.isprintable():
        return [
            Check(
                "token",
                "fail",
                "the token contains spaces, newlines or control characters; copy it again "
                "without surrounding whitespace",
                2,
            )
        ]
    if not _TOKEN_SHAPE.match(token):
        return [
            Check(
                "token",
                "warn",
                "set, but it does not look like an AppBuilder key (bce-v3/ALTAK-…/…); fine for "
                "the emulator",
            )
        ]
    return [Check("token", "ok", "set and well-formed")]


def _app_id_checks(app_id: str | None) -> list[Check]:
    if not app_id:
        return [
            Check(
                "app id",
                "fail",
                "no app id: set APPBUILDER_APP_ID or pass --app-id (the id of a published app, "
                "shown in the AppBuilder console)",
                2,
            )
        ]
    if not _UUID.match(app_id):
        return [Check("app id", "warn", f"{app_id!r} is not a UUID as console app ids are")]
    return [Check("app id", "ok", app_id)]


@app.command()
def doctor(
    tools: ToolsOpt = [],  # noqa: B006 - typer needs a literal default
    platform: PlatformOpt = "appbuilder",
    app_id: AppIdOpt = None,
    base_url: BaseUrlOpt = None,
    token: TokenOpt = None,
    model: ModelOpt = None,
    api_key: ApiKeyOpt = None,
) -> None:
    """Check configuration (token, app id, gateway, tools) and explain how to fix problems."""
    from rich.console import Console
    from rich.markup import escape

    from bridge.platforms import PLATFORMS
    from bridge.tools.loader import load_tools

    console = Console(highlight=False, soft_wrap=True)
    checks: list[Check] = []
    if platform not in PLATFORMS:
        checks.append(
            Check("platform", "fail", f"unknown {platform!r}; use {' or '.join(PLATFORMS)}", 2)
        )
    elif platform == "appbuilder":
        checks += _token_checks(token or os.environ.get("APPBUILDER_TOKEN"))
        checks += _app_id_checks(app_id or os.environ.get("APPBUILDER_APP_ID"))
        gateway = base_url or os.environ.get("GATEWAY_URL_V2") or "https://qianfan.baidubce.com"
        checks.append(Check("gateway", "ok", gateway))
    else:
        for label, value, env in (
            ("base url", base_url, "OPENAI_BASE_URL"),
            ("model", model, "OPENAI_MODEL"),
        ):
            value = value or os.environ.get(env)
            checks.append(
                Check(label, "ok", value)
                if value
                else Check(
                    label, "fail", f"not set: pass --{label.replace(' ', '-')} or set {env}", 2
                )
            )

    adapter = None
    if not any(c.status == "fail" for c in checks):
        try:
            adapter = Connection(platform, app_id, base_url, token, model, api_key).open()
            checks.append(Check("reachable", "ok", adapter.check()))
        except BridgeError as exc:
            checks.append(Check("reachable", "fail", _fix_hint(exc), exit_code_for(exc)))
        finally:
            if adapter is not None:
                adapter.close()
    else:
        checks.append(Check("reachable", "warn", "not tried until the settings above are fixed"))

    if tools:
        try:
            toolbox = load_tools(list(tools))
            dialect = "openai" if platform == "openai" else "appbuilder"
            toolbox.manifests(dialect)
            names = ", ".join(toolbox.names()) or "(none)"
            checks.append(Check("tools", "ok", f"{len(toolbox)} valid: {names}"))
        except BridgeError as exc:
            checks.append(Check("tools", "fail", str(exc), 2))
    else:
        checks.append(Check("tools", "warn", "none given; pass --tools SPEC to check manifests"))

    marks = {"ok": "[green]✓[/green]", "warn": "[yellow]![/yellow]", "fail": "[red]✗[/red]"}
    for check in checks:
        detail = escape(redact(check.detail))
        console.print(f"{marks[check.status]} {check.name}: {detail}", markup=True)
    failures = [c for c in checks if c.status == "fail"]
    if failures:
        raise typer.Exit(failures[0].exit_code)
    console.print("[green]all good[/green]")
    raise typer.Exit(EXIT_OK)


def _fix_hint(exc: BridgeError) -> str:
    from bridge.errors import AuthenticationError, NotFoundError, PlatformConnectionError

    text = str(exc)
    if isinstance(exc, AuthenticationError):
        return f"{text} — the token was refused: check APPBUILDER_TOKEN/--token"
    if isinstance(exc, NotFoundError):
        return f"{text} — check the app id (is the app published?) and the gateway URL"
    if isinstance(exc, PlatformConnectionError):
        return f"{text} — check the gateway/base URL, proxies and the network"
    return text
