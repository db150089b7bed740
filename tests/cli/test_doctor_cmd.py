"""`toolbridge doctor`: every check, its fix-it hint and its exit code, over real loopback HTTP."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from typer.testing import CliRunner

from bridge._serve import serve_in_thread
from bridge.cli import app
from bridge.emulator import Emulator
from bridge.platforms.openai_chat import OpenAIChatPlatform
from bridge.platforms.retry import BACKOFF_ENV

runner = CliRunner()
GOOD_TOKEN = "bce-v3/ALTAK-abc123/0123456789abcdef"
GOOD_APP = "7f7d8f4e-1b2c-4d5e-9f00-0123456789ab"
TOOLS = """
from bridge import manifest

@manifest(description="Say hello.")
def hello(name: str) -> str:
    return f"hello {name}"
"""


def invoke(args: list[str], env: dict[str, str]) -> Any:
    base = {k: "" for k in ("APPBUILDER_TOKEN", "APPBUILDER_APP_ID", "GATEWAY_URL_V2")}
    base |= {k: "" for k in ("OPENAI_BASE_URL", "OPENAI_MODEL", "OPENAI_API_KEY")}
    return runner.invoke(app, ["doctor", *args], env={**base, **env})


@pytest.fixture(scope="module")
def emulator() -> Iterator[Emulator]:
    with Emulator(token=GOOD_TOKEN, app_id=GOOD_APP, faults="") as emu:
        yield emu


@pytest.fixture()
def tools_file(tmp_path: Path) -> str:
    path = tmp_path / "hello_tools.py"
    path.write_text(TOOLS, encoding="utf-8")
    return str(path)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_all_good(emulator: Emulator, tools_file: str) -> None:
    result = invoke(["--tools", tools_file], emulator.env())
    assert result.exit_code == 0, result.output
    assert "✓ token: set and well-formed" in result.stdout
    assert f"✓ app id: {GOOD_APP}" in result.stdout
    assert "✓ reachable:" in result.stdout
    assert "✓ tools: 1 valid: hello" in result.stdout
    assert "all good" in result.stdout
    assert GOOD_TOKEN not in result.output


def test_missing_token_and_app_id(tools_file: str) -> None:
    result = invoke(["--tools", tools_file], {})
    assert result.exit_code == 2
    assert "✗ token: not set: pass --token or set APPBUILDER_TOKEN" in result.stdout
    assert "✗ app id: not set: pass --app-id or set APPBUILDER_APP_ID" in result.stdout
    assert "not tried until the settings above are fixed" in result.stdout


def test_a_token_with_whitespace_is_refused(emulator: Emulator) -> None:
    env = {**emulator.env(), "APPBUILDER_TOKEN": "bce-v3/ALTAK-a b/1"}
    result = invoke([], env)
    assert result.exit_code == 2
    assert "contains spaces" in result.stdout


def test_odd_shapes_are_warnings_not_failures(emulator: Emulator) -> None:
    with Emulator(faults="") as plain:  # emulator-token / emulator-app: not console shapes
        result = invoke([], plain.env())
    assert result.exit_code == 0, result.output
    assert "! token: set, but it does not look like an AppBuilder key" in result.stdout
    assert "! app id: 'emulator-app' is not a UUID" in result.stdout
    assert "! tools: none given" in result.stdout


def test_a_refused_token_exits_3_with_a_hint(emulator: Emulator) -> None:
    env = {**emulator.env(), "APPBUILDER_TOKEN": "bce-v3/ALTAK-zzz/ffff"}
    result = invoke([], env)
    assert result.exit_code == 3
    assert "the token was refused" in result.stdout
    assert "bce-v3/ALTAK-zzz/ffff" not in result.output


def test_an_unknown_app_exits_1_with_a_hint(emulator: Emulator) -> None:
    env = {**emulator.env(), "APPBUILDER_APP_ID": "00000000-0000-0000-0000-000000000000"}
    result = invoke([], env)
    assert result.exit_code == 1
    assert "check the app id (is the app published?)" in result.stdout


def test_an_unreachable_gateway_exits_4(emulator: Emulator) -> None:
    env = {**emulator.env(), "GATEWAY_URL_V2": f"http://127.0.0.1:{free_port()}"}
    result = invoke([], {**env, BACKOFF_ENV: "0.001"})  # retried at once
    assert result.exit_code == 4
    assert "check the gateway/base URL" in result.stdout


def test_broken_tools_exit_2(emulator: Emulator, tmp_path: Path) -> None:
    broken = tmp_path / "broken.py"
    broken.write_text("import nowhere_to_be_found\n", encoding="utf-8")
    result = invoke(["--tools", str(broken)], emulator.env())
    assert result.exit_code == 2
    assert "✗ tools:" in result.stdout and "nowhere_to_be_found" in result.stdout


def test_unknown_platform_exits_2() -> None:
    result = invoke(["--platform", "nope"], {})
    assert result.exit_code == 2
    assert "unknown 'nope'" in result.stdout


# --- --platform openai --------------------------------------------------------------------------


def _models_app(served: list[str]) -> Starlette:
    async def models(request: Request) -> JSONResponse:
        if request.headers.get("authorization") != "Bearer sk-local-123":
            return JSONResponse({"error": {"message": "bad key"}}, status_code=401)
        return JSONResponse({"object": "list", "data": [{"id": name} for name in served]})

    return Starlette(routes=[Route("/v1/models", models)])


@pytest.fixture(scope="module")
def models_server() -> Iterator[str]:
    with serve_in_thread(_models_app(["qwen2.5", "llama3.1"])) as handle:
        yield handle.base_url + "/v1"


def test_openai_all_good(models_server: str, tools_file: str) -> None:
    env = {"OPENAI_BASE_URL": models_server, "OPENAI_API_KEY": "sk-local-123"}
    result = invoke(["--platform", "openai", "--model", "qwen2.5", "--tools", tools_file], env)
    assert result.exit_code == 0, result.output
    assert "serves model 'qwen2.5'" in result.stdout
    assert "sk-local-123" not in result.output


def test_openai_model_not_served(models_server: str) -> None:
    env = {"OPENAI_BASE_URL": models_server, "OPENAI_API_KEY": "sk-local-123"}
    result = invoke(["--platform", "openai", "--model", "gpt-9"], env)
    assert result.exit_code == 2
    assert "it serves: qwen2.5, llama3.1" in result.stdout


def test_openai_refused_key_and_missing_settings(models_server: str) -> None:
    refused = invoke(
        ["--platform", "openai", "--model", "qwen2.5"],
        {"OPENAI_BASE_URL": models_server, "OPENAI_API_KEY": "sk-not-the-right-one"},
    )
    assert refused.exit_code == 3
    missing = invoke(["--platform", "openai"], {})
    assert missing.exit_code == 2
    assert "✗ base url: not set: pass --base-url or set OPENAI_BASE_URL" in missing.stdout
    assert "✗ model: not set: pass --model or set OPENAI_MODEL" in missing.stdout


def test_openai_check_tolerates_servers_without_a_model_list() -> None:
    async def empty(request: Request) -> JSONResponse:
        return JSONResponse({"object": "list", "data": []})

    with serve_in_thread(Starlette(routes=[Route("/v1/models", empty)])) as handle:
        platform = OpenAIChatPlatform(handle.base_url + "/v1", "any-model")
        try:
            assert "lists no models" in platform.check()
        finally:
            platform.close()


# --- --json, hints in full, servers without /models -----------------------------------------


def test_the_token_hint_is_not_masked_as_a_secret(tools_file: str) -> None:
    result = invoke(["--tools", tools_file], {})
    assert "it looks like bce-v3/ALTAK-…/…" in result.stdout
    assert "[secure]" not in result.stdout
    assert "--emulator" in result.stdout


def test_json_report(emulator: Emulator, tools_file: str) -> None:
    import json

    good = invoke(["--tools", tools_file, "--json"], emulator.env())
    assert good.exit_code == 0, good.output
    body = json.loads(good.stdout)
    assert (body["ok"], body["exit_code"]) == (True, 0)
    assert [c["name"] for c in body["checks"]] == [
        "token",
        "app id",
        "base url",
        "reachable",
        "tools",
    ]
    assert {c["status"] for c in body["checks"]} == {"ok"}
    assert GOOD_TOKEN not in good.output
    bad = invoke(["--json"], {})
    assert bad.exit_code == 2
    body = json.loads(bad.stdout)
    assert (body["ok"], body["exit_code"]) == (False, 2)
    statuses = {c["name"]: c["status"] for c in body["checks"]}
    assert statuses["token"] == statuses["app id"] == "fail"


def test_doctor_checks_the_embedded_emulator(tools_file: str) -> None:
    result = invoke(["--emulator", "--tools", tools_file], {})
    assert result.exit_code == 0, result.output
    assert "✓ platform: the embedded AppBuilder emulator" in result.stdout
    assert "✓ reachable: AppBuilder at http://127.0.0.1:" in result.stdout


def _chat_only_app() -> Starlette:
    """A compatible server that answers chat completions but has no GET /v1/models."""

    async def chat(request: Request) -> JSONResponse:
        body = await request.json()
        if body.get("model") != "local":
            return JSONResponse({"error": {"message": "no such model"}}, status_code=404)
        return JSONResponse(
            {
                "id": "c1",
                "object": "chat.completion",
                "model": "local",
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": "p"},
                        "finish_reason": "length",
                    }
                ],
            }
        )

    return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])


def test_openai_server_without_models_is_a_warning_when_chat_answers() -> None:
    with serve_in_thread(_chat_only_app()) as handle:
        env = {"OPENAI_BASE_URL": handle.base_url + "/v1"}
        result = invoke(["--platform", "openai", "--model", "local"], env)
        assert result.exit_code == 0, result.output
        assert "! reachable:" in result.stdout
        assert "/v1/models is not served (404)" in result.stdout
        assert "/v1/chat/completions answered for model 'local'" in result.stdout
        wrong = invoke(["--platform", "openai", "--model", "gpt-9"], env)
        assert wrong.exit_code == 1
        assert "✗ reachable:" in wrong.stdout
        assert "check --base-url/OPENAI_BASE_URL: it is the API root ending in /v1" in wrong.stdout


def test_openai_hints(tools_file: str) -> None:
    port = free_port()
    down = invoke(
        ["--platform", "openai", "--model", "m", "--base-url", f"http://127.0.0.1:{port}/v1"], {}
    )
    assert down.exit_code == 4
    assert f"cannot connect to http://127.0.0.1:{port} (connection refused)" in down.stdout
    assert "start the server (vLLM, Ollama, llama.cpp...)" in down.stdout
    assert "APPBUILDER" not in down.stdout and "gateway" not in down.stdout
    odd = invoke(
        ["--platform", "openai", "--model", "m", "--base-url", f"http://127.0.0.1:{port}/api"], {}
    )
    assert "does not end in /v1" in odd.stdout
