"""Every example runs against the emulator and says what its docstring promises."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from bridge import Platform, open_platform

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture()
def platform_for() -> Iterator[object]:
    """Open an emulator-backed platform scripted by an example's SCENARIO."""
    stack: list[object] = []

    def make(module: ModuleType) -> Platform:
        manager = open_platform(emulator=True, scenario=module.SCENARIO)
        stack.append(manager)
        return manager.__enter__()

    yield make
    for manager in reversed(stack):
        manager.__exit__(None, None, None)  # type: ignore[attr-defined]


def test_two_turn(platform_for) -> None:  # type: ignore[no-untyped-def]
    module = importlib.import_module("examples.two_turn")
    first, second = module.main(platform_for(module))
    assert first.answer == "张三的电话是 010-8888-0001。"
    assert second.answer == "李四的电话是 021-6666-0002。"
    assert first.conversation_id == second.conversation_id
    assert (first.rounds, second.rounds) == (1, 1)


def test_weather(platform_for) -> None:  # type: ignore[no-untyped-def]
    module = importlib.import_module("examples.weather.main")
    now, forecast = module.main(platform_for(module))
    assert now.answer == "上海现在多云，16.5°C，湿度 65%。"
    assert forecast.tool_runs[0].name == "get_forecast"
    assert forecast.tool_runs[0].error is None
    assert forecast.answer.startswith("北京未来2天：")
    assert forecast.answer.count('"day"') == 2  # "2" from the text was coerced to int


def test_weather_manifests_carry_chinese_descriptions() -> None:
    from bridge import Toolbox
    from examples.weather import tools

    manifests = {m["function"]["name"]: m["function"] for m in Toolbox([tools]).manifests()}
    assert manifests["get_current_weather"]["description"].startswith("查询城市当前的天气")
    city = manifests["get_current_weather"]["parameters"]["properties"]["city"]
    assert city["description"] == "城市名，例如：北京、上海"
    days = manifests["get_forecast"]["parameters"]["properties"]["days"]
    assert (days["minimum"], days["maximum"]) == (1, 7)


def test_toolkit(platform_for) -> None:  # type: ignore[no-untyped-def]
    module = importlib.import_module("examples.toolkit")
    result = module.main(platform_for(module))
    assert [run.name for run in result.tool_runs] == [
        "helpdesk_open_ticket",
        "helpdesk_list_tickets",
    ]
    assert result.answer == 'Opened T-1. Open tickets: ["T-1"]'


def test_stateful_tool(platform_for) -> None:  # type: ignore[no-untyped-def]
    module = importlib.import_module("examples.stateful_tool")
    first, second = module.main(platform_for(module))
    assert first.answer == 'You asked me to remember: ["milk", "eggs"]'
    assert second.answer == 'You asked me to remember: ["tea"]'


def test_confirm(platform_for) -> None:  # type: ignore[no-untyped-def]
    module = importlib.import_module("examples.confirm")
    module.RESTARTED.clear()
    approved, rejected = module.main(platform_for(module))
    assert approved.answer == "restart_service said: billing-staging restarted"
    assert rejected.answer.endswith("rejected by the user")
    assert rejected.tool_runs[0].error == "rejected"
    assert module.RESTARTED == ["billing-staging"]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["examples/two_turn.py"], "张三的电话是 010-8888-0001。"),
        (["-m", "examples.weather.main"], "上海现在多云"),
        (["examples/toolkit.py"], "Opened T-1."),
        (["examples/stateful_tool.py"], "milk"),
        (["examples/confirm.py"], "rejected by the user"),
    ],
)
def test_examples_run_as_scripts_offline(args: list[str], expected: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("APPBUILDER_", "GATEWAY_"))}
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run(
        [sys.executable, *args, "--emulator"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert expected in done.stdout


def test_without_the_emulator_switch_missing_settings_are_an_error() -> None:
    """No silent fallback to the emulator: a mistyped variable must not give emulated answers."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("APPBUILDER_", "GATEWAY_"))}
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run(
        [sys.executable, "examples/two_turn.py"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1
    error = done.stderr.strip().splitlines()[-1]
    assert "ConfigurationError" in error
    # Every missing setting at once, and the way out.
    assert "APPBUILDER_APP_ID" in error and "APPBUILDER_TOKEN" in error
    assert "open_platform(emulator=True)" in error
    assert done.stdout == ""
