"""`toolbridge policy schema|check|replay`: the Cedar schema of the loaded tools' calls,
checking a policy file against it (misspelled tools, sources and arguments, types,
annotations), and replaying a candidate policy against the journal's calls."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from bridge.cli._app import Typer, app
from bridge.cli._common import EXIT_FAILED, EXIT_USAGE, AllowHostOpt, ToolsOpt, fail
from bridge.cli.db_cmd import DbOpt, _target

if TYPE_CHECKING:
    from bridge.access.decision import Decides
    from bridge.access.principal import Principal
    from bridge.access.replay import ReplayReport
    from bridge.journal.base import Journal
    from bridge.tools.spec import ToolSpec
    from bridge.tools.toolbox import Toolbox

__all__ = ["policy_app"]

policy_app = Typer(
    help="Cedar policies on tool calls: the schema to write them against, checking a file, "
    "and replaying one against the journal before enforcing it.",
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


@policy_app.command("replay")
def replay_cmd(
    file: Annotated[Path, typer.Argument(help="The candidate Cedar policy file (.cedar).")],
    db: DbOpt = None,
    tools: ToolsOpt = [],  # noqa: B006 - typer needs a literal default
    allow_host: AllowHostOpt = [],  # noqa: B006
    callers: Annotated[
        Path | None,
        typer.Option(
            "--callers",
            help="The caller file, for each caller's roles (without it, callers have none).",
            show_default=False,
        ),
    ] = None,
    platform: Annotated[
        str, typer.Option("--platform", help="context.platform for conversations' calls.")
    ] = "",
    examples: Annotated[
        int, typer.Option("--examples", min=0, help="Examples shown of each change.")
    ] = 5,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Evaluate a candidate policy against every call in the journal, and print how many
    decisions would change (allowed -> refused, allowed -> approval, refused -> allowed...)
    with the first examples of each.

    Each call is replayed as the caller whose message caused it (the caller of a direct call),
    with its arguments as journaled. Its decision then is the policy decision the audit record
    holds, or "allow" for a call that ran without one. --tools gives the tools' sources and
    flags (read_only, confirm, idempotent) and the arguments' types. A SQLite journal is read
    from a snapshot, so a running daemon is not disturbed. Changes nothing.
    """
    import json

    from bridge.access.policy import Policy
    from bridge.errors import UsageError

    try:
        policy = Policy.from_file(file)
        specs = {}
        if tools:
            with _toolbox(tools, allow_host) as box:
                specs = {spec.name: spec for spec in box}
        principal = _principals(callers)
        with _journal_snapshot(_target(db)) as journal:
            report = _replay(policy, journal, specs, platform, principal, examples)
    except UsageError as exc:
        fail(exc, code=EXIT_USAGE)
    if as_json:
        typer.echo(json.dumps(report.to_json(), ensure_ascii=False, indent=2))
        return
    typer.echo(_render_replay(report))


def _replay(
    policy: Decides,
    journal: Journal,
    specs: dict[str, ToolSpec],
    platform: str,
    principal: Callable[[str], Principal],
    examples: int,
) -> ReplayReport:
    from bridge.access.replay import decisions_on_record, journaled_calls, replay

    before = decisions_on_record(journal)
    calls = journaled_calls(journal, specs=specs, platform=platform, before=before)
    return replay(policy, calls, principal=principal, examples=examples)


_EFFECT_WORDS = {"allow": "allowed", "refuse": "refused", "approval": "approval"}


def _render_replay(report: ReplayReport) -> str:
    decided = ", ".join(
        f"{count} {_EFFECT_WORDS[effect]}"
        for effect in ("allow", "approval", "refuse")
        if (count := report.decisions.get(effect, 0))
    )
    lines = [f"replayed {report.calls} call(s): {decided or 'none'} under the candidate"]
    if not report.total_changed:
        lines.append("no decision would change")
        return "\n".join(lines)
    lines.append(f"{report.total_changed} decision(s) would change:")
    for (before, after), count in sorted(report.changed.items()):
        lines.append(f"  {_EFFECT_WORDS[before]} -> {_EFFECT_WORDS[after]}: {count}")
        for change in report.examples.get((before, after), []):
            call = change.call
            where = "direct call" if call.direct else f"conversation {call.facts.conversation}"
            why = ", ".join(change.after.policies)
            if change.after.reason:
                why = f"{why}: {change.after.reason}" if why else change.after.reason
            lines.append(
                f"    {where}, call {call.call_id}: {call.facts.tool} by {call.caller}"
                + (f" ({why})" if why else "")
            )
    return "\n".join(lines)


def _principals(callers: Path | None) -> Callable[[str], Principal]:
    from bridge.access.callers import Callers
    from bridge.access.principal import Principal

    book = Callers(callers) if callers is not None else None

    def principal(name: str) -> Principal:
        found = book.get(name) if book is not None else None
        return found if found is not None else Principal(name=name)

    return principal


@contextmanager
def _journal_snapshot(target: str) -> Iterator[Journal]:
    """The journal to read: PostgreSQL as it is; a SQLite file through a consistent copy made
    with SQLite's backup API (read-only on the original, so its owner is not disturbed)."""
    import sqlite3
    import tempfile

    from bridge.errors import UsageError
    from bridge.journal.stores import is_postgres_url, open_journal

    if is_postgres_url(target):
        journal = open_journal(target)
        try:
            yield journal
        finally:
            journal.close()
        return
    if target == ":memory:" or not Path(target).is_file():
        raise UsageError(f"no journal at {target}")
    with tempfile.TemporaryDirectory(prefix="toolbridge-replay-") as tmp:
        copy = Path(tmp) / "journal.db"
        try:
            with (
                sqlite3.connect(f"file:{target}?mode=ro", uri=True) as source,
                sqlite3.connect(copy) as dest,
            ):
                source.backup(dest)
        except sqlite3.Error as exc:
            raise UsageError(f"cannot read the journal {target}: {exc}") from None
        journal = open_journal(str(copy))
        try:
            yield journal
        finally:
            journal.close()
