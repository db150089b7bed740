"""`toolbridge serve` at start-up, as a real process: where the journal goes, what it warns
about, when it is ready, what a failing tool logs, and that a failed start leaves nothing."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from bridge.emulator import Emulator
from bridge.platforms.retry import BACKOFF_ENV

ROOT = Path(__file__).resolve().parents[2]

TOOLS = '''
from bridge import manifest

@manifest(description="Current weather of a city.")
def get_weather(city: str) -> dict:
    """Weather.

    Args:
        city: City name.
    """
    if city == "Atlantis":
        raise ValueError(f"no weather station in {city}")
    return {"city": city, "temp": 18}
'''

HTTP_TOOLS = """
base_url: http://127.0.0.1:9
tools:
  - name: get_weather
    description: Weather from the registry.
    url: /weather
    parameters:
      type: object
      properties:
        city: {type: string}
      required: [city]
"""

SCENARIO: dict[str, Any] = {
    "rules": [
        {
            "match": r"weather in (?P<city>\w+)",
            "steps": [{"tool": "get_weather", "arguments": {"city": "{city}"}}],
            "answer": "{outputs.get_weather}",
        }
    ]
}


class Serve:
    """One `python -m bridge serve` process, its log, and its URL once it listens."""

    def __init__(self, *args: str, env: dict[str, str], wait: bool = True) -> None:
        self.lines: list[str] = []
        self.url = ""
        self._listening = threading.Event()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bridge", *args],
            cwd=ROOT,
            env={**env, "PYTHONUNBUFFERED": "1"},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        if wait:
            deadline = time.monotonic() + 60
            while not self._listening.wait(0.05):
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self._reader.join(timeout=5)
                    raise AssertionError("the daemon did not start:\n" + self.log)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))
            if "listening on http://" in line and not self.url:
                self.url = line.split("listening on ", 1)[1].split()[0]
                self._listening.set()

    @property
    def log(self) -> str:
        return "\n".join(self.lines)

    def wait_exit(self) -> int:
        code = self.proc.wait(timeout=60)
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


def clean_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("APPBUILDER_", "GATEWAY_", "OPENAI_", "TOOLBRIDGE_", "XDG_"))
    }
    return {**env, "PYTHONPATH": str(ROOT), "XDG_STATE_HOME": str(tmp_path / "state"), **extra}


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def emulator() -> Iterator[Emulator]:
    with Emulator(scenario=SCENARIO, faults="") as emu:
        yield emu


@pytest.fixture()
def tools_file(tmp_path: Path) -> str:
    path = tmp_path / "serve_tools.py"
    path.write_text(TOOLS, encoding="utf-8")
    return str(path)


def wait_for_ready(url: str, expected: int) -> requests.Response:
    deadline = time.monotonic() + 60
    while True:
        got = requests.get(url + "/readyz", timeout=30)
        if got.status_code == expected or time.monotonic() > deadline:
            return got
        time.sleep(0.1)


def test_the_default_journal_is_in_the_state_directory_and_printed(
    tmp_path: Path, tools_file: str
) -> None:
    daemon = Serve(
        "serve", "--port", "0", "--tools", tools_file, "--emulator", env=clean_env(tmp_path)
    )
    try:
        journal = tmp_path / "state" / "toolbridge" / "toolbridge.db"
        assert f"journal: {journal}" in daemon.log
        assert journal.is_file()
        ready = wait_for_ready(daemon.url, 200)
        assert ready.status_code == 200, ready.text
        assert ready.json()["status"] == "ready" and ready.json()["tools"] == 1
        assert "embedded AppBuilder emulator" in daemon.log
        # The listening line names the console, the page a newcomer opens.
        assert f"listening on {daemon.url} (console: {daemon.url}/)" in daemon.log
        console = requests.get(daemon.url + "/", timeout=30)
        assert console.status_code == 200 and "toolbridge console" in console.text
    finally:
        daemon.stop()


def test_no_tools_is_a_warning_and_not_ready(tmp_path: Path) -> None:
    daemon = Serve(
        "serve", "--port", "0", "--db", ":memory:", "--emulator", env=clean_env(tmp_path)
    )
    try:
        assert "starting with no tools" in daemon.log
        got = requests.get(daemon.url + "/readyz", timeout=30)
        assert got.status_code == 503
        error = got.json()["error"]
        assert error["code"] == "not_ready" and "no tools are loaded" in error["message"]
        assert "journal: in memory" in daemon.log
    finally:
        daemon.stop()


def test_an_unreachable_platform_is_not_ready_and_named_in_plain_words(
    tmp_path: Path, tools_file: str
) -> None:
    port = closed_port()
    gateway = f"http://127.0.0.1:{port}"
    args = ["serve", "--port", "0", "--db", ":memory:", "--tools", tools_file]
    args += ["--token", "t0ken-abcdefgh", "--app-id", "app", "--base-url", gateway]
    daemon = Serve(*args, env=clean_env(tmp_path, **{BACKOFF_ENV: "0.001"}))  # retried at once
    try:
        got = wait_for_ready(daemon.url, 503)
        assert got.status_code == 503, got.text
        message = got.json()["error"]["message"]
        assert "the agent platform is unreachable" in message
        assert f"cannot connect to {gateway} (connection refused)" in message
        # The API's error bodies (and so the console) say it the same way.
        cid = requests.post(daemon.url + "/v1/conversations", json={}, timeout=30)
        if cid.status_code == 201:
            answer = requests.post(
                daemon.url + f"/v1/conversations/{cid.json()['conversation_id']}/messages",
                json={"query": "hi"},
                timeout=60,
            )
            text = answer.text
        else:
            text = cid.text
        assert f"cannot connect to {gateway} (connection refused)" in text, text
        assert "HTTPConnectionPool" not in text
    finally:
        daemon.stop()


def test_a_failing_tool_is_one_log_line_with_its_conversation(
    tmp_path: Path, tools_file: str, emulator: Emulator
) -> None:
    env = clean_env(tmp_path, **emulator.env())
    for verbose in (False, True):
        args = ["-v"] if verbose else []
        daemon = Serve(
            *args, "serve", "--port", "0", "--db", ":memory:", "--tools", tools_file, env=env
        )
        try:
            cid = requests.post(daemon.url + "/v1/conversations", json={}, timeout=30).json()[
                "conversation_id"
            ]
            answer = requests.post(
                daemon.url + f"/v1/conversations/{cid}/messages",
                json={"query": "weather in Atlantis"},
                timeout=60,
            )
            assert answer.status_code == 200, answer.text
        finally:
            daemon.stop()
        [line] = [line for line in daemon.lines if "tool 'get_weather' failed" in line]
        assert f"(conversation {cid}, call " in line
        assert "ValueError: no weather station in Atlantis" in line
        assert ("Traceback" in daemon.log) is verbose


def test_a_failed_start_creates_no_journal(tmp_path: Path) -> None:
    db = tmp_path / "journal.db"
    missing = str(tmp_path / "missing.py")
    daemon = Serve(
        "serve", "--port", "0", "--db", str(db), "--tools", missing, "--emulator",
        env=clean_env(tmp_path), wait=False,
    )  # fmt: skip
    assert daemon.wait_exit() == 2, daemon.log
    assert "missing.py" in daemon.log
    assert list(tmp_path.glob("journal.db*")) == []
    default = Serve(
        "serve",
        "--port",
        "0",
        "--tools",
        missing,
        "--emulator",
        env=clean_env(tmp_path),
        wait=False,
    )
    assert default.wait_exit() == 2
    assert list((tmp_path / "state").rglob("*.db*")) == []


def test_missing_platform_settings_are_all_named(tmp_path: Path, tools_file: str) -> None:
    daemon = Serve(
        "serve", "--port", "0", "--db", str(tmp_path / "j.db"), "--tools", tools_file,
        env=clean_env(tmp_path), wait=False,
    )  # fmt: skip
    assert daemon.wait_exit() == 2
    assert "--token or APPBUILDER_TOKEN" in daemon.log
    assert "--app-id or APPBUILDER_APP_ID" in daemon.log
    assert "--emulator" in daemon.log
    assert "Traceback" not in daemon.log
    assert not (tmp_path / "j.db").exists()


def test_two_sources_with_one_tool_name_are_served_with_a_prefix(
    tmp_path: Path, tools_file: str
) -> None:
    manifest = tmp_path / "registry.yaml"
    manifest.write_text(HTTP_TOOLS, encoding="utf-8")
    base = ["serve", "--port", "0", "--db", ":memory:", "--emulator", "--tools", tools_file]
    clash = Serve(*base, "--tools", str(manifest), env=clean_env(tmp_path), wait=False)
    assert clash.wait_exit() == 2
    assert "duplicate tool name 'get_weather'" in clash.log
    assert f'--tools "{manifest} prefix=other_"' in clash.log
    daemon = Serve(*base, "--tools", f"{manifest} prefix=registry_", env=clean_env(tmp_path))
    try:
        tools = requests.get(daemon.url + "/v1/tools", timeout=30).json()
        names = sorted(tool["name"] for tool in tools.get("tools", tools))
        assert names == ["get_weather", "registry_get_weather"]
    finally:
        daemon.stop()


def test_a_port_in_use_leaves_no_journal(tmp_path: Path, tools_file: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        daemon = Serve(
            "serve", "--port", port, "--tools", tools_file, "--emulator",
            env=clean_env(tmp_path), wait=False,
        )  # fmt: skip
        assert daemon.wait_exit() == 2, daemon.log
    assert f"error: port {port} on 127.0.0.1 is in use by another process" in daemon.log
    assert list((tmp_path / "state").rglob("*.db*")) == []
