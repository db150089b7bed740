"""`toolbridge run`, `chat` and `demo` against the emulator, through typer's CliRunner."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from bridge.cli import app
from bridge.emulator import Emulator
from bridge.platforms.retry import BACKOFF_ENV

TOOLS = '''
from bridge import manifest

@manifest(description="Current weather of a city.")
def get_weather(city: str) -> dict:
    """Weather.

    Args:
        city: City name.
    """
    return {"city": city, "temp": {"Paris": 18, "Tokyo": 22}.get(city, 0)}

@manifest(description="Wipe a disk.", confirm=True)
def wipe(disk: str) -> str:
    return f"wiped {disk}"
'''

SCENARIO: dict[str, Any] = {
    "rules": [
        {
            "match": r"weather in (?P<a>\w+) and (?P<b>\w+)",
            "steps": [
                {
                    "calls": [
                        {"tool": "get_weather", "as": "a", "arguments": {"city": "{a}"}},
                        {"tool": "get_weather", "as": "b", "arguments": {"city": "{b}"}},
                    ]
                }
            ],
            "answer": "{a}: {outputs.a.temp}, {b}: {outputs.b.temp}",
        },
        {
            "match": r"wipe (?P<disk>\w+)",
            "steps": [{"tool": "wipe", "arguments": {"disk": "{disk}"}}],
            "answer": "{outputs.wipe}",
        },
        {
            "match": r"loop",
            "steps": [
                {"tool": "get_weather", "as": f"w{i}", "arguments": {"city": "Paris"}}
                for i in range(3)
            ],
            "answer": "done",
        },
        {
            "match": r"fail",
            "steps": [],
            "answer": "x",
            "faults": "inband=WorkflowError,message=the code node failed",
        },
        {
            "match": r"json error at start",
            "steps": [],
            "answer": "x",
            "faults": "inband=CodeNodeError,message=division by zero,json_error_on_stream",
        },
        {
            "match": r"json error at submit",
            "steps": [{"tool": "get_weather", "arguments": {"city": "Paris"}}],
            "answer": "x",
            "faults": "inband=CodeNodeError,message=division by zero,json_error_on_stream,round=1",
        },
    ]
}


@pytest.fixture(scope="module")
def emulator() -> Iterator[Emulator]:
    with Emulator(scenario=SCENARIO, token="secret-token-123") as emu:
        yield emu


@pytest.fixture()
def tools_file(tmp_path: Path) -> str:
    path = tmp_path / "my_tools.py"
    path.write_text(TOOLS, encoding="utf-8")
    return str(path)


def env_for(emu: Emulator) -> dict[str, str]:
    return emu.env()


runner = CliRunner()


def invoke(args: list[str], env: dict[str, str] | None = None, input: str | None = None) -> Any:
    base = {"APPBUILDER_TOKEN": "", "APPBUILDER_APP_ID": "", "GATEWAY_URL_V2": ""}
    return runner.invoke(app, args, env={**base, **(env or {})}, input=input)


def test_run_streams_the_answer_and_tool_lines(emulator: Emulator, tools_file: str) -> None:
    result = invoke(["run", "weather in Paris and Tokyo", "--tools", tools_file], env_for(emulator))
    assert result.exit_code == 0, result.output
    assert "Paris: 18, Tokyo: 22" in result.stdout
    assert "get_weather" in result.stderr
    assert '{"city": "Paris"}' in result.stderr


@pytest.mark.parametrize("stream", ["--stream", "--no-stream"])
def test_run_json(emulator: Emulator, tools_file: str, stream: str) -> None:
    result = invoke(
        ["run", "weather in Paris and Tokyo", "-t", tools_file, "--json", stream],
        env_for(emulator),
    )
    assert result.exit_code == 0, result.output
    body = json.loads(result.stdout)
    assert set(body) == {"conversation_id", "answer", "rounds", "tool_runs", "request_ids"}
    assert body["answer"] == "Paris: 18, Tokyo: 22"
    assert body["rounds"] == 1
    assert [r["arguments"] for r in body["tool_runs"]] == [{"city": "Paris"}, {"city": "Tokyo"}]
    assert set(body["tool_runs"][0]) == {
        "call_id",
        "name",
        "arguments",
        "output",
        "error",
        "duration_ms",
    }
    assert body["request_ids"]


def test_run_flags_override_environment(emulator: Emulator, tools_file: str) -> None:
    args = ["run", "weather in Paris and Tokyo", "-t", tools_file, "--json"]
    args += [
        "--base-url",
        emulator.base_url,
        "--token",
        emulator.token,
        "--app-id",
        emulator.app_id,
    ]
    result = invoke([*args, "--end-user-id", "user-000001", "--tool-choice", "get_weather"])
    assert result.exit_code == 0, result.output
    sent = [r.json for r in emulator.requests if r.path.endswith("/runs")][-2]
    assert sent["end_user_id"] == "user-000001"


def test_run_continues_a_conversation(emulator: Emulator, tools_file: str) -> None:
    first = json.loads(
        invoke(
            ["run", "weather in Paris and Tokyo", "-t", tools_file, "--json"], env_for(emulator)
        ).stdout
    )
    again = invoke(
        [
            "run",
            "weather in Tokyo and Paris",
            "-t",
            tools_file,
            "--json",
            "--conversation-id",
            first["conversation_id"],
        ],
        env_for(emulator),
    )
    assert json.loads(again.stdout)["conversation_id"] == first["conversation_id"]


def test_confirm_tool_prompts_yes(emulator: Emulator, tools_file: str) -> None:
    result = invoke(["run", "wipe sda", "-t", tools_file], env_for(emulator), input="y\n")
    assert result.exit_code == 0, result.output
    assert "wiped sda" in result.stdout
    assert "Run wipe" in result.stderr


def test_confirm_tool_prompts_no(emulator: Emulator, tools_file: str) -> None:
    result = invoke(["run", "wipe sda", "-t", tools_file], env_for(emulator), input="n\n")
    assert result.exit_code == 0, result.output
    assert "rejected by the user" in result.stdout


def test_confirm_tool_with_yes_flag_and_json(emulator: Emulator, tools_file: str) -> None:
    result = invoke(["run", "wipe sdb", "-t", tools_file, "--json", "--yes"], env_for(emulator))
    assert json.loads(result.stdout)["answer"] == "wiped sdb"
    refused = invoke(["run", "wipe sdc", "-t", tools_file, "--json"], env_for(emulator))
    # --json has nobody to ask: refused as such, not as a person's "no".
    assert json.loads(refused.stdout)["answer"] == (
        "The tool call was not run: rejected: this tool needs approval and no approver is "
        "configured"
    )


def test_exit_1_on_max_rounds(emulator: Emulator, tools_file: str) -> None:
    result = invoke(["run", "loop", "-t", tools_file, "--max-rounds", "1"], env_for(emulator))
    assert result.exit_code == 1
    assert "more than 1 rounds" in result.stderr
    assert "Traceback" not in result.output


def test_exit_1_on_failed_run_with_json_error(emulator: Emulator, tools_file: str) -> None:
    result = invoke(["run", "fail", "-t", tools_file, "--json"], env_for(emulator))
    assert result.exit_code == 1
    body = json.loads(result.stdout)
    assert "the code node failed" in body["error"]["message"]
    assert body["error"]["exit_code"] == 1


@pytest.mark.parametrize("when", ["start", "submit"])
def test_a_json_error_answering_a_stream_is_reported_with_its_code(
    emulator: Emulator, tools_file: str, when: str
) -> None:
    """The platform answers the streamed run (or the streamed tool outputs) with HTTP 200 and a
    JSON error body instead of SSE: its message and code are shown, not an empty stream."""
    result = invoke(["run", f"json error at {when}", "-t", tools_file], env_for(emulator))
    assert result.exit_code == 1, result.output
    assert "division by zero" in result.stderr
    assert "CodeNodeError" in result.stderr
    assert ("get_weather" in result.stderr) is (when == "submit")
    assert "0 chunk(s)" not in result.output
    assert "Traceback" not in result.output
    as_json = invoke(
        ["run", f"json error at {when}", "-t", tools_file, "--json"], env_for(emulator)
    )
    error = json.loads(as_json.stdout)["error"]
    assert "division by zero" in error["message"] and "CodeNodeError" in error["message"]
    assert json.loads(as_json.stdout)["request_ids"], "the platform's request id is reported"


def test_exit_2_on_missing_token(tools_file: str) -> None:
    result = invoke(["run", "hi", "-t", tools_file], {"APPBUILDER_APP_ID": "app-1"})
    assert result.exit_code == 2
    assert "APPBUILDER_TOKEN" in result.stderr
    no_app = invoke(["run", "hi", "-t", tools_file], {"APPBUILDER_TOKEN": "tok-123"})
    assert no_app.exit_code == 2
    assert "APPBUILDER_APP_ID" in no_app.stderr
    assert "Traceback" not in result.output


def test_exit_2_on_bad_tools_spec(emulator: Emulator, tmp_path: Path) -> None:
    result = invoke(["run", "hi", "-t", str(tmp_path / "missing.py")], env_for(emulator))
    assert result.exit_code == 2
    assert "missing.py" in result.stderr


def test_exit_2_on_unknown_platform_and_tool_choice(emulator: Emulator, tools_file: str) -> None:
    bad_platform = invoke(["run", "hi", "-t", tools_file, "--platform", "nope"], env_for(emulator))
    assert bad_platform.exit_code == 2
    assert "appbuilder, openai" in bad_platform.stderr
    bad_choice = invoke(["run", "hi", "-t", tools_file, "--tool-choice", "nope"], env_for(emulator))
    assert bad_choice.exit_code == 2
    assert "get_weather" in bad_choice.stderr


def test_exit_2_on_bad_max_rounds(emulator: Emulator, tools_file: str) -> None:
    result = invoke(["run", "hi", "-t", tools_file, "--max-rounds", "0"], env_for(emulator))
    assert result.exit_code == 2


def test_exit_3_on_refused_token_without_leaking_it(emulator: Emulator, tools_file: str) -> None:
    env = {**env_for(emulator), "APPBUILDER_TOKEN": "wrong-token-abcdef"}
    result = invoke(["-v", "run", "hi", "-t", tools_file], env)
    assert result.exit_code == 3
    assert "wrong-token-abcdef" not in result.output
    assert "secret-token-123" not in result.output


def test_exit_4_when_the_gateway_is_unreachable(tools_file: str) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {
        "APPBUILDER_TOKEN": "t0ken",
        "APPBUILDER_APP_ID": "app",
        "GATEWAY_URL_V2": f"http://127.0.0.1:{port}",
        BACKOFF_ENV: "0.001",  # retried at once
    }
    result = invoke(["run", "hi", "-t", tools_file], env)
    assert result.exit_code == 4
    assert "Traceback" not in result.output


def test_chat_keeps_one_conversation(emulator: Emulator, tools_file: str) -> None:
    result = invoke(
        ["chat", "-t", tools_file],
        env_for(emulator),
        input="weather in Paris and Tokyo\nweather in Tokyo and Paris\n/exit\n",
    )
    assert result.exit_code == 0, result.output
    assert "Paris: 18, Tokyo: 22" in result.stdout
    assert "Tokyo: 22, Paris: 18" in result.stdout


def test_chat_reports_errors_and_goes_on(emulator: Emulator, tools_file: str) -> None:
    result = invoke(["chat", "-t", tools_file], env_for(emulator), input="fail\nwipe sdd\ny\n")
    assert result.exit_code == 0, result.output
    assert "the code node failed" in result.stderr
    assert "wiped sdd" in result.stdout


def test_demo_runs_end_to_end() -> None:
    result = invoke(["demo"])
    assert result.exit_code == 0, result.output
    assert "北京今天晴，12°C；上海今天多云，16°C。" in result.stdout
    assert "MR-1024" in result.stdout
    assert "in parallel" in result.stdout
    assert "2 turns, 3 tool rounds, 4 tool calls" in result.stdout
