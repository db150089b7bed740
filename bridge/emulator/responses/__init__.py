"""The OpenAI Responses API, emulated: the ``responses`` protocol of `Emulator`.

``Emulator(protocol="responses")`` or ``toolbridge emulator --protocol responses`` serves
``POST /v1/responses`` (stream or not, ``previous_response_id`` chains, ``store: false`` with
resent items), ``GET /v1/responses/{id}`` and ``GET /v1/models``, planned by the same scenarios
and default planner as the AppBuilder protocol. The emulator's ``app_id`` is the model it
serves, so `client_env` sets ``OPENAI_MODEL`` next to ``OPENAI_API_KEY`` and
``OPENAI_BASE_URL`` (what the official ``openai`` package and toolbridge's adapter read).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bridge.emulator.faults import FaultSpec, parse_faults
from bridge.emulator.openai_wire import client_env
from bridge.emulator.responses.app import ResponsesApp
from bridge.emulator.scenario import Scenario, load_scenario

__all__ = ["ResponsesApp", "client_env", "create_app"]


def create_app(
    *,
    token: str = "emulator-token",
    app_id: str = "emulator-model",
    scenario: str | Path | Mapping[str, Any] | Scenario | None = None,
    faults: str | FaultSpec | None = None,
) -> ResponsesApp:
    """Build the Responses emulator's ASGI app.

    Args:
        token: the API key clients must send as ``Authorization: Bearer <token>``.
        app_id: the one model name served (requests for another get 404 model_not_found).
        scenario: a scenario file, mapping or `Scenario`; None for the default planner only.
        faults: a fault spec applied to every matching request (see `bridge.emulator.faults`).

    Raises:
        ScenarioError: the scenario cannot be loaded.
        FaultSpecError: the fault spec cannot be parsed.
    """
    loaded = load_scenario(scenario) if scenario is not None else None
    spec = parse_faults(faults) if isinstance(faults, str) else faults
    return ResponsesApp(token=token, model=app_id, scenario=loaded, faults=spec)
