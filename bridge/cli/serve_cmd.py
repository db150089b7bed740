"""`toolbridge serve`: the long-lived bridge daemon (HTTP API, journal, web console).

Two keys, two names: `--api-key` is the *daemon's own* key, which clients must send as
``Authorization: Bearer <key>``; `--platform-api-key` is the key of an OpenAI-compatible
server the daemon talks to (`--platform openai`).
"""

from __future__ import annotations

import inspect
import logging
import os
import types
import typing
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
import typer.main

from bridge.cli._app import Command, app, state
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
    from typer import _click  # click itself with typer < 0.2x: only named in annotations

    from bridge.daemon.settings import DaemonSettings
    from bridge.emulator import Emulator
    from bridge.platforms.registry import PlatformEntry

__all__ = ["serve"]

logger = logging.getLogger("bridge.daemon")


class _SettingsCommand(Command):
    """`serve`: a flag for every `DaemonSettings` field (its name, type, default, description
    and variable), made when the command parses or shows its help, not when `toolbridge
    --help` lists it (which would import pydantic for nothing).

    The flags' values reach the command in ``ctx.meta[_FLAGS]`` (not as arguments of its
    function: typer checks those against the parameters it made from the function)."""

    _own: list[Any]
    _made: list[Any] | None = None

    @property
    def params(self) -> list[Any]:
        if self._made is None:
            self._made = [*settings_options(), *self._own]
        return self._made

    @params.setter
    def params(self, value: list[Any]) -> None:
        self._own, self._made = value, None

    def invoke(self, ctx: _click.Context) -> Any:
        own = {param.name for param in self._own}
        ctx.meta[_FLAGS] = {
            name: _given(value) for name, value in list(ctx.params.items()) if name not in own
        }
        for name in ctx.meta[_FLAGS]:
            del ctx.params[name]
        return super().invoke(ctx)


_FLAGS = "toolbridge.serve.settings"
_SHARED: dict[str, Any] = {"tools": ToolsOpt, "allow_hosts": AllowHostOpt}
"""Settings whose flag `serve` shares with `run` (and the others loading tools)."""
_ELSEWHERE = ("platform", "platform_settings")
"""Settings given by `with_platform_flags` (``--platform`` and each platform's flags)."""


def settings_options() -> list[Any]:
    """A click option for each `DaemonSettings` field but `_ELSEWHERE` (None, or an empty
    list: not given, so the environment and the config file still count)."""
    from pydantic import SecretStr

    from bridge.daemon.settings import ENV_PREFIX, FLAGS, DaemonSettings

    made: list[inspect.Parameter] = []
    for name, field in DaemonSettings.model_fields.items():
        if name in _ELSEWHERE:
            continue
        annotation = _SHARED.get(name)
        default: Any = [] if name in _SHARED else None
        if annotation is None:
            kind: Any = field.annotation
            if kind is not None and typing.get_origin(kind) in (types.UnionType, typing.Union):
                kind = next(arg for arg in typing.get_args(kind) if arg is not type(None))
            if kind is SecretStr:
                kind = str
            decl = FLAGS.get(name, "--" + name.replace("_", "-"))
            env = ENV_PREFIX + name.upper()
            shown = None if field.default_factory is not None else field.default
            facts = [f"default {_shown(shown)}"] if shown not in (None, False) else []
            facts.append(f"env {env}, comma-separated" if kind == list[str] else f"env {env}")
            text = (field.description or "").rstrip(".")
            if kind == list[str]:
                default, kind = [], list[str]
            else:
                kind = kind | None
            annotation = Annotated[
                kind,
                typer.Option(decl, help=f"{text} ({'; '.join(facts)}).", show_default=False),
            ]
        made.append(
            inspect.Parameter(
                name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation
            )
        )

    def flags(**_: Any) -> None:
        """Only its parameters count."""

    flags.__signature__ = inspect.Signature(made)  # type: ignore[attr-defined]
    one = typer.Typer(add_completion=False)
    one.command()(flags)
    return list(typer.main.get_command(one).params)


def _shown(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _given(value: Any) -> Any:
    """A flag's value as `load_settings` takes it (a list for a repeated flag)."""
    return list(value) if isinstance(value, tuple) else value


@app.command(cls=_SettingsCommand)
@with_platform_flags(default=None, rename=DAEMON_RENAMES)
def serve(
    ctx: typer.Context,
    config: Annotated[
        Path | None,
        typer.Option("--config", help="TOML settings file (env TOOLBRIDGE_CONFIG)."),
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

    flags: dict[str, Any] = dict(ctx.meta.get(_FLAGS, {}))
    flags["platform"] = connection.platform or None
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
