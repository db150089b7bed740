"""Run an ASGI app on loopback in a background thread (emulator, daemon, test servers)."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bridge._connections import ConnectionLimits

__all__ = ["ServerHandle", "run_foreground", "serve_in_thread"]


class ServerHandle:
    """A running server: its `base_url` (``http://host:port``) and `port`."""

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self.base_url = f"http://{host}:{port}"


@contextlib.contextmanager
def serve_in_thread(
    app: Any, *, host: str = "127.0.0.1", port: int = 0, startup_timeout: float = 15.0
) -> Iterator[ServerHandle]:
    """Serve `app` with uvicorn in a daemon thread; stop it when the block ends.

    `port=0` picks a free ephemeral port; the handle says which one.
    """
    import uvicorn

    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="warning",
        access_log=False,
        lifespan="auto",
        timeout_graceful_shutdown=2,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="toolbridge-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + startup_timeout
    while not server.started:
        if not thread.is_alive():
            raise RuntimeError(f"server on {host}:{port} failed to start")
        if time.monotonic() > deadline:
            server.should_exit = True
            raise RuntimeError(f"server on {host}:{port} did not start in {startup_timeout} s")
        time.sleep(0.01)
    bound_port = port
    for srv in getattr(server, "servers", []):
        for sock in srv.sockets:
            bound_port = sock.getsockname()[1]
            break
    try:
        yield ServerHandle(host, bound_port)
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def run_foreground(
    app: Any, sock: Any, *, verbose: bool = False, limits: ConnectionLimits | None = None
) -> None:
    """Serve `app` on an already bound socket until Ctrl+C or SIGTERM (CLI commands).

    The caller binds the socket first, so "address in use" is reported before anything is
    printed as listening. `limits` bound slow and surplus connections (`bridge._connections`).
    """
    import uvicorn

    from bridge._connections import http_protocol

    config = uvicorn.Config(
        app,
        log_level="info" if verbose else "warning",
        access_log=verbose,
        lifespan="on",
        timeout_graceful_shutdown=2,
        http=http_protocol(limits) if limits is not None else "auto",
    )
    try:
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        sock.close()
