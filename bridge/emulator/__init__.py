"""Local servers speaking each platform's wire protocol: develop offline, test against real HTTP.

One package per protocol (`appbuilder/`, `coze/`, `responses/`, listed in `protocols`), on the
shared scenario, planner, matching, state and faults here. `Emulator` runs one in-process on
loopback; `create_app` returns the AppBuilder-compatible ASGI app;
``toolbridge emulator`` runs it in the foreground. The agent it emulates is scripted by a
scenario file (`load_scenario`) or, without one, plans from the manifests it is sent. Faults
(`parse_faults`) make it misbehave on purpose.
"""

from __future__ import annotations

from bridge.emulator.appbuilder import EmulatorApp, create_app
from bridge.emulator.faults import ENV_VAR, HEADER, FaultSpec, FaultSpecError, parse_faults
from bridge.emulator.scenario import Scenario, ScenarioError, load_scenario
from bridge.emulator.server import Emulator
from bridge.emulator.state import ConversationSnapshot, RecordedRequest

__all__ = [
    "ENV_VAR",
    "HEADER",
    "ConversationSnapshot",
    "Emulator",
    "EmulatorApp",
    "FaultSpec",
    "FaultSpecError",
    "RecordedRequest",
    "Scenario",
    "ScenarioError",
    "create_app",
    "load_scenario",
    "parse_faults",
]
