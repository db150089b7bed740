"""Conformance: the OFFICIAL cozepy 0.20.0 accepts the Coze emulator, and so does toolbridge.

cozepy runs in its own venv (`.venv-cozepy/`, built once by `tests.support.sdk_venv`) as a
subprocess (`tests/support/cozepy_drive.py`) that drives one emulator the way coze-py's
``examples/chat_local_plugin.py`` drives a real bot: a stream, ``requires_action``,
``submit_tool_outputs(stream=True)`` recursively; then the non-streamed path (create and poll,
submit without a stream, retrieve, message list), cancel, the bot's plugins and the errors.
toolbridge's adapter then runs against the same emulator. Both passing is what ties the adapter
to the real wire. If the venv cannot be built these tests fail loudly; they never skip.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bridge import Bridge, Toolbox
from bridge.emulator import Emulator
from bridge.platforms.coze import CozePlatform
from tests.support.sdk_venv import COZE, ensure_sdk_venv

pytestmark = [pytest.mark.conformance, pytest.mark.timeout(1800)]

SCRIPT = Path(__file__).resolve().parents[2] / "support" / "cozepy_drive.py"


def get_weather(city: str) -> str:
    """Get the current weather for a city.

    Args:
        city: City name.
    """
    return f"{city}: 21 C, sunny"


def get_time(timezone: str) -> str:
    """Current local time in a time zone.

    Args:
        timezone: IANA time zone, e.g. Tokyo.
    """
    return f"12:00 in {timezone}"


TOOLBOX = Toolbox([get_weather, get_time])
SCENARIO = {"coze": {"bot_name": "Local helper", "plugins": TOOLBOX.manifests("openai")}}


@pytest.fixture(scope="module")
def emu() -> Iterator[Emulator]:
    with Emulator(protocol="coze", scenario=SCENARIO, faults="") as emulator:
        yield emulator


@pytest.fixture(scope="module")
def seen(emu: Emulator) -> dict[str, Any]:
    """Build the cozepy venv, run the driver against the emulator, return what it saw."""
    python = ensure_sdk_venv(COZE)
    env = {k: v for k, v in os.environ.items() if not k.startswith("COZE_")}
    env.update(emu.env())
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    done = subprocess.run(
        [str(python), str(SCRIPT)],
        env=env,
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    results: dict[str, Any] = json.loads(done.stdout)
    return results


def check(seen: dict[str, Any], name: str) -> Any:
    result = seen[name]
    assert result["ok"], result.get("error")
    return result["value"]


def test_the_example_local_plugin_loop(seen: dict[str, Any]) -> None:
    example = check(seen, "example")
    weather, time_ = example["weather"], example["time"]
    assert [c["name"] for c in weather["calls"]] == ["get_weather"]
    assert weather["calls"][0]["city"] == "Paris"
    assert weather["answer"] == '{"output": "Paris: 21 C, sunny"}'
    assert weather["events"][:2] == ["conversation.chat.created", "conversation.chat.in_progress"]
    assert "conversation.chat.requires_action" in weather["events"]
    assert weather["events"][-1] == "conversation.chat.completed"
    assert weather["token_count"] and len(weather["chat_ids"]) == 1
    assert all(weather["logids"])
    assert time_["answer"] == '{"output": "12:00 in Tokyo"}'
    assert weather["conversation_id"] != time_["conversation_id"]


def test_parallel_calls_are_submitted_together(seen: dict[str, Any], emu: Emulator) -> None:
    parallel = check(seen, "parallel")
    assert sorted(c["city"] for c in parallel["calls"]) == ["Paris", "Tokyo"]
    snapshot = emu.conversation(parallel["conversation_id"])
    assert sorted(snapshot.accepted_outputs.values()) == [1, 1]
    assert "Paris" in parallel["answer"] and "Tokyo" in parallel["answer"]


def test_a_created_conversation_holds_two_turns(seen: dict[str, Any], emu: Emulator) -> None:
    turns = check(seen, "conversation")
    assert turns["first"]["conversation_id"] == turns["conversation_id"]
    assert turns["second"]["conversation_id"] == turns["conversation_id"]
    messages = emu.conversation(turns["conversation_id"]).messages
    assert [m.answer for m in messages] == [
        '{"output": "Paris: 21 C, sunny"}',
        '{"output": "12:00 in Tokyo"}',
    ]


def test_an_object_string_question_is_read(seen: dict[str, Any]) -> None:
    assert check(seen, "object_string")["calls"][0]["city"] == "Berlin"


def test_a_file_is_uploaded_and_sent_with_a_question(seen: dict[str, Any], emu: Emulator) -> None:
    asked = check(seen, "file")
    assert asked["file"] == ["notes.txt", 13]
    assert asked["calls"][0]["city"] == "Oslo"
    assert any(r.path == "/v1/files/upload" and r.status == 200 for r in emu.requests)


def test_the_non_streamed_path_polls(seen: dict[str, Any]) -> None:
    polled = check(seen, "non_stream")
    assert polled["first_status"] == "requires_action"
    assert polled["first_messages"] == ["function_call"]
    assert polled["calls"] == ["get_weather"]
    assert polled["statuses"] == ["in_progress", "completed"]
    kinds = [kind for kind, _ in polled["messages"]]
    assert kinds == ["function_call", "tool_response", "answer", "verbose"]
    assert polled["messages"][2][1] == "Rome: 21 C, sunny"
    assert polled["usage"]


def test_cancel_bots_and_errors(seen: dict[str, Any]) -> None:
    assert check(seen, "cancel") == {"status": "canceled", "cancel_again": 4104}
    assert check(seen, "bot") == {"name": "Local helper", "apis": ["get_weather", "get_time"]}
    errors = check(seen, "errors")
    assert errors["bad_token"]["code"] == 4100 and errors["bad_token"]["logid"]
    assert errors["bad_bot"]["code"] == 4200 and "no-such-bot" in errors["bad_bot"]["msg"]
    assert (
        errors["error_event"].startswith("error event:") and "node failed" in errors["error_event"]
    )


@pytest.mark.parametrize("stream", [True, False])
def test_toolbridge_passes_against_the_same_emulator(
    seen: dict[str, Any], emu: Emulator, stream: bool
) -> None:
    env = emu.env()
    platform = CozePlatform(
        env["COZE_API_TOKEN"], env["COZE_BOT_ID"], env["COZE_API_BASE"], poll_interval=0.01
    )
    with Bridge(platform, TOOLBOX, stream=stream) as bridge, bridge.conversation() as conv:
        first = conv.ask("What is the weather in Paris and Tokyo?")
        second = conv.ask("What time is it in Tokyo?")
    # Coze sends arguments as a JSON string; the run records them as received.
    cities = [
        json.loads(r.arguments)["city"] for r in first.tool_runs if isinstance(r.arguments, str)
    ]
    assert sorted(cities) == ["Paris", "Tokyo"]
    assert first.rounds == 1 and "Paris: 21 C, sunny" in first.answer
    assert second.answer == "12:00 in Tokyo"
    assert sorted(platform.remote_tool_names() or []) == sorted(TOOLBOX.names())
