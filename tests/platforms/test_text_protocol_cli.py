"""`--tool-protocol text` end to end: the CLI's run and chat, and the daemon (serve's settings),
against a loopback OpenAI-compatible server whose replies are text."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import requests
from openai_fakes import Reply, ScriptedServer, completion, text_stream
from typer.testing import CliRunner

from bridge._serve import serve_in_thread
from bridge.cli import app
from bridge.daemon.app import create_app
from bridge.daemon.settings import load_settings
from bridge.errors import UsageError

runner = CliRunner()

TOOLS = """\
from bridge import manifest


@manifest()
def get_weather(city: str) -> str:
    \"\"\"Current weather of a city.\"\"\"
    return f"{city}: sunny"
"""


@pytest.fixture
def tools_file(tmp_path: Path) -> str:
    path = tmp_path / "text_tools_cli.py"
    path.write_text(TOOLS, encoding="utf-8")
    return str(path)


def openai_flags(server: ScriptedServer) -> list[str]:
    return ["--platform", "openai", "--base-url", server.base_url, "--model", "m"]


def test_run_with_the_text_protocol(server: ScriptedServer, tools_file: str) -> None:
    server.script(
        Reply(stream=text_stream('get_weather(city="Paris")')),
        Reply(stream=text_stream("Paris is sunny.")),
    )
    args = ["run", "Weather in Paris?", "-t", tools_file, *openai_flags(server)]

    result = runner.invoke(app, [*args, "--tool-protocol", "text", "--json"])

    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["answer"] == "Paris is sunny."
    assert [(r["name"], r["output"]) for r in out["tool_runs"]] == [("get_weather", "Paris: sunny")]
    first, second = server.bodies
    assert "tools" not in first and "## get_weather" in first["messages"][0]["content"]
    assert second["messages"][-1]["content"].startswith("Tool results:")


def test_run_stays_native_by_default(server: ScriptedServer, tools_file: str) -> None:
    server.script(Reply(json=completion("Hi.")))
    args = ["run", "Hi", "-t", tools_file, *openai_flags(server), "--no-stream", "--json"]

    result = runner.invoke(app, args)

    assert result.exit_code == 0, result.output
    assert server.bodies[0]["tools"][0]["function"]["name"] == "get_weather"


def test_chat_with_the_text_protocol(server: ScriptedServer, tools_file: str) -> None:
    server.script(
        Reply(stream=text_stream('{"tool": "get_weather", "arguments": {"city": "Oslo"}}')),
        Reply(stream=text_stream("Oslo is sunny.")),
    )
    args = ["chat", "-t", tools_file, *openai_flags(server), "--tool-protocol", "text"]

    result = runner.invoke(app, args, input="Weather in Oslo?\n/exit\n")

    assert result.exit_code == 0, result.output
    assert "Oslo is sunny." in result.stdout
    assert "tools" not in server.bodies[0]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--tool-protocol", "xml"], "tool_protocol must be 'native'"),
        (
            [
                "--platform",
                "appbuilder",
                "--token",
                "t",
                "--app-id",
                "a",
                "--tool-protocol",
                "text",
            ],
            "--tool-protocol is for --platform openai only",
        ),
    ],
)
def test_bad_tool_protocol_flags_are_usage_errors(
    server: ScriptedServer, tools_file: str, flags: list[str], message: str
) -> None:
    base = openai_flags(server) if "--platform" not in flags else []
    result = runner.invoke(app, ["run", "Hi", "-t", tools_file, *base, *flags])

    assert result.exit_code == 2, result.output
    assert message in result.stderr
    assert server.bodies == []


def test_the_daemon_serves_the_text_protocol(server: ScriptedServer, tools_file: str) -> None:
    settings = load_settings(
        {
            "platform": "openai",
            "base_url": server.base_url,
            "model": "m",
            "db": ":memory:",
            "tools": [tools_file],
            "tool_protocol": "text",
        },
        env={},
    )
    server.script(
        Reply(
            stream=text_stream(
                '<tool_call>{"name": "get_weather", "arguments": {"city": "Rome"}}</tool_call>'
            )
        ),
        Reply(stream=text_stream("Rome is sunny.")),
    )
    with serve_in_thread(create_app(settings)) as handle:
        created = requests.post(handle.base_url + "/v1/conversations", json={}, timeout=30)
        cid = created.json()["conversation_id"]
        answer = requests.post(
            handle.base_url + f"/v1/conversations/{cid}/messages",
            json={"query": "Weather in Rome?"},
            timeout=30,
        )

    assert answer.status_code == 200, answer.text
    assert answer.json()["answer"] == "Rome is sunny."
    assert [run["output"] for run in answer.json()["tool_runs"]] == ["Rome: sunny"]
    assert "tools" not in server.bodies[0]


def test_serve_refuses_the_text_protocol_for_appbuilder() -> None:
    with pytest.raises(UsageError, match="tool_protocol is for platform openai only"):
        load_settings({"platform": "appbuilder", "tool_protocol": "text"}, env={})
    with pytest.raises(UsageError, match="should be 'native' or 'text' \\(from --tool-protocol\\)"):
        load_settings({"platform": "openai", "tool_protocol": "xml"}, env={})
