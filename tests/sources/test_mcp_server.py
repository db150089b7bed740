"""`toolbridge mcp-serve`: any toolbox (Python, HTTP manifest, OpenAPI) served over MCP, checked
with the official MCP client over stdio and streamable HTTP on loopback."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from mcp import Client, StdioServerParameters, types
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
    with mcp_serve_http(PY_TOOLS, path) as url:
        yield url


@contextlib.contextmanager
def mcp_serve_http(*specs: str | Path) -> Iterator[str]:
    """`toolbridge mcp-serve --transport http` on an ephemeral port; yields its URL."""
    command = [sys.executable, "-m", "bridge", "mcp-serve", "--transport", "http", "--port", "0"]
    for spec in specs:
        command += ["--tools", str(spec)]
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
    assert "refusing to listen on 0.0.0.0 without --allow-remote" in remote.stderr
    missing = runner.invoke(app, ["mcp-serve", "--tools", "nope.yaml"])
    assert missing.exit_code == 2
    assert "no such file: nope.yaml" in missing.stderr


# --- confirm=True through mcp-serve: annotations, elicitation, refusals ----------------------

CONFIRM_TOOLS = '''
from pathlib import Path

from bridge.tools import manifest


@manifest(confirm=True)
def wipe(path: str) -> str:
    """Write a marker file (the side effect a refusal must prevent)."""
    Path(path).write_text("ran", encoding="utf-8")
    return f"wiped {Path(path).name}"


@manifest(idempotent=True, read_only=True)
def peek(path: str) -> str:
    """Whether a file exists."""
    return "exists" if Path(path).exists() else "absent"
'''


@pytest.fixture
def confirm_tools(tmp_path: Path) -> Path:
    path = tmp_path / "confirm_tools.py"
    path.write_text(CONFIRM_TOOLS, encoding="utf-8")
    return path


def serve(*specs: str | Path, yes: bool = False) -> StdioServerParameters:
    args = ["-m", "bridge", "mcp-serve"]
    for spec in specs:
        args += ["--tools", str(spec)]
    return StdioServerParameters(
        command=sys.executable, args=[*args, *(["--yes"] if yes else [])], cwd=str(ROOT)
    )


class Host:
    """An MCP host's user: answers each approval question by the marker file's name."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    async def __call__(self, context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        self.asked.append(params.message)
        assert isinstance(params, types.ElicitRequestFormParams)
        for action in ("accept", "decline", "cancel"):
            if f"{action}.txt" in params.message:
                return types.ElicitResult(action=action, content={} if action == "accept" else None)
        raise AssertionError(f"unexpected question: {params.message}")


def run_client(params: StdioServerParameters, body: Any, **options: Any) -> Any:
    async def main() -> Any:
        async with Client(params, **options) as client:
            return await body(client)

    return asyncio.run(asyncio.wait_for(main(), 90))


def test_tools_are_listed_with_annotations(confirm_tools: Path) -> None:
    async def body(client: Client) -> dict[str, Any]:
        listed = await client.list_tools()
        return {tool.name: tool.annotations for tool in listed.tools}

    annotations = run_client(serve(confirm_tools, PY_TOOLS), body)
    assert annotations["wipe"] == types.ToolAnnotations(destructive_hint=True)
    assert annotations["peek"] == types.ToolAnnotations(read_only_hint=True, idempotent_hint=True)
    assert annotations["add"] is None  # nothing is known: no hint is invented


