"""`toolbridge call SPEC TOOL [ARGS_JSON]`: output, exit codes and usage errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bridge.cli import app

runner = CliRunner()

TOOLS = '''
import asyncio
import threading

from bridge.tools import ToolContext, manifest


@manifest
def get_weather(city: str, days: int = 1) -> dict:
    """Weather of a city.

    Args:
        city: City name.
        days: Forecast length.
    """
    return {"city": city, "days": days, "sky": "晴"}


@manifest
async def shout(text: str) -> str:
    """Upper-case a text."""
    await asyncio.sleep(0)
    return text.upper()


@manifest
def explode(reason: str) -> str:
    """Always fails."""
    raise ValueError(f"cannot {reason}")


@manifest
def nothing() -> None:
    """Returns nothing."""


@manifest
def hang(ctx: ToolContext) -> str:
    """Waits until cancelled."""
    ctx.cancelled.wait(10)
    return "late"
'''


@pytest.fixture
def tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    (tmp_path / "call_tools.py").write_text(TOOLS, encoding="utf-8")
    (tmp_path / "syntax_tools.py").write_text("def broken(:\n", encoding="utf-8")
    (tmp_path / "failing_tools.py").write_text("raise RuntimeError('no db')\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))  # the command adds the cwd; undo it
    yield tmp_path
    sys.modules.pop("call_tools", None)


def test_prints_the_output_and_exits_0(tools: Path) -> None:
    result = runner.invoke(app, ["call", "call_tools.py", "get_weather", '{"city": "Paris"}'])
    assert result.exit_code == 0, result.stderr
    assert result.stdout == '{"city": "Paris", "days": 1, "sky": "晴"}\n'
    assert result.stderr == ""


def test_a_module_name_works_as_spec_and_arguments_are_coerced(tools: Path) -> None:
    result = runner.invoke(
        app, ["call", "call_tools", "get_weather", '{"city": "Oslo", "days": "3"}']
    )
    assert result.exit_code == 0, result.stderr
    assert '"days": 3' in result.stdout


def test_async_tools_run(tools: Path) -> None:
    result = runner.invoke(app, ["call", "call_tools.py", "shout", '{"text": "hé"}'])
    assert (result.exit_code, result.stdout) == (0, "HÉ\n")


def test_arguments_default_to_none_and_none_prints_an_empty_line(tools: Path) -> None:
    result = runner.invoke(app, ["call", "call_tools.py", "nothing"])
    assert (result.exit_code, result.stdout) == (0, "\n")


def test_dash_reads_the_arguments_from_stdin(tools: Path) -> None:
    result = runner.invoke(
        app, ["call", "call_tools.py", "get_weather", "-"], input='{"city": "Rome"}'
    )
    assert result.exit_code == 0, result.stderr
    assert '"city": "Rome"' in result.stdout


def test_unknown_tool_exits_1_and_lists_the_tools_on_stderr(tools: Path) -> None:
    result = runner.invoke(app, ["call", "call_tools.py", "get_wether"])
    assert result.exit_code == 1
    assert result.stdout == ""
    assert "Unknown tool 'get_wether'. Available tools: get_weather, shout" in result.stderr


def test_invalid_arguments_exit_1_and_name_the_problem(tools: Path) -> None:
    result = runner.invoke(app, ["call", "call_tools.py", "get_weather", '{"days": "x"}'])
    assert result.exit_code == 1
    assert "Invalid arguments for tool 'get_weather'" in result.stderr
    assert "city: missing required argument" in result.stderr
    assert "Expected arguments (JSON Schema):" in result.stderr


def test_a_failing_tool_exits_1_without_a_traceback(tools: Path) -> None:
    result = runner.invoke(app, ["call", "call_tools.py", "explode", '{"reason": "fly"}'])
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [
        "ValueError: cannot fly",
        "(run `toolbridge -v call ...` to see the traceback)",
    ]


def test_a_failing_tool_shows_its_traceback_with_verbose(
    tools: Path, caplog: pytest.LogCaptureFixture
) -> None:
    result = runner.invoke(app, ["-v", "call", "call_tools.py", "explode", '{"reason": "fly"}'])
    assert result.exit_code == 1
    assert "ValueError: cannot fly" in result.stderr
    assert any(r.exc_info for r in caplog.records if r.name == "bridge.tools.dispatch")


def test_a_timeout_exits_1(tools: Path) -> None:
    result = runner.invoke(app, ["call", "--timeout", "0.05", "call_tools.py", "hang"])
    assert result.exit_code == 1
    assert "The tool 'hang' timed out after 0.05 seconds" in result.stderr


@pytest.mark.parametrize(
    ("args_json", "message"),
    [
        ("{city: Paris}", "ARGS_JSON is not valid JSON (Expecting property name"),
        (
            '["Paris"]',
            'ARGS_JSON must be a JSON object such as \'{"city": "Paris"}\', got a JSON array',
        ),
        ("3", "got a JSON number"),
        ("null", "got a JSON null"),
    ],
)
def test_bad_args_json_is_a_usage_error(tools: Path, args_json: str, message: str) -> None:
    result = runner.invoke(app, ["call", "call_tools.py", "get_weather", args_json])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("missing_tools.py", "missing_tools.py"),
        ("no_such_module_xyz", "no module named 'no_such_module_xyz'"),
        ("syntax_tools.py", "syntax_tools.py"),
        ("failing_tools.py", "no db"),
    ],
)
def test_an_unloadable_spec_is_a_usage_error(tools: Path, spec: str, message: str) -> None:
    result = runner.invoke(app, ["call", spec, "anything"])
    assert result.exit_code == 2
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.stderr


def test_a_bad_timeout_is_a_usage_error(tools: Path) -> None:
    result = runner.invoke(app, ["call", "--timeout", "0", "call_tools.py", "nothing"])
    assert result.exit_code == 2
    assert "default_timeout must be a positive, finite number of seconds, got 0" in result.stderr


def test_help_describes_the_command() -> None:
    result = runner.invoke(app, ["call", "--help"])
    assert result.exit_code == 0
    assert "Run one tool through the dispatcher" in result.stdout


def test_a_hung_tool_does_not_keep_the_process_alive(tmp_path: Path) -> None:
    # The abandoned worker is a daemon thread: the command exits right after the timeout
    # instead of waiting for the tool (the subprocess timeout only stops a broken run).
    (tmp_path / "hung_tools.py").write_text(
        "import time\n\nfrom bridge.tools import manifest\n\n\n"
        "@manifest\ndef stuck() -> str:\n"
        '    """Never returns in time."""\n'
        "    time.sleep(600)\n"
        "    return 'late'\n",
        encoding="utf-8",
    )
    done = subprocess.run(
        [sys.executable, "-m", "bridge", "call", "--timeout", "0.1", "hung_tools.py", "stuck"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1, done.stderr
    assert "timed out after 0.1 seconds" in done.stderr


# --- confirm=True: a person at the terminal decides, or --yes; nobody to ask is a refusal ----

CONFIRM_TOOLS = '''
from pathlib import Path

from bridge.tools import manifest


@manifest(confirm=True)
def wipe(path: str, force: bool = False) -> str:
    """Write a marker file (the side effect a refusal must prevent)."""
    Path(path).write_text("ran", encoding="utf-8")
    return f"wiped {path}"
'''


@pytest.fixture
def confirm_tools(tmp_path: Path) -> Path:
    (tmp_path / "confirm_tools.py").write_text(CONFIRM_TOOLS, encoding="utf-8")
    return tmp_path


def test_a_confirm_tool_without_a_terminal_is_refused(confirm_tools: Path) -> None:
    marker = confirm_tools / "marker.txt"
    spec = str(confirm_tools / "confirm_tools.py")
    result = runner.invoke(app, ["call", spec, "wipe", json.dumps({"path": str(marker)})])
    assert result.exit_code == 1
    assert result.stdout == ""
    assert result.stderr == (
        "The tool call was not run: rejected: this tool needs approval and no approver is "
        "configured (no terminal to ask on; pass --yes to run it without asking)\n"
    )
    assert not marker.exists()


def test_yes_runs_a_confirm_tool_without_asking(confirm_tools: Path) -> None:
    marker = confirm_tools / "marker.txt"
    spec = str(confirm_tools / "confirm_tools.py")
    result = runner.invoke(app, ["call", spec, "wipe", json.dumps({"path": str(marker)}), "--yes"])
    assert (result.exit_code, result.stdout) == (0, f"wiped {marker}\n")
    assert marker.read_text(encoding="utf-8") == "ran"


def call_on_a_terminal(directory: Path, answer: str) -> tuple[int, str, str]:
    """Run `toolbridge call` with a pseudo-terminal as stdin; type `answer` at the prompt."""
    master, slave = os.openpty()
    command = [sys.executable, "-m", "bridge", "call", "confirm_tools.py", "wipe"]
    arguments = json.dumps({"path": "marker.txt", "force": True})
    try:
        proc = subprocess.Popen(
            [*command, arguments],
            cwd=directory,
            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
            stdin=slave,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
    finally:
        os.close(slave)
    prompt: list[bytes] = []

    def read_until_prompt() -> None:
        data = b""
        while b"Run it? [y/N] " not in data:
            chunk = proc.stderr.read1(4096)  # type: ignore[union-attr]
            if not chunk:
                break
            data += chunk
        prompt.append(data)

    try:
        reader = threading.Thread(target=read_until_prompt, daemon=True)
        reader.start()
        reader.join(timeout=60)
        assert prompt, "no prompt within 60 s"
        os.write(master, answer.encode() + b"\n")
        out, rest = proc.communicate(timeout=60)
        return proc.returncode, out.decode(), (prompt[0] + rest).decode()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        os.close(master)


@pytest.mark.parametrize(
    ("answer", "runs"), [("y", True), ("YES", True), ("n", False), ("", False)]
)
def test_on_a_terminal_the_person_is_asked(confirm_tools: Path, answer: str, runs: bool) -> None:
    code, out, err = call_on_a_terminal(confirm_tools, answer)
    # The person sees the tool and its exact arguments before deciding.
    assert err.startswith(
        "The agent wants to run the tool 'wipe' with these arguments:\n"
        '{\n  "force": true,\n  "path": "marker.txt"\n}\nRun it? [y/N] '
    ), err
    marker = confirm_tools / "marker.txt"
    if runs:
        assert (code, out) == (0, "wiped marker.txt\n"), err
        assert marker.read_text(encoding="utf-8") == "ran"
    else:
        assert (code, out) == (1, "")
        assert err.endswith("The tool call was not run: rejected by the user\n"), err
        assert not marker.exists()
