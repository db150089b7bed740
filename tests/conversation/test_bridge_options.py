"""`BridgeOptions` (one frozen, checked value) and the one run path of `Conversation`.

`Bridge(platform, tools, max_rounds=3, ...)` stays the short form of `Bridge(platform,
dispatcher=..., journal=..., options=BridgeOptions(...))`. `stream`, `stream_resume` and
`stream_recovered` go through one run path, so they journal a message's end alike: the tests
drive each against the emulator over loopback HTTP and compare what the journal says.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from bridge import (
    Bridge,
    HumanInputRequested,
    MemoryJournal,
    TextDelta,
    ToolCallsRequested,
    ToolChoice,
    UsageError,
    manifest,
)
from bridge.conversation import Conversation
from bridge.emulator import Emulator
from bridge.options import BridgeOptions
from bridge.platforms.appbuilder import AppBuilderPlatform
from bridge.tools.dispatch import Dispatcher
from bridge.tools.toolbox import Toolbox
from bridge.types import Event


@manifest(description="Current weather of a city.")
def get_weather(city: str) -> str:
    """Weather lookup.

    Args:
        city: City name.
    """
    return f"sunny in {city}"


@manifest(description="Book a meeting room for a day.")
def book_room(date: str) -> str:
    """Book it.

    Args:
        date: The day, as the person said it.
    """
    return f"booked for {date}"


SCENARIO: dict[str, Any] = {
    "rules": [
        {
            "match": r"weather in (?P<city>\w+)",
            "steps": [{"tool": "get_weather", "arguments": {"city": "{city}"}}],
            "answer": "It is {outputs.get_weather}.",
        },
        {
            "match": "book a room",
            "steps": [
                {"ask": "For which day?", "as": "date"},
                {"tool": "book_room", "arguments": {"date": "{answers.date}"}},
            ],
            "answer": "Done: {outputs.book_room}.",
        },
    ]
}


@pytest.fixture(scope="module")
def emulator() -> Iterator[Emulator]:
    with Emulator(scenario=SCENARIO, faults="") as emu:
        yield emu


def platform_for(emu: Emulator) -> AppBuilderPlatform:
    return AppBuilderPlatform(
        app_id=emu.app_id, token=emu.token, base_url=emu.base_url, max_retries=1
    )


# --- the options value -------------------------------------------------------------------------


def test_options_are_frozen_and_compare_by_value() -> None:
    options = BridgeOptions(max_rounds=3, tool_choice={"name": "get_weather"})
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.max_rounds = 4  # type: ignore[misc]
    # Normalised when made: the dict form and the model form are one value.
    assert options == BridgeOptions(max_rounds=3, tool_choice=ToolChoice(name="get_weather"))
    assert options.replace(stream=False).stream is False
    assert options.stream is True


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"max_rounds": 0}, "max_rounds must be at least 1, got 0"),
        ({"max_rounds": "3"}, "max_rounds must be an integer >= 1, got '3'"),
        ({"max_rounds": True}, "max_rounds must be an integer >= 1, got True"),
        ({"stream": "yes"}, "stream must be True or False, got 'yes'"),
        ({"keep_events": 1}, "keep_events must be True or False, got 1"),
        ({"end_user_id": 7}, "end_user_id must be a string or None, got 7"),
        ({"platform_tools": 5}, "platform_tools must be a list of tool types"),
        ({"on_event": "print"}, "on_event must be a function or None, got 'print'"),
        ({"approve": "yes"}, "approve must be a function approve(call) -> bool"),
        ({"tool_choice": 42}, "tool_choice"),
    ],
)
def test_bad_options_say_what_fits(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(UsageError) as caught:
        BridgeOptions(**fields)
    assert message in str(caught.value)
    # The keyword form refuses them the same way.
    with pytest.raises(UsageError) as again:
        Bridge(_NoPlatform(), [get_weather], **fields)
    assert message in str(again.value)


def test_keyword_arguments_map_to_the_options(emulator: Emulator) -> None:
    def seen(event: Event) -> None:
        pass

    with Bridge(
        platform_for(emulator),
        [get_weather],
        max_rounds=3,
        stream=False,
        end_user_id="u-1",
        tool_choice="get_weather",
        platform_tools=["code_interpreter"],
        on_event=seen,
        keep_events=True,
        max_concurrency=2,
        default_timeout=5,
    ) as bridge:
        assert bridge.options == BridgeOptions(
            max_rounds=3,
            stream=False,
            end_user_id="u-1",
            tool_choice=ToolChoice(name="get_weather"),
            platform_tools=("code_interpreter",),
            on_event=seen,
            keep_events=True,
        )
        # The attributes of old read the options.
        assert (bridge.max_rounds, bridge.stream, bridge.end_user_id) == (3, False, "u-1")
        assert bridge.tool_choice == ToolChoice(name="get_weather")
        assert (bridge.on_event, bridge.keep_events) == (seen, True)
        assert bridge.platform_tools == [{"type": "code_interpreter"}]
        assert (bridge.dispatcher.max_concurrency, bridge.dispatcher.default_timeout) == (2, 5.0)


def test_a_bridge_from_its_parts(emulator: Emulator) -> None:
    journal = MemoryJournal()
    with Dispatcher(Toolbox([get_weather])) as dispatcher:
        bridge = Bridge(
            platform_for(emulator),
            dispatcher=dispatcher,
            journal=journal,
            options=BridgeOptions(keep_events=True),
        )
        with bridge:
            result = bridge.ask("what is the weather in Paris?")
            assert result.answer == "It is sunny in Paris."
            assert result.events is not None and result.events[-1].kind == "finished"
            assert bridge.toolbox is dispatcher.toolbox and bridge.journal is journal
        assert journal.messages(result.conversation_id)[-1].status == "finished"


def test_options_are_given_once(emulator: Emulator) -> None:
    with pytest.raises(UsageError, match=r"either options= or its fields \(max_rounds\)"):
        Bridge(platform_for(emulator), [get_weather], options=BridgeOptions(), max_rounds=2)
    with pytest.raises(TypeError, match="unexpected keyword arguments: max_round"):
        Bridge(platform_for(emulator), [get_weather], max_round=2)  # type: ignore[call-arg]
    with pytest.raises(UsageError, match="'nope' is not a loaded tool"):
        Bridge(platform_for(emulator), [get_weather], options=BridgeOptions(tool_choice="nope"))


def test_a_conversation_follows_the_bridge_it_is_given(emulator: Emulator) -> None:
    """The daemon switches a live conversation to a new toolbox generation between runs."""
    with (
        Bridge(platform_for(emulator), [get_weather]) as first,
        Bridge(platform_for(emulator), [get_weather], keep_events=True) as second,
    ):
        second_journal = second.journal
        conv = first.conversation()
        assert conv.ask("what is the weather in Paris?").events is None
        conv.bridge = second
        result = conv.ask("what is the weather in Tokyo?")
        assert result.answer == "It is sunny in Tokyo."
        assert result.events is not None
        assert [m.status for m in second_journal.messages(conv.id)] == ["finished"]


# --- one run path ------------------------------------------------------------------------------


def _weather(conv: Conversation, bridge: Bridge) -> Iterator[Event]:
    return conv.stream("what is the weather in Paris?")


def _resumed(conv: Conversation, bridge: Bridge) -> Iterator[Event]:
    assert conv.ask("book a room").human_input is not None
    return conv.stream_resume("tomorrow")


def _recovered(conv: Conversation, bridge: Bridge) -> Iterator[Event]:
    """What a restarted process finds: a message with a journaled batch, never answered."""
    paused = conv.ask("book a room").human_input
    assert isinstance(paused, HumanInputRequested)
    events = bridge.platform.resume(conv.id, paused.interrupt_id, "tomorrow")
    [batch] = [e.batch for e in events if isinstance(e, ToolCallsRequested)]
    message_id = bridge.journal.begin_message(conv.id, "tomorrow")
    bridge.journal.receive(conv.id, batch, message_id=message_id)
    return conv.stream_recovered(message_id, batch)


ENTRY_POINTS: dict[str, Callable[[Conversation, Bridge], Iterator[Event]]] = {
    "stream": _weather,
    "stream_resume": _resumed,
    "stream_recovered": _recovered,
}
ANSWERS = {
    "stream": "It is sunny in Paris.",
    "stream_resume": "Done: booked for tomorrow.",
    "stream_recovered": "Done: booked for tomorrow.",
}


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
def test_each_entry_point_journals_a_finished_message_alike(emulator: Emulator, entry: str) -> None:
    with Bridge(platform_for(emulator), [get_weather, book_room]) as bridge:
        conv = bridge.conversation()
        events = list(ENTRY_POINTS[entry](conv, bridge))
        text = "".join(e.text for e in events if isinstance(e, TextDelta))
        assert text == ANSWERS[entry]
        last = bridge.journal.messages(conv.id)[-1]
        assert last.message_id == conv.message_id
        assert (last.status, last.answer, last.rounds, last.error_code) == (
            "finished",
            text,
            1,
            None,
        )
        assert last.request_ids and last.platform_settled
        assert {c.state for c in bridge.journal.calls(conv.id)} == {"submitted"}


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
def test_each_entry_point_journals_an_abandoned_stream_alike(
    emulator: Emulator, entry: str
) -> None:
    with Bridge(platform_for(emulator), [get_weather, book_room]) as bridge:
        conv = bridge.conversation()
        events = ENTRY_POINTS[entry](conv, bridge)
        next(events)
        events.close()  # type: ignore[attr-defined]
        last = bridge.journal.messages(conv.id)[-1]
        assert (last.status, last.error_code, last.platform_settled) == (
            "failed",
            "abandoned",
            False,
        )


def test_a_refused_first_request_ends_the_message(emulator: Emulator) -> None:
    """A failure before the first event is journaled by the run path too."""
    with Bridge(platform_for(emulator), [get_weather, book_room]) as bridge:
        conv = bridge.conversation()
        assert conv.ask("book a room").human_input is not None
        with pytest.raises(Exception) as refused:
            list(conv.stream_resume("tomorrow", interrupt_id="no-such-interrupt"))
        resumed = bridge.journal.messages(conv.id)[-1]
        assert (resumed.status, resumed.rounds) == ("failed", 0)
        assert resumed.error_code == type(refused.value).__name__
        assert conv.pending_input is not None, "a refused resume leaves the pause answerable"


class _NoPlatform:
    """Enough of a platform for a `Bridge` that is refused before it talks to anything."""

    name = "appbuilder"
    dialect = "appbuilder"

    def close(self) -> None:
        pass
