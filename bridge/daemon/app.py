"""The daemon's ASGI application: `create_app(settings)`.

The factory builds what can fail on bad configuration (platform, journal, toolbox) right
away, so `toolbridge serve` exits with a clear message instead of a half-started server. The
`lifespan` starts the workers, recovers interrupted messages before the first request is
served, and on shutdown drains the runs for `grace` seconds and releases everything. Every
request first passes the Host/Origin gate (`bridge._hosts`).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import os
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import Depends, FastAPI
from opentelemetry.trace import TracerProvider

from bridge._hosts import HostGate
from bridge._version import __version__
from bridge.access import AccessError
from bridge.access.door import Door
from bridge.daemon.door import door_principal, load_policy, open_audit, open_door
from bridge.daemon.errors import install_error_handlers
from bridge.daemon.failpoints import failpoint_from_env
from bridge.daemon.fastpath import FastRoutes
from bridge.daemon.middleware import RequestContextMiddleware
from bridge.daemon.outbound import PublicJSONResponse
from bridge.daemon.permissions import authorize, on_access_error
from bridge.daemon.recovery import keep_leases, recover
from bridge.daemon.relay import start_relay
from bridge.daemon.routers import approvals, console, conversations, events, health, tools
from bridge.daemon.service import Service
from bridge.daemon.settings import DaemonSettings
from bridge.daemon.shutdown import GraceClock
from bridge.errors import register_secret
from bridge.journal.leases import LeaseJournal
from bridge.journal.stores import is_postgres_url, open_journal
from bridge.platforms.base import Platform
from bridge.tracing import Tracing

__all__ = ["FASTPATH_ENV", "create_app"]

FASTPATH_ENV = "TOOLBRIDGE_FASTPATH"

logger = logging.getLogger(__name__)


# FastAPI 0.165 and later trace every request themselves once a tracer provider is set: a
# second SERVER span beside the daemon's own (which names the route, the caller and the
# conversation), recording exceptions unredacted. The daemon's middleware is the one server
# span; older FastAPI has no such telemetry and no such argument.
_NO_NATIVE_TELEMETRY: dict[str, Any] = (
    {"telemetry": {"tracing": False, "metrics": False, "logs": False}}
    if "telemetry" in inspect.signature(FastAPI.__init__).parameters
    else {}
)


def create_app(
    settings: DaemonSettings,
    *,
    platform: Platform | None = None,
    journal: LeaseJournal | None = None,
    tracer_provider: TracerProvider | None = None,
) -> FastAPI:
    """The daemon's FastAPI app.

    Args:
        settings: what to serve and how.
        platform: the agent platform; default: built from `settings`.
        journal: default: the one `settings.db` names (`bridge.journal.stores.open_journal`:
            a SQLite path or a PostgreSQL URL).
        tracer_provider: where the daemon's spans go (its requests', its runs', its
            recoveries'); default: the global provider (`bridge.tracing`).

    Raises:
        UsageError: bad configuration (missing token, unloadable tools, unusable db).
    """
    for secret in settings.secrets():
        register_secret(secret)
    if settings.approval_webhook is not None:
        register_secret(settings.approval_webhook)  # chat webhooks carry a token in the URL
    door = open_door(settings)  # a broken callers or key file stops here, before the db
    policy = load_policy(settings)
    own_platform = platform is None
    if platform is None:
        platform = _platform(settings)
    own_journal = journal is None
    fresh = (
        own_journal
        and settings.db != ":memory:"
        and not is_postgres_url(settings.db)
        and not Path(settings.db).exists()
    )
    if journal is None:
        if fresh:  # the default lives in the user's state directory, which may not exist yet
            Path(settings.db).parent.mkdir(parents=True, exist_ok=True)
        # One connection per worker, plus room for the HTTP side (approvals, listings, events).
        journal = open_journal(
            settings.db,
            on_write=failpoint_from_env(),
            pool_size=settings.workers + 4,
            sqlite_sync=settings.sqlite_sync,
        )
    try:
        service = Service(
            settings,
            platform,
            journal,
            policy=policy,
            audit=open_audit(settings, journal),
            tracing=Tracing(tracer_provider),
        )
        service.principal_named = lambda name: door_principal(door, name)
    except BaseException:
        # A start-up that fails (tools that do not load) leaves no empty journal behind.
        if own_journal:
            journal.close()
            if fresh:
                for suffix in ("", "-wal", "-shm", "-journal"):
                    Path(settings.db + suffix).unlink(missing_ok=True)
        if own_platform:
            platform.close()
        raise

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await service.start()
        # Replicas on a shared journal: renew this one's leases, take over dead ones' messages.
        lease_keeper = asyncio.create_task(keep_leases(service)) if service.journal.shared else None
        # Other replicas on the same PostgreSQL journal: live events both ways (from before
        # recovery, so they see the runs it resumes).
        app.state.relay = relay = await start_relay(service)
        recover(service)
        reloads_keys = _reload_callers_on_sighup(door)
        try:
            yield
        finally:
            if reloads_keys:
                _stop_reloading_keys()
            left = await service.drain()
            app.state.runs_left = left
            if relay is not None:
                await relay.close()
            if lease_keeper is not None:
                lease_keeper.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await lease_keeper
            await service.close(left)

    app = FastAPI(
        title="toolbridge daemon",
        version=__version__,
        description="Conversations with a hosted agent whose tools run on this machine.",
        lifespan=lifespan,
        # Every JSON body through one redaction step (`bridge.daemon.outbound`).
        default_response_class=PublicJSONResponse,
        docs_url=None,  # Swagger UI and ReDoc load scripts from a CDN: not on an intranet
        redoc_url=None,
        # The door for every route: who calls, and whether the route's rule lets it in.
        dependencies=[Depends(authorize)],
        **_NO_NATIVE_TELEMETRY,
    )
    app.state.settings = settings
    app.state.service = service
    app.state.door = door
    app.state.audit = service.audit
    app.state.runs_left = 0
    app.state.relay = None
    app.state.grace = GraceClock(settings.grace)  # armed by the server when a shutdown begins
    install_error_handlers(app)
    app.add_exception_handler(AccessError, on_access_error)
    app.include_router(conversations.router)
    app.include_router(tools.router)
    app.include_router(approvals.router)
    app.include_router(events.router)
    app.include_router(health.router)
    app.include_router(console.router)
    # Inside the request context (added first: the last added is the outermost).
    # TOOLBRIDGE_FASTPATH=0 leaves every request to FastAPI: to rule the fast path out when
    # diagnosing, and for the tests that compare the two answers.
    if os.environ.get(FASTPATH_ENV, "1") != "0":
        app.add_middleware(FastRoutes)
    app.add_middleware(
        RequestContextMiddleware,
        max_body_bytes=settings.max_body_bytes,
        metrics=service.metrics,
        gate=HostGate.for_server(settings.host, settings.server_names),
        tracing=service.tracing,
    )
    return app


def _reload_callers_on_sighup(door: Door) -> bool:
    """Reload the callers and key files on SIGHUP; True if the handler is installed (only a
    daemon in the main thread can: an app served from another thread keeps its callers)."""
    if not hasattr(signal, "SIGHUP") or door.anonymous:
        return False
    try:
        asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, door.reload)
    except (ValueError, RuntimeError, NotImplementedError):
        logger.debug("SIGHUP cannot be handled here; the callers are not reloadable")
        return False
    return True


def _stop_reloading_keys() -> None:
    with contextlib.suppress(ValueError, RuntimeError, NotImplementedError):
        asyncio.get_running_loop().remove_signal_handler(signal.SIGHUP)


def _platform(settings: DaemonSettings) -> Platform:
    from bridge.platforms import create_platform
    from bridge.platforms._http import new_session

    # One connection per worker, so concurrent runs do not discard pooled connections.
    session = new_session(connections=max(10, settings.workers))
    return create_platform(settings.platform, session=session, **settings.platform_options())
