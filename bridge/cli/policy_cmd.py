"""`toolbridge policy schema|check`: the Cedar schema of the loaded tools' calls, and checking
a policy file against it (misspelled tools, sources and arguments, types, annotations)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from bridge.cli._app import Typer, app
from bridge.cli._common import EXIT_FAILED, EXIT_USAGE, AllowHostOpt, ToolsOpt, fail

if TYPE_CHECKING:
    from bridge.tools.toolbox import Toolbox

__all__ = ["policy_app"]

policy_app = Typer(
    help="Cedar policies on tool calls: the schema to write them against, and checking a file.",
    no_args_is_help=True,
)
app.add_typer(policy_app, name="policy")


@policy_app.command("schema")
def schema(
    tools: ToolsOpt = [],  # noqa: B006 - typer needs a literal default
    allow_host: AllowHostOpt = [],  # noqa: B006
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="Write the schema to this file.", show_default=False),
    ] = None,
) -> None:
    """Print the Cedar schema of calls to the loaded tools.

    Entities Caller (in Role), Role, Source and Tool (in Source; read_only, confirm,
    idempotent), the action call, and its context: arguments (every argument of every tool,
    optional, typed from its JSON Schema), platform, conversation, end_user.
    """
    from bridge.access.policy import policy_schema
    from bridge.errors import UsageError

    try:
        with _toolbox(tools, allow_host) as box:
            text = policy_schema(box)
        if output is None:
            typer.echo(text, nl=False)
            return
        try:
            output.write_text(text, encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"cannot write {output}: {exc}") from None
    except UsageError as exc:
        fail(exc, code=EXIT_USAGE)
    typer.echo(f"wrote {output}", err=True)


@policy_app.command("check")
def check(
    file: Annotated[Path, typer.Argument(help="The Cedar policy file (.cedar).")],
    tools: ToolsOpt = [],  # noqa: B006 - typer needs a literal default
    allow_host: AllowHostOpt = [],  # noqa: B006
) -> None:
    """Check a policy file against the loaded tools.

    Exit 0 ("ok: N policies"), or 1 with one line per error naming its line: a parse error,
    an unknown Tool::"..." or Source::"...", an argument no tool has, a comparison of the wrong
    type, an optional argument read without `has`, an @approval other than "required", an @id
    given twice.
    """
    from bridge.access.policy import Policy, check_policy
    from bridge.errors import UsageError

    try:
        try:
            text = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"cannot read the policy file {file}: {exc}") from None
        with _toolbox(tools, allow_host) as box:
            errors = check_policy(text, box, source=str(file))
    except UsageError as exc:
        fail(exc, code=EXIT_USAGE)
    if errors:
        for error in errors:
            typer.echo(f"error: {error}", err=True)
        typer.echo(f"{len(errors)} error(s) in {file}", err=True)
        raise typer.Exit(EXIT_FAILED)
    typer.echo(f"ok: {len(Policy.from_text(text, source=str(file)))} policies")


def _toolbox(tools: list[str], allow_host: list[str]) -> Toolbox:
    from bridge.cli._common import build_toolbox
    from bridge.errors import UsageError

    # As `toolbridge call` does: modules next to the cwd are importable.
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    if not tools:
        raise UsageError(
            "name the tools the policies are for: --tools SPEC (repeat for more), as for "
            "`toolbridge serve`"
        )
    return build_toolbox(tools, allow_hosts=allow_host)
