"""Run the daemon in the foreground with uvicorn until SIGTERM/SIGINT.

On the signal: stop accepting connections (uvicorn), answer new messages on open
connections with 503 (`Service.begin_drain`), give running runs `grace` seconds, and exit 0.
Runs still going after that are left exactly as a crash would leave them: the journal already
holds their state, and the next start on the same `--db` recovers them. Their clients are
answered when the grace ends (`GraceClock`: JSON 503 ``shutting_down``, or SSE ``failed`` +
``done``); uvicorn waits a little longer than the grace for those answers to go out, so it
never has to cancel a request (a plain-text 500 and a traceback).

Start-up order (`claim`, then `serve`): own the journal (a SQLite file's lock, a PostgreSQL
replica id), bind the listening socket, and only then open the journal, recover what a crash
left and serve. A second daemon on the same journal, or on a port in use, exits 2 with one
line before it has read or changed anything (`bridge.journal.owner`).
"""

from __future__ import annotations

import errno
import logging
import os
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import uvicorn
from opentelemetry import trace

from bridge._connections import http_protocol
from bridge.daemon.app import create_app
from bridge.daemon.service import Service
from bridge.daemon.settings import DaemonSettings
from bridge.daemon.shutdown import GraceClock
from bridge.errors import UsageError
from bridge.journal.owner import JournalLock, Owner
from bridge.journal.stores import is_postgres_url

__all__ = ["Claim", "claim", "serve"]

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
                # The console is the daemon's root page: the one URL a newcomer opens.
                url = f"http://{shown}:{port}"
                logger.info("toolbridge daemon listening on %s (console: %s/)", url, url)
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


def _flush_spans(timeout_millis: int = 5_000) -> None:
    """Send the spans the global provider (an SDK's, `toolbridge serve` with ``OTEL_*``)
    still holds in its batches."""
    flush = getattr(trace.get_tracer_provider(), "force_flush", None)
    if callable(flush):
        try:
            flush(timeout_millis)
        except Exception:
            logger.debug("the spans could not be flushed", exc_info=True)


def _discard(db: str, fresh: bool) -> None:
    """A daemon that never served leaves no journal it created behind."""
    if fresh:
        for suffix in ("", "-wal", "-shm", "-journal"):
            Path(db + suffix).unlink(missing_ok=True)


@dataclass
class Claim:
    """What a daemon owns before it reads its journal: the journal (a SQLite file's lock, or
    its PostgreSQL replica id) and its listening socket."""

    sock: socket.socket
    address: str
    lock: JournalLock | None = None
    replica: Any = None
    """A `bridge.journal.postgres_replicas.ReplicaClaim` on a PostgreSQL journal."""
    fresh: bool = False
    """The SQLite file did not exist before this daemon (removed again if it never serves)."""
    _closed: bool = field(default=False, repr=False)

    def close(self) -> None:
        """Give everything back (a clean stop); a second call does nothing."""
        if self._closed:
            return
        self._closed = True
        self.sock.close()
        if self.replica is not None:
            self.replica.release()
        if self.lock is not None:
            self.lock.release()


def claim(settings: DaemonSettings) -> Claim:
    """Own the journal, then bind the port: before anything is read for recovery.

    Raises:
        UsageError: another live daemon owns the journal (`JournalInUseError`) or the replica
            id (`ReplicaInUseError`), or the address cannot be bound (port in use...).
    """
    db = settings.db
    embedded = db != ":memory:" and not is_postgres_url(db)
    lock = JournalLock.acquire(db) if embedded else None
    fresh = embedded and not Path(db).exists()  # known once no other daemon can create it
    replica = None
    try:
        if is_postgres_url(db):
            from bridge.journal.postgres_replicas import claim_replica

            replica = claim_replica(
                db,
                settings.replica(),
                settings.lease_seconds,
                Owner(pid=os.getpid(), host=socket.gethostname()),
            )
        sock = bind(settings.host, settings.port)
    except BaseException:
        if replica is not None:
            replica.release()
        if lock is not None:
            lock.release()
        raise
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    address = f"http://{shown}:{port}"
    try:
        if lock is not None:
            lock.set_address(address)
        if replica is not None:
            replica.set_address(address)
            replica.start_renewing()
    except BaseException:
        Claim(sock, address, lock, replica).close()
        raise
    return Claim(sock, address, lock, replica, fresh=fresh)


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on `host`:`port` (0: a free port), for uvicorn to serve on.

    Raises:
        UsageError: the port is in use, or the address cannot be bound here.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # Named TCP (not protocol 0): asyncio's own loop sets TCP_NODELAY only on connections of
    # a socket that says so. Without it each answer's last segment waits for the client's
    # delayed ACK (about 40 ms per request; uvloop sets it on any socket).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host.strip("[]"), port))
        # Listen now: clients that connect while the journal is recovered wait in the backlog.
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise UsageError(
                f"port {port} on {host} is in use by another process; stop it or choose "
                "another --port (0 picks a free one)"
            ) from None
        raise UsageError(
            f"cannot listen on {host}:{port}: {exc.strerror or exc}; check --host and --port"
        ) from None
    return sock


def serve(settings: DaemonSettings, owned: Claim | None = None) -> int:
    """Serve until stopped; returns the exit code (0 after a clean or grace-limited stop).

    Args:
        settings: what to serve.
        owned: the journal and socket `claim` took (default: claimed here).

    Raises:
        UsageError: bad configuration, found before anything is served; the journal or the
            port is another process's.
    """
    if owned is None:
        owned = claim(settings)
    try:
        return _serve(settings, owned)
    finally:
        owned.close()


def _serve(settings: DaemonSettings, owned: Claim) -> int:
    if owned.replica is not None and owned.replica.note:
        logger.warning("%s", owned.replica.note)
    try:
        app = create_app(settings)
    except BaseException:
        _discard(settings.db, owned.fresh)
        raise
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
        server.run(sockets=[owned.sock])
    except SystemExit as exc:  # uvicorn exits 3 when it cannot serve; ours is 1 (3 is auth)
        if exc.code in (0, None):
            raise
        logger.error("the daemon could not start serving (see the error above)")
        _discard(settings.db, owned.fresh)
        return 1
    if not server.started:
        _discard(settings.db, owned.fresh)
        return 1
    if app.state.runs_left:
        # Worker threads are still inside tools; their state is journaled. Exit now rather
        # than wait for them (an interpreter shutdown would run into their next write). The
        # journal's lock goes with the process (the kernel releases it).
        logger.warning("exiting with %d run(s) left for recovery", app.state.runs_left)
        _flush_spans()  # no exit handler runs after os._exit: the SDK's would have
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    logger.info("stopped")
    return 0
