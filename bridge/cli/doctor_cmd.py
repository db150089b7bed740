"""`toolbridge doctor`: check the configuration and say what is wrong and how to fix it.

What to check comes from the platform registry: each setting of the chosen platform (present,
well-formed, secrets never shown), then the adapter's own `check()`, then the tools: loaded and
valid for the platform's dialect, and, where the platform can list the tools its agent has
configured server-side (`remote_tool_names()`), compared with the loaded ones.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Literal
from urllib.parse import urlsplit, urlunsplit

import typer

from bridge.cli._app import app
from bridge.cli._common import (
    EXIT_OK,
    EXIT_USAGE,
    FROM_FLAGS,
    Connection,
    ToolsOpt,
    exit_code_for,
    with_platform_flags,
)
from bridge.errors import BridgeError

if TYPE_CHECKING:
    from bridge.platforms.registry import PlatformEntry, Setting

__all__ = ["Check", "doctor"]


@dataclass
class Check:
    """One line of the report."""

    name: str
    status: Literal["ok", "warn", "fail"]
    detail: str
    exit_code: int = EXIT_OK


@app.command()
@with_platform_flags()
def doctor(
    tools: ToolsOpt = [],  # noqa: B006 - typer needs a literal default
    connection: Connection = FROM_FLAGS,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="Print one JSON object: {ok, exit_code, checks: [{name, status, detail}]}.",
        ),
    ] = False,
) -> None:
    """Check the platform's settings, reach it, check the tools, and explain how to fix problems.

    Exit codes: 0 every check passed (warnings allowed); otherwise the code of the first failure
    (2 configuration, 3 credentials refused, 4 unreachable, 1 anything else).
    """
    from bridge.platforms.registry import PLATFORMS

    checks: list[Check] = []
    entry = PLATFORMS.get(connection.platform)
    remote: list[str] | None = None
    if entry is None:
        known = " or ".join(PLATFORMS)
        checks.append(Check("platform", "fail", f"unknown {connection.platform!r}; use {known}", 2))
    else:
        checks += _platform_checks(entry, connection)
    # The tools are loaded first (reported after reachability): with --emulator, an emulated
    # agent whose tools are configured server-side gets them declared, as `run` does.
    local: list[str] | None = None
    manifests: list[dict[str, Any]] = []
    if tools:
        local, manifests, tools_check = _tools_check(tools, entry)
    else:
        tools_check = Check("tools", "warn", "none given; pass --tools SPEC to check manifests")
    if entry is not None and not any(c.status == "fail" for c in checks):
        reachable, remote = _reachable(connection, entry, manifests)
        checks += reachable
    else:
        checks.append(Check("reachable", "warn", "not tried until the settings above are fixed"))
    checks.append(tools_check)
    if remote is not None:
        checks.append(_remote_tools_check(remote, local))
    _report(checks, as_json)


def _report(checks: list[Check], as_json: bool) -> None:
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
        # bce-v3/ALTAK-…/…), never a secret's value, or error messages already redacted when
        # they were raised.
        console.print(f"{marks[check.status]} {check.name}: {escape(check.detail)}", markup=True)
    if failures:
        raise typer.Exit(code)
    console.print("[green]all good[/green]")
    raise typer.Exit(EXIT_OK)


def _platform_checks(entry: PlatformEntry, connection: Connection) -> list[Check]:
    """The platform's settings one by one, or the emulator that replaces them."""
    try:
        entry.refuse_foreign(connection.settings)
    except BridgeError as exc:
        return [Check("flags", "fail", str(exc), exit_code_for(exc))]
    if connection.emulator:
        try:
            entry.require_emulator()
        except BridgeError as exc:
            return [Check("platform", "fail", str(exc), exit_code_for(exc))]
        return [Check("platform", "ok", f"the embedded {entry.short_title} emulator (--emulator)")]
    offline = ", or pass --emulator to check the embedded emulator instead"
    # The stream limits every platform shares are listed only when given (then checked).
    return [
        _setting_check(
            setting, setting.given(connection.settings), offline * bool(entry.emulator_protocol)
        )
        for setting in entry.settings
        if not setting.shared or setting.given(connection.settings) is not None
    ]


def _setting_check(setting: Setting, value: Any, offline: str) -> Check:
    name = setting.label
    if value is None:
        if setting.required:
            where = f"pass {setting.flag}" + (f" or set {setting.env}" if setting.env else "")
            return Check(name, "fail", f"not set: {where} ({setting.help}){offline}", EXIT_USAGE)
        if setting.default is not None:
            return Check(name, "ok", f"{setting.default} (the default)")
        return Check(name, "ok", f"not set (optional: {setting.help})")
    problem = setting.problem(value)
    if problem is not None:
        return Check(name, "fail", problem, EXIT_USAGE)
    text = str(setting.parse(value)).lower() if setting.kind == "bool" else str(value)
    shown = "set" if setting.secret else _shown_url(text) if setting.kind == "url" else text
    if setting.shape is not None and not re.search(setting.shape, text):
        if setting.secret:
            return Check(name, "warn", f"set, but it {setting.shape_hint}")
        quoted = shown if setting.kind == "url" else repr(shown)
        return Check(name, "warn", f"{quoted} {setting.shape_hint}")
    return Check(name, "ok", "set and well-formed" if setting.secret else shown)


