"""A newcomer's usual mistakes each get one clear line: what is wrong, where, and what to do."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from bridge.cli import app

runner = CliRunner()

BAD_TYPES = """
import socket
import threading

from bridge import manifest


@manifest(description="Reads from a socket.")
def receive(conn: socket.socket) -> str:
    return "x"


@manifest(description="Holds a lock.")
def hold(lock: threading.Lock, seconds: int) -> str:
    return "y"


@manifest(description="Fine.")
def fine(n: int) -> int:
    return n
"""


def _one_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1, text
    return lines[0]


def test_unsupported_parameter_types_are_named_with_the_file_all_at_once(
    tmp_path: Path,
) -> None:
    tools = tmp_path / "bad_types.py"
    tools.write_text(BAD_TYPES, encoding="utf-8")
    result = runner.invoke(
        app, ["run", "--emulator", "--tools", str(tools), "hi"], env={"COLUMNS": "400"}
    )
    assert result.exit_code == 2
    line = _one_line(result.output)
    assert str(tools) in line
    assert "_toolbridge_file_" not in line  # the generated module name means nothing to them
    assert "receive: parameter 'conn': type socket.socket is not supported" in line
    assert "hold: parameter 'lock'" in line  # the second bad tool too, not only the first
    assert "str, int, float, bool" in line  # what to use instead, said once
    assert line.count("str, int, float, bool") == 1
    assert "arbitrary_types_allowed" not in line and "__get_pydantic_core_schema__" not in line


def test_verbose_works_after_the_command_too(tmp_path: Path) -> None:
    tools = tmp_path / "bad_types.py"
    tools.write_text(BAD_TYPES, encoding="utf-8")
    args = ["--emulator", "--tools", str(tools), "hi"]
    quiet = runner.invoke(app, ["run", *args])
    assert "Traceback" not in quiet.output
    for given in (["-v", "run", *args], ["run", "-v", *args], ["run", *args, "--verbose"]):
        result = runner.invoke(app, given)
        assert result.exit_code == 2, given
        assert "Traceback (most recent call last)" in result.output, given
    # After `--`, a -v belongs to the command's arguments (here: the question).
    literal = runner.invoke(app, ["run", *args[:3], "--", "-v"])
    assert "Traceback" not in literal.output
