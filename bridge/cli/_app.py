"""The typer application every command module registers on."""

from __future__ import annotations

import logging
from typing import Annotated

import typer

__all__ = ["app", "state"]

app = typer.Typer(
    name="toolbridge",
    help="Run a cloud agent's tool calls on local functions.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)

state: dict[str, bool] = {"verbose": False}


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        typer.echo(f"toolbridge {version('toolbridge')}")
        raise typer.Exit()


@app.callback()
def main(
    ctx: typer.Context,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Show details of errors and debug logs.")
    ] = False,
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version."),
    ] = False,
) -> None:
    """Run a cloud agent's tool calls on local functions."""
    state["verbose"] = verbose
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    # basicConfig leaves an already configured root alone (an embedding app, a test runner):
    # -v must still bring the library's debug records, tracebacks included. Both settings
    # last as long as the command, so that the process embedding it gets its logging back.
    library = logging.getLogger("bridge")
    level = library.level
    library.setLevel(logging.DEBUG if verbose else level)
    ctx.call_on_close(lambda: library.setLevel(level))
    if not verbose and ctx.invoked_subcommand in _TOOL_LINES:
        dispatch = logging.getLogger("bridge.tools.dispatch")
        shown = _ShownElsewhere()
        dispatch.addFilter(shown)
        ctx.call_on_close(lambda: dispatch.removeFilter(shown))


_TOOL_LINES = frozenset({"run", "chat", "demo", "call"})
"""Commands that print a line per tool call; `serve` logs failures instead."""


class _ShownElsewhere(logging.Filter):
    """Drops log records the commands already show in their own words: a tool's failure is
    its `✗` line (the dispatcher's warning and traceback come back with `-v`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not getattr(record, "tool_failure", False)