# Both protocol eras: 2026-07-28 ("auto") asks through an InputRequiredResult and a second
# tools/call; 2025-11-25 ("legacy") sends elicitation/create in the middle of the call.
@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_the_host_is_asked_and_its_answer_decides(
    confirm_tools: Path, tmp_path: Path, mode: str
) -> None:
    host = Host()

    async def body(client: Client) -> dict[str, Any]:
        results = {}
        for action in ("accept", "decline", "cancel"):
            path = tmp_path / f"{action}.txt"
            results[action] = await client.call_tool("wipe", {"path": str(path)})
        return results

    results = run_client(serve(confirm_tools), body, mode=mode, elicitation_callback=host)
    accepted = results["accept"]
    assert (accepted.is_error, text(accepted)) == (False, "wiped accept.txt")
    assert (tmp_path / "accept.txt").read_text(encoding="utf-8") == "ran"
    assert results["decline"].is_error is True
    assert text(results["decline"]) == "The tool call was not run: rejected by the user"
    assert results["cancel"].is_error is True
    assert text(results["cancel"]) == (
        "The tool call was not run: rejected: the person closed the question without approving"
    )
    assert not (tmp_path / "decline.txt").exists()
    assert not (tmp_path / "cancel.txt").exists()
    # The person saw the tool and its exact arguments, once per call.
    assert len(host.asked) == 3
    assert host.asked[0].startswith("The agent wants to run the tool 'wipe' with these arguments:")
    assert json.dumps(str(tmp_path / "accept.txt")) in host.asked[0]


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_a_host_without_elicitation_gets_a_refusal(
    confirm_tools: Path, tmp_path: Path, mode: str
) -> None:
    marker = tmp_path / "m.txt"

    async def body(client: Client) -> tuple[Any, Any]:
        refused = await client.call_tool("wipe", {"path": str(marker)})
        peeked = await client.call_tool("peek", {"path": str(marker)})  # no confirm: runs
        return refused, peeked

    refused, peeked = run_client(serve(confirm_tools), body, mode=mode)
    assert refused.is_error is True
    assert text(refused) == (
        "The tool call was not run: rejected: this tool needs approval and no approver is "
        "configured (the MCP client cannot ask a person: it did not declare the elicitation "
        "capability)"
    )
    assert not marker.exists()
    assert (peeked.is_error, text(peeked)) == (False, "absent")


def test_yes_runs_confirm_tools_without_asking(confirm_tools: Path, tmp_path: Path) -> None:
    host = Host()
    marker = tmp_path / "decline.txt"  # the host would say no, were it asked

    async def body(client: Client) -> Any:
        return await client.call_tool("wipe", {"path": str(marker)})

    result = run_client(serve(confirm_tools, yes=True), body, elicitation_callback=host)
    assert (result.is_error, text(result)) == (False, "wiped decline.txt")
    assert marker.exists()
    assert host.asked == []


