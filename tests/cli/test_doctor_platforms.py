"""`toolbridge doctor` on any registered platform: its settings, its check(), and the tools its
agent has configured server-side (`remote_tool_names()`) against the loaded ones."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from bridge.cli import app
from bridge.emulator import Emulator
from bridge.errors import AuthenticationError
from bridge.platforms.registry import PLATFORMS, PlatformEntry, Setting

runner = CliRunner()
SECRET = "fake-secret-0123456789"
TOOLS = """
from bridge import manifest

@manifest(description="Say hello.")
def hello(name: str) -> str:
    return f"hello {name}"

@manifest(description="Say bye.")
def bye(name: str) -> str:
    return f"bye {name}"
"""
ENV_NAMES = (
    "APPBUILDER_TOKEN",
    "APPBUILDER_APP_ID",
    "GATEWAY_URL_V2",
    "OPENAI_BASE_URL",
    "OPENAI_MODEL",
    "OPENAI_API_KEY",
    "COZE_API_TOKEN",
    "COZE_BOT_ID",
    "COZE_API_BASE",
    "FAKE_TOKEN",
)


class FakePlatform:
    """A platform whose agent has `REMOTE` configured server-side (None: it cannot tell)."""

    name = "fake"
    dialect = "openai"
    remote: list[str] | Exception | None = None

    def __init__(self, token: str | None = None, **options: Any) -> None:
        self.token = token

    def check(self) -> str:
        return "the fake service answered"

    def remote_tool_names(self) -> list[str] | None:
        if isinstance(FakePlatform.remote, Exception):
            raise FakePlatform.remote
        return FakePlatform.remote

    def close(self) -> None:
        pass


@pytest.fixture()
def fake() -> Iterator[type[FakePlatform]]:
    entry = PlatformEntry(
        "fake",
        "Fake",
        f"{__name__}:FakePlatform",
        (Setting("token", "--token", "FAKE_TOKEN", None, "a key", secret=True, required=True),),
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(PLATFORMS, "fake", entry)
        yield FakePlatform
    FakePlatform.remote = None


@pytest.fixture()
def tools_file(tmp_path: Path) -> str:
    path = tmp_path / "greetings.py"
    path.write_text(TOOLS, encoding="utf-8")
    return str(path)


def invoke(args: list[str], env: dict[str, str] | None = None) -> Any:
    return runner.invoke(
        app, ["doctor", *args], env={**dict.fromkeys(ENV_NAMES, ""), **(env or {})}
    )


def test_a_tool_the_agent_has_but_not_loaded_fails(
    fake: type[FakePlatform], tools_file: str
) -> None:
    fake.remote = ["hello", "lookup"]
    result = invoke(["--platform", "fake", "--token", SECRET, "-t", tools_file])
    assert result.exit_code == 2, result.output
    assert "✓ token: set and well-formed" in result.stdout
    assert "✓ reachable: the fake service answered" in result.stdout
    assert "✗ remote tools: the agent can call lookup, not loaded here" in result.stdout
    assert "loaded here but not configured on the agent (never called): bye" in result.stdout
    assert SECRET not in result.output


def test_loaded_tools_the_agent_lacks_are_a_warning(
    fake: type[FakePlatform], tools_file: str
) -> None:
    fake.remote = ["hello"]
    result = invoke(["--platform", "fake", "-t", tools_file], {"FAKE_TOKEN": SECRET})
    assert result.exit_code == 0, result.output
    assert "! remote tools: every tool the agent has is loaded: hello; loaded here" in result.stdout
    fake.remote = ["bye", "hello"]
    same = invoke(["--platform", "fake", "-t", tools_file, "--json"], {"FAKE_TOKEN": SECRET})
    assert same.exit_code == 0, same.output
    checks = {c["name"]: c for c in json.loads(same.stdout)["checks"]}
    assert checks["remote tools"]["status"] == "ok"
    assert checks["remote tools"]["detail"] == "every tool the agent has is loaded: bye, hello"
    assert SECRET not in same.output


def test_without_tools_the_remote_ones_are_listed(fake: type[FakePlatform]) -> None:
    fake.remote = ["hello"]
    result = invoke(["--platform", "fake"], {"FAKE_TOKEN": SECRET})
    assert result.exit_code == 0, result.output
    assert "! remote tools: the agent has 1 configured: hello; pass --tools" in result.stdout


def test_a_platform_that_cannot_tell_gets_no_comparison(
    fake: type[FakePlatform], tools_file: str
) -> None:
    result = invoke(["--platform", "fake", "-t", tools_file], {"FAKE_TOKEN": SECRET})
    assert result.exit_code == 0, result.output
    assert "remote tools" not in result.stdout


def test_a_failing_tool_listing_is_reported_with_its_code(fake: type[FakePlatform]) -> None:
    fake.remote = AuthenticationError("the listing was refused", status_code=403)
    result = invoke(["--platform", "fake"], {"FAKE_TOKEN": SECRET})
    assert result.exit_code == 3, result.output
    assert "✗ remote tools: " in result.stdout and "the listing was refused" in result.stdout


def test_a_missing_secret_names_flag_and_variable(fake: type[FakePlatform]) -> None:
    result = invoke(["--platform", "fake"])
    assert result.exit_code == 2
    assert "✗ token: not set: pass --token or set FAKE_TOKEN (a key)" in result.stdout
    assert "--emulator" not in result.stdout, "the fake platform has no emulator"


def test_malformed_and_foreign_settings(tools_file: str) -> None:
    bad_url = invoke(["--platform", "openai", "--base-url", "ftp://x/v1", "--model", "m"])
    assert bad_url.exit_code == 2
    assert "✗ base url: 'ftp://x/v1' is not an http:// or https:// URL" in bad_url.stdout
    foreign = invoke(["--platform", "openai", "--app-id", "a"])
    assert foreign.exit_code == 2
    assert "✗ flags: --app-id is for --platform appbuilder only" in foreign.stdout
    choice = invoke(["--platform", "openai", "--tool-protocol", "xml"])
    assert "✗ tool protocol: 'xml' is not accepted; should be 'native' or 'text'" in choice.stdout


def test_coze_bot_plugins_against_local_tools(tools_file: str) -> None:
    if "coze" not in PLATFORMS:
        pytest.skip("the coze platform is not registered")
    scenario = {
        "coze": {
            "plugins": [
                {"name": "hello", "parameters": {"type": "object"}},
                {"name": "lookup", "parameters": {"type": "object"}},
            ]
        },
        "rules": [],
    }
    with Emulator(protocol="coze", scenario=scenario, faults="") as emu:
        result = invoke(["--platform", "coze", "-t", tools_file], emu.env())
        with_both = invoke(
            ["--platform", "coze", "-t", tools_file, "-t", _one_more(tools_file)], emu.env()
        )
    assert result.exit_code == 2, result.output
    assert "✗ remote tools: the agent can call lookup, not loaded here" in result.stdout
    assert emu.token not in result.output
    assert with_both.exit_code == 0, with_both.output
    assert "! remote tools: every tool the agent has is loaded" in with_both.stdout


def _one_more(tools_file: str) -> str:
    path = Path(tools_file).with_name("lookup_tools.py")
    path.write_text(
        "from bridge import manifest\n\n"
        "@manifest(description='Look up.')\n"
        "def lookup(q: str) -> str:\n"
        "    return q\n",
        encoding="utf-8",
    )
    return str(path)
