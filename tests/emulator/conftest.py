"""Fixtures: one default-planner emulator per test module, and a raw HTTP client for it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bridge.emulator import ENV_VAR, Emulator
from tests.emulator.helpers import Api


@pytest.fixture(autouse=True)
def _no_env_faults(monkeypatch: pytest.MonkeyPatch) -> None:
    """Faults from the developer's shell must not leak into the tests."""
    monkeypatch.delenv(ENV_VAR, raising=False)


@pytest.fixture(scope="module")
def emu() -> Iterator[Emulator]:
    """An emulator with the default planner, shared by the tests of one module."""
    with Emulator(faults="") as emulator:
        yield emulator


@pytest.fixture
def api(emu: Emulator) -> Api:
    """A raw HTTP client for `emu`; fault counters are reset for each test."""
    emu.clear_requests()
    return Api(emu.base_url)
