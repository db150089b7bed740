"""Connecting to the PostgreSQL journal: psycopg (imported lazily), the URL without its
password, connections and the pool's hooks, and statement parameters as PostgreSQL takes them.

Secrets: the password (in the URL, ``PGPASSWORD`` or ``~/.pgpass``, which libpq reads itself)
is never in `repr`, logs or errors: `safe_dsn` drops it and every error text goes through
`clean_error` (`bridge.errors.redact`, with the password masked).
"""

from __future__ import annotations

import select
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from bridge.errors import UsageError, redact

if TYPE_CHECKING:
    import psycopg

__all__ = [
    "CHECKOUT_TIMEOUT",
    "CONNECT_TIMEOUT",
    "INSTALL_HINT",
    "check_if_idle",
    "clean_error",
    "configure_connection",
    "connect",
    "dsn_password",
    "load_psycopg",
    "mark_returned",
    "pg_params",
    "pg_sql",
    "pg_text",
    "safe_dsn",
]

INSTALL_HINT = "pip install 'toolbridge[postgres]'"
# One key for every toolbridge migration, on any database: pg_advisory_lock is per database.
CONNECT_TIMEOUT = 30
CHECKOUT_TIMEOUT = 10
IDLE_CHECK_SECONDS = 5.0
"""A pooled connection idle for longer than this is pinged before use (`check_if_idle`): a
server that restarted or failed over closed its connections, which the poll sees without a
round trip; the ping is for one dropped without a word (a firewall, a moved address)."""
_RETURNED_AT = "_toolbridge_returned_at"


def load_psycopg() -> Any:
    """The psycopg module, or a `UsageError` saying how to install it."""
    try:
        import psycopg
    except ImportError:
        raise UsageError(
            f"a postgresql:// journal needs psycopg, which is not installed: {INSTALL_HINT}"
        ) from None
    return psycopg


def _parts(dsn: str) -> dict[str, Any]:
    from psycopg.conninfo import conninfo_to_dict

    try:
        return conninfo_to_dict(dsn)
    except Exception:
        raise UsageError(
            "the PostgreSQL URL cannot be parsed; expected postgresql://user[:password]@host"
            "[:port]/database[?options]"
        ) from None


def safe_dsn(dsn: str) -> str:
    """`dsn` without its password, for logs, errors, `repr` and the API."""
    load_psycopg()
    from psycopg.conninfo import make_conninfo

    parts = _parts(dsn)
    parts.pop("password", None)
    host = parts.get("host", "")
    port = parts.get("port", "")
    user = parts.get("user", "")
    database = parts.get("dbname", "")
    if set(parts) <= {"host", "port", "user", "dbname"}:
        who = f"{user}@" if user else ""
        where = f"{host}:{port}" if port else str(host)
        return f"postgresql://{who}{where}/{database}"
    return make_conninfo("", **parts)


def dsn_password(dsn: str) -> str | None:
    """The password written in `dsn`, if any (registered as a secret by its users)."""
    password = _parts(dsn).get("password")
    return str(password) if password else None


def clean_error(dsn: str, exc: BaseException) -> str:
    """An error's text with the password masked (psycopg may echo the conninfo)."""
    text = str(exc).strip() or type(exc).__name__
    password = dsn_password(dsn)
    if password:
        text = text.replace(password, "[secure]")
    return redact(text)


def pg_text(value: Any) -> Any:
    """A parameter as PostgreSQL can store it (text without NUL)."""
    # PostgreSQL text cannot hold NUL, which hostile input (an answer, a tool output, an id)
    # may contain; SQLite stores it. Replaced, not rejected: a run must not fail on it.
    return value.replace("\x00", "\ufffd") if isinstance(value, str) else value


def pg_params(params: Sequence[Any]) -> list[Any]:
    """Every parameter through `pg_text`."""
    return [pg_text(value) for value in params]


_STATEMENTS: dict[str, str] = {}


def pg_sql(statement: str) -> str:
    """A shared statement (``?`` placeholders, no ``%``) as psycopg takes it (``%s``).

    Translated once per statement text; statements written for PostgreSQL alone (``%s``)
    pass unchanged.
    """
    translated = _STATEMENTS.get(statement)
    if translated is None:
        translated = _STATEMENTS[statement] = statement.replace("?", "%s")
    return translated


def connect(dsn: str) -> psycopg.Connection[Any]:
    """A new autocommit connection, or a `UsageError` without the password."""
    pg = load_psycopg()
    try:
        conn: psycopg.Connection[Any] = pg.connect(
            dsn, autocommit=True, connect_timeout=CONNECT_TIMEOUT
        )
    except pg.Error as exc:
        raise UsageError(
            f"cannot connect to the journal {safe_dsn(dsn)}: {clean_error(dsn, exc)}"
        ) from None
    return conn


def configure_connection(conn: psycopg.Connection[Any]) -> None:
    # A commit must be on disk before the next step (a lost "started" would let a call run
    # twice), whatever the server's or the role's default says: SQLite's synchronous=FULL.
    conn.execute("SET synchronous_commit = on")
    conn.commit()
    mark_returned(conn)


def mark_returned(conn: psycopg.Connection[Any]) -> None:
    """Note when the connection was last known to work (as it goes back to the pool)."""
    setattr(conn, _RETURNED_AT, time.monotonic())


def check_if_idle(conn: psycopg.Connection[Any]) -> None:
    """The pool's ``check``: ping a connection (one round trip) only when the server may have
    dropped it: it sat idle in the pool for more than `IDLE_CHECK_SECONDS`, or something
    arrived on its socket while it was idle (a backend ended by a server restart or a
    failover says so and closes the socket). Pinging on every checkout cost one round trip
    per step, about 21 per conversation."""
    idle = time.monotonic() - getattr(conn, _RETURNED_AT, 0.0)
    if idle > IDLE_CHECK_SECONDS or _has_input(conn):
        from psycopg_pool import ConnectionPool

        ConnectionPool.check_connection(conn)


def _has_input(conn: psycopg.Connection[Any]) -> bool:
    """Whether an idle connection's socket is readable (no round trip: one poll(2))."""
    try:
        poller = select.poll()
        poller.register(conn.fileno(), select.POLLIN)
        return bool(poller.poll(0))
    except (OSError, ValueError):  # closed meanwhile: let the ping say so
        return True
