"""Conformance: the OFFICIAL openai package 3.54.0 accepts the Chat Completions emulator, and
toolbridge's Chat Completions adapter passes against the same emulator.

The package runs in its own venv (`.venv-openai/`, built once by `tests.support.sdk_venv`, the
same one the Responses conformance uses) as a subprocess that drives one emulator through its
public API (`tests/support/openai_chat_drive.py`: ``chat.completions.create`` plain and with
``stream=True, tools=...`` and the calls assembled by ``index``, the SDK's own stream
accumulator with a pydantic tool, ``models.list``, and its error classes) and prints what it saw
as JSON. If the venv cannot be built these tests fail loudly; they never skip.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bridge import Bridge
from bridge.emulator import Emulator, RecordedRequest
from bridge.platforms import create_platform
from tests.support.openai_sdk import run_openai_drive
from tests.support.sdk_venv import OPENAI

pytestmark = [pytest.mark.conformance, pytest.mark.timeout(1800)]

SCRIPT = Path(__file__).resolve().parents[1] / "support" / "openai_chat_drive.py"
Seen = tuple[dict[str, Any], Emulator, list[RecordedRequest]]


@pytest.fixture(scope="module")
def emu() -> Iterator[Emulator]:
    with Emulator(protocol="openai", faults="") as emulator:
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
    assert conformance[0]["sdk_version"] == OPENAI.version


def test_create_answers_tool_calls_with_tool_messages(conformance: Seen) -> None:
    got = conformance[0]["create"]
    assert got["first_finish"] == "tool_calls" and got["second_finish"] == "stop"
    assert [json.loads(c["function"]["arguments"]) for c in got["calls"]] == [
        {"city": "Paris"},
        {"city": "Tokyo"},
    ]
    assert all(c["id"].startswith("call_") and c["type"] == "function" for c in got["calls"])
    assert got["answer"] == f"Paris: {weather('Paris')}\nTokyo: {weather('Tokyo')}"
    assert got["usage_total"] > 0
    assert got["models"] == [conformance[1].app_id]


def test_the_sdks_streamed_tool_calls_assemble_by_index(conformance: Seen) -> None:
    got = conformance[0]["stream"]
    assert got["finish"] == "tool_calls"
    assert [c["function"]["name"] for c in got["calls"]] == ["get_weather", "get_weather"]
    assert [json.loads(c["function"]["arguments"]) for c in got["calls"]] == [
        {"city": "Lima"},
        {"city": "Quito"},
    ]
    assert all(c["id"].startswith("call_") for c in got["calls"])
    assert got["usage_total"] > 0 and got["last_has_choices"] is False
    assert got["answer"] == f"Lima: {weather('Lima')}\nQuito: {weather('Quito')}"
    assert got["answer_finish"] == "stop"


def test_the_sdks_stream_accumulator_parses_the_calls(conformance: Seen) -> None:
    got = conformance[0]["stream_helper"]
    assert got["finish"] == "tool_calls"
    assert got["parsed"] == {"city": "Oslo"}
    assert "tool_calls.function.arguments.done" in got["events"]
    assert got["answer"] == got["deltas_joined"] == weather("Oslo")


def test_the_sdk_maps_the_emulators_errors(conformance: Seen) -> None:
    got = conformance[0]["errors"]
    assert got["auth"]["status"] == 401 and got["auth"]["request_id"]
    assert got["model"] == {"status": 404, "code": "model_not_found"}
    assert got["malformed"] == {
        "status": 400,
        "param": "messages[0].role",
        "type": "invalid_request_error",
    }
    assert got["missing_result"]["status"] == 400
    assert "did not have response messages: call_" in got["missing_result"]["message"]


def test_every_sdk_request_was_one_the_emulator_accepted_or_meant_to_refuse(
    conformance: Seen,
) -> None:
    _, _, requests = conformance
    statuses = sorted({r.status for r in requests if r.path == "/v1/chat/completions"})
    assert statuses == [200, 400, 401, 404]
    assert all(r.headers["authorization"] == "Bearer [secure]" for r in requests)


# --- toolbridge's adapter against the same emulator ---------------------------------------------


@pytest.mark.parametrize("stream", [True, False])
def test_the_adapter_passes_against_the_same_emulator(conformance: Seen, stream: bool) -> None:
    _, emu, _ = conformance
    env = emu.env()
    platform = create_platform(
        "openai",
        base_url=env["OPENAI_BASE_URL"],
        model=env["OPENAI_MODEL"],
        api_key=env["OPENAI_API_KEY"],
    )
    with Bridge(platform, tools=[weather], stream=stream) as bridge:
        conv = bridge.conversation()
        first = conv.ask("What is the weather in Lima and Quito?")
        second = conv.ask("What is the weather in Oslo?")
    assert first.answer == f"Lima: {weather('Lima')}\nQuito: {weather('Quito')}"
    assert second.answer == weather("Oslo")


def test_the_adapter_sends_what_the_sdk_sends(conformance: Seen) -> None:
    """The shapes both clients put on the wire: nested function tools, results by call id."""
    _, emu, sdk_requests = conformance
    emu.clear_requests()
    env = emu.env()
    platform = create_platform(
        "openai",
        base_url=env["OPENAI_BASE_URL"],
        model=env["OPENAI_MODEL"],
        api_key=env["OPENAI_API_KEY"],
    )
    with Bridge(platform, tools=[weather]) as bridge:
        bridge.ask("What is the weather in Paris?")
    ours = [r.json for r in emu.requests]
    theirs = [r.json for r in sdk_requests if r.status == 200 and r.path == "/v1/chat/completions"]
    sdk_tool = next(body["tools"][0] for body in theirs if body.get("tools"))
    assert set(ours[0]["tools"][0]) == set(sdk_tool) == {"type", "function"}
    assert {"name", "parameters"} <= set(ours[0]["tools"][0]["function"])
    sdk_result = next(
        message for body in theirs for message in body["messages"] if message["role"] == "tool"
    )
    our_result = ours[1]["messages"][-1]
    assert set(our_result) == set(sdk_result) == {"role", "tool_call_id", "content"}
    sdk_call = next(
        message["tool_calls"][0]
        for body in theirs
        for message in body["messages"]
        if message.get("tool_calls")
    )
    assert (
        set(ours[1]["messages"][-2]["tool_calls"][0])
        == set(sdk_call)
        == {
            "id",
            "type",
            "function",
        }
    )
