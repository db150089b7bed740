"""Fixtures: a recording fault server on loopback and clients pointed at it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from ab_fakes import NO_WAIT, TOKEN, FakeAppBuilder

from bridge._serve import ServerHandle, serve_in_thread
from bridge.platforms._transport import Transport
from bridge.platforms.appbuilder import AppBuilderClient
from bridge.platforms.appbuilder._errors import CONFIG_HINT, REQUEST_ID_HEADER, read_status_error
from bridge.platforms.retry import RetryPolicy

ENV_VARS = (
    "APPBUILDER_TOKEN",
    "APPBUILDER_APP_ID",
    "GATEWAY_URL_V2",
    "CONSOLE_OPENAPI_PREFIX",
    "CONSOLE_OPENAPI_VERSION",
    "SECRET_KEY_PREFIX",
    "APPBUILDER_SDK_PLATFORM",
    "APPBUILDER_SDK_MCP_CONTEXT",
)


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests see no AppBuilder settings from the developer's shell."""
    for name in ENV_VARS:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="session")
def _fake_server() -> Iterator[tuple[FakeAppBuilder, ServerHandle]]:
    app = FakeAppBuilder()
    with serve_in_thread(app) as handle:
        yield app, handle


@pytest.fixture
def fake(_fake_server: tuple[FakeAppBuilder, ServerHandle]) -> Iterator[FakeAppBuilder]:
    """The fake server, reset for this test."""
    app, _ = _fake_server
    app.reset()
    yield app
    app.reset()


@pytest.fixture
def fake_url(_fake_server: tuple[FakeAppBuilder, ServerHandle]) -> str:
    """Base URL of the fake server (http://127.0.0.1:PORT)."""
    return _fake_server[1].base_url


@pytest.fixture
def client(fake: FakeAppBuilder, fake_url: str) -> Iterator[AppBuilderClient]:
    """A client for app `app-1` on the fake server, with instant retries."""
    with AppBuilderClient(
        "app-1", TOKEN, fake_url, retry_policy=NO_WAIT, connect_timeout=5, idle_timeout=10
    ) as instance:
        yield instance


@pytest.fixture(scope="module")
def transport() -> Iterator[Transport]:
    """An AppBuilder `Transport` that sends nothing: for the error mapping and parsing tests."""
    transport = Transport(
        label="AppBuilder",
        connect_timeout=10.0,
        idle_timeout=120.0,
        retry_policy=RetryPolicy(),
        read_status_error=read_status_error,
        request_id_header=REQUEST_ID_HEADER,
        config_hint=CONFIG_HINT,
    )
    yield transport
    transport.close()
