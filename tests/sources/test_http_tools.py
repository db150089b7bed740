"""Declarative HTTP tools against a real API on loopback: request building, auth from the
environment, the host allowlist (also after redirects), error statuses, response selection,
size limits, concurrency and connection reuse. Secrets never show in outputs, errors or logs."""

from __future__ import annotations

import json
import logging
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from bridge._serve import ServerHandle
from bridge.loading import load_tools
from bridge.sources import HttpToolSource
from bridge.tools import Dispatcher, Toolbox
from bridge.types import ToolCall, ToolRun
from tests.sources.echo_app import EchoState

TOKEN = "tb-test-token-4f1c9a"
PASSWORD = "pw-test-secret-77aa"
API_KEY = "key-test-secret-31bd"


def manifest(base_url: str, tools: list[dict[str, Any]], **top: Any) -> dict[str, Any]:
    return {"base_url": base_url, **top, "tools": tools}


def echo_tool(name: str = "echo", method: str = "POST", **extra: Any) -> dict[str, Any]:
    tool: dict[str, Any] = {
        "name": name,
        "description": "Echo the request back.",
        "method": method,
        "url": "/echo/{item}",
        "parameters": {
            "type": "object",
            "properties": {
                "item": {"type": "string"},
                "tags": {"type": "array", "items": {"type": "string"}},
                "flag": {"type": "boolean"},
                "count": {"type": "integer"},
                "trace": {"type": "string"},
                "theme": {"type": "string"},
                "note": {"type": "string"},
            },
            "required": ["item"],
        },
        "locations": {
            "tags": "query",
            "flag": {"in": "query", "name": "is_flag"},
            "trace": {"in": "header", "name": "X-Trace"},
            "theme": "cookie",
        },
    }
    tool.update(extra)
    return tool


