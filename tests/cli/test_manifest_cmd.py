"""`toolbridge manifest SPEC... [--dialect D]`: output, dialects and usage errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bridge.cli import app
from bridge.cli.tools_cmd import DIALECT_NAMES
from bridge.tools import DIALECTS

runner = CliRunner()

WEATHER = '''
from bridge.tools import manifest


@manifest
def get_weather(city: str, days: int = 1) -> str:
    """获取指定城市的天气。

    Args:
        city: 城市名，例如：北京
        days: Forecast length.
    """
    return city
'''

CLOCK = '''
from bridge.tools import manifest


@manifest(name="now")
def current_time(zone: str = "UTC") -> str:
    """The current time."""
    return zone
'''


@pytest.fixture
def tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "weather_tools.py").write_text(WEATHER, encoding="utf-8")
    (tmp_path / "clock_tools.py").write_text(CLOCK, encoding="utf-8")
    (tmp_path / "plain_mod.py").write_text("def f():\n    pass\n", encoding="utf-8")
    (tmp_path / "broken_tools.py").write_text("import nonexistent_dep_xyz\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))  # the command adds the cwd; undo it
    yield tmp_path
    for name in ("clock_tools", "plain_mod", "broken_tools"):
        sys.modules.pop(name, None)


def test_prints_the_json_array_of_a_file(tools: Path) -> None:
    result = runner.invoke(app, ["manifest", str(tools / "weather_tools.py")])
    assert result.exit_code == 0, result.stderr
    assert "获取指定城市的天气" in result.stdout  # ensure_ascii=False
    assert result.stdout.startswith("[\n  {\n")  # indent 2
    tools_out = json.loads(result.stdout)
    assert tools_out == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "获取指定城市的天气。",
                "parameters": {
                    "properties": {
                        "city": {"description": "城市名，例如：北京", "type": "string"},
                        "days": {
                            "default": 1,
                            "description": "Forecast length.",
                            "type": "integer",
                        },
                    },
                    "required": ["city"],
                    "type": "object",
                },
            },
        }
    ]


def test_several_specs_and_a_module_name(tools: Path) -> None:
    result = runner.invoke(app, ["manifest", "weather_tools.py", "clock_tools"])
    assert result.exit_code == 0, result.stderr
    names = [tool["function"]["name"] for tool in json.loads(result.stdout)]
    assert names == ["get_weather", "now"]


@pytest.mark.parametrize("dialect", DIALECTS)
def test_dialect_option(tools: Path, dialect: str) -> None:
    result = runner.invoke(app, ["manifest", "clock_tools.py", "--dialect", dialect])
    assert result.exit_code == 0, result.stderr
    [tool] = json.loads(result.stdout)
    if dialect == "mcp":
        assert tool["name"] == "now" and "inputSchema" in tool
    else:
        assert tool["function"]["name"] == "now"
    if dialect == "openai-strict":
        assert tool["function"]["strict"] is True
    if dialect == "appbuilder-sdk":
        assert tool["function"]["parameters"]["properties"]["zone"]["type"] == "str"


def test_short_dialect_option(tools: Path) -> None:
    result = runner.invoke(app, ["manifest", "-d", "mcp", "clock_tools.py"])
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)[0]["name"] == "now"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["missing.py"], "error: no such file: missing.py"),
        (["no_such_module_xyz"], "error: no module named 'no_such_module_xyz'"),
        (["plain_mod"], "error: module plain_mod has no @manifest functions"),
        (
            ["broken_tools"],
            "error: cannot import broken_tools: ModuleNotFoundError: No module named "
            "'nonexistent_dep_xyz'",
        ),
        (["not a spec!"], "error: cannot load tools from 'not a spec!'"),
        (
            ["clock_tools.py", "--dialect", "gemini"],
            "error: unknown dialect 'gemini'; valid dialects: appbuilder, appbuilder-sdk, "
            "openai, openai-strict, mcp",
        ),
    ],
    ids=["missing-file", "missing-module", "no-tools", "import-error", "bad-spec", "bad-dialect"],
)
def test_usage_errors_exit_2_with_one_line(tools: Path, args: list[str], message: str) -> None:
    result = runner.invoke(app, ["manifest", *args])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.startswith(message)
    assert result.stderr.count("\n") == 1
    assert "Traceback" not in result.stderr


def test_openai_strict_error_is_a_usage_error(tools: Path) -> None:
    (tools / "loose_tools.py").write_text(
        "from bridge.tools import manifest\n\n\n@manifest\ndef f(data: dict) -> None:\n    pass\n",
        encoding="utf-8",
    )
    result = runner.invoke(app, ["manifest", "loose_tools.py", "-d", "openai-strict"])
    assert result.exit_code == 2
    assert "cannot be described in the openai-strict dialect" in result.stderr


def test_spec_is_required() -> None:
    result = runner.invoke(app, ["manifest"])
    assert result.exit_code == 2
    assert "Missing argument 'SPEC...'" in result.stderr


def test_help_lists_every_dialect() -> None:
    assert DIALECT_NAMES == DIALECTS
    result = runner.invoke(app, ["manifest", "--help"])
    assert result.exit_code == 0
    flat = " ".join(result.stdout.split())
    for dialect in DIALECTS:
        assert dialect in flat


def test_registering_the_command_imports_no_schema_machinery() -> None:
    code = (
        "import sys, bridge.cli.tools_cmd; "
        "print(sorted(m for m in ('pydantic', 'bridge.tools.schema', 'docstring_parser') "
        "if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "[]"
