"""`toolbridge audit verify|head|export`: check the audit record's hash chains, print their
heads, export the entries as JSON lines.

``--db`` takes what ``toolbridge db`` takes: a SQLite file (read-only: a daemon may own it
meanwhile) or a ``postgresql://`` URL (read as it is, never migrated).
"""

from __future__ import annotations

import re
import sys
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Annotated

import typer

from bridge.cli._app import Typer, app
from bridge.cli._common import fail
from bridge.cli.db_cmd import DbOpt, _target
from bridge.errors import UsageError

if TYPE_CHECKING:
    from bridge.journal.audit_readers import AuditReader

__all__ = ["audit_app", "parse_since"]

audit_app = Typer(
    help="The audit record: verify its hash chains, print their heads, export its entries.",
    no_args_is_help=True,
)
app.add_typer(audit_app, name="audit")

ChainOpt = Annotated[
    str | None,
    typer.Option(
        "--chain",
        help='Only this chain ("local" for a SQLite journal, a replica id on PostgreSQL).',
        show_default=False,
    ),
]

_AGE = re.compile(r"^\s*(\d+)\s*([smhdw])\s*$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_since(text: str, *, now: datetime | None = None) -> datetime:
    """``--since``: an ISO 8601 time (UTC unless it says otherwise) or an age (``90s``,
    ``30m``, ``24h``, ``7d``, ``2w``) counted back from now.

    Raises:
        UsageError: neither.
    """
    age = _AGE.match(text)
    if age is not None:
        delta = timedelta(**{_UNITS[age.group(2)]: int(age.group(1))})
        return (now or datetime.now(timezone.utc)) - delta
    try:
        value = datetime.fromisoformat(text.strip())
    except ValueError:
        raise UsageError(
            f"--since {text!r}: expected an ISO time (2026-01-31T09:00:00Z) or an age such as "
            "30m, 24h or 7d"
        ) from None
    return value if value.tzinfo is not None else value.replace(tzinfo=timezone.utc)


def _reader(db: str | None) -> AuditReader:
    from bridge.journal.audit_readers import open_audit_reader

    return open_audit_reader(_target(db))


@audit_app.command("verify")
def verify(
    db: DbOpt = None,
    chain: ChainOpt = None,
    expect_head: Annotated[
        list[str] | None,
        typer.Option(
            "--expect-head",
            metavar="[CHAIN:]SEQ:HASH",
            help="A head printed earlier by `audit head` (kept elsewhere): the chain must "
            "still reach it, which catches entries cut off its end. Repeatable.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Recompute every hash chain; exit 1 naming the first bad entry of a chain.

    Prints ``intact: N entries in K chains, head CHAIN:SEQ:HASH`` when all hold.
    """
    from bridge.access.audit import ExpectedHead, verify_audit

    try:
        expected = [ExpectedHead.parse(text) for text in expect_head or ()]
        with _reader(db) as reader:
            report = verify_audit(reader, chain=chain, expect=expected)
    except UsageError as exc:
        fail(exc)
    if report.ok:
        typer.echo(report.summary())
        return
    chains = len(report.heads)
    typer.echo(
        f"tampered: {report.entries} entries in {chains} chain{'' if chains == 1 else 's'}, "
        f"{len(report.problems)} with a bad entry"
    )
    for problem in report.problems:
        typer.echo(f"  {problem.describe()}")
    raise typer.Exit(1)


@audit_app.command("head")
def head(db: DbOpt = None, chain: ChainOpt = None) -> None:
    """Print each chain's head as CHAIN:SEQ:HASH: keep it elsewhere, and give it to
    ``audit verify --expect-head`` later to catch entries cut off the chain's end."""
    try:
        with _reader(db) as reader:
            names = [chain] if chain is not None else reader.audit_chains()
            tails = [reader.audit_tail(name) for name in names]
    except UsageError as exc:
        fail(exc)
    found = [tail for tail in tails if tail is not None]
    if not found:
        typer.echo("no audit entries", err=True)
        return
    for tail in found:
        typer.echo(f"{tail.chain}:{tail.seq}:{tail.hash}")


@audit_app.command("export")
def export(
    db: DbOpt = None,
    since: Annotated[
        str | None,
        typer.Option(
            "--since",
            help="Only entries at or after this time: ISO 8601 (UTC unless it says) or an "
            "age such as 30m, 24h, 7d.",
            show_default=False,
        ),
    ] = None,
    chain: ChainOpt = None,
    format: Annotated[
        str, typer.Option("--format", help="Output format (jsonl: one JSON object per line).")
    ] = "jsonl",
) -> None:
    """Stream the entries to stdout, one JSON object per line, in chain order: arguments
    masked, their SHA-256 always, each entry's hash."""
    import json

    from bridge.access.audit import export_audit

    try:
        if format != "jsonl":
            raise UsageError(f"--format {format!r}: the only format is jsonl")
        start = parse_since(since) if since is not None else None
        with _reader(db) as reader:
            out = sys.stdout
            for entry in export_audit(reader, since=start, chain=chain):
                out.write(json.dumps(entry, ensure_ascii=False) + "\n")
            out.flush()
    except UsageError as exc:
        fail(exc)
