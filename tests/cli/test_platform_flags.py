"""Every registered platform through the CLI: its flags come from the registry, --emulator
starts its emulator, and the same tools answer over each wire."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bridge.cli import app
from bridge.platforms.registry import PLATFORMS, flag_settings

runner = CliRunner()
EMULATED = [name for name, entry in PLATFORMS.items() if entry.emulator_protocol]
TOOLS = """
from bridge import manifest

@manifest(description="Current weather of a city.")
def get_weather(city: str) -> str:
    return f"{city}: sunny"
"""


@pytest.fixture()
def tools_file(tmp_path: Path) -> str:
    path = tmp_path / "weather_tools.py"
    path.write_text(TOOLS, encoding="utf-8")
    return str(path)


@pytest.mark.parametrize("command", ["run", "chat", "doctor", "serve"])
def test_every_platform_flag_is_offered(command: str) -> None:
    result = runner.invoke(
        app, [command, "--help"], env={"COLUMNS": "300", "TERMINAL_WIDTH": "300"}
    )
    assert result.exit_code == 0, result.output
    for flag in flag_settings():
        shown = "--platform-api-key" if command == "serve" and flag == "--api-key" else flag
        assert shown in result.stdout, f"{command} lacks {shown}"
    for name in PLATFORMS:
        assert name in result.stdout


@pytest.mark.parametrize("platform", EMULATED)
def test_run_on_each_emulated_platform(platform: str, tools_file: str) -> None:
    result = runner.invoke(
        app,
        [
            "run",
            "weather in Paris",
            "-t",
            tools_file,
            "--platform",
            platform,
            "--emulator",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    body = json.loads(result.stdout)
    assert [run["name"] for run in body["tool_runs"]] == ["get_weather"]
    assert body["answer"] == "Paris: sunny"


@pytest.mark.parametrize("platform", EMULATED)
def test_doctor_on_each_emulated_platform(platform: str, tools_file: str) -> None:
    result = runner.invoke(app, ["doctor", "--platform", platform, "--emulator", "-t", tools_file])
    assert result.exit_code == 0, result.output
    assert "✓ platform: the embedded" in result.stdout
    assert "✓ reachable:" in result.stdout
    # An emulated agent whose tools live server-side gets the loaded ones, as with `run`.
    assert "remote tools" not in result.stdout or "✓ remote tools:" in result.stdout


def test_a_flag_for_another_platform_names_who_takes_it(tools_file: str) -> None:
    result = runner.invoke(
        app, ["run", "hi", "-t", tools_file, "--emulator", "--tool-protocol", "text"]
    )
    assert result.exit_code == 2
    assert "--tool-protocol is for --platform openai only" in result.stderr
