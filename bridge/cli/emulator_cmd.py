"""`toolbridge emulator`: run the AppBuilder-compatible emulator in the foreground."""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from bridge.cli._app import app, state
from bridge.cli._common import EXIT_FAILED, EXIT_USAGE, fail

if TYPE_CHECKING:
    import socket

__all__ = ["emulator"]


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _bind(host: str, port: int) -> socket.socket:
    """Bind the listening socket first, so `--port 0` can report the port it got."""
    import socket  # here: `toolbridge --help` imports this module

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # TCP by name: asyncio's own loop sets TCP_NODELAY only then (as the daemon's `bind`).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
        # Listen now: clients that read the printed URL before uvicorn is up wait in the
        # backlog instead of being refused.
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


@app.command("emulator")
def emulator(
    host: Annotated[
        str, typer.Option("--host", help="Address to listen on (loopback unless --allow-remote).")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="Port to listen on; 0 picks a free one.")] = (
        8410
    ),
    token: Annotated[
        str,
        typer.Option(
            "--token",
            help="Token clients must send as 'Authorization: Bearer <token>'.",
            envvar="TOOLBRIDGE_EMULATOR_TOKEN",
        ),
    ] = "emulator-token",
    app_id: Annotated[str, typer.Option("--app-id", help="The app id the emulator serves.")] = (
        "emulator-app"
    ),
    scenario: Annotated[
        Path | None,
        typer.Option(
            "--scenario", help="Scenario file (YAML or JSON) that scripts the emulated agent."
        ),
    ] = None,
    faults: Annotated[
        str | None,
        typer.Option(
            "--faults",
            help="Fault spec for every /runs request, e.g. 'delay=0.2' or 'status=429,times=1'.",
            envvar="TOOLBRIDGE_EMULATOR_FAULTS",
        ),
    ] = None,
    allow_remote: Annotated[
        bool,
        typer.Option(
            "--allow-remote", help="Allow a non-loopback --host (anyone who can reach it gets in)."
        ),
    ] = False,
    protocol: Annotated[
        str,
        typer.Option(
            "--protocol",
            help="Wire protocol to speak: appbuilder (default), or another platform's.",
            envvar="TOOLBRIDGE_EMULATOR_PROTOCOL",
        ),
    ] = "appbuilder",
) -> None:
    """Run an agent platform's emulator in the foreground (Ctrl+C stops it).

    By default it speaks the AppBuilder conversation API (create, runs, file upload,
    feedback); --protocol picks another platform's wire. toolbridge's adapter and the
    platform's official SDK can both be pointed at it.
    """
    from bridge.emulator.protocols import get_protocol
    from bridge.errors import BridgeError, UsageError

    try:
        wire = get_protocol(protocol)
    except UsageError as exc:
        fail(exc, code=EXIT_USAGE)

    if not _is_loopback(host):
        if not allow_remote:
            fail(
                UsageError(
                    f"refusing to listen on {host}: the emulator accepts one fixed token and is "
                    "meant for this machine; use a loopback address such as 127.0.0.1, or pass "
                    "--allow-remote to expose it anyway"
                ),
                code=EXIT_USAGE,
            )
        typer.secho(
            f"warning: listening on {host}; anyone who can reach this port can use the emulator",
            fg=typer.colors.YELLOW,
            err=True,
        )

    try:
        asgi = wire.create_app(token=token, app_id=app_id, scenario=scenario, faults=faults or "")
    except UsageError as exc:
        fail(exc, code=EXIT_USAGE)
    try:
        sock = _bind(host, port)
    except OSError as exc:
        fail(
            BridgeError(f"cannot listen on {host}:{port}: {exc.strerror or exc}"), code=EXIT_FAILED
        )
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{bound}"
    source = f", scenario {scenario}" if scenario else ", default planner"
    typer.echo(f"toolbridge emulator: {wire.title} server on {url} (app {app_id}{source})")
    typer.echo("Point a client or the official SDK at it:")
    for name, value in wire.client_env(url, token, app_id).items():
        typer.echo(f"  export {name}={value}")
    typer.echo("Press Ctrl+C to stop.")
    from bridge._serve import run_foreground

    run_foreground(asgi, sock, verbose=bool(state.get("verbose")))
