"""`toolbridge db status|upgrade`: a journal's schema version, and applying what is missing.

The daemon migrates at start anyway (under an advisory lock on PostgreSQL); these let an
operator see and apply an upgrade before rolling out new daemons. ``--db`` takes what
``toolbridge serve --db`` takes: a SQLite file or a ``postgresql://`` URL (``TOOLBRIDGE_DB``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from bridge.cli._app import Typer, app
from bridge.cli._common import fail
from bridge.errors import UsageError, register_secret

__all__ = ["db_app"]

db_app = Typer(
    help="The journal: status (who holds it, schema version, pending steps) and upgrade.",
    no_args_is_help=True,
)
app.add_typer(db_app, name="db")

DbOpt = Annotated[
    str | None,
    typer.Option(
        "--db",
        help="A SQLite journal file or a postgresql://user@host/db URL (env TOOLBRIDGE_DB; "
        "default: the daemon's default SQLite file). Passwords: the URL, PGPASSWORD or "
        "~/.pgpass.",
        envvar="TOOLBRIDGE_DB",
        show_default=False,
    ),
]


def _target(db: str | None) -> str:
    from bridge.journal.stores import db_password

    if db is None:
        from bridge.daemon.settings import default_db

        db = default_db()
    register_secret(db_password(db))
    return db


def _sqlite_version(path: str) -> int:
    import sqlite3  # here: `toolbridge --help` imports this module

    if not Path(path).exists():
        return 0
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
            return int(db.execute("PRAGMA user_version").fetchone()[0])
    except sqlite3.Error as exc:
        raise UsageError(f"cannot read the journal {path}: {exc}") from None


@db_app.command("status")
def status(db: DbOpt = None) -> None:
    """Print who holds the journal, its schema version and the pending migrations.

    Who holds it: a SQLite file's daemon (pid, address, since), PostgreSQL's live replicas.
    Reads only.
    """
    # Imported here: registering the command must not load the journal (and pydantic) for
    # every other command's start-up.
    from bridge.journal.stores import db_label, is_postgres_url

    target = _target(db)
    try:
        if is_postgres_url(target):
            from bridge.journal.postgres_migrations import schema_status

            found = schema_status(target)
            version, latest, pending = found.version, found.latest, found.pending
        else:
            from bridge.journal.migrations import SCHEMA_VERSION

            version, latest = _sqlite_version(target), SCHEMA_VERSION
            pending = list(range(version + 1, latest + 1))
        owners = _owners(target)
    except UsageError as exc:
        fail(exc)
    typer.echo(f"journal: {db_label(target)}")
    for line in owners:
        typer.echo(line)
    typer.echo(f"schema version: {version} (this toolbridge: {latest})")
    if version > latest:
        typer.echo("newer than this toolbridge: upgrade toolbridge")
        raise typer.Exit(1)
    if pending:
        typer.echo("pending migrations: " + ", ".join(str(step) for step in pending))
    else:
        typer.echo("pending migrations: none")


def _owners(target: str) -> list[str]:
    """Who holds the journal: a SQLite file's daemon, or PostgreSQL's live replicas."""
    from bridge.journal.stores import is_postgres_url

    if target == ":memory:":
        return []
    if not is_postgres_url(target):
        from bridge.journal.owner import holder

        owner = holder(target)
        if owner is None:
            return ["held by: nobody (no daemon has it open)"]
        since = f", since {owner.since}" if owner.since else ""
        return [f"held by: {owner.describe()}{since}"]
    from bridge.journal.postgres_replicas import replica_status

    replicas = replica_status(target)
    live = [r for r in replicas if r.live]
    lines = [f"live replicas: {len(live)}" + ("" if live else " (none)")]
    for status in replicas:
        owner = status.owner
        since = f", since {owner.since}" if owner.since else ""
        state = "live" if status.live else "stale"
        lines.append(
            f"  {status.replica}: {state}, {owner.describe(host=True)}{since}, {status.reason}"
        )
    return lines


@db_app.command("upgrade")
def upgrade(db: DbOpt = None) -> None:
    """Apply the journal's pending migrations (safe while daemons start: one applies them)."""
    from bridge.journal.stores import db_label, is_postgres_url

    target = _target(db)
    try:
        if is_postgres_url(target):
            from bridge.journal.postgres_migrations import migrate

            applied = migrate(target)
        else:
            from bridge.journal.owner import JournalLock
            from bridge.journal.sqlite import SQLiteJournal

            # Never under a running daemon: it owns the file (and holds it while this runs).
            with JournalLock.acquire(
                target,
                command="toolbridge db upgrade",
                advice="stop it first, then upgrade (a daemon upgrades its journal at start)",
            ):
                before = _sqlite_version(target)
                SQLiteJournal(target).close()
                applied = list(range(before + 1, _sqlite_version(target) + 1))
    except UsageError as exc:
        fail(exc)
    label = db_label(target)
    if applied:
        typer.echo(f"journal {label}: applied " + ", ".join(str(step) for step in applied))
    else:
        typer.echo(f"journal {label}: already current")
