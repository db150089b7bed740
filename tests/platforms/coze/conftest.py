"""Fixtures of the Coze adapter tests: one scripted server per module, a platform aimed at it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from coze_fakes import FAST, TOKEN, CozeServer

from bridge.platforms.coze import CozePlatform


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests see no Coze settings from the developer's shell."""
    for name in ("COZE_API_TOKEN", "COZE_BOT_ID", "COZE_API_BASE", "COZE_USER_ID"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="module")
def module_server() -> Iterator[CozeServer]:
    with CozeServer().running() as server:
        yield server


@pytest.fixture
def server(module_server: CozeServer) -> CozeServer:
    module_server.script()
    return module_server


@pytest.fixture
def platform(server: CozeServer) -> Iterator[CozePlatform]:
    with CozePlatform(TOKEN, "b1", server.base_url, retry_policy=FAST, sleep=lambda _s: None) as p:
        yield p
