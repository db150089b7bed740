"""`toolbridge mcp-serve`: any toolbox (Python, HTTP manifest, OpenAPI) served over MCP, checked
with the official MCP client over stdio and streamable HTTP on loopback."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from mcp import Client, StdioServerParameters
from typer.testing import CliRunner

from bridge._serve import ServerHandle
from bridge.cli import app

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
PY_TOOLS = str(DATA / "serve_tools.py")
PETSTORE = f"openapi:{DATA / 'petstore.yaml'} --server-url http://127.0.0.1:9/v1"


async def exercise(client: Client) -> dict[str, Any]:
    listed = await client.list_tools()
    tools = {tool.name: tool for tool in listed.tools}
    added = await client.call_tool("add", {"a": 2, "b": 40})
    boom = await client.call_tool("boom", {"reason": "now"})
    invalid = await client.call_tool("add", {"a": "two"})
    unknown = await client.call_tool("nope", {})
    return {"tools": tools, "add": added, "boom": boom, "invalid": invalid, "unknown": unknown}


def text(result: Any) -> str:
    return "".join(block.text for block in result.content)


def check(seen: dict[str, Any]) -> None:
    add = seen["tools"]["add"]
    assert add.description.startswith("Add two integers.")
    assert add.input_schema["properties"]["a"] == {
        "type": "integer",
        "description": "The first one.",
    }
    assert add.input_schema["required"] == ["a", "b"]
    assert (text(seen["add"]), seen["add"].is_error) == ("42", False)
    assert seen["boom"].is_error is True
    assert text(seen["boom"]) == "RuntimeError: boom now"
    assert seen["invalid"].is_error is True
    assert text(seen["invalid"]).startswith("Invalid arguments for tool 'add'; it was not run.")
    assert seen["unknown"].is_error is True
    assert text(seen["unknown"]).startswith("Unknown tool 'nope'. Available tools: add, boom")


def test_stdio_with_python_and_openapi_tools() -> None:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "bridge", "mcp-serve", "--tools", PY_TOOLS, "--tools", PETSTORE],
        cwd=str(ROOT),
    )

    async def main() -> dict[str, Any]:
        async with Client(params) as client:
            return await exercise(client)

    seen = asyncio.run(asyncio.wait_for(main(), 90))
    assert list(seen["tools"]) == ["add", "boom", "listPets", "createPets", "showPetById"]
    assert seen["tools"]["showPetById"].input_schema["required"] == ["petId"]
    check(seen)


@pytest.fixture
def http_server(echo_server: ServerHandle, tmp_path: Path) -> Iterator[str]:
    manifest = {
        "base_url": echo_server.base_url,
        "tools": [{"name": "echo_get", "url": "/echo/mcp", "description": "Echo a GET."}],
    }
    path = tmp_path / "http.yaml"
    path.write_text(yaml.safe_dump(manifest), encoding="utf-8")
    command = [
        sys.executable,
        "-m",
        "bridge",
        "mcp-serve",
        "--transport",
        "http",
        "--port",
        "0",
        "--tools",
        PY_TOOLS,
        "--tools",
        str(path),
    ]
    proc = subprocess.Popen(
        command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        line: list[str] = []
        reader = threading.Thread(target=lambda: line.append(proc.stdout.readline()), daemon=True)  # type: ignore[union-attr]
        reader.start()
        reader.join(timeout=60)
        assert line and line[0].startswith("toolbridge mcp-serve: http://127.0.0.1:"), (
            line,
            proc.poll(),
        )
        yield line[0].split(": ", 1)[1].strip()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


def test_streamable_http_with_python_and_http_tools(http_server: str) -> None:
    assert http_server.endswith("/mcp")

    async def main() -> tuple[dict[str, Any], Any]:
        async with Client(http_server) as client:
            seen = await exercise(client)
            echoed = await client.call_tool("echo_get", {})
            return seen, echoed

    seen, echoed = asyncio.run(asyncio.wait_for(main(), 90))
    assert list(seen["tools"]) == ["add", "boom", "echo_get"]
    check(seen)
    assert echoed.is_error is False
    assert json.loads(text(echoed))["path"] == "/echo/mcp"


def test_command_line_mistakes() -> None:
    runner = CliRunner()
    bad = runner.invoke(app, ["mcp-serve", "--tools", PY_TOOLS, "--transport", "pigeon"])
    assert bad.exit_code == 2
    assert "--transport must be stdio or http, got 'pigeon'" in bad.stderr
    remote = runner.invoke(
        app, ["mcp-serve", "--tools", PY_TOOLS, "--transport", "http", "--host", "0.0.0.0"]
    )
    assert remote.exit_code == 2
    assert "refusing to listen on 0.0.0.0: the MCP endpoint has no authentication" in (
        remote.stderr
    )
    missing = runner.invoke(app, ["mcp-serve", "--tools", "nope.yaml"])
    assert missing.exit_code == 2
    assert "no such file: nope.yaml" in missing.stderr
