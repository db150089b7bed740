"""`/v1/info`'s platform part for every registered platform: the agent's id, and whether it is
the embedded emulator (the console shows an "emulator" badge from it), never a credential."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from bridge.daemon.routers.events import EMULATOR_APP_ID, platform_info
from bridge.platforms import create_platform

ROOT = "http://127.0.0.1:9"
SECRET = "sk-never-shown-0123456789"


def _platform(name: str, agent: str) -> Any:
    options: dict[str, dict[str, Any]] = {
        "appbuilder": {"app_id": agent, "token": SECRET, "base_url": ROOT},
        "coze": {"bot_id": agent, "token": SECRET, "base_url": ROOT},
        "responses": {"model": agent, "api_key": SECRET, "base_url": ROOT + "/v1"},
        "openai": {"model": agent, "api_key": SECRET, "base_url": ROOT + "/v1"},
    }
    return create_platform(name, **options[name])


@pytest.mark.parametrize(
    ("name", "agent", "field", "emulated"),
    [
        ("appbuilder", EMULATOR_APP_ID, "app_id", True),
        ("appbuilder", "0b8a3c2e-real-app", "app_id", False),
        ("coze", EMULATOR_APP_ID, "app_id", True),
        ("coze", "7446000000000000000", "app_id", False),
        ("responses", EMULATOR_APP_ID, "model", True),
        ("responses", "gpt-4.1", "model", False),
        ("openai", EMULATOR_APP_ID, "model", True),
        ("openai", "qwen2.5-7b-instruct", "model", False),
    ],
)
def test_info_names_the_agent_and_tells_the_emulator(
    name: str, agent: str, field: str, emulated: bool
) -> None:
    platform = _platform(name, agent)
    try:
        info = platform_info(SimpleNamespace(platform=platform))  # type: ignore[arg-type]
    finally:
        platform.close()
    assert info["platform"] == name
    assert info[field] == agent
    assert info["is_emulator"] is emulated
    assert info["base_url"].startswith(ROOT)
    assert SECRET not in repr(info)
