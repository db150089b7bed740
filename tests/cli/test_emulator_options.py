"""`--emulator` with `--scenario`, the bridge's tools declared to an emulated Coze bot from
Python as from the CLI, and the emulator's own hints shown as written (not as secrets)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import requests
from typer.testing import CliRunner

from bridge import Bridge, manifest, open_platform
from bridge.cli import app
from bridge.emulator import Emulator
from bridge.errors import redact, register_secret
from tests.cli.test_serve_cmd import Serve, clean_env

runner = CliRunner()

SCENARIO = """
rules:
  - match: "ping (?P<who>\\\\w+)"
    steps:
      - tool: get_weather
        arguments: {city: "{who}"}
    answer: "pong {who}: {outputs.get_weather}"
"""

TOOLS = """
from bridge import manifest


@manifest(description="Current weather of a city.")
def get_weather(city: str) -> str:
    return f"sunny in {city}"
"""


def _files(tmp_path: Path) -> tuple[str, str]:
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(SCENARIO, encoding="utf-8")
    tools = tmp_path / "weather_tools.py"
    tools.write_text(TOOLS, encoding="utf-8")
    return str(scenario), str(tools)


def _invoke(args: list[str], env: dict[str, str] | None = None) -> Any:
    base = {"APPBUILDER_TOKEN": "", "APPBUILDER_APP_ID": "", "GATEWAY_URL_V2": ""}
    base |= {"COZE_API_TOKEN": "", "COZE_BOT_ID": "", "COZE_API_BASE": ""}
    return runner.invoke(app, args, env={**base, **(env or {})})


def test_run_emulator_takes_a_scenario(tmp_path: Path) -> None:
    scenario, tools = _files(tmp_path)
    for platform in ("appbuilder", "coze"):
        result = _invoke(
            [
                *("run", "ping Oslo", "--tools", tools, "--emulator", "--scenario", scenario),
                *("--platform", platform, "--json"),
            ]
        )
        assert result.exit_code == 0, (platform, result.output)
        assert '"answer": "pong Oslo: sunny in Oslo"' in result.output, result.output


def test_a_scenario_without_the_emulator_is_refused(tmp_path: Path) -> None:
    scenario, tools = _files(tmp_path)
    result = _invoke(["run", "ping Oslo", "--tools", tools, "--scenario", scenario])
    assert result.exit_code == 2, result.output
    assert "pass --emulator too" in result.output


def test_a_bad_scenario_is_named(tmp_path: Path) -> None:
    _, tools = _files(tmp_path)
    missing = str(tmp_path / "nope.yaml")
    result = _invoke(["run", "ping Oslo", "--tools", tools, "--emulator", "--scenario", missing])
    assert result.exit_code == 2, result.output
    assert "nope.yaml: scenario file not found" in result.output


def test_serve_emulator_takes_a_scenario(tmp_path: Path) -> None:
    scenario, tools = _files(tmp_path)
    db = tmp_path / "journal.db"
    daemon = Serve(
        "serve", "--port", "0", "--tools", tools, "--db", str(db), "--emulator",
        "--scenario", scenario,
        env=clean_env(tmp_path),
    )  # fmt: skip
    try:
        created = requests.post(daemon.url + "/v1/conversations", json={}, timeout=30)
        cid = created.json()["conversation_id"]
        reply = requests.post(
            f"{daemon.url}/v1/conversations/{cid}/messages", json={"query": "ping Rome"}, timeout=60
        )
        assert reply.status_code == 200, reply.text
        assert reply.json()["answer"] == "pong Rome: sunny in Rome"
        assert f"{db}.emulator.json" in daemon.log, "where the emulator keeps its state"
    finally:
        daemon.stop()


@manifest(description="Current weather of a city.")
def get_weather(city: str) -> str:
    """Weather.

    Args:
        city: City name.
    """
    return f"sunny in {city}"


def test_open_platform_declares_a_bridges_tools_to_an_emulated_coze_bot() -> None:
    with open_platform("coze", emulator=True) as platform:
        bridge = Bridge(platform, [get_weather])
        result = bridge.ask("what is the weather in Paris?")
    [run] = result.tool_runs
    arguments = json.loads(run.arguments) if isinstance(run.arguments, str) else run.arguments
    assert (run.name, arguments, run.error) == ("get_weather", {"city": "Paris"}, None)
    assert result.answer == "sunny in Paris"


def test_doctor_shows_the_emulators_hint_as_written_and_masks_real_tokens() -> None:
    token = "emulator-token-0123456789"
    with Emulator(token=token, faults="") as emu:
        env = {**emu.env(), "APPBUILDER_TOKEN": "bce-v3/ALTAK-wrong0123/0123456789abcdef"}
        result = _invoke(["doctor"], env)
    assert result.exit_code == 3, result.output
    assert "expected 'Authorization: Bearer <token>'" in result.output, result.output
    assert "Bearer [secure]" not in result.output
    assert "wrong0123" not in result.output and token not in result.output
    # A real value after Bearer is still masked, whatever it looks like.
    register_secret(None)
    assert redact("Authorization: Bearer sk-live-0123456789") == "Authorization: Bearer [secure]"
    assert redact("Bearer <x>sk-live-0123456789") == "Bearer [secure]"
    assert redact("Bearer <token>") == "Bearer <token>"


def test_the_emulator_state_sits_beside_the_file_the_journal_path_names(tmp_path: Path) -> None:
    """Another spelling of the same journal (a symlink, a relative path) finds the same state,
    as it finds the same lock."""
    from bridge.cli.serve_cmd import _emulator_state_file

    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "journal.db").write_bytes(b"")
    (tmp_path / "link.db").symlink_to(tmp_path / "data" / "journal.db")
    expected = tmp_path.resolve() / "data" / "journal.db.emulator.json"
    assert _emulator_state_file(str(tmp_path / "link.db")) == expected
    assert _emulator_state_file(str(tmp_path / "data" / ".." / "data" / "journal.db")) == expected
    assert _emulator_state_file(":memory:") is None
