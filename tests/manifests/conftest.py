"""Helpers of the ready-made manifest tests: load a manifest file and call its tools."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from bridge.loading import load_tools
from bridge.tools import Dispatcher, Toolbox
from bridge.types import ToolCall, ToolRun

MANIFESTS = Path(__file__).resolve().parents[2] / "manifests"

Call = Callable[[str, dict[str, Any]], ToolRun]


def loaded(name: str) -> Toolbox:
    return load_tools([str(MANIFESTS / name)])


@pytest.fixture
def call_in() -> Iterator[Callable[[Toolbox], Call]]:
    dispatchers: list[Dispatcher] = []

    def bind(box: Toolbox) -> Call:
        dispatcher = Dispatcher(box)
        dispatchers.append(dispatcher)

        def call(name: str, arguments: dict[str, Any]) -> ToolRun:
            [run] = dispatcher.run([ToolCall(call_id="t1", name=name, arguments=arguments)])
            return run

        return call

    yield bind
    for dispatcher in dispatchers:
        dispatcher.close()
