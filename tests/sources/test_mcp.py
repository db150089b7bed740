"""MCP servers as a tool source: the third-party `mcp-server-time` (stdio) end to end through
the emulator, a server that crashes mid-call (clear error, restarted on the next call), error
results, schema conversion, streamable HTTP, and stopping servers with the toolbox."""

from __future__ import annotations

import json
import os
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bridge import Bridge
from bridge.emulator import Emulator
from bridge.errors import UsageError
from bridge.loading import load_tools
from bridge.platforms.appbuilder import AppBuilderPlatform
from bridge.sources.mcp import McpSource
from bridge.tools import Dispatcher, Toolbox
from bridge.types import ToolCall, ToolRun
from tests.sources.schema_rules import check_tool

CRASHY = Path(__file__).resolve().parents[1] / "data" / "mcp_crashing_server.py"
TIME_SPEC = f"mcp:{sys.executable} -m mcp_server_time --local-timezone UTC"

SCENARIO: dict[str, Any] = {
    "rules": [
        {
            "name": "time",
            "match": r"time is it in (?P<tz>[\w/]+)",
            "steps": [{"tool": "get_current_time", "arguments": {"timezone": "{tz}"}}],
            "answer": "In {outputs.get_current_time.timezone} it is "
            "{outputs.get_current_time.datetime}.",
        },
        {
            "name": "convert",
            "match": r"(?P<hhmm>\d\d:\d\d) in (?P<src>[\w/]+) is what in (?P<dst>[\w/]+)",
            "steps": [
                {
                    "tool": "convert_time",
                    "arguments": {
                        "source_timezone": "{src}",
                        "time": "{hhmm}",
                        "target_timezone": "{dst}",
                    },
                }
            ],
            "answer": "{outputs.convert_time.target.datetime}",
        },
        {
            "name": "echo",
            "match": r"^say (?P<text>.+)",
            "steps": [{"tool": "echo", "arguments": {"text": "{text}"}}],
            "answer": "{outputs.echo}",
        },
        {
            "name": "crash then echo",
            "match": r"crash and carry on",
            "steps": [
                {"tool": "crash", "arguments": {}},
                {"tool": "echo", "arguments": {"text": "still here"}},
            ],
            "answer": "first: {outputs.crash} / then: {outputs.echo}",
        },
    ]
}


@pytest.fixture(scope="module")
def time_box() -> Iterator[Toolbox]:
    with load_tools([TIME_SPEC]) as box:
        yield box


@pytest.fixture(scope="module")
def crashy() -> Iterator[Toolbox]:
    with load_tools([f"mcp:{sys.executable} {CRASHY}"]) as box:
        yield box


@pytest.fixture(scope="module")
def emulator() -> Iterator[Emulator]:
    with Emulator(scenario=SCENARIO) as emu:
        yield emu


def call(box: Toolbox, name: str, arguments: dict[str, Any]) -> ToolRun:
    with Dispatcher(box, default_timeout=60) as dispatcher:
        [result] = dispatcher.run([ToolCall(call_id="m1", name=name, arguments=arguments)])
    return result


def ask(emu: Emulator, box: Toolbox, query: str) -> Any:
    platform = AppBuilderPlatform(
        app_id=emu.app_id, token=emu.token, base_url=emu.base_url, max_retries=1
    )
    with Bridge(platform, box) as bridge:
        return bridge.ask(query)


def pid_of(output: str) -> int:
    match = re.search(r"\(pid (\d+)\)", output)
    assert match, output
    return int(match.group(1))


def test_the_time_server_tools_in_the_appbuilder_dialect(time_box: Toolbox) -> None:
    assert time_box.names() == ["get_current_time", "convert_time"]
    described = check_tool(time_box.get("get_current_time"))  # type: ignore[arg-type]
    assert described == {
        "name": "get_current_time",
        "description": "Get current time in a specific timezone",
        "parameters": {
            "type": "object",
            "properties": {
                "timezone": {
                    "type": "string",
                    "description": "IANA timezone name (e.g., 'America/New_York', "
                    "'Europe/London'). Use 'UTC' as local timezone if no timezone provided by "
                    "the user.",
                }
            },
            "required": ["timezone"],
        },
    }
    check_tool(time_box.get("convert_time"))  # type: ignore[arg-type]


def test_calls_and_error_results(time_box: Toolbox) -> None:
    now = call(time_box, "get_current_time", {"timezone": "Asia/Tokyo"})
    assert now.error is None, now.output
    assert json.loads(now.output)["timezone"] == "Asia/Tokyo"
    bad = call(time_box, "get_current_time", {"timezone": "Nowhere/Atlantis"})
    assert bad.error == "tool_error"
    assert "Invalid timezone" in bad.output and "Nowhere/Atlantis" in bad.output
    missing = call(time_box, "convert_time", {"time": "12:00"})
    assert missing.error == "invalid_arguments"
    assert "source_timezone: missing required argument (expected a string)" in missing.output


def test_end_to_end_through_the_emulator(time_box: Toolbox, emulator: Emulator) -> None:
    result = ask(emulator, time_box, "what time is it in Europe/Paris?")
    assert [run.name for run in result.tool_runs] == ["get_current_time"]
    assert re.fullmatch(
        r"In Europe/Paris it is \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+0[12]:00\.", (result.answer)
    )
    converted = ask(emulator, time_box, "12:00 in UTC is what in Asia/Tokyo?")
    assert converted.answer.endswith("T21:00:00+09:00")


