"""Run the daemon in the foreground with uvicorn until SIGTERM/SIGINT.

On the signal: stop accepting connections (uvicorn), answer new messages on open
connections with 503 (`Service.begin_drain`), give running runs `grace` seconds, and exit 0.
Runs still going after that are left exactly as a crash would leave them: the journal already
holds their state, and the next start on the same `--db` recovers them. Their clients are
answered when the grace ends (`GraceClock`: JSON 503 ``shutting_down``, or SSE ``failed`` +
``done``); uvicorn waits a little longer than the grace for those answers to go out, so it
never has to cancel a request (a plain-text 500 and a traceback).
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import time
from pathlib import Path
from types import FrameType

import uvicorn

from bridge._connections import http_protocol
from bridge.daemon.app import create_app
from bridge.daemon.service import Service
from bridge.daemon.settings import DaemonSettings
from bridge.daemon.shutdown import GraceClock
from bridge.journal.stores import is_postgres_url

__all__ = ["serve"]

logger = logging.getLogger("bridge.daemon")

ANSWER_SECONDS = 3
"""How long past the grace uvicorn waits for the answers to abandoned runs' clients."""


class _Server(uvicorn.Server):
    """uvicorn, plus: report the bound address, start draining at the first signal."""

    def __init__(self, config: uvicorn.Config, service: Service, grace: GraceClock) -> None:
        super().__init__(config)
        self.service = service
        self.grace = grace
        self._deadline: float | None = None

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self._deadline is None:
            self._deadline = time.monotonic() + self.service.settings.grace
        self.service.begin_drain()
        super().handle_exit(sig, frame)
        # Recent uvicorn re-raises the signal after a graceful stop, so the process would die
        # of SIGTERM; a drained daemon exits 0 instead (what systemd and tests expect).
        captured = getattr(self, "_captured_signals", None)
        if isinstance(captured, list):
            captured.clear()

    async def startup(self, sockets: list[object] | None = None) -> None:  # type: ignore[override]
        await super().startup(sockets=sockets)  # type: ignore[arg-type]
        for server in self.servers:
            for sock in server.sockets:
                host, port = sock.getsockname()[:2]
                shown = f"[{host}]" if ":" in host else host
                logger.info("toolbridge daemon listening on http://%s:%d", shown, port)
                if not self.service.public_url:
                    self.service.public_url = _public_url(
                        shown, port, self.service.settings.server_names
                    )

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self.grace.arm(self._deadline)
        await super().shutdown(sockets=sockets)


def _public_url(shown: str, port: int, server_names: list[str]) -> str:
    """Where people reach the daemon, for links it sends (the webhook's approve_url): the
    bound address, or the first --server-name when bound to every interface."""
    if shown in ("0.0.0.0", "[::]") and server_names:
        name = server_names[0]
        tail = name.rsplit(":", 1)[-1]
        has_port = tail.isdigit() and (name.count(":") == 1 or name.startswith("["))
        return f"http://{name}" if has_port else f"http://{name}:{port}"
    return f"http://{shown}:{port}"


def _discard(db: str, fresh: bool) -> None:
    """A daemon that never served (port in use) leaves no journal it created behind."""
    if fresh:
        for suffix in ("", "-wal", "-shm", "-journal"):
            Path(db + suffix).unlink(missing_ok=True)


def serve(settings: DaemonSettings) -> int:
    """Serve until stopped; returns the exit code (0 after a clean or grace-limited stop).

    Raises:
        UsageError: bad configuration, found before anything listens.
    """
    fresh = (
        settings.db != ":memory:"
        and not is_postgres_url(settings.db)
        and not Path(settings.db).exists()
    )
    app = create_app(settings)
    service: Service = app.state.service
    grace: GraceClock = app.state.grace
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_config=None,
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=int(settings.grace + 0.999) + ANSWER_SECONDS,
        server_header=False,
        proxy_headers=False,
        http=http_protocol(settings.connection_limits()),
    )
    server = _Server(config, service, grace)
    try:
        server.run()
    except SystemExit as exc:  # uvicorn exits 3 when it cannot bind; ours is 1 (3 is auth)
        if exc.code in (0, None):
            raise
        logger.error("the daemon could not start serving (see the error above)")
        _discard(settings.db, fresh)
        return 1
    if not server.started:
        _discard(settings.db, fresh)
        return 1
    if app.state.runs_left:
        # Worker threads are still inside tools; their state is journaled. Exit now rather
        # than wait for them (an interpreter shutdown would run into their next write).
        logger.warning("exiting with %d run(s) left for recovery", app.state.runs_left)
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    logger.info("stopped")
    return 0
