"""tool_choice naming one of the app's own components (scenario ``app.components``), raw HTTP.

The official SDK's view of the same events is in tests/platforms/appbuilder/test_conformance_sdk.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import bridge.emulator
from bridge.emulator import Emulator, ScenarioError, load_scenario
from tests.emulator.helpers import WEATHER, Api, body_events, statuses

COMPONENTS: list[dict[str, Any]] = [
    {
        "code": "Booking",
        "name": "订票",
        "parameters": {
            "type": "object",
            "properties": {
                "train": {"type": "string"},
                "seats": {"type": "integer"},
                "note": {"type": "string"},
            },
            "required": ["train", "seats"],
        },
        "answer": "booked {seats} on {train}",
    },
    {"code": "Echo"},
    {"code": "get_weather", "answer": "the component, not the tool"},
]


@pytest.fixture(scope="module")
def emu() -> Iterator[Emulator]:
    with Emulator(scenario={"app": {"components": COMPONENTS}}, faults="") as emulator:
        yield emulator


def _choice(name: str, given: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "input": given or {}}}


def _error(response: Any) -> str:
    assert response.status_code == 400, response.text
    return str(response.json()["message"])


@pytest.mark.parametrize("stream", [True, False])
def test_a_component_runs_on_the_server_with_its_input(api: Api, stream: bool) -> None:
    conversation_id = api.create()
    chunks = api.chunks(
        conversation_id,
        "book it",
        stream=stream,
        tool_choice=_choice("Booking", {"train": "G1", "seats": "2"}),
    )
    assert statuses(chunks)[:5] == [
        "function_call/done",
        "status/preparing",
        "text/done",
        "status/success",
        "status/preparing",
    ]
    call = body_events(chunks)[0]["outputs"]["text"]
    assert call == {
        "arguments": {"train": "G1", "seats": 2},
        "component_code": "Booking",
        "component_name": "订票",
    }
    assert "".join(c["answer"] for c in chunks) == "booked 2 on G1"


def test_without_an_answer_template_the_result_names_the_component(api: Api) -> None:
    chunks = api.chunks(api.create(), "hi", stream=False, tool_choice=_choice("Echo"))
    assert chunks[0]["answer"] == "(emulated component Echo) {}"


def test_a_tool_of_the_run_wins_over_a_component_of_the_same_name(api: Api, emu: Emulator) -> None:
    conversation_id = api.create()
    chunks = api.chunks(
        conversation_id,
        "weather",
        stream=False,
        tools=[WEATHER],
        tool_choice=_choice("get_weather"),
    )
    assert statuses(chunks)[-1] == "contexts/interrupt"
    assert emu.conversation(conversation_id).pending_call_ids


def test_required_inputs_beyond_the_one_the_query_fills_are_refused(api: Api) -> None:
    message = _error(api.run(api.create(), "G1", tool_choice=_choice("Booking")))
    assert "misses the required input(s) train, seats of component 'Booking'" in message


def test_an_input_the_component_does_not_take_is_refused(api: Api) -> None:
    given = {"train": "G1", "seats": 1, "colour": "red"}
    message = _error(api.run(api.create(), "x", tool_choice=_choice("Booking", given)))
    assert "'colour', which component 'Booking' does not take" in message
    assert "(its inputs: train, seats, note)" in message


def test_a_name_neither_tool_nor_component_lists_both(api: Api) -> None:
    message = _error(api.run(api.create(), "x", tools=[WEATHER], tool_choice=_choice("Nope")))
    assert "neither a tool of this run (tools: get_weather)" in message
    assert "nor a component of the app (components: Booking, Echo, get_weather)" in message


def test_without_components_the_message_says_where_to_declare_them() -> None:
    with Emulator(faults="") as emu:
        api = Api(emu.base_url)
        message = _error(api.run(api.create(), "x", tool_choice=_choice("Nope")))
    assert "declare them in the scenario's app.components" in message


@pytest.mark.parametrize(
    ("components", "expected"),
    [
        ([{"code": "A"}, {"code": "A"}], r"app\.components\[1\]\.code: 'A' is used by two"),
        ([{"code": "A", "parameters": {"type": "string"}}], "must be a schema of type 'object'"),
        (
            [{"code": "A", "parameters": {"type": "object"}}],
            r"app\.components\[0\]\.parameters: an object schema needs 'properties'",
        ),
        ([{"code": "A", "answer": "{city}"}], r"app\.components\[0\]\.answer: unknown placeholder"),
        ([{"code": "has space"}], r"app\.components\[0\]\.code: String should match pattern"),
    ],
)
def test_bad_components_name_the_key(components: list[dict[str, Any]], expected: str) -> None:
    with pytest.raises(ScenarioError, match=expected):
        load_scenario({"app": {"components": components}})


def test_the_shipped_scenario_declares_a_component() -> None:
    shipped = Path(bridge.emulator.__file__).parent / "scenarios" / "weather.yaml"
    with Emulator(scenario=shipped, faults="") as emu:
        api = Api(emu.base_url)
        chunks = api.chunks(api.create(), "Oslo", stream=True, tool_choice=_choice("WeatherQuery"))
    assert "".join(c["answer"] for c in chunks) == (
        "Oslo: 21°C, sunny (from the WeatherQuery component)"
    )
