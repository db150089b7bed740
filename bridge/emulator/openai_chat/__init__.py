"""OpenAI Chat Completions, emulated: the ``openai`` protocol of `Emulator`.

``Emulator(protocol="openai")`` or ``toolbridge emulator --protocol openai`` serves
``POST /v1/chat/completions`` (stream or not; the whole conversation in ``messages`` every
time, tool calls as the assistant's ``tool_calls``, results as ``role: "tool"`` messages) and
``GET /v1/models``, planned by the same scenarios and default planner as the other protocols.
A request without ``tools`` whose system prompt describes them in the text tool format (what
toolbridge's ``--tool-protocol text`` sends for models without native tool calls) is answered
in that format: calls written as JSON blocks in the reply; a scenario whose ``openai`` section
says ``native_tools: false`` emulates a model that has only that way (requests with ``tools``
are refused). The emulator's ``app_id`` is the
model it serves, so `client_env` sets ``OPENAI_MODEL`` next to ``OPENAI_API_KEY`` and
``OPENAI_BASE_URL`` (what the official ``openai`` package and toolbridge's adapter read).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bridge.emulator.faults import FaultSpec, parse_faults
from bridge.emulator.openai_chat.app import ChatApp
from bridge.emulator.openai_chat.model import ModelConfig, split_scenario
from bridge.emulator.openai_wire import client_env
from bridge.emulator.scenario import Scenario

__all__ = ["ChatApp", "ModelConfig", "client_env", "create_app"]


def create_app(
    *,
    token: str = "emulator-token",
    app_id: str = "emulator-model",
    scenario: str | Path | Mapping[str, Any] | Scenario | None = None,
    faults: str | FaultSpec | None = None,
) -> ChatApp:
    """Build the Chat Completions emulator's ASGI app.

    Args:
        token: the API key clients must send as ``Authorization: Bearer <token>``.
        app_id: the one model name served (requests for another get 404 model_not_found).
        scenario: a scenario file, mapping or `Scenario`; None for the default planner only.
            Its ``openai`` section describes the model (`bridge.emulator.openai_chat.model`:
            ``native_tools: false`` for a model without native tool calls).
        faults: a fault spec applied to every matching request (see `bridge.emulator.faults`).

    Raises:
        ScenarioError: the scenario cannot be loaded.
        FaultSpecError: the fault spec cannot be parsed.
    """
    loaded, traits = split_scenario(scenario)
    spec = parse_faults(faults) if isinstance(faults, str) else faults
    return ChatApp(token=token, model=app_id, scenario=loaded, faults=spec, traits=traits)
