"""`toolbridge manifest`: print the tool descriptions of Python files or modules."""

from __future__ import annotations

from typing import Annotated

import typer

from bridge.cli._app import app

__all__ = ["manifest"]

# Kept literal so that `toolbridge --help` does not import pydantic; a test checks it against
# bridge.tools.DIALECTS.
DIALECT_NAMES = ("appbuilder", "appbuilder-sdk", "openai", "openai-strict", "mcp")


@app.command("manifest")
def manifest(
    specs: Annotated[
        list[str],
        typer.Argument(
            metavar="SPEC...",
            help="Where tools come from, as --tools takes them: a .py file, a module name "
            "(package.module), a .yaml/.yml/.json HTTP tools manifest, 'openapi:PATH_OR_URL "
            "[--include X] [--server-url URL]', 'mcp:COMMAND ARGS' or mcp+http://HOST:PORT/PATH. "
            "Several allowed.",
            show_default=False,
        ),
    ],
    dialect: Annotated[
        str,
        typer.Option(
            "--dialect",
            "-d",
            help=f"Shape of the descriptions: {', '.join(DIALECT_NAMES)}.",
        ),
    ] = "appbuilder",
) -> None:
    """Print the JSON array of tool descriptions of every tool in SPEC (any source kind)."""
    import json
    import os
    import sys

    from bridge.cli._common import fail
    from bridge.errors import UsageError
    from bridge.loading import load_tools

    # As `python -m` does: modules next to where the command runs are importable.
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        if dialect not in DIALECT_NAMES:
            raise UsageError(
                f"unknown dialect {dialect!r}; valid dialects: {', '.join(DIALECT_NAMES)}"
            )
        manifests = load_tools(specs).manifests(dialect)
    except UsageError as exc:
        fail(exc)  # one red line on stderr, exit code 2
    typer.echo(json.dumps(manifests, ensure_ascii=False, indent=2))
