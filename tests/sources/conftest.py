"""Fixtures of the source tests: one echo API per session, on loopback."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bridge._serve import ServerHandle, serve_in_thread
from tests.sources.echo_app import EchoState, create_echo_app


@pytest.fixture(scope="session")
def echo_state() -> EchoState:
    return EchoState()


@pytest.fixture(scope="session")
def echo_server(echo_state: EchoState) -> Iterator[ServerHandle]:
    with serve_in_thread(create_echo_app(echo_state)) as handle:
        yield handle


@pytest.fixture(autouse=True)
def _no_env_hosts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Hosts allowed in the developer's shell must not leak into the tests."""
    monkeypatch.delenv("TOOLBRIDGE_ALLOW_HOSTS", raising=False)