def test_yes_is_announced_with_a_warning(confirm_tools: Path) -> None:
    # stdin closed at once: the server starts, warns on stderr, and ends.
    done = subprocess.run(
        [sys.executable, "-m", "bridge", "mcp-serve", "--tools", str(confirm_tools), "--yes"],
        cwd=ROOT,
        input="",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "--yes: confirm tools run without asking anyone (wipe)" in done.stderr


def test_an_answer_binds_one_call_with_its_exact_arguments(
    confirm_tools: Path, tmp_path: Path
) -> None:
    first, other = tmp_path / "first.txt", tmp_path / "other.txt"
    accept = types.ElicitResult(action="accept", content={})

    async def body(client: Client) -> list[Any]:
        session = client.session
        seen: list[Any] = []
        asked = await session.call_tool("wipe", {"path": str(first)}, allow_input_required=True)
        assert isinstance(asked, types.InputRequiredResult)
        [key] = asked.input_requests or {}
        answer = {key: accept}
        state = asked.request_state
        # The accepted answer, sent back with other arguments: asked again, nothing runs.
        seen.append(
            await session.call_tool(
                "wipe",
                {"path": str(other)},
                input_responses=answer,
                request_state=state,
                allow_input_required=True,
            )
        )
        # An answer the server never asked for: asked, nothing runs.
        seen.append(
            await session.call_tool(
                "wipe",
                {"path": str(first)},
                input_responses=answer,
                request_state="forged",
                allow_input_required=True,
            )
        )
        again = await session.call_tool("wipe", {"path": str(first)}, allow_input_required=True)
        assert isinstance(again, types.InputRequiredResult)
        for _ in range(2):  # the same accepted answer replayed: it runs once
            seen.append(
                await session.call_tool(
                    "wipe",
                    {"path": str(first)},
                    input_responses=answer,
                    request_state=again.request_state,
                    allow_input_required=True,
                )
            )
        return seen

    other_args, forged, ran, replayed = run_client(
        serve(confirm_tools), body, elicitation_callback=Host()
    )
    assert isinstance(other_args, types.InputRequiredResult)
    assert isinstance(forged, types.InputRequiredResult)
    assert not other.exists()
    assert isinstance(ran, types.CallToolResult) and text(ran) == "wiped first.txt"
    assert isinstance(replayed, types.InputRequiredResult)


def test_an_http_manifest_confirm_tool_changes_nothing_until_accepted(
    echo_server: ServerHandle, echo_state: Any, tmp_path: Path
) -> None:
    # The reproduction: an HTTP tool with `confirm: true` changed data through an MCP
    # stdio client that was never asked.
    manifest = {
        "base_url": echo_server.base_url,
        "tools": [
            {
                "name": "delete_item",
                "method": "POST",
                "url": "/echo/mcp-confirm/{item}",
                "confirm": True,
                "parameters": {
                    "type": "object",
                    "properties": {"item": {"type": "string"}},
                    "required": ["item"],
                },
            },
            {"name": "list_items", "url": "/echo/mcp-confirm-list"},
        ],
    }
    path = tmp_path / "http.yaml"
    path.write_text(yaml.safe_dump(manifest), encoding="utf-8")

    async def list_and_call(client: Client) -> tuple[Any, Any]:
        listed = await client.list_tools()
        tools = {tool.name: tool.annotations for tool in listed.tools}
        return tools, await client.call_tool("delete_item", {"item": "accept.txt"})

    tools, refused = run_client(serve(path), list_and_call)
    assert tools["delete_item"] == types.ToolAnnotations(destructive_hint=True)
    assert tools["list_items"] == types.ToolAnnotations(read_only_hint=True, idempotent_hint=True)
    assert refused.is_error is True
    assert "no approver is configured" in text(refused)
    assert echo_state.hits["/echo/mcp-confirm/accept.txt"] == 0

    async def call(client: Client) -> Any:
        return await client.call_tool("delete_item", {"item": "accept.txt"})

    accepted = run_client(serve(path), call, elicitation_callback=Host())
    assert accepted.is_error is False
    assert json.loads(text(accepted))["method"] == "POST"
    assert echo_state.hits["/echo/mcp-confirm/accept.txt"] == 1


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_over_streamable_http_the_host_is_asked_too(
    confirm_tools: Path, tmp_path: Path, mode: str
) -> None:
    host = Host()

    async def main(url: str) -> list[Any]:
        results = []
        async with Client(url, mode=mode, elicitation_callback=host) as client:
            for action in ("accept", "decline"):
                path = str(tmp_path / f"{action}.txt")
                results.append(await client.call_tool("wipe", {"path": path}))
        async with Client(url, mode=mode) as client:  # no elicitation callback
            results.append(await client.call_tool("wipe", {"path": str(tmp_path / "cancel.txt")}))
        return results

    with mcp_serve_http(confirm_tools) as url:
        accepted, declined, unasked = asyncio.run(asyncio.wait_for(main(url), 90))
    assert (accepted.is_error, text(accepted)) == (False, "wiped accept.txt")
    assert (declined.is_error, text(declined)) == (
        True,
        "The tool call was not run: rejected by the user",
    )
    assert unasked.is_error is True
    assert "did not declare the elicitation capability" in text(unasked)
    assert sorted(p.name for p in tmp_path.glob("*.txt")) == ["accept.txt"]
