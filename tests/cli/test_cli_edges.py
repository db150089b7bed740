"""The CLI at its edges: tool failures, retries, unreachable platforms, missing settings.

Real processes where the terminal output is the point (`python -m bridge`), typer's CliRunner
elsewhere; every platform is a real server on loopback (the emulator, or nothing on a port).
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from bridge.cli import app
from bridge.emulator import Emulator
from bridge.platforms.registry import PLATFORMS
from bridge.platforms.retry import BACKOFF_ENV

ROOT = Path(__file__).resolve().parents[2]

TOOLS = '''
from bridge import manifest
from bridge.tools import ToolError

@manifest(description="Current weather of a city.")
def get_weather(city: str) -> dict:
    """Weather.

    Args:
        city: City name.
    """
    if city == "Atlantis":
        raise ValueError(f"no weather station in {city}")
    if city == "Nowhere":
        raise ToolError(f"unknown city {city}")
    return {"city": city, "temp": 18}
'''

SCENARIO: dict[str, Any] = {
    "rules": [
        {
            "match": r"weather in (?P<city>\w+)",
            "steps": [{"tool": "get_weather", "arguments": {"city": "{city}"}}],
            "answer": "{outputs.get_weather}",
        },
        {
            "match": r"busy",
            "steps": [],
            "answer": "finally",
            "faults": "status=503,times=1",
        },
    ]
}


@pytest.fixture(scope="module")
def emulator() -> Iterator[Emulator]:
    with Emulator(scenario=SCENARIO, faults="") as emu:
        yield emu


@pytest.fixture()
def tools_file(tmp_path: Path) -> str:
    path = tmp_path / "edge_tools.py"
    path.write_text(TOOLS, encoding="utf-8")
    return str(path)


def clean_env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("APPBUILDER_", "GATEWAY_", "OPENAI_", "TOOLBRIDGE_"))
    }
    return {**env, "PYTHONPATH": str(ROOT), "COLUMNS": "200", **extra}


def no_backoff(**extra: str) -> dict[str, str]:
    """`clean_env`, retrying at once: the retries happen and are told, without the waits."""
    return clean_env(**{BACKOFF_ENV: "0.001", **extra})


def toolbridge(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bridge", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


runner = CliRunner()


def invoke(args: list[str], env: dict[str, str] | None = None) -> Any:
    base = {"APPBUILDER_TOKEN": "", "APPBUILDER_APP_ID": "", "GATEWAY_URL_V2": ""}
    return runner.invoke(app, args, env={**base, **(env or {})})


# --- 1. a tool's failure is one line -------------------------------------------------------------


def test_the_readme_time_example_fails_in_one_line_not_a_traceback() -> None:
    done = toolbridge(
        "run",
        "what time is it in Tokyo?",
        "--tools",
        "manifests/time.py",
        "--emulator",
        env=clean_env(),
    )
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert all(line.startswith(("✓ ", "✗ ")) for line in lines), done.stderr  # tool lines only
    [line] = [line for line in lines if line.startswith("✗ ")]
    assert line.startswith('✗ current_time({"timezone": "Tokyo"}) ')
    assert "error: ValueError: timezone: unknown time zone 'Tokyo'" in line
    assert "did you mean Asia/Tokyo?" in line


@pytest.mark.parametrize(("city", "error"), [("Atlantis", "ValueError"), ("Nowhere", "ToolError")])
def test_any_tool_exception_is_one_line_and_verbose_adds_details(
    emulator: Emulator, tools_file: str, city: str, error: str
) -> None:
    env = clean_env(**emulator.env())
    done = toolbridge("run", f"weather in {city}", "-t", tools_file, env=env)
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr  # a ToolError too: reported once, not twice
    assert f"error: {error}: " in lines[0] and city in lines[0]
    verbose = toolbridge("-v", "run", f"weather in {city}", "-t", tools_file, env=env)
    assert "tool 'get_weather' failed" in verbose.stderr
    assert ("Traceback" in verbose.stderr) is (error == "ValueError")


def test_chat_reports_a_tool_failure_in_one_line(emulator: Emulator, tools_file: str) -> None:
    result = runner.invoke(
        app,
        ["chat", "-t", tools_file],
        env={"APPBUILDER_TOKEN": "", "APPBUILDER_APP_ID": "", **emulator.env()},
        input="weather in Atlantis\n/exit\n",
    )
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    assert "error: ValueError: no weather station in Atlantis" in result.stderr


# --- 2. retries and unreachable platforms --------------------------------------------------------


def test_a_busy_platform_is_retried_visibly(emulator: Emulator, tools_file: str) -> None:
    done = toolbridge("run", "busy", "-t", tools_file, env=no_backoff(**emulator.env()))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "finally"
    assert re.search(
        r"platform busy \(HTTP 503\), retrying in \d+\.\d s \(attempt 2 of 4\)", done.stderr
    ), done.stderr


@pytest.mark.parametrize("platform", ["appbuilder", "openai"])
def test_an_unreachable_platform_is_named_in_plain_words(platform: str, tools_file: str) -> None:
    port = closed_port()
    if platform == "appbuilder":
        flags = ["--token", "t0ken", "--app-id", "app", "--base-url", f"http://127.0.0.1:{port}"]
    else:
        flags = ["--platform", "openai", "--base-url", f"http://127.0.0.1:{port}/v1"]
        flags += ["--model", "m"]
    done = toolbridge("run", "hi", "-t", tools_file, *flags, env=no_backoff())
    assert done.returncode == 4, done.stderr
    assert f"cannot connect to http://127.0.0.1:{port} (connection refused)" in done.stderr
    assert "HTTPConnectionPool" not in done.stderr and "Traceback" not in done.stderr
    retries = [line for line in done.stderr.splitlines() if "retrying in" in line]
    assert [line.split("(attempt ")[1] for line in retries] == ["2 of 4)", "3 of 4)", "4 of 4)"]
    assert all(f"cannot connect to http://127.0.0.1:{port}" in line for line in retries)
    as_json = toolbridge("run", "hi", "-t", tools_file, *flags, "--json", env=no_backoff())
    error = json.loads(as_json.stdout)["error"]
    assert error["exit_code"] == 4 and "HTTPConnectionPool" not in error["message"]
    assert f"cannot connect to http://127.0.0.1:{port} (connection refused)" in error["message"]


# --- 3. no silent emulator -----------------------------------------------------------------------


def test_missing_settings_are_all_named_in_cli_words(tools_file: str) -> None:
    result = invoke(["run", "hi", "-t", tools_file])
    assert result.exit_code == 2
    message = result.stderr
    assert "--token or APPBUILDER_TOKEN" in message and "--app-id or APPBUILDER_APP_ID" in message
    assert "--emulator" in message
    assert "app_id=" not in message and "token=" not in message
    openai = invoke(["run", "hi", "-t", tools_file, "--platform", "openai"])
    assert openai.exit_code == 2
    assert "--base-url or OPENAI_BASE_URL" in openai.stderr
    assert "--model or OPENAI_MODEL" in openai.stderr


def test_the_emulator_switch_runs_offline(tools_file: str, monkeypatch: pytest.MonkeyPatch) -> None:
    result = invoke(["run", "weather in Paris", "-t", tools_file, "--emulator", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["tool_runs"][0]["name"] == "get_weather"
    mixed = invoke(["run", "hi", "-t", tools_file, "--emulator", "--token", "x"])
    assert mixed.exit_code == 2 and "--token cannot be used with it" in mixed.stderr
    # Every shipped platform has an emulator: take the openai platform's away.
    monkeypatch.setitem(PLATFORMS, "openai", replace(PLATFORMS["openai"], emulator_protocol=None))
    other = invoke(["run", "hi", "-t", tools_file, "--emulator", "--platform", "openai"])
    assert other.exit_code == 2 and "--platform appbuilder" in other.stderr


def test_chat_takes_the_emulator_switch(tools_file: str) -> None:
    result = runner.invoke(
        app,
        ["chat", "-t", tools_file, "--emulator"],
        env={"APPBUILDER_TOKEN": "", "APPBUILDER_APP_ID": ""},
        input="weather in Paris\n/exit\n",
    )
    assert result.exit_code == 0, result.output
    assert "get_weather" in result.stderr


# --- 5. renaming a source's tools -----------------------------------------------------------------


def test_a_prefix_renames_one_sources_tools(tools_file: str) -> None:
    result = runner.invoke(app, ["manifest", tools_file, f"{tools_file} prefix=other_"])
    assert result.exit_code == 0, result.output
    names = [tool["function"]["name"] for tool in json.loads(result.stdout)]
    assert names == ["get_weather", "other_get_weather"]
    clash = runner.invoke(app, ["manifest", tools_file, tools_file])
    assert clash.exit_code == 2
    assert "duplicate tool name 'get_weather'" in clash.stderr
    assert f'--tools "{tools_file} prefix=other_"' in " ".join(clash.stderr.split())
    bad = runner.invoke(app, ["manifest", f"{tools_file} prefix=no!"])
    assert bad.exit_code == 2
    assert "expected 1 to 63 ASCII letters, digits, '_' or '-'" in bad.stderr


def test_run_calls_a_renamed_tool(emulator: Emulator, tools_file: str) -> None:
    result = invoke(
        ["run", "weather in Paris", "-t", tools_file, "-t", f"{tools_file} prefix=x_", "--json"],
        emulator.env(),
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["tool_runs"][0]["name"] == "get_weather"
    sent = [r.json for r in emulator.requests if r.path.endswith("/runs") and r.json.get("tools")]
    assert [tool["function"]["name"] for tool in sent[-1]["tools"]] == [
        "get_weather",
        "x_get_weather",
    ]


# --- 7. --json, human input, help ----------------------------------------------------------------


def test_run_json_reports_load_errors_as_json(tmp_path: Path) -> None:
    result = invoke(["run", "hi", "-t", str(tmp_path / "missing.py"), "--emulator", "--json"])
    assert result.exit_code == 2
    body = json.loads(result.stdout)
    assert body["error"]["exit_code"] == 2 and "missing.py" in body["error"]["message"]
    assert body["error"]["type"] == "UsageError"
    unconfigured = invoke(["run", "hi", "--json"])
    assert unconfigured.exit_code == 2
    assert "APPBUILDER_TOKEN" in json.loads(unconfigured.stdout)["error"]["message"]
    no_conversation = invoke(["run", "hi", "--json", "--resume", "x"])
    assert json.loads(no_conversation.stdout)["error"]["exit_code"] == 2


def test_manifest_help_lists_every_source_kind() -> None:
    result = runner.invoke(app, ["manifest", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    text = " ".join(result.stdout.split())
    for kind in (".py", "package.module", ".yaml", "openapi:", "mcp:", "mcp+http://"):
        assert kind in text, kind


@pytest.mark.parametrize(
    ("extra", "problem"),
    [("prefix=x_ bad=1", "prefix= must come last, once"), ("bad=1", "unknown option 'bad'")],
)
def test_an_unknown_option_after_a_tool_spec_is_named(
    tools_file: str, extra: str, problem: str
) -> None:
    result = runner.invoke(app, ["manifest", f"{tools_file} {extra}"])
    assert result.exit_code == 2, result.output
    message = " ".join(result.stderr.split())
    assert problem in message and "prefix=NAME" in message
    assert "Traceback" not in result.output
