"""Fixtures of the OpenAI-compatible platform tests: one scripted server per module and a
platform pointed at it (the AppBuilder tests in appbuilder/ have their own)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from openai_fakes import FAST_RETRIES, ScriptedServer

from bridge.platforms.openai_chat import OpenAIChatPlatform


@pytest.fixture(scope="module")
def module_server() -> Iterator[ScriptedServer]:
    with ScriptedServer().running() as server:
        yield server


@pytest.fixture
def server(module_server: ScriptedServer) -> ScriptedServer:
    module_server.script()
    return module_server


@pytest.fixture
def platform(server: ScriptedServer) -> Iterator[OpenAIChatPlatform]:
    with OpenAIChatPlatform(server.base_url, "m", retry_policy=FAST_RETRIES) as p:
        yield p
