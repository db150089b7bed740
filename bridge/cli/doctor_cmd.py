"""`toolbridge doctor`: check the configuration and say what is wrong and how to fix it."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from typing import Annotated, Literal
from urllib.parse import urlsplit, urlunsplit

import typer

from bridge.cli._app import app
from bridge.cli._common import (
    EXIT_OK,
    ApiKeyOpt,
    AppIdOpt,
    BaseUrlOpt,
    Connection,
    EmulatorOpt,
    ModelOpt,
    PlatformOpt,
    TokenOpt,
    ToolsOpt,
    exit_code_for,
)
from bridge.errors import BridgeError

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
                "API Key; it looks like bce-v3/ALTAK-…/…), or pass --emulator to check the "
                "embedded emulator instead",
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
    emulator: EmulatorOpt = False,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="Print one JSON object: {ok, exit_code, checks: [{name, status, detail}]}.",
        ),
    ] = False,
) -> None:
    """Check configuration (token, app id, gateway, tools) and explain how to fix problems.

    Exit codes: 0 every check passed (warnings allowed); otherwise the code of the first failure
    (2 configuration, 3 credentials refused, 4 unreachable, 1 anything else).
    """
    from bridge.loading import load_tools
    from bridge.platforms import PLATFORMS

    checks: list[Check] = []
    if platform not in PLATFORMS:
        checks.append(
            Check("platform", "fail", f"unknown {platform!r}; use {' or '.join(PLATFORMS)}", 2)
        )
    elif emulator:
        checks.append(Check("platform", "ok", "the embedded AppBuilder emulator (--emulator)"))
    elif platform == "appbuilder":
        checks += _token_checks(token or os.environ.get("APPBUILDER_TOKEN"))
        checks += _app_id_checks(app_id or os.environ.get("APPBUILDER_APP_ID"))
        gateway = base_url or os.environ.get("GATEWAY_URL_V2") or "https://qianfan.baidubce.com"
        checks.append(Check("gateway", "ok", _shown_url(gateway)))
    else:
        checks += _openai_settings_checks(base_url, model)

    if not any(c.status == "fail" for c in checks):
        connection = Connection(platform, app_id, base_url, token, model, api_key, emulator)
        checks.append(_reachable(connection))
    else:
        checks.append(Check("reachable", "warn", "not tried until the settings above are fixed"))

    if tools:
        try:
            with load_tools(list(tools)) as toolbox:
                dialect = "openai" if platform == "openai" else "appbuilder"
                toolbox.manifests(dialect)
                names = ", ".join(toolbox.names()) or "(none)"
                checks.append(Check("tools", "ok", f"{len(toolbox)} valid: {names}"))
        except BridgeError as exc:
            checks.append(Check("tools", "fail", str(exc), 2))
    else:
        checks.append(Check("tools", "warn", "none given; pass --tools SPEC to check manifests"))

    failures = [c for c in checks if c.status == "fail"]
    code = failures[0].exit_code if failures else EXIT_OK
    if as_json:
        typer.echo(
            json.dumps(
                {
                    "ok": not failures,
                    "exit_code": code,
                    "checks": [
                        {"name": c.name, "status": c.status, "detail": c.detail} for c in checks
                    ],
                },
                ensure_ascii=False,
            )
        )
        raise typer.Exit(code)
    from rich.console import Console
    from rich.markup import escape

    console = Console(highlight=False, soft_wrap=True)
    marks = {"ok": "[green]✓[/green]", "warn": "[yellow]![/yellow]", "fail": "[red]✗[/red]"}
    for check in checks:
        # Not redacted here: details are our own words (the token hint shows the shape
        # bce-v3/ALTAK-…/…) or error messages already redacted when they were raised.
        console.print(f"{marks[check.status]} {check.name}: {escape(check.detail)}", markup=True)
    if failures:
        raise typer.Exit(code)
    console.print("[green]all good[/green]")
    raise typer.Exit(EXIT_OK)


def _shown_url(url: str) -> str:
    """A URL as printed: without a password (`https://user:secret@host` happens)."""
    parts = urlsplit(url)
    if parts.password:
        netloc = parts.netloc.replace(f":{parts.password}@", ":[secure]@")
        return urlunsplit(parts._replace(netloc=netloc))
    return url


def _openai_settings_checks(base_url: str | None, model: str | None) -> list[Check]:
    checks: list[Check] = []
    url = base_url or os.environ.get("OPENAI_BASE_URL")
    if not url:
        checks.append(
            Check(
                "base url",
                "fail",
                "not set: pass --base-url or set OPENAI_BASE_URL (the server's API root, e.g. "
                "http://127.0.0.1:8000/v1 for vLLM, http://127.0.0.1:11434/v1 for Ollama)",
                2,
            )
        )
    elif not url.rstrip("/").endswith("/v1"):
        checks.append(
            Check(
                "base url",
                "warn",
                f"{_shown_url(url)} does not end in /v1, as OpenAI-compatible API roots "
                "usually do (chat completions are POSTed to BASE_URL/chat/completions)",
            )
        )
    else:
        checks.append(Check("base url", "ok", _shown_url(url)))
    chosen = model or os.environ.get("OPENAI_MODEL")
    checks.append(
        Check("model", "ok", chosen)
        if chosen
        else Check(
            "model",
            "fail",
            "not set: pass --model or set OPENAI_MODEL (a name the server serves; its "
            "GET /v1/models lists them)",
            2,
        )
    )
    return checks


def _reachable(connection: Connection) -> Check:
    from bridge.errors import NotFoundError
    from bridge.platforms.openai_chat import OpenAIChatPlatform

    adapter = None
    try:
        adapter = connection.open()
        try:
            return Check("reachable", "ok", adapter.check())
        except NotFoundError as exc:
            if not isinstance(adapter, OpenAIChatPlatform):
                raise
            # Not every compatible server lists its models; what matters is that chat
            # completions answer.
            try:
                answered = adapter.check_chat()
            except BridgeError:
                raise exc from None
            return Check(
                "reachable",
                "warn",
                f"{adapter.base_url}/models is not served (404), but {answered}",
            )
    except BridgeError as exc:
        return Check("reachable", "fail", _fix_hint(exc, connection.platform), exit_code_for(exc))
    finally:
        if adapter is not None:
            adapter.close()


def _fix_hint(exc: BridgeError, platform: str) -> str:
    from bridge.errors import AuthenticationError, NotFoundError, PlatformConnectionError

    text = str(exc)
    if platform == "openai":
        if isinstance(exc, AuthenticationError):
            return f"{text} — the API key was refused: check OPENAI_API_KEY/--api-key"
        if isinstance(exc, NotFoundError):
            return (
                f"{text} — check --base-url/OPENAI_BASE_URL: it is the API root ending in /v1 "
                "(e.g. http://127.0.0.1:8000/v1), and the model name"
            )
        if isinstance(exc, PlatformConnectionError):
            return (
                f"{text} — start the server (vLLM, Ollama, llama.cpp...) or fix "
                "--base-url/OPENAI_BASE_URL"
            )
        return text
    if isinstance(exc, AuthenticationError):
        return f"{text} — the token was refused: check APPBUILDER_TOKEN/--token"
    if isinstance(exc, NotFoundError):
        return f"{text} — check the app id (is the app published?) and the gateway URL"
    if isinstance(exc, PlatformConnectionError):
        return f"{text} — check the gateway/base URL, proxies and the network"
    return text
