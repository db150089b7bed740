"""A newcomer's usual mistakes each get one clear line: what is wrong, where, and what to do."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from typer.testing import CliRunner

from bridge._serve import serve_in_thread
from bridge.cli import app
from bridge.loading import load_tools

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


HTTP_MANIFEST = """
base_url: http://127.0.0.1:9
headers:
  Authorization: Bearer ${TB_NEWCOMER_TOKEN}
tools:
  - name: list_tickets
    description: Tickets.
    url: /tickets
  - name: get_ticket
    description: One ticket.
    url: /tickets/1
  - name: search
    description: Search.
    url: /search
    headers:
      X-Key: ${TB_NEWCOMER_SEARCH_KEY}
"""


def test_an_unset_manifest_variable_is_one_warning_naming_its_tools(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "intranet.yaml"
    path.write_text(HTTP_MANIFEST, encoding="utf-8")
    env = {"TB_NEWCOMER_TOKEN": "", "TB_NEWCOMER_SEARCH_KEY": ""}
    with pytest.MonkeyPatch.context() as patch:
        for name in env:
            patch.delenv(name, raising=False)
        caplog.set_level(logging.WARNING, logger="bridge.sources")
        load_tools([str(path)]).close()
    warnings = [r.getMessage() for r in caplog.records if "not set" in r.getMessage()]
    assert len(warnings) == 1, warnings  # once for the manifest, not once per tool
    line = warnings[0]
    assert str(path) in line
    assert "TB_NEWCOMER_TOKEN (used by list_tickets, get_ticket, search)" in line
    assert "TB_NEWCOMER_SEARCH_KEY (used by search)" in line


def test_an_http_tools_expected_error_does_not_offer_a_traceback(tmp_path: Path) -> None:
    async def missing(request: Request) -> JSONResponse:
        return JSONResponse({"detail": "no ticket 7"}, status_code=404)

    with serve_in_thread(Starlette(routes=[Route("/tickets/7", missing)])) as server:
        path = tmp_path / "intranet.yaml"
        path.write_text(
            f"base_url: {server.base_url}\n"
            "tools:\n"
            "  - name: get_ticket\n"
            "    description: One ticket.\n"
            "    url: /tickets/7\n",
            encoding="utf-8",
        )
        result = runner.invoke(app, ["call", str(path), "get_ticket"])
    assert result.exit_code == 1
    line = _one_line(result.stderr)
    assert "404" in line and "no ticket 7" in line
    assert "traceback" not in result.stderr and "-v" not in result.stderr


def test_run_without_tools_warns_in_one_line() -> None:
    result = runner.invoke(app, ["run", "--emulator", "--no-stream", "hi"])
    assert result.exit_code == 0, result.output
    warning = _one_line(result.stderr)
    assert warning.startswith("warning: no --tools given")
    assert "--tools tools.py" in warning
    tools_given = runner.invoke(app, ["run", "--emulator", "--no-stream", "--tools", "x.py", "hi"])
    assert "no --tools given" not in tools_given.output