def test_a_server_that_crashes_mid_call(crashy: Toolbox) -> None:
    first = pid_of(call(crashy, "echo", {"text": "hi"}).output)
    crashed = call(crashy, "crash", {})
    assert crashed.error == "tool_error"
    assert "closed the connection during the call to 'crash' (it exited or crashed)" in (
        crashed.output
    )
    assert "the server is started again on the next call" in crashed.output
    again = call(crashy, "echo", {"text": "back"})
    assert again.error is None, again.output
    assert again.output.startswith("back (pid ")
    assert pid_of(again.output) != first, "a new server process answered"


def test_the_conversation_goes_on_after_a_crash(crashy: Toolbox, emulator: Emulator) -> None:
    result = ask(emulator, crashy, "crash and carry on")
    crash, echo = result.tool_runs
    assert crash.error == "tool_error"
    assert echo.error is None
    assert result.answer.startswith("first: McpToolError: the MCP server ")
    assert "then: still here (pid " in result.answer


def test_error_results_and_nested_schemas(crashy: Toolbox) -> None:
    failed = call(crashy, "fail", {"reason": "testing"})
    assert failed.error == "tool_error"
    assert failed.output == "McpToolError: Error executing tool fail: failed on purpose: testing"
    plan = crashy.get("plan")
    assert plan is not None
    described = check_tool(plan)
    meeting = described["parameters"]["properties"]["meeting"]
    assert meeting["properties"]["people"]["items"]["properties"]["name"] == {"type": "string"}
    ok = call(crashy, "plan", {"meeting": {"title": "Sync", "people": [{"name": "Ana"}]}})
    assert ok.output == "Sync: Ana"
    wrong = call(crashy, "plan", {"meeting": {"title": "Sync", "people": [{}]}})
    assert wrong.error == "invalid_arguments"
    assert "meeting.people[0].name: missing required field (expected a string)" in wrong.output


def test_closing_the_toolbox_stops_the_server() -> None:
    box = load_tools([f"mcp:{sys.executable} {CRASHY}"])
    pid = pid_of(call(box, "echo", {"text": "x"}).output)
    box.close()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        pytest.fail(f"the MCP server process {pid} is still running after close()")
    closed = call(box, "echo", {"text": "x"})
    assert closed.error == "tool_error"
    assert "is closed" in closed.output


def test_a_server_that_cannot_start() -> None:
    with pytest.raises(UsageError, match=r"cannot start or list the MCP server mcp:/nonexistent"):
        load_tools(["mcp:/nonexistent/mcp-server --flag"])
    with pytest.raises(UsageError, match=r'mcp: needs a command, e\.g\. --tools "mcp:'):
        load_tools(["mcp:"])
    with pytest.raises(UsageError, match="cannot split the SPEC"):
        load_tools(["mcp:python 'unclosed"])


def test_streamable_http_server() -> None:
    """`mcp+http://` against a server built with the official SDK's MCPServer."""
    from mcp.server.mcpserver import MCPServer

    from bridge._serve import serve_in_thread

    server = MCPServer("adder")

    @server.tool(description="Add two integers.")
    def add(a: int, b: int) -> int:
        return a + b

    with serve_in_thread(server.streamable_http_app()) as handle:
        spec = f"mcp+{handle.base_url}/mcp"
        with load_tools([spec]) as box:
            assert box.names() == ["add"]
            result = call(box, "add", {"a": 2, "b": "40"})
            assert result.error is None, result.output
            assert result.output == "42"


def test_python_api_with_a_prefix() -> None:
    source = McpSource.stdio([sys.executable, str(CRASHY)], prefix="crashy")
    try:
        assert [spec.name for spec in source.specs()] == [
            "crashy_echo",
            "crashy_fail",
            "crashy_crash",
            "crashy_plan",
        ]
        assert repr(source).startswith("McpSource('mcp:")
    finally:
        source.close()


def test_the_call_command_starts_and_stops_a_server() -> None:
    from typer.testing import CliRunner

    from bridge.cli import app

    result = CliRunner().invoke(
        app, ["call", f"mcp:{sys.executable} {CRASHY}", "echo", '{"text": "from the cli"}']
    )
    assert result.exit_code == 0, result.output
    pid = pid_of(result.stdout)
    assert result.stdout.startswith("from the cli (pid ")
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    pytest.fail(f"the MCP server process {pid} outlived the call command")


def wait_gone(pid: int) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    pytest.fail(f"the MCP server process {pid} is still running")


def test_toolbridge_run_stops_the_server_it_started(emulator: Emulator) -> None:
    from typer.testing import CliRunner

    from bridge.cli import app

    result = CliRunner().invoke(
        app,
        [
            "run",
            "say hello from run",
            "--tools",
            f"mcp:{sys.executable} {CRASHY}",
            "--app-id",
            emulator.app_id,
            "--token",
            emulator.token,
            "--base-url",
            emulator.base_url,
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    answer = json.loads(result.stdout)["answer"]
    assert answer.startswith("hello from run (pid ")
    wait_gone(pid_of(answer))
