"""The Coze adapter against the Coze emulator, through `Bridge`: real HTTP end to end."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bridge import Bridge, Toolbox
from bridge.emulator import Emulator
from bridge.errors import (
    AuthenticationError,
    BadRequestError,
    ProtocolError,
    StreamInterruptedError,
)
from bridge.platforms.coze import CozePlatform
from bridge.types import RunFinished, ToolCallsRequested, ToolResult


def get_weather(city: str) -> str:
    """Get the current weather for a city.

    Args:
        city: City name.
    """
    return f"{city}: 21 C, sunny"


def get_time(timezone: str) -> str:
    """Current local time in a time zone.

    Args:
        timezone: IANA zone such as Asia/Tokyo.
    """
    return f"12:00 in {timezone}"


def scenario(toolbox: Toolbox, *extra: dict[str, Any]) -> dict[str, Any]:
    """The bot's plugins: the local tools' manifests as they are (plus `extra` ones)."""
    return {"coze": {"plugins": [*toolbox.manifests("openai"), *extra]}}


@pytest.fixture
def toolbox() -> Toolbox:
    return Toolbox([get_weather, get_time])


@pytest.fixture
def emu(toolbox: Toolbox) -> Iterator[Emulator]:
    with Emulator(protocol="coze", scenario=scenario(toolbox), faults="") as emulator:
        yield emulator


def platform_for(emu: Emulator, **options: Any) -> CozePlatform:
    env = emu.env()
    return CozePlatform(env["COZE_API_TOKEN"], env["COZE_BOT_ID"], env["COZE_API_BASE"], **options)


@pytest.mark.parametrize("stream", [True, False])
def test_a_two_turn_tool_conversation(emu: Emulator, toolbox: Toolbox, stream: bool) -> None:
    platform = platform_for(emu, poll_interval=0.01)
    with Bridge(platform, toolbox, stream=stream) as bridge, bridge.conversation() as conv:
        first = conv.ask("What is the weather in Paris?")
        second = conv.ask("What time is it in Tokyo?")
    assert first.answer == "Paris: 21 C, sunny" and first.rounds == 1
    assert [r.name for r in first.tool_runs] == ["get_weather"]
    assert second.answer == "12:00 in Tokyo" and second.rounds == 1
    assert first.usage is not None and first.usage["total_tokens"] > 0
    snapshot = emu.conversation(conv.platform_conversation_id)
    assert [m.answer for m in snapshot.messages] == [first.answer, second.answer]
    assert all(count == 1 for count in snapshot.accepted_outputs.values())
    assert len(snapshot.accepted_outputs) == 2
    assert first.request_ids and all(
        r in {q.request_id for q in emu.requests} for r in first.request_ids
    )


def test_a_plugin_with_no_local_tool_gets_an_output_that_says_so(toolbox: Toolbox) -> None:
    ghost = {"name": "unlock_door", "description": "Unlock the front door", "parameters": {}}
    with Emulator(protocol="coze", scenario=scenario(toolbox, ghost), faults="") as emu:
        platform = platform_for(emu)
        assert platform.remote_tool_names() == ["get_weather", "get_time", "unlock_door"]
        with Bridge(platform, toolbox) as bridge:
            result = bridge.ask("please unlock the front door")
            record = bridge.journal.get_conversation(result.conversation_id)
        assert record is not None
        (run,) = result.tool_runs
        assert run.error == "unknown_tool"
        outputs = [
            c.output for m in emu.conversation(record.platform_id).messages for c in m.tool_calls
        ]
    assert outputs and "The bot's plugin has a tool 'unlock_door'" in outputs[0]


def test_a_token_without_submit_permission_is_named(toolbox: Toolbox) -> None:
    faults = "inband=4101,round=1,message=The token does not have the permission"
    with (
        Emulator(protocol="coze", scenario=scenario(toolbox), faults=faults) as emu,
        Bridge(platform_for(emu), toolbox) as bridge,
        pytest.raises(AuthenticationError, match="needs submitToolChat") as caught,
    ):
        bridge.ask("What is the weather in Paris?")
    assert caught.value.code == "4101"


def test_outputs_posted_twice_are_refused_at_the_second_post(emu: Emulator) -> None:
    # What recovery relies on: after a crash while submitting, the platform's refusal of the
    # same outputs proves the first post arrived.
    platform = platform_for(emu)
    conversation_id = platform.create_conversation()
    pause = list(platform.start(conversation_id, "What is the weather in Paris?", tools=[]))[-1]
    assert isinstance(pause, ToolCallsRequested)
    results = [ToolResult(call_id=c.call_id, output="sunny") for c in pause.batch.calls]
    assert isinstance(list(platform.submit(conversation_id, pause.batch, results))[-1], RunFinished)
    with pytest.raises(BadRequestError, match="no tool outputs are expected"):
        platform.submit(conversation_id, pause.batch, results)
    assert set(emu.conversation(conversation_id).accepted_outputs.values()) == {1}


def test_a_question_with_a_file_on_the_emulator(
    emu: Emulator, toolbox: Toolbox, tmp_path: Path
) -> None:
    report = tmp_path / "report.txt"
    report.write_text("quarterly numbers", encoding="utf-8")
    with Bridge(platform_for(emu), toolbox) as bridge, bridge.conversation() as conv:
        result = conv.ask("What is the weather in Paris?", files=[report])
    assert result.answer == "Paris: 21 C, sunny"
    chat = next(r for r in emu.requests if r.path == "/v3/chat")
    (message,) = chat.json["additional_messages"]
    items = json.loads(message["content"])
    assert items[0] == {"type": "text", "text": "What is the weather in Paris?"}
    assert items[1]["type"] == "file"
    upload = next(r for r in emu.requests if r.path == "/v1/files/upload")
    assert upload.form == {"file": {"filename": "report.txt", "size": 17}}


@pytest.mark.parametrize(
    ("faults", "error"),
    [
        ("drop_after=3", StreamInterruptedError),
        ("malformed=2", ProtocolError),
    ],
)
def test_stream_faults_reach_the_caller_as_errors(
    toolbox: Toolbox, faults: str, error: type[Exception]
) -> None:
    with (
        Emulator(protocol="coze", scenario=scenario(toolbox), faults=faults) as emu,
        Bridge(platform_for(emu), toolbox) as bridge,
        pytest.raises(error),
    ):
        bridge.ask("What is the weather in Paris?")


def test_a_duplicated_requires_action_is_one_batch_and_429_is_retried(toolbox: Toolbox) -> None:
    faults = "duplicate_interrupt"
    with Emulator(protocol="coze", scenario=scenario(toolbox), faults=faults) as emu:
        with Bridge(platform_for(emu), toolbox) as bridge:
            result = bridge.ask("What is the weather in Paris?")
        assert result.answer == "Paris: 21 C, sunny" and len(result.tool_runs) == 1
    limited = "status=429,retry_after=0,times=1"
    with Emulator(protocol="coze", scenario=scenario(toolbox), faults=limited) as emu:
        with Bridge(platform_for(emu), toolbox) as bridge:
            assert bridge.ask("What is the weather in Paris?").answer == "Paris: 21 C, sunny"
        chats = [r.status for r in emu.requests if r.path == "/v3/chat"]
        assert chats == [429, 200]


def test_a_bot_question_is_answered_with_resume(toolbox: Toolbox) -> None:
    booking = {
        "rules": [
            {
                "match": "book a room",
                "steps": [
                    {"ask": "For which city?", "as": "city"},
                    {"tool": "get_weather", "arguments": {"city": "{answers.city}"}},
                ],
                "answer": "Booked in {answers.city}; weather: {outputs.get_weather}",
            }
        ]
    }
    with Emulator(protocol="coze", scenario={**scenario(toolbox), **booking}, faults="") as emu:
        with Bridge(platform_for(emu), toolbox) as bridge, bridge.conversation() as conv:
            paused = conv.ask("please book a room")
            assert paused.human_input is not None
            assert paused.human_input.prompt == "For which city?"
            done = conv.resume("Oslo")
        assert done.answer == "Booked in Oslo; weather: Oslo: 21 C, sunny"
        assert [r.name for r in done.tool_runs] == ["get_weather"]
        asked = [m.query for m in emu.conversation(conv.platform_conversation_id).messages]
    assert asked == ["please book a room", "Oslo"]
