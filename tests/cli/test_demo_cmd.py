"""`toolbridge demo`: the same script and tools on every platform that has an emulator."""

from __future__ import annotations

from dataclasses import replace

import pytest
from typer.testing import CliRunner

from bridge.cli import app
from bridge.demo import demo_platforms
from bridge.platforms.registry import PLATFORMS

runner = CliRunner()


def test_the_default_demo_switches_platform() -> None:
    others = [name for name in demo_platforms() if name != "appbuilder"]
    result = runner.invoke(app, ["demo"])
    assert result.exit_code == 0, result.output
    assert "2 turns, 3 tool rounds, 4 tool calls" in result.stdout
    if not others:
        pytest.skip("no other platform has an emulator")
    assert "Switched platform: the" in result.stdout
    assert f"(--platform {others[0]}); the same tools, unchanged." in result.stdout
    switched = result.stdout.split("Switched platform")[1]
    assert "run in parallel" in switched
    assert "北京今天晴，12°C；上海今天多云，16°C。" in switched


@pytest.mark.parametrize("platform", demo_platforms())
def test_the_demo_runs_on_each_emulated_platform(platform: str) -> None:
    result = runner.invoke(app, ["demo", "--platform", platform])
    assert result.exit_code == 0, result.output
    assert "2 turns, 3 tool rounds, 4 tool calls" in result.stdout
    assert "MR-1024" in result.stdout
    assert "Switched platform" not in result.stdout
    assert f"--platform {platform}`" not in result.stdout, "it does not advertise itself"


def test_platforms_without_an_emulator_or_unknown_are_usage_errors(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Every shipped platform has one: take the openai platform's away.
    monkeypatch.setitem(PLATFORMS, "openai", replace(PLATFORMS["openai"], emulator_protocol=None))
    result = runner.invoke(app, ["demo", "--platform", "openai"])
    assert result.exit_code == 2
    assert "--platform openai has no embedded emulator" in result.stderr
    unknown = runner.invoke(app, ["demo", "--platform", "nowhere"])
    assert unknown.exit_code == 2
    assert "unknown platform 'nowhere'; expected one of: appbuilder" in unknown.stderr
