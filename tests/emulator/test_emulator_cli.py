"""`toolbridge emulator`: a real foreground server in a subprocess, and its error exits."""

from __future__ import annotations

import contextlib
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

import bridge.emulator
import bridge.errors
from bridge.cli import app
from tests.emulator.helpers import WEATHER, Api, interrupt_calls

SHIPPED = Path(bridge.emulator.__file__).parent / "scenarios" / "weather.yaml"


def _output(result: object) -> str:
    text = str(getattr(result, "output", ""))
    with contextlib.suppress(ValueError):  # older click: stderr not captured separately
        text += str(getattr(result, "stderr", "") or "")
    return text


@pytest.fixture
def cli_server() -> Iterator[tuple[subprocess.Popen[str], dict[str, str], list[str]]]:
    """`toolbridge emulator --port 0 --scenario weather.yaml` running as a subprocess."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bridge",
            "emulator",
            "--port",
            "0",
            "--token",
            "cli-token",
            "--app-id",
            "cli-app",
            "--scenario",
            str(SHIPPED),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        encoding="utf-8",
    )
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)

    threading.Thread(target=pump, daemon=True).start()
    seen: list[str] = []
    env: dict[str, str] = {}
    try:
        while "APPBUILDER_APP_ID" not in env:
            try:
                line = lines.get(timeout=30)
            except queue.Empty:
                pytest.fail(f"the emulator printed no env vars in 30 s: {seen}")
            seen.append(line)
            found = re.match(r"\s*export (\w+)=(\S+)", line)
            if found:
                env[found.group(1)] = found.group(2)
        yield proc, env, seen
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=15)


def test_the_command_serves_the_scenario_and_stops_cleanly(
    cli_server: tuple[subprocess.Popen[str], dict[str, str], list[str]],
) -> None:
    proc, env, seen = cli_server
    assert env["APPBUILDER_TOKEN"] == "cli-token" and env["APPBUILDER_APP_ID"] == "cli-app"
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+", env["GATEWAY_URL_V2"])
    assert "scenario" in seen[0] and "weather.yaml" in seen[0]
    api = Api(env["GATEWAY_URL_V2"], token="cli-token", app_id="cli-app")
    conversation_id = api.create()
    chunks = api.chunks(conversation_id, "Compare Paris and London", stream=True, tools=[WEATHER])
    assert [c["function"]["arguments"]["city"] for c in interrupt_calls(chunks)] == [
        "Paris",
        "London",
    ]
    proc.send_signal(signal.SIGINT)  # Ctrl+C: uvicorn shuts down, then exits as interrupted
    assert proc.wait(timeout=15) == 130


def test_a_bad_scenario_file_exits_2_naming_file_and_key(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("rules:\n  - match: '(oops'\n", encoding="utf-8")
    result = CliRunner().invoke(app, ["emulator", "--scenario", str(bad)])
    assert result.exit_code == 2
    assert f"{bad}: rules[0].match: not a valid regular expression" in _output(result)


def test_a_missing_scenario_file_exits_2(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["emulator", "--scenario", str(tmp_path / "none.yaml")])
    assert result.exit_code == 2
    assert "none.yaml: scenario file not found" in _output(result)


def test_a_bad_fault_spec_exits_2() -> None:
    result = CliRunner().invoke(app, ["emulator", "--faults", "explode=1"])
    assert result.exit_code == 2
    assert "fault spec 'explode=1': unknown key 'explode'" in _output(result)


def test_a_non_loopback_host_is_refused_without_allow_remote() -> None:
    result = CliRunner().invoke(app, ["emulator", "--host", "0.0.0.0"])
    assert result.exit_code == 2
    output = _output(result)
    assert "refusing to listen on 0.0.0.0" in output and "--allow-remote" in output


def test_allow_remote_warns(tmp_path: Path) -> None:
    # A bad scenario stops the command before it listens anywhere.
    bad = tmp_path / "bad.yaml"
    bad.write_text("rules: 3\n", encoding="utf-8")
    result = CliRunner().invoke(
        app, ["emulator", "--host", "0.0.0.0", "--allow-remote", "--scenario", str(bad)]
    )
    assert result.exit_code == 2
    output = _output(result)
    assert "warning: listening on 0.0.0.0" in output
    assert "rules: Input should be a valid list" in output


def test_a_busy_port_exits_1() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = CliRunner().invoke(app, ["emulator", "--port", str(port)])
    assert result.exit_code == 1
    assert f"cannot listen on 127.0.0.1:{port}" in _output(result)


def test_an_unknown_protocol_exits_2_listing_the_known_ones() -> None:
    result = CliRunner().invoke(app, ["emulator", "--protocol", "smoke-signals"])
    assert result.exit_code == 2
    assert "unknown emulator protocol 'smoke-signals'" in result.output
    assert "appbuilder" in result.output


def test_the_in_process_emulator_refuses_an_unknown_protocol() -> None:
    with pytest.raises(bridge.errors.UsageError, match="expected one of: appbuilder"):
        bridge.emulator.Emulator(protocol="smoke-signals")


def test_the_appbuilder_protocol_names_its_client_environment() -> None:
    with bridge.emulator.Emulator(protocol="appbuilder") as emu:
        assert emu.env() == {
            "GATEWAY_URL_V2": emu.base_url,
            "APPBUILDER_TOKEN": emu.token,
            "APPBUILDER_APP_ID": emu.app_id,
        }
        assert repr(emu).startswith("Emulator(appbuilder, app_id='emulator-app'")
