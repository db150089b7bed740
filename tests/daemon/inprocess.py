"""A daemon served in the test's own process, and its crash at a journal failpoint.

`InProcessDaemon` is the app `toolbridge serve` serves (`create_app`, settings merged by
`load_settings` from the same flags), served by uvicorn from a thread on a free loopback port,
with the methods the tests call on a `DaemonProcess`. Its journal takes the daemon's own
failpoint hook (`bridge.daemon.failpoints`, the ``STEP:MARKER`` of ``TOOLBRIDGE_FAILPOINT``):
the writing thread holds right after that journal step and creates MARKER. `crash()` then does
to the journal what `kill -9` does to the process: no write commits any more (a write already
queued may still commit, as one may in the instant before a kill). Its threads, connections and
the requests it was serving are left as a dead process leaves them, until the test ends.

A real `kill -9` per journal step runs on the AppBuilder platform (`test_crash_matrix.py`); the
other platforms go through the same steps here, without a process start per daemon.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import requests
import uvicorn
from opentelemetry.trace import TracerProvider

from bridge.daemon.app import create_app
from bridge.daemon.failpoints import ENV_VAR, failpoint_from_env
from bridge.daemon.server import bind
from bridge.daemon.settings import load_settings
from bridge.journal.stores import open_journal

__all__ = ["InProcessDaemon"]


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{record.levelname} {record.name}: {record.getMessage()}")


def _flags(argv: list[str]) -> dict[str, Any]:
    """`toolbridge serve` flags as `load_settings` takes them (``--base-url X`` -> base_url)."""
    flags: dict[str, Any] = {"tools": []}
    for name, value in zip(argv[::2], argv[1::2], strict=True):
        key = name.removeprefix("--").replace("-", "_")
        if key == "tools":
            flags["tools"].append(value)
        elif key != "port":
            flags[key] = value
    return flags


class InProcessDaemon:
    """One daemon app in this process, listening on `url`.

    Args:
        argv: ``toolbridge serve`` flags (``--port`` is ignored: a free one is taken).
        env: set for the rest of the test (the platform's settings, the tools' folder).
        monkeypatch: the test's, which undoes `env`.
        failpoint: ``STEP:MARKER``, as ``TOOLBRIDGE_FAILPOINT`` takes it.
        tracer_provider: where the daemon's spans go (`tests.support.tracing.recorded`).
    """

    def __init__(
        self,
        argv: list[str],
        *,
        env: dict[str, str],
        monkeypatch: pytest.MonkeyPatch,
        failpoint: str | None = None,
        tracer_provider: TracerProvider | None = None,
    ) -> None:
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        monkeypatch.delenv(ENV_VAR, raising=False)
        self.api_key: str | None = None
        self._handler = _Lines()
        logging.getLogger("bridge").addHandler(self._handler)
        # grace 0: a stop leaves a held run as it is (`bury`), as a crash does.
        settings = load_settings({"grace": 0.0, **_flags(argv)}, config=None)
        self._frozen = threading.Event()
        self._released = threading.Event()
        hold = None
        if failpoint:
            hold = failpoint_from_env({ENV_VAR: failpoint}, release=self._released)
        self.journal = open_journal(settings.db, on_write=hold, pool_size=settings.workers + 4)
        sock = bind("127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        config = uvicorn.Config(
            create_app(settings, journal=self.journal, tracer_provider=tracer_provider),
            log_config=None,
            access_log=False,
            lifespan="on",
            timeout_graceful_shutdown=1,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + 60
        while not self._server.started:
            assert self._thread.is_alive(), "the daemon did not start:\n" + self.log
            assert time.monotonic() < deadline, "the daemon did not start:\n" + self.log
            time.sleep(0.01)
        self._dead = False

    @property
    def log(self) -> str:
        return "\n".join(self._handler.lines)

    def request(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        kwargs.setdefault("timeout", 60)
        return requests.request(method, self.url + path, **kwargs)

    def new_conversation(self, **body: Any) -> str:
        response = self.request("POST", "/v1/conversations", json=body)
        assert response.status_code == 201, response.text
        return str(response.json()["conversation_id"])

    def ask(self, conversation_id: str, query: str, **body: Any) -> requests.Response:
        return self.request(
            "POST", f"/v1/conversations/{conversation_id}/messages", json={"query": query, **body}
        )

    def crash(self) -> None:
        """From now on no journal write commits: what the file holds is what a `kill -9`
        now would have left. The daemon's threads stay where they are."""
        self._dead = True
        self._frozen.set()
        transaction: Callable[..., Any] = self.journal._transaction  # type: ignore[attr-defined]

        def frozen(fn: Callable[..., Any], *, write: bool) -> Any:
            if write:
                self._released.wait()  # the process is dead: this write never happens
                raise RuntimeError("the daemon was killed")
            return transaction(fn, write=write)

        self.journal._transaction = frozen  # type: ignore[attr-defined]
        logging.getLogger("bridge").removeHandler(self._handler)

    def stop(self) -> None:
        """A clean stop (drain, close); nothing for a crashed daemon (see `bury`)."""
        logging.getLogger("bridge").removeHandler(self._handler)
        if not self._dead:
            self._dead = True
            self._server.should_exit = True
            self._thread.join(timeout=60)

    def bury(self) -> None:
        """After the test: the thread the failpoint held goes on, every write of the crashed
        daemon fails instead of waiting, and its server stops (grace 0), so nothing of it
        outlives the test (a thread left waiting would keep the test process from exiting)."""
        if not self._frozen.is_set():
            return self.stop()
        self._released.set()
        self._server.should_exit = True
        self._thread.join(timeout=30)


def marker_of(tmp_path: Path, step: str) -> tuple[str, Path]:
    """The failpoint for `step` and the file it creates when it holds."""
    marker = tmp_path / f"hit-{step}"
    return f"{step}:{marker}", marker
