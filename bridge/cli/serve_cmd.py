"""`toolbridge serve`: the long-lived bridge daemon (HTTP API, journal, web console).

Two keys, two names: `--api-key` is the *daemon's own* key, which clients must send as
``Authorization: Bearer <key>``; `--platform-api-key` is the key of an OpenAI-compatible
server the daemon talks to (`--platform openai`).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from bridge.cli._app import app, state
from bridge.cli._common import (
    FROM_FLAGS,
    AllowHostOpt,
    Connection,
    ToolsOpt,
    fail,
    with_platform_flags,
)
from bridge.errors import BridgeError, ConfigurationError
from bridge.platforms.registry import DAEMON_RENAMES

if TYPE_CHECKING:
    from bridge.daemon.settings import DaemonSettings
    from bridge.emulator import Emulator
    from bridge.platforms.registry import PlatformEntry

__all__ = ["serve"]

logger = logging.getLogger("bridge.daemon")


@app.command()
@with_platform_flags(default=None, rename=DAEMON_RENAMES)
def serve(
    tools: ToolsOpt = [],  # noqa: B006 - typer needs a literal default
    allow_host: AllowHostOpt = [],  # noqa: B006 - typer needs a literal default
    server_name: Annotated[
        list[str],
        typer.Option(
            "--server-name",
            help="A name (host or host:port) clients reach the daemon by, besides the bound "
            "address, localhost, 127.0.0.1 and [::1]; requests for other Host names get 421. "
            "Repeat for more (env TOOLBRIDGE_SERVER_NAMES).",
        ),
    ] = [],  # noqa: B006 - typer needs a literal default
    host: Annotated[
        str | None,
        typer.Option("--host", help="Address to bind (default 127.0.0.1); others need --api-key."),
    ] = None,
    port: Annotated[
        int | None, typer.Option("--port", help="Port (default 8411); 0 picks a free one.")
    ] = None,
    db: Annotated[
        str | None,
        typer.Option(
            "--db",
            help="Journal: a SQLite file (default $XDG_STATE_HOME/toolbridge/toolbridge.db, "
            "i.e. ~/.local/state/toolbridge/toolbridge.db), ':memory:' for none, or a "
            "postgresql://user@host/db URL (password from the URL, PGPASSWORD or ~/.pgpass; "
            "env TOOLBRIDGE_DB).",
        ),
    ] = None,
    api_key: Annotated[
        str | None,
        typer.Option(
            "--api-key",
            help="Key clients must send as 'Authorization: Bearer KEY' (env TOOLBRIDGE_API_KEY).",
            show_default=False,
        ),
    ] = None,
    api_key_file: Annotated[
        str | None,
        typer.Option(
            "--api-key-file",
            help="File of named keys, one 'name: key' per line; the name attributes messages "
            "and approval decisions. Reloaded on SIGHUP (env TOOLBRIDGE_API_KEY_FILE).",
        ),
    ] = None,
    approval_timeout: Annotated[
        float | None,
        typer.Option(
            "--approval-timeout",
            help="Seconds a confirm=True call waits for a person's decision before it is "
            "rejected (default 600).",
        ),
    ] = None,
    approval_webhook: Annotated[
        str | None,
        typer.Option(
            "--approval-webhook",
            help="URL to POST each new approval request to (chat-ops); decisions still come "
            "through the API.",
            show_default=False,
        ),
    ] = None,
    workers: Annotated[
        int | None, typer.Option("--workers", help="Conversations answered at once (default 16).")
    ] = None,
    grace: Annotated[
        float | None,
        typer.Option("--grace", help="Seconds SIGTERM waits for running tool calls (default 30)."),
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option("--config", help="TOML settings file (env TOOLBRIDGE_CONFIG)."),
    ] = None,
    log_json: Annotated[
        bool | None, typer.Option("--log-json/--log-text", help="Log JSON lines to stderr.")
    ] = None,
    queue_limit: Annotated[
        int | None, typer.Option("--queue-limit", help="Messages that may wait for a worker.")
    ] = None,
    max_body_bytes: Annotated[
        int | None, typer.Option("--max-body-bytes", help="Largest request body (default 64 KiB).")
    ] = None,
    header_timeout: Annotated[
        float | None,
        typer.Option(
            "--header-timeout",
            help="Seconds a client has to send a request's headers; later it gets 408 and is "
            "disconnected (default 10).",
        ),
    ] = None,
    body_timeout: Annotated[
        float | None,
        typer.Option(
            "--body-timeout",
            help="Seconds a request body may pause before the request gets 408 and is not run "
            "(default 30).",
        ),
    ] = None,
    max_connections: Annotated[
        int | None,
        typer.Option(
            "--max-connections",
            help="Open connections at most; more get 503 (default 1000).",
        ),
    ] = None,
    max_rounds: Annotated[
        int | None, typer.Option("--max-rounds", help="Most tool rounds per message (default 10).")
    ] = None,
    tool_timeout: Annotated[
        float | None,
        typer.Option("--tool-timeout", help="Default seconds per tool call (default 60)."),
    ] = None,
    idle_timeout: Annotated[
        float | None,
        typer.Option("--idle-timeout", help="Idle seconds before a conversation's tools let go."),
    ] = None,
    replica_id: Annotated[
        str | None,
        typer.Option(
            "--replica-id",
            help="Name among replicas sharing a PostgreSQL journal (default host:port); a "
            "name a live process holds is refused.",
        ),
    ] = None,
    lease_seconds: Annotated[
        float | None,
        typer.Option(
            "--lease-seconds",
            help="Seconds a dead replica's conversations wait before another takes them "
            "(default 15).",
        ),
    ] = None,
    connection: Connection = FROM_FLAGS,
) -> None:
    """Run the bridge daemon: an HTTP API (and web console at /) that answers conversations.

    Settings also come from TOOLBRIDGE_<NAME> variables and --config; flags win.

    Binding anything but loopback requires --api-key or --api-key-file. Requests for other
    Host names than the daemon's own get 421, cross-origin browser requests 403 (see
    --server-name).

    SIGTERM/SIGINT: running tool calls get --grace seconds, the rest resumes on the next start.

    One daemon per journal: a second one on the same SQLite file, or with the replica id of
    a live process on a PostgreSQL journal, exits 2 naming the holder; one whose port is in
    use exits 2 too. Both before anything is read for recovery.

    Exit codes: 0 stopped; 1 could not serve; 2 bad configuration, journal or port in use.
    """
    from bridge.daemon.logs import configure_logging
    from bridge.daemon.server import claim
    from bridge.daemon.server import serve as run_server
    from bridge.daemon.settings import load_settings

    flags = {
        "tools": tools,
        "allow_hosts": allow_host,
        "server_names": server_name,
        "platform": connection.platform or None,
        "host": host,
        "port": port,
        "db": db,
        "api_key": api_key,
        "api_key_file": api_key_file,
        "approval_timeout": approval_timeout,
        "approval_webhook": approval_webhook,
        "workers": workers,
        "grace": grace,
        "log_json": log_json,
        "queue_limit": queue_limit,
        "max_body_bytes": max_body_bytes,
        "header_timeout": header_timeout,
        "body_timeout": body_timeout,
        "max_connections": max_connections,
        "max_rounds": max_rounds,
        "tool_timeout": tool_timeout,
        "idle_timeout": idle_timeout,
        "replica_id": replica_id,
        "lease_seconds": lease_seconds,
    }
    flags.update(
        {DAEMON_RENAMES.get(option, option): value for option, value in connection.settings.items()}
    )
    server = None
    owned = None
    try:
        settings = load_settings(flags, config=config)
        connection.check_scenario()
        if not connection.emulator:
            _check_platform_settings(settings)
        # Before anything is read or logged: a second daemon on this journal or port stops
        # here with one line, leaving the first one's work alone.
        owned = claim(settings)
        if connection.emulator:
            server, settings = _start_emulator(settings, connection.scenario)
        configure_logging(
            json_lines=settings.log_json,
            verbose=bool(state.get("verbose")),
            replica=settings.replica(),
        )
        _announce(settings, server)
        code = run_server(settings, owned)
    except BridgeError as exc:
        fail(exc)
    finally:
        if owned is not None:
            owned.close()
        if server is not None:
            server.stop()
    raise typer.Exit(code)


def _start_emulator(
    settings: DaemonSettings, scenario: Path | None = None
) -> tuple[Emulator, DaemonSettings]:
    """--emulator: the platform's embedded emulator, serving for as long as the daemon does,
    scripted by --scenario, with its state kept beside a file journal (so a restart, even a
    kill -9, finds the conversations the journal continues)."""
    from bridge._open import start_emulator
    from bridge.platforms.registry import get_entry

    entry = get_entry(settings.platform)
    server = start_emulator(
        entry,
        scenario=scenario,
        tools=_declared_tools(entry, settings),
        state_file=_emulator_state_file(settings.db),
    )
    try:
        client_env = server.env()
        given = [entry.setting(option) for option in entry.emulated_options(client_env)]
        flags = [s.flag for s in given if s is not None and s.option in settings.platform_settings]
        if flags:
            raise ConfigurationError(
                f"--emulator starts its own {entry.short_title} service, so "
                f"{', '.join(flags)} cannot be used with it; pass one or the other"
            )
    except BaseException:
        server.stop()
        raise
    return server, settings.with_platform_options(entry.emulator_options(client_env))


def _declared_tools(entry: PlatformEntry, settings: DaemonSettings) -> list[dict[str, Any]]:
    """The daemon's tools (Chat Completions function tools) for an emulated agent whose tools
    are configured server-side (Coze's bot); none for the others (they get them per run)."""
    if entry.emulator_tools is None or not settings.tools:
        return []
    from bridge.cli._common import build_toolbox

    with build_toolbox(settings.tools, allow_hosts=settings.allow_hosts) as toolbox:
        return toolbox.manifests("openai")


def _emulator_state_file(db: str) -> Path | None:
    """Where the embedded emulator keeps its state: beside a SQLite journal file (None for a
    journal in memory or on PostgreSQL)."""
    from bridge.journal.stores import is_postgres_url

    if db == ":memory:" or db.startswith("file:") or is_postgres_url(db):
        return None
    # Beside the file the path names (as the journal's lock is): another spelling of the same
    # journal, a symlink included, finds the same state.
    return Path(f"{os.path.realpath(db)}.emulator.json")


def _check_platform_settings(settings: DaemonSettings) -> None:
    """Every missing platform setting at once, in flag and variable names (the adapters'
    own errors speak Python: `app_id=`)."""
    from bridge.platforms.registry import get_entry

    get_entry(settings.platform).require(settings.platform_options())


def _announce(settings: DaemonSettings, server: Emulator | None) -> None:
    """What an operator must know before the first request: where the journal is, and what
    is missing."""
    from bridge.journal.stores import db_label, is_postgres_url
    from bridge.platforms.registry import get_entry

    journal = (
        "in memory (nothing survives a restart)"
        if settings.db == ":memory:"
        else db_label(settings.db)
    )
    logger.info("journal: %s", journal)
    if is_postgres_url(settings.db):
        logger.info(
            "replica: %s (leases of %g s; other replicas on this journal take over its "
            "conversations if it stops renewing them)",
            settings.replica(),
            settings.lease_seconds,
        )
    if server is not None:
        kept = (
            f"its state kept in {server.state_file}"
            if server.state_file is not None
            else "its state in memory"
        )
        logger.info(
            "platform: the embedded %s emulator at %s (--emulator; %s)",
            get_entry(settings.platform).short_title,
            server.base_url,
            kept,
        )
    if not settings.tools:
        logger.warning(
            "starting with no tools: the agent can call nothing and /readyz answers 503; pass "
            "--tools SPEC (or set TOOLBRIDGE_TOOLS)"
        )