def write(tmp_path: Path, data: dict[str, Any], name: str = "tools.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def run(box: Toolbox, name: str, arguments: dict[str, Any] | str) -> ToolRun:
    with Dispatcher(box) as dispatcher:
        [result] = dispatcher.run([ToolCall(call_id="c1", name=name, arguments=arguments)])
    return result


@pytest.fixture
def box_for(tmp_path: Path) -> Iterator[Any]:
    boxes: list[Toolbox] = []

    def make(data: dict[str, Any], *, allow_hosts: list[str] | None = None) -> Toolbox:
        box = load_tools([str(write(tmp_path, data))], allow_hosts=allow_hosts or [])
        boxes.append(box)
        return box

    yield make
    for box in boxes:
        box.close()


def test_arguments_go_where_the_manifest_says(echo_server: ServerHandle, box_for: Any) -> None:
    box = box_for(manifest(echo_server.base_url, [echo_tool()]))
    result = run(
        box,
        "echo",
        {
            "item": "a b/c",
            "tags": ["x", "y"],
            "flag": True,
            "count": "3",
            "trace": "t-1",
            "theme": "dark",
            "note": "hello",
        },
    )
    assert result.error is None, result.output
    seen = json.loads(result.output)
    assert seen["method"] == "POST"
    assert seen["path"] == "/echo/a b/c"  # quoted on the wire: the slash stays in the segment
    assert seen["query"] == [["tags", "x"], ["tags", "y"], ["is_flag", "true"]]
    assert seen["headers"]["x-trace"] == "t-1"
    assert seen["cookies"] == {"theme": "dark"}
    assert seen["json"] == {"count": 3, "note": "hello"}  # "3" coerced to the schema's integer


def test_get_arguments_default_to_the_query(echo_server: ServerHandle, box_for: Any) -> None:
    tool = {
        "name": "find",
        "url": "/echo/find",
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
    }
    box = box_for(manifest(echo_server.base_url, [tool]))
    seen = json.loads(run(box, "find", {"q": "café"}).output)
    assert seen["method"] == "GET"
    assert seen["query"] == [["q", "café"]]
    assert seen["json"] is None


def test_whole_body(echo_server: ServerHandle, box_for: Any) -> None:
    tool = {
        "name": "put_list",
        "method": "PUT",
        "url": "/echo/list",
        "parameters": {
            "type": "object",
            "properties": {"values": {"type": "array", "items": {"type": "integer"}}},
            "required": ["values"],
        },
        "locations": {"values": "whole_body"},
    }
    box = box_for(manifest(echo_server.base_url, [tool]))
    seen = json.loads(run(box, "put_list", {"values": [1, 2, 3]}).output)
    assert seen["json"] == [1, 2, 3]


def test_the_manifest_is_described_to_the_agent(echo_server: ServerHandle, box_for: Any) -> None:
    box = box_for(manifest(echo_server.base_url, [echo_tool()]))
    [described] = box.manifests("appbuilder")
    function = described["function"]
    assert function["name"] == "echo"
    assert function["description"] == "Echo the request back."
    assert function["parameters"]["required"] == ["item"]
    assert function["parameters"]["properties"]["tags"] == {
        "type": "array",
        "items": {"type": "string"},
    }


def test_invalid_arguments_are_refused_before_any_request(
    echo_server: ServerHandle, echo_state: EchoState, box_for: Any
) -> None:
    box = box_for(manifest(echo_server.base_url, [echo_tool(name="strict_echo")]))
    before = echo_state.hits["/echo/zz"]
    result = run(box, "strict_echo", {"item": "zz", "count": "many", "colour": "red"})
    assert result.error == "invalid_arguments"
    assert "unknown argument 'colour': accepted arguments are item, tags" in result.output
    assert 'count: should be an integer (got "many")' in result.output
    missing = run(box, "strict_echo", {})
    assert "item: missing required argument (expected a string)" in missing.output
    assert echo_state.hits["/echo/zz"] == before


@pytest.mark.parametrize(
    ("auth", "header", "expected"),
    [
        ({"type": "bearer", "token": "${TB_TEST_TOKEN}"}, "authorization", "Bearer " + TOKEN),
        (
            {"type": "basic", "username": "svc", "password": "${TB_TEST_PASSWORD}"},
            "authorization",
            "Basic c3ZjOnB3LXRlc3Qtc2VjcmV0LTc3YWE=",
        ),
        (
            {"type": "api_key", "header": "X-Api-Key", "key": "${TB_TEST_KEY}"},
            "x-api-key",
            API_KEY,
        ),
    ],
)
def test_auth_from_the_environment_never_shows(
    echo_server: ServerHandle,
    echo_state: EchoState,
    box_for: Any,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    auth: dict[str, str],
    header: str,
    expected: str,
) -> None:
    monkeypatch.setenv("TB_TEST_TOKEN", TOKEN)
    monkeypatch.setenv("TB_TEST_PASSWORD", PASSWORD)
    monkeypatch.setenv("TB_TEST_KEY", API_KEY)
    caplog.set_level(logging.DEBUG)
    tools = [
        echo_tool(),
        {"name": "fail", "url": "/status/403", "parameters": {"type": "object"}},
        {"name": "elsewhere", "url": "http://localhost:1/x", "parameters": {"type": "object"}},
    ]
    box = box_for(manifest(echo_server.base_url, tools, auth=auth, allow_hosts=None))
    secret_free = [repr(box), repr(box.get("echo")), json.dumps(box.manifests())]
    ok = run(box, "echo", {"item": "me"})
    failed = run(box, "fail", {})
    refused = run(box, "elsewhere", {})
    # The server did get the secret...
    assert echo_state.headers["/echo/me"][header] == expected
    # ...but the output the model reads has it masked, and nothing else shows it.
    assert json.loads(ok.output)["headers"][header] != expected
    assert failed.error == "tool_error" and "HTTP 403 Forbidden" in failed.output
    assert refused.error == "tool_error"
    texts = [ok.output, failed.output, refused.output, caplog.text, *secret_free]
    for text in texts:
        for secret in (TOKEN, PASSWORD, API_KEY, expected.split(" ")[-1]):
            assert secret not in text


def test_a_missing_environment_variable_is_a_clear_output(
    echo_server: ServerHandle, box_for: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TB_TEST_UNSET", raising=False)
    data = manifest(
        echo_server.base_url,
        [echo_tool()],
        auth={"type": "bearer", "token": "${TB_TEST_UNSET}"},
    )
    box = box_for(data)
    result = run(box, "echo", {"item": "x"})
    assert result.error == "tool_error"
    assert "The environment variable TB_TEST_UNSET is not set (auth.token in " in result.output


def test_a_non_2xx_status_is_an_error_output_with_a_trimmed_body(
    echo_server: ServerHandle, box_for: Any
) -> None:
    tools = [
        {
            "name": "missing",
            "url": "/status/404",
            "parameters": {"type": "object", "properties": {"detail": {"type": "string"}}},
        }
    ]
    box = box_for(manifest(echo_server.base_url, tools))
    result = run(box, "missing", {"detail": "no such item\n\n  here"})
    assert result.error == "tool_error"
    assert result.output == (
        f"HttpToolError: HTTP 404 Not Found from GET {echo_server.base_url}/status/404: "
        "no such item here"
    )
    long = run(box, "missing", {"detail": "z" * 5000})
    assert long.output.endswith("z" * 10 + "...")
    assert len(long.output) < 700


def test_a_host_not_on_the_allowlist_is_refused(
    echo_server: ServerHandle, echo_state: EchoState, box_for: Any
) -> None:
    tools = [{"name": "items", "url": "/items", "parameters": {"type": "object"}}]
    box = box_for(manifest(echo_server.base_url, tools, allow_hosts=["api.example.com"]))
    before = echo_state.hits["/items"]
    result = run(box, "items", {})
    assert result.error == "tool_error"
    host = echo_server.base_url.removeprefix("http://")
    assert f"Refused: {echo_server.base_url}/items goes to {host}, which is not an allowed " in (
        result.output
    )
    assert "(allowed: api.example.com)" in result.output
    assert f"pass --allow-host {host}" in result.output
    assert echo_state.hits["/items"] == before, "no request was sent"


def test_allow_host_option_and_environment_variable(
    echo_server: ServerHandle, box_for: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    tools = [{"name": "items", "url": "/items", "parameters": {"type": "object"}}]
    data = manifest(echo_server.base_url, tools, allow_hosts=["api.example.com"])
    assert run(box_for(data, allow_hosts=["127.0.0.1"]), "items", {}).error is None
    monkeypatch.setenv("TOOLBRIDGE_ALLOW_HOSTS", f"other.example, {echo_server.host}")
    assert run(box_for(data), "items", {}).error is None


def test_redirects_are_followed_to_allowed_hosts_only(
    echo_server: ServerHandle, echo_state: EchoState, box_for: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TB_TEST_TOKEN", TOKEN)
    port = echo_server.port
    tool = {
        "name": "go",
        "url": "/redirect",
        "parameters": {
            "type": "object",
            "properties": {"to": {"type": "string"}, "code": {"type": "integer"}},
            "required": ["to"],
        },
    }
    data = manifest(
        echo_server.base_url,
        [tool],
        allow_hosts=[f"127.0.0.1:{port}"],
        auth={"type": "bearer", "token": "${TB_TEST_TOKEN}"},
    )
    box = box_for(data)
    followed = run(box, "go", {"to": "/echo/after?x=1", "code": 307})
    assert followed.error is None, followed.output
    seen = json.loads(followed.output)
    assert seen["path"] == "/echo/after"
    assert seen["query"] == [["x", "1"]]
    assert "authorization" in seen["headers"], "same host: the auth stays"

    before = echo_state.hits["/echo/stolen"]
    refused = run(box, "go", {"to": f"http://localhost:{port}/echo/stolen"})
    assert refused.error == "tool_error"
    assert (
        f"Refused: the redirect from {echo_server.base_url}/redirect to "
        f"http://localhost:{port}/echo/stolen goes to localhost:{port}, which is not an "
        "allowed host"
    ) in refused.output
    assert echo_state.hits["/echo/stolen"] == before, "the redirect target was never contacted"

    crossed = run(
        box_for(data, allow_hosts=[f"localhost:{port}"]),
        "go",
        {"to": f"http://localhost:{port}/echo/elsewhere"},
    )
    assert crossed.error is None, crossed.output
    assert "authorization" not in json.loads(crossed.output)["headers"], "auth dropped cross-host"


def test_too_many_redirects(echo_server: ServerHandle, box_for: Any) -> None:
    tools = [{"name": "loop", "url": "/loop", "parameters": {"type": "object"}}]
    result = run(box_for(manifest(echo_server.base_url, tools)), "loop", {})
    assert result.error == "tool_error"
    assert "was redirected more than 5 times; gave up" in result.output


def test_response_selection_and_size_limits(echo_server: ServerHandle, box_for: Any) -> None:
    tools = [
        {"name": "first_name", "url": "/items", "response": {"select": "data.items[0].name"}},
        {"name": "second", "url": "/items", "response": {"select": "data.items.1"}},
        {"name": "wrong", "url": "/items", "response": {"select": "data.things"}},
        {"name": "text", "url": "/text"},
        {"name": "empty", "url": "/empty", "method": "DELETE"},
        {
            "name": "big",
            "url": "/big",
            "parameters": {"type": "object", "properties": {"n": {"type": "integer"}}},
            "response": {"max_chars": 200},
        },
    ]
    box = box_for(manifest(echo_server.base_url, tools, max_response_bytes=5000))
    assert run(box, "first_name", {}).output == "alpha"
    assert json.loads(run(box, "second", {}).output) == {"name": "beta", "n": 2}
    wrong = run(box, "wrong", {})
    assert wrong.error == "tool_error"
    assert "the response has no field 'things' at data (response.select 'data.things'); keys: " in (
        wrong.output
    )
    assert run(box, "text", {}).output == "plain words"
    assert run(box, "empty", {}).output == "HTTP 204 No Content (no content)"
    big = run(box, "big", {"n": 150})
    assert big.output == "x" * 150
    cut = run(box, "big", {"n": 100_000})
    assert len(cut.output) <= 200
    assert "[... output truncated:" in cut.output
    capped = box.get("big")
    assert capped is not None


def test_unreachable_host_is_a_clear_output(box_for: Any) -> None:
    tools = [{"name": "down", "url": "http://127.0.0.1:9/nothing", "timeout": 5}]
    result = run(box_for({"tools": tools}), "down", {})
    assert result.error == "tool_error"
    assert result.output.startswith(
        "HttpToolError: GET http://127.0.0.1:9/nothing failed: cannot connect"
    )


def test_calls_of_a_batch_run_concurrently(echo_server: ServerHandle, box_for: Any) -> None:
    # /meet answers only when two requests are in flight at once (a barrier of two).
    tools = [{"name": "meet", "url": "/meet", "timeout": 30}]
    box = box_for(manifest(echo_server.base_url, tools))
    with Dispatcher(box) as dispatcher:
        results = dispatcher.run(
            [ToolCall(call_id=f"m{i}", name="meet", arguments={}) for i in range(2)]
        )
    assert [r.output for r in results] == ["met", "met"]


def test_one_session_reuses_its_connection(echo_server: ServerHandle, box_for: Any) -> None:
    tools = [{"name": "client", "url": "/client"}]
    box = box_for(manifest(echo_server.base_url, tools))
    first = json.loads(run(box, "client", {}).output)["port"]
    second = json.loads(run(box, "client", {}).output)["port"]
    assert first == second


def test_the_source_api(echo_server: ServerHandle, tmp_path: Path) -> None:
    path = write(tmp_path, manifest(echo_server.base_url, [echo_tool(confirm=True, timeout=7)]))
    source = HttpToolSource.from_file(path, allow_hosts=["extra.example"])
    try:
        assert [spec.name for spec in source.specs()] == ["echo"]
        options = source.specs()[0].options
        assert (options.confirm, options.timeout, options.idempotent) == (True, 7, False)
        assert "extra.example" in str(source.allowlist)
        assert repr(source).startswith(f"HttpToolSource({str(path)!r}, tools=['echo']")
        with Toolbox() as box:
            box.add_source(source)
            assert run(box, "echo", {"item": "a"}).error is None
    finally:
        source.close()


def test_json_manifests_and_the_call_command(echo_server: ServerHandle, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from bridge.cli import app

    path = tmp_path / "tools.json"
    path.write_text(json.dumps(manifest(echo_server.base_url, [echo_tool()])), encoding="utf-8")
    result = CliRunner().invoke(app, ["call", str(path), "echo", '{"item": "cli"}'])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["path"] == "/echo/cli"


def test_yaml_written_by_hand(echo_server: ServerHandle, tmp_path: Path) -> None:
    path = tmp_path / "hand.yml"
    path.write_text(
        textwrap.dedent(
            f"""\
            base_url: {echo_server.base_url}
            headers: {{X-Client: toolbridge-tests}}
            tools:
              - name: whoami
                description: Echo, to see the static headers.
                url: /echo/who
                headers: {{X-Tool: whoami}}
            """
        ),
        encoding="utf-8",
    )
    with load_tools([str(path)]) as box:
        seen = json.loads(run(box, "whoami", {}).output)
    assert seen["headers"]["x-client"] == "toolbridge-tests"
    assert seen["headers"]["x-tool"] == "whoami"


def test_the_call_command_takes_allow_host(echo_server: ServerHandle, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from bridge.cli import app

    tools = [{"name": "items", "url": "/items", "response": {"select": "data.items[0].name"}}]
    path = write(tmp_path, manifest(echo_server.base_url, tools, allow_hosts=["api.example.com"]))
    runner = CliRunner()
    refused = runner.invoke(app, ["call", str(path), "items"])
    assert refused.exit_code == 1
    assert "which is not an allowed host" in refused.stderr
    allowed = runner.invoke(app, ["call", str(path), "items", "--allow-host", echo_server.host])
    assert allowed.exit_code == 0, allowed.output
    assert allowed.stdout.strip() == "alpha"


def test_select_on_a_response_that_is_not_json(echo_server: ServerHandle, box_for: Any) -> None:
    tools = [{"name": "words", "url": "/text", "response": {"select": "a.b"}}]
    result = run(box_for(manifest(echo_server.base_url, tools)), "words", {})
    assert result.error == "tool_error"
    assert "the response is not JSON, so response.select 'a.b' cannot apply; content type: " in (
        result.output
    )
    assert "text/plain" in result.output
