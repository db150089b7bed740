"""The wire protocols the emulator speaks, each an ASGI app built from the same inputs.

Every protocol module offers ``create_app(*, token, app_id, scenario, faults)`` returning an app
with a `state` (`EmulatorState`), and ``client_env(base_url, token, app_id)`` naming the
environment variables that point that platform's client (toolbridge's adapter or the official
SDK) at it. The scenario files, the default planner and the faults are shared by all of them;
only the wire differs.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol

from bridge.emulator.faults import FaultSpec
from bridge.emulator.planner import Planner
from bridge.emulator.scenario import Scenario
from bridge.emulator.state import EmulatorState
from bridge.errors import UsageError

__all__ = ["PROTOCOLS", "EmulatorProtocol", "ProtocolApp", "get_protocol"]


class ProtocolApp(Protocol):
    """An emulator's ASGI app: callable by a server, with its inspectable state."""

    state: EmulatorState
    planner: Planner
    SAVED: ClassVar[Mapping[str, Any]]
    """What the app keeps in a state file besides the conversations (`bridge.emulator.saving`)."""

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None: ...


@dataclass(frozen=True)
class EmulatorProtocol:
    """One protocol: its name, what it emulates, and the module that implements it."""

    name: str
    title: str
    """What it emulates, for messages: "AppBuilder-compatible"."""
    module: str

    def create_app(
        self,
        *,
        token: str,
        app_id: str,
        scenario: str | Path | Mapping[str, Any] | Scenario | None = None,
        faults: str | FaultSpec | None = None,
    ) -> ProtocolApp:
        """Build this protocol's ASGI app (see the protocol module's `create_app`)."""
        factory = importlib.import_module(self.module).create_app
        app: ProtocolApp = factory(token=token, app_id=app_id, scenario=scenario, faults=faults)
        return app

    def client_env(self, base_url: str, token: str, app_id: str) -> dict[str, str]:
        """The environment variables that point this platform's clients at the emulator."""
        env: dict[str, str] = importlib.import_module(self.module).client_env(
            base_url, token, app_id
        )
        return env


PROTOCOLS: dict[str, EmulatorProtocol] = {
    "appbuilder": EmulatorProtocol(
        "appbuilder", "AppBuilder-compatible", "bridge.emulator.appbuilder"
    ),
    "coze": EmulatorProtocol("coze", "Coze-compatible (v3 chat)", "bridge.emulator.coze"),
    "responses": EmulatorProtocol(
        "responses", "OpenAI Responses-compatible", "bridge.emulator.responses"
    ),
    "openai": EmulatorProtocol(
        "openai", "OpenAI Chat Completions-compatible", "bridge.emulator.openai_chat"
    ),
}


def get_protocol(name: str) -> EmulatorProtocol:
    """The protocol called `name`, or a `UsageError` listing the known ones."""
    try:
        return PROTOCOLS[name]
    except KeyError:
        raise UsageError(
            f"unknown emulator protocol {name!r}; expected one of: {', '.join(PROTOCOLS)}"
        ) from None
