"""Run `toolbridge serve` as a real process against an in-process emulator.

`DaemonProcess` starts ``python -m bridge serve ...`` on a free loopback port (``--port 0``; the
daemon logs the address it bound), collects its stderr, and always stops it. The tools it
serves (`TOOLS`) append one line per execution to ``executions.log`` in their folder, and block
while a file ``block-<tool>`` exists there, so tests can stop a call at a known point.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from bridge.emulator import Emulator

API_KEY = "test-daemon-key-0123456789abcdef"

TOOLS = '''
"""Tools for the daemon tests: each execution is logged; a block file holds a tool."""

import os
import time
from pathlib import Path

from bridge import ToolContext, manifest

HERE = Path(os.environ["TB_TOOLS_DIR"])


def _run(name: str, detail: object) -> None:
    with open(HERE / "executions.log", "a", encoding="utf-8") as log:
        log.write(f"{name} {detail}\\n")
        log.flush()
        os.fsync(log.fileno())
    time.sleep(float(os.environ.get("TB_TOOL_SECONDS", "0")))  # widens crash windows (soak)
    deadline = time.monotonic() + 60
    while (HERE / f"block-{name}").exists() and time.monotonic() < deadline:
        time.sleep(0.02)


@manifest(description="Current weather of a city.", idempotent=True)
def get_weather(city: str) -> dict:
    """Weather.

    Args:
        city: City name.
    """
    _run("get_weather", city)
    return {"city": city, "temp": {"Paris": 18, "Tokyo": 22}.get(city, 0)}


@manifest(description="Sleep a while, then say so.")
def slow_step(seconds: float) -> str:
    """Slow.

    Args:
        seconds: How long.
    """
    _run("slow_step", seconds)
    time.sleep(seconds)
    with open(HERE / "executions.log", "a", encoding="utf-8") as log:
        log.write(f"slow_step_end {seconds}\\n")
    return f"slept {seconds}"


@manifest(description="Charge a card: must never run twice.")
def charge(amount: int) -> str:
    """Charge.

    Args:
        amount: Euros.
    """
    _run("charge", amount)
    return f"charged {amount}"


@manifest(description="Send an email: must never run twice.")
def send_email(to: str) -> str:
    """Email.

    Args:
        to: Recipient.
    """
    _run("send_email", to)
    return f"sent to {to}"


@manifest(description="Look a key up (safe to repeat).", idempotent=True)
def lookup(key: str) -> str:
    """Lookup.

    Args:
        key: The key.
    """
    _run("lookup", key)
    return f"value of {key}"


class Session:
    def __init__(self) -> None:
        _run("session_open", "-")

    def close(self) -> None:
        with open(HERE / "executions.log", "a", encoding="utf-8") as log:
            log.write("session_closed -\\n")


@manifest(description="Use the conversation's session.")
def use_session(ctx: ToolContext, note: str) -> str:
    """Session.

    Args:
        note: Anything.
    """
    ctx.resource(Session)
    return f"noted {note}"
'''

EXTRA_TOOLS = '''
from bridge import manifest


@manifest(description="Say hello.")
def hello(name: str) -> str:
    """Hello.

    Args:
        name: Who.
    """
    return f"hello {name}"
'''


def _rule(match: str, tool: str, arguments: dict[str, str], answer: str) -> dict[str, Any]:
    return {"match": match, "steps": [{"tool": tool, "arguments": arguments}], "answer": answer}


SCENARIO: dict[str, Any] = {
    "settings": {"fallback": "plain", "chunk_chars": 4},
    "rules": [
        _rule(
            r"weather in (?P<city>\w+)",
            "get_weather",
            {"city": "{city}"},
            "{city}: {outputs.get_weather.temp} degrees",
        ),
        _rule(r"slow (?P<s>[\d.]+)", "slow_step", {"seconds": "{s}"}, "{outputs.slow_step}"),
        _rule(r"charge (?P<n>\d+)", "charge", {"amount": "{n}"}, "result: {outputs.charge}"),
        _rule(r"email (?P<to>\w+)", "send_email", {"to": "{to}"}, "result: {outputs.send_email}"),
        _rule(r"lookup (?P<k>\w+)", "lookup", {"key": "{k}"}, "result: {outputs.lookup}"),
        _rule(r"note (?P<n>\w+)", "use_session", {"note": "{n}"}, "{outputs.use_session}"),
        _rule(r"hello (?P<n>\w+)", "hello", {"name": "{n}"}, "{outputs.hello}"),
        {
            "match": r"book a (?P<what>room|table)",
            "steps": [
                {"ask": "For which day?", "as": "day"},
                {"tool": "lookup", "arguments": {"key": "{answers.day}"}},
            ],
            "answer": "booked a {what} for {answers.day} ({outputs.lookup})",
        },
    ],
}


class DaemonProcess:
    """One `toolbridge serve` process; `url` once it listens."""

    def __init__(
        self,
        args: list[str],
        *,
        env: dict[str, str],
        api_key: str | None = None,
        wait: bool = True,
    ) -> None:
        self.api_key = api_key
        self.lines: list[str] = []
        self.url = ""
        self._listening = threading.Event()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bridge", "serve", *args],
            env={**os.environ, "PYTHONUNBUFFERED": "1", **env},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        if wait:
            self.wait_listening()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))
            if "listening on http://" in line and not self.url:
                self.url = line.split("listening on ", 1)[1].split()[0].strip('"}').split('"')[0]
                self._listening.set()

    def wait_listening(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not self._listening.wait(0.05):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self._reader.join(timeout=5)
                raise AssertionError("the daemon did not start:\n" + self.log)

    @property
    def log(self) -> str:
        return "\n".join(self.lines)

    def headers(self, **extra: str) -> dict[str, str]:
        auth = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        return {**auth, **extra}

    def request(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        headers = {**self.headers(), **kwargs.pop("headers", {})}
        kwargs.setdefault("timeout", 60)
        return requests.request(method, self.url + path, headers=headers, **kwargs)

    def new_conversation(self, **body: Any) -> str:
        response = self.request("POST", "/v1/conversations", json=body)
        assert response.status_code == 201, response.text
        return str(response.json()["conversation_id"])

    def ask(self, conversation_id: str, query: str, **body: Any) -> requests.Response:
        return self.request(
            "POST", f"/v1/conversations/{conversation_id}/messages", json={"query": query, **body}
        )

    def wait_exit(self, timeout: float = 60) -> int:
        try:
            code = self.proc.wait(timeout=timeout)
        finally:
            self._reader.join(timeout=5)
        return code

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self._reader.join(timeout=5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()

    def kill9(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)
        self._reader.join(timeout=5)


def wait_for(check: Callable[[], Any], what: str, timeout: float = 30) -> Any:
    """Poll `check` until it returns something truthy (a generous timeout stops hangs)."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def db_status(db: Path | str) -> subprocess.CompletedProcess[str]:
    """``toolbridge db status --db DB`` run as a process beside the daemons (no colour)."""
    return subprocess.run(
        [sys.executable, "-m", "bridge", "db", "status", "--db", str(db)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "NO_COLOR": "1"},
        check=False,
    )


