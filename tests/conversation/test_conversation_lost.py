"""A platform conversation that no longer exists does not break the conversation for good.

A platform may drop a conversation (it expired or was deleted there; an emulator restarted
without its state; a Responses server lost the chain's previous response): the next message
continues in a new platform conversation, the reason is journaled (the conversation's
transcript shows it), and the messages after it stay there. The platform's "not found" names
the conversation, not the app id, as the cause.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from bridge import Bridge, manifest
from bridge.emulator import Emulator
from bridge.errors import NotFoundError
from bridge.platforms.registry import get_entry


@manifest(description="Current weather of a city.")
def get_weather(city: str) -> str:
    """Weather.

    Args:
        city: City name.
    """
    return f"{city}: 18"


SCENARIO: dict[str, Any] = {
    "rules": [
        {
            "match": r"weather in (?P<city>\w+)",
            "steps": [{"tool": "get_weather", "arguments": {"city": "{city}"}}],
            "answer": "{outputs.get_weather}",
        }
    ]
}


def _emulator(name: str, port: int = 0) -> Emulator:
    entry = get_entry(name)
    tools = [{"type": "function", "function": _weather_tool()}]
    declared = entry.emulator_tools(tools) if entry.emulator_tools else {}
    scenario = {**SCENARIO, **declared}
    return Emulator(protocol=entry.require_emulator(), scenario=scenario, port=port)


@pytest.fixture(params=["appbuilder", "coze", "responses"])
def platform(request: pytest.FixtureRequest) -> Iterator[tuple[str, Emulator]]:
    with _emulator(request.param) as emu:
        yield request.param, emu


@pytest.fixture(params=["appbuilder", "coze"])
def server_side(request: pytest.FixtureRequest) -> Iterator[tuple[str, Emulator]]:
    """A platform that keeps conversations by id on the server (Responses keeps a chain)."""
    with _emulator(request.param) as emu:
        yield request.param, emu


def _weather_tool() -> dict[str, Any]:
    return {
        "name": "get_weather",
        "description": "Current weather of a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    }


def _bridge(name: str, emu: Emulator) -> Bridge:
    entry = get_entry(name)
    return Bridge(entry.create(**entry.emulator_options(emu.env()), max_retries=0), [get_weather])


def test_a_conversation_the_platform_forgot_continues_in_a_new_one(
    platform: tuple[str, Emulator],
) -> None:
    name, emu = platform
    with _bridge(name, emu) as bridge, bridge.conversation() as conversation:
        assert conversation.ask("weather in Paris").answer == "Paris: 18"
        forgotten = conversation.platform_conversation_id
        # The emulator restarts on its port without its state: it forgot the conversation.
        port = emu.port
        assert port is not None
        emu.stop()
        with _emulator(name, port) as restarted:
            result = conversation.ask("weather in Tokyo")
            assert forgotten not in restarted.conversation_ids()
            rome = conversation.ask("weather in Rome")
        assert result.answer == "Tokyo: 18"
        assert result.conversation_id == conversation.id, "the conversation keeps its id"
        new = conversation.platform_conversation_id
        assert new != forgotten
        history = bridge.journal.platform_conversations(conversation.id)
        assert [h.platform_conversation_id for h in history] == [forgotten, new]
        assert f"the platform no longer knows {forgotten}" in history[1].reason
        assert "lost its state" in history[1].reason, "the emulator says why"

        assert rome.answer == "Rome: 18"
        assert len(bridge.journal.platform_conversations(conversation.id)) == 2, "kept"
        assert [m.status for m in bridge.journal.messages(conversation.id)] == ["finished"] * 3


def test_not_found_for_a_conversation_names_the_conversation_as_the_cause(
    server_side: tuple[str, Emulator],
) -> None:
    """A first message to an id the platform never had is not papered over; the error says
    the conversation is what is missing, not to check the app (or bot) id."""
    name, emu = server_side
    with (
        _bridge(name, emu) as bridge,
        bridge.conversation("7000000000000000001") as conversation,
        pytest.raises(NotFoundError) as caught,
    ):
        conversation.ask("weather in Paris")
    message = str(caught.value)
    assert "no longer has this conversation" in message, message
    assert "expired or was deleted" in message, message
    assert "check the app id (APPBUILDER_APP_ID or --app-id) and GATEWAY_URL_V2" not in message
    assert "check the bot id" not in message, message