def _shown_url(url: str) -> str:
    """A URL as printed: without a password (`https://user:secret@host` happens)."""
    parts = urlsplit(url)
    if parts.password:
        netloc = parts.netloc.replace(f":{parts.password}@", ":[secure]@")
        return urlunsplit(parts._replace(netloc=netloc))
    return url


def _reachable(
    connection: Connection, entry: PlatformEntry, manifests: list[dict[str, Any]]
) -> tuple[list[Check], list[str] | None]:
    """The adapter's `check()`, then the tools its agent has configured (None: it cannot say);
    `manifests` are the loaded tools, declared to an emulated agent that needs them."""
    from bridge.errors import NotFoundError
    from bridge.platforms.base import ListsRemoteTools

    adapter = None
    try:
        adapter = connection.open(manifests)
        try:
            reached = Check("reachable", "ok", adapter.check())
        except NotFoundError as exc:
            # Not every OpenAI-compatible server lists its models; what matters is that chat
            # completions answer.
            fallback = getattr(adapter, "check_chat", None)
            if fallback is None:
                raise
            try:
                answered = fallback()
            except BridgeError:
                raise exc from None
            where = getattr(adapter, "base_url", "the server")
            reached = Check(
                "reachable", "warn", f"{where}/models is not served (404), but {answered}"
            )
        if not isinstance(adapter, ListsRemoteTools):
            return [reached], None
        try:
            remote = adapter.remote_tool_names()
        except BridgeError as exc:
            failed = Check("remote tools", "fail", _fix_hint(exc, entry), exit_code_for(exc))
            return [reached, failed], None
        return [reached], None if remote is None else [str(name) for name in remote]
    except BridgeError as exc:
        return [Check("reachable", "fail", _fix_hint(exc, entry), exit_code_for(exc))], None
    finally:
        if adapter is not None:
            adapter.close()


def _tools_check(
    specs: list[str], entry: PlatformEntry | None
) -> tuple[list[str] | None, list[dict[str, Any]], Check]:
    """The loaded tools' names and Chat Completions manifests, and the report line."""
    from bridge.loading import load_tools
    from bridge.platforms.registry import DEFAULT_PLATFORM, PLATFORMS

    dialect = str((entry or PLATFORMS[DEFAULT_PLATFORM]).load().dialect)
    try:
        with load_tools(list(specs)) as toolbox:
            toolbox.manifests(dialect)
            names = list(toolbox.names())
            manifests = toolbox.manifests("openai")
    except BridgeError as exc:
        return None, [], Check("tools", "fail", str(exc), EXIT_USAGE)
    valid = f"{len(names)} valid: {', '.join(names) or '(none)'}"
    return names, manifests, Check("tools", "ok", valid)


def _remote_tools_check(remote: list[str], local: list[str] | None) -> Check:
    """The agent's server-side tools against the loaded ones: a call to a tool that is not
    loaded fails, a loaded tool the agent does not know is never called."""
    listed = ", ".join(remote) or "(none)"
    if local is None:
        return Check(
            "remote tools",
            "warn",
            f"the agent has {len(remote)} configured: {listed}; pass --tools SPEC to compare "
            "them with yours",
        )
    missing = [name for name in remote if name not in local]
    extra = [name for name in local if name not in remote]
    unused = (
        f"; loaded here but not configured on the agent (never called): {', '.join(extra)}"
        if extra
        else ""
    )
    if missing:
        return Check(
            "remote tools",
            "fail",
            f"the agent can call {', '.join(missing)}, not loaded here (those calls would get "
            f"an error): load them with --tools{unused}",
            EXIT_USAGE,
        )
    if extra:
        return Check(
            "remote tools", "warn", f"every tool the agent has is loaded: {listed}{unused}"
        )
    return Check("remote tools", "ok", f"every tool the agent has is loaded: {listed}")


def _fix_hint(exc: BridgeError, entry: PlatformEntry) -> str:
    from bridge.errors import AuthenticationError, NotFoundError, PlatformConnectionError

    kinds = (
        (AuthenticationError, "auth"),
        (NotFoundError, "not_found"),
        (PlatformConnectionError, "connect"),
    )
    hint = next((entry.hints.get(key) for cls, key in kinds if isinstance(exc, cls)), None)
    return f"{exc} — {hint}" if hint else str(exc)
