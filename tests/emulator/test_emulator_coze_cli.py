"""`toolbridge emulator --protocol coze`: a foreground Coze server that the adapter talks to."""

from __future__ import annotations

import queue
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bridge import Bridge, Toolbox
from bridge.cli import app
from bridge.platforms.coze import CozePlatform

BOT = """\
coze:
  bot_name: CLI bot
  plugins:
    - name: get_weather
      description: Get the current weather for a city
      parameters:
        type: object
        properties: {city: {type: string, description: City name}}
        required: [city]
"""


def get_weather(city: str) -> str:
    """Get the current weather for a city.

    Args:
        city: City name.
    """
    return f"{city}: 18 C"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], dict[str, str], str]]:
    """`toolbridge emulator --protocol coze --port 0 --scenario bot.yaml` as a subprocess."""
    scenario = tmp_path / "bot.yaml"
    scenario.write_text(BOT, encoding="utf-8")
    argv = [sys.executable, "-m", "bridge", "emulator", "--protocol", "coze", "--port", "0"]
    argv += ["--token", "pat_cli_token", "--app-id", "7400000000000000001"]
    argv += ["--scenario", str(scenario)]
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, encoding="utf-8"
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
        while "COZE_BOT_ID" not in env:
            try:
                line = lines.get(timeout=30)
            except queue.Empty:
                pytest.fail(f"the emulator printed no env vars in 30 s: {seen}")
            seen.append(line)
            found = re.match(r"\s*export (\w+)=(\S+)", line)
            if found:
                env[found.group(1)] = found.group(2)
        yield proc, env, seen[0]
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=15)


def test_the_coze_emulator_command_serves_the_adapter(
    server: tuple[subprocess.Popen[str], dict[str, str], str],
) -> None:
    proc, env, first = server
    assert "Coze-compatible" in first and "bot.yaml" in first
    assert env["COZE_API_TOKEN"] == "pat_cli_token"
    assert env["COZE_BOT_ID"] == "7400000000000000001"
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+", env["COZE_API_BASE"])
    platform = CozePlatform(env["COZE_API_TOKEN"], env["COZE_BOT_ID"], env["COZE_API_BASE"])
    assert platform.remote_tool_names() == ["get_weather"]
    with Bridge(platform, Toolbox([get_weather])) as bridge:
        assert bridge.ask("What is the weather in Oslo?").answer == "Oslo: 18 C"
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=15) == 130


def test_a_bad_coze_section_exits_2_naming_the_key(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("coze:\n  plugins: [{name: 'no spaces allowed'}]\n", encoding="utf-8")
    result = CliRunner().invoke(app, ["emulator", "--protocol", "coze", "--scenario", str(bad)])
    assert result.exit_code == 2
    assert "bad.yaml: coze: plugins[0].name" in result.output