def in_background(send: Callable[[], Any]) -> dict[str, Any]:
    """Run `send` (a request to a daemon) in a daemon thread: ``box["thread"]`` is the thread,
    ``box["response"]`` what `send` returned, absent if the daemon died under the request."""
    box: dict[str, Any] = {}

    def run() -> None:
        with contextlib.suppress(requests.RequestException):  # killed under the request
            box["response"] = send()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    box["thread"] = thread
    return box


@contextlib.contextmanager
def stopped(*daemons: DaemonProcess) -> Iterator[None]:
    """Stop every daemon at the end, a paused one (SIGSTOP) included."""
    try:
        yield
    finally:
        for daemon in daemons:
            with contextlib.suppress(Exception):
                daemon.proc.send_signal(signal.SIGCONT)  # a paused one must be able to stop
            daemon.stop()


def executions(folder: Path) -> list[str]:
    path = folder / "executions.log"
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


@pytest.fixture(scope="session")
def emulator() -> Iterator[Emulator]:
    with Emulator(scenario=SCENARIO) as emu:
        yield emu


@pytest.fixture(scope="session")
def tools_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("daemon-tools")
    (folder / "daemon_tools.py").write_text(TOOLS, encoding="utf-8")
    (folder / "extra_tools.py").write_text(EXTRA_TOOLS, encoding="utf-8")
    return folder


def daemon_env(emulator: Emulator, tools_dir: Path, **extra: str) -> dict[str, str]:
    return {**emulator.env(), "TB_TOOLS_DIR": str(tools_dir), **extra}


def start_daemon(
    emulator: Emulator,
    tools_dir: Path,
    db: Path | str,
    *args: str,
    api_key: str | None = None,
    env: dict[str, str] | None = None,
) -> DaemonProcess:
    argv = [
        "--tools",
        str(tools_dir / "daemon_tools.py"),
        "--port",
        "0",
        "--db",
        str(db),
        *args,
    ]
    if api_key:
        argv += ["--api-key", api_key]
    return DaemonProcess(argv, env=daemon_env(emulator, tools_dir, **(env or {})), api_key=api_key)


@pytest.fixture(scope="session")
def daemon(
    emulator: Emulator, tools_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[DaemonProcess]:
    """The shared daemon: API key, JSON logs, two tool specs (one of them reloadable)."""
    db = tmp_path_factory.mktemp("daemon-db") / "journal.db"
    proc = start_daemon(
        emulator,
        tools_dir,
        db,
        "--tools",
        str(tools_dir / "extra_tools.py"),
        "--log-json",
        api_key=API_KEY,
    )
    proc.db = db  # type: ignore[attr-defined]
    try:
        yield proc
    finally:
        proc.stop()
