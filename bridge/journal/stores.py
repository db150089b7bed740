"""`open_journal`: a SQLite path or a PostgreSQL URL becomes the journal it names.

The daemon's ``--db`` (``TOOLBRIDGE_DB``) takes either; this is the one place that decides.
Nothing here imports psycopg: a SQLite daemon runs without the ``postgres`` extra.
"""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import unquote, urlsplit

from bridge.journal.leases import LeaseJournal
from bridge.journal.sqlite import SQLiteJournal

__all__ = ["db_label", "db_password", "is_postgres_url", "open_journal"]


def is_postgres_url(value: str) -> bool:
    """Whether `value` names a PostgreSQL database rather than a SQLite file."""
    return value.startswith(("postgresql://", "postgres://"))


def db_password(value: str) -> str | None:
    """The password written in a PostgreSQL URL (to register for redaction), else None."""
    if not is_postgres_url(value):
        return None
    try:
        password = urlsplit(value).password
    except ValueError:
        return None
    return unquote(password) if password else None


def db_label(value: str) -> str:
    """`value` fit for logs and the API: a URL without its password, or the path."""
    if not is_postgres_url(value):
        return value
    try:
        parts = urlsplit(value)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "postgresql://[unparsable URL]"
    user = f"{unquote(parts.username)}@" if parts.username else ""
    return f"postgresql://{user}{host}{port}{parts.path}"


def open_journal(
    url_or_path: str,
    *,
    on_write: Callable[[str], None] | None = None,
    pool_size: int | None = None,
    sqlite_sync: str = "full",
) -> LeaseJournal:
    """A `PostgresJournal` for a ``postgresql://`` URL, else a `SQLiteJournal` at the path.

    `pool_size` caps PostgreSQL connections (default `POOL_MAX`); a daemon passes its worker
    count and some room, so no worker waits for a connection while another holds one.
    `sqlite_sync` is a SQLite file's fsync policy (`SQLiteJournal`'s `synchronous`).

    Raises:
        UsageError: the journal cannot be opened (psycopg missing, database unreachable,
            schema newer than this toolbridge...); the message never holds the password.
    """
    if is_postgres_url(url_or_path):
        from bridge.journal.postgres import PostgresJournal

        if pool_size is None:
            return PostgresJournal(url_or_path, on_write=on_write)
        return PostgresJournal(url_or_path, on_write=on_write, pool_size=pool_size)
    return SQLiteJournal(url_or_path, on_write=on_write, synchronous=sqlite_sync)
