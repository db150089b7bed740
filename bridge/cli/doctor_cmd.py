"""`toolbridge doctor`: check the configuration and say what is wrong and how to fix it.

The checks are `bridge.doctor`'s; this module renders them (lines or JSON) and picks the exit
code.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated

import typer

from bridge.cli._app import app
from bridge.cli._common import (
    EXIT_FAILED,
    EXIT_OK,
    FROM_FLAGS,
    Connection,
    ToolsOpt,
    exit_code_for,
    with_platform_flags,
)

if TYPE_CHECKING:
    from bridge.doctor import Check

__all__ = ["doctor"]


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
    from bridge.doctor import diagnose

    checks = diagnose(
        connection.platform,
        connection.settings,
        emulator=connection.emulator,
        tools=tools,
        open_platform=connection.open,
    )
    _report(checks, as_json)


def _report(checks: list[Check], as_json: bool) -> None:
    failures = [c for c in checks if c.status == "fail"]
    code = _exit_code(failures[0]) if failures else EXIT_OK
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


def _exit_code(check: Check) -> int:
    return exit_code_for(check.error) if check.error is not None else EXIT_FAILED
