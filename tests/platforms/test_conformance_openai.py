"""Conformance: the OFFICIAL openai package 3.54.0 accepts the Responses emulator, and
toolbridge's Responses adapter passes against the same emulator.

The package runs in its own venv (`.venv-openai/`, built once by `tests.support.sdk_venv`) as
a subprocess that drives one emulator through its public API (`tests/support/openai_drive.py`:
``responses.create`` and ``.retrieve``, ``responses.stream`` with its event accumulator,
``previous_response_id`` chains, ``ResponsesToolRunner`` run plain and streamed) and prints
what it saw as JSON. If the venv cannot be built these tests fail loudly; they never skip.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bridge.bridge import Bridge
from bridge.emulator import Emulator, RecordedRequest
from bridge.platforms.openai_responses import OpenAIResponsesPlatform
from tests.support.openai_sdk import run_openai_drive

pytestmark = [pytest.mark.conformance, pytest.mark.timeout(1800)]

SCRIPT = Path(__file__).resolve().parents[1] / "support" / "openai_drive.py"
Seen = tuple[dict[str, Any], Emulator, list[RecordedRequest]]


@pytest.fixture(scope="module")
def emu() -> Iterator[Emulator]:
    with Emulator(protocol="responses", faults="") as emulator:
        yield emulator


@pytest.fixture(scope="module")
def conformance(emu: Emulator) -> Seen:
    """Run the SDK script against the emulator; what it saw."""
    return run_openai_drive(SCRIPT, emu.env()), emu, emu.requests


def weather(city: str) -> str:
    """Get the current weather for a city.

    Args:
        city: City name.
    """
    return json.dumps({"city": city, "sky": "sunny", "temp": 21})


def test_the_sdk_is_the_pinned_version(conformance: Seen) -> None:
    assert conformance[0]["sdk_version"] == "3.54.0"


def test_create_chains_function_call_outputs_by_previous_response_id(conformance: Seen) -> None:
    got = conformance[0]["create"]
    assert got["first_status"] == "completed"
    assert got["first_types"] == ["reasoning", "function_call", "function_call"]
    assert [json.loads(c["arguments"]) for c in got["calls"]] == [
        {"city": "Paris"},
        {"city": "Tokyo"},
    ]
    assert all(c["id"].startswith("fc_") and c["call_id"].startswith("call_") for c in got["calls"])
    assert got["answer"].splitlines()[0].startswith("Paris: ")
    assert got["usage_total"] > 0 and got["retrieved_same"] is True


def test_store_false_output_items_go_back_as_input(conformance: Seen) -> None:
    got = conformance[0]["store_false"]
    assert got == {"encrypted": True, "answer": weather("Lima"), "store": False}


def test_the_stream_accumulator_parses_every_event(conformance: Seen) -> None:
    got = conformance[0]["stream"]
    assert got["first_events"][0] == "response.created"
    assert got["first_events"][-1] == "response.completed"
    assert "response.function_call_arguments.done" in got["first_events"]
    assert got["first_calls"] == [{"city": "Oslo"}]
    assert got["answer"] == got["deltas_joined"] == weather("Oslo")


@pytest.mark.parametrize("part", ["runner", "runner_stream"])
def test_the_responses_tool_runner_runs_tools_to_completion(conformance: Seen, part: str) -> None:
    got = conformance[0][part]
    assert got["executed"] == ["Lima", "Quito"]
    assert got["status"] == "completed"
    assert got["answer"] == f"Lima: {weather('Lima')}\nQuito: {weather('Quito')}"


def test_the_sdk_maps_the_emulators_errors(conformance: Seen) -> None:
    got = conformance[0]["errors"]
    assert got["auth"]["status"] == 401 and got["auth"]["request_id"]
    assert got["missing_output"]["status"] == 400
    assert "No tool output found for function call call_" in got["missing_output"]["message"]


def test_every_sdk_request_was_one_the_emulator_accepted_or_meant_to_refuse(
    conformance: Seen,
) -> None:
    _, _, requests = conformance
    statuses = sorted({r.status for r in requests if r.path.startswith("/v1/responses")})
    assert statuses == [200, 400, 401]
    assert all(r.headers["authorization"] == "Bearer [secure]" for r in requests)


# --- toolbridge's adapter against the same emulator ---------------------------------------------


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("store", [True, False])
def test_the_adapter_passes_against_the_same_emulator(
    conformance: Seen, store: bool, stream: bool
) -> None:
    _, emu, _ = conformance
    env = emu.env()
    platform = OpenAIResponsesPlatform(
        env["OPENAI_BASE_URL"], env["OPENAI_MODEL"], env["OPENAI_API_KEY"], store=store
    )
    with Bridge(platform, tools=[weather], stream=stream) as bridge:
        conv = bridge.conversation()
        first = conv.ask("What is the weather in Lima and Quito?")
        second = conv.ask("What is the weather in Oslo?")
    assert first.answer == f"Lima: {weather('Lima')}\nQuito: {weather('Quito')}"
    assert second.answer == weather("Oslo")


def test_the_adapter_sends_what_the_sdk_sends(conformance: Seen) -> None:
    """The shapes both clients put on the wire: flat function tools, outputs by call_id."""
    _, emu, sdk_requests = conformance
    emu.clear_requests()
    env = emu.env()
    platform = OpenAIResponsesPlatform(
        env["OPENAI_BASE_URL"], env["OPENAI_MODEL"], env["OPENAI_API_KEY"]
    )
    with Bridge(platform, tools=[weather]) as bridge:
        bridge.ask("What is the weather in Paris?")
    ours = [r.json for r in emu.requests]
    theirs = [r.json for r in sdk_requests if r.status == 200 and r.path == "/v1/responses"]
    sdk_tool = next(body["tools"][0] for body in theirs if body.get("tools"))
    assert (
        set(ours[0]["tools"][0])
        == set(sdk_tool)
        == {
            "type",
            "name",
            "description",
            "parameters",
            "strict",
        }
    )
    sdk_output = next(
        item
        for body in theirs
        for item in (body["input"] if isinstance(body["input"], list) else [])
        if item.get("type") == "function_call_output"
    )
    (our_output,) = ours[1]["input"]
    assert set(our_output) == set(sdk_output) == {"type", "call_id", "output"}
