"""The Responses adapter through `Bridge` against the Responses emulator: a two-turn tool
conversation chained by previous_response_id (store) or resent item by item (store=false)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from bridge.bridge import Bridge
from bridge.emulator import Emulator
from bridge.errors import BridgeError, ProtocolError, StreamInterruptedError
from bridge.journal import SQLiteJournal
from bridge.platforms.openai_responses import OpenAIResponsesPlatform
from bridge.types import RunFailed


def get_weather(city: str) -> str:
    """Get the current weather for a city.

    Args:
        city: City name.
    """
    return f"sunny in {city}"


@pytest.fixture(scope="module")
def emu() -> Iterator[Emulator]:
    with Emulator(protocol="responses", faults="") as emulator:
        yield emulator


def platform_for(emu: Emulator, *, store: bool) -> OpenAIResponsesPlatform:
    env = emu.env()
    return OpenAIResponsesPlatform(
        env["OPENAI_BASE_URL"], env["OPENAI_MODEL"], env["OPENAI_API_KEY"], store=store
    )


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("store", [True, False])
def test_a_two_turn_tool_conversation(emu: Emulator, store: bool, stream: bool) -> None:
    emu.clear_requests()
    with Bridge(platform_for(emu, store=store), tools=[get_weather], stream=stream) as bridge:
        conv = bridge.conversation()
        first = conv.ask("What is the weather in Paris and Tokyo?")
        second = conv.ask("What is the weather in Oslo?")
    assert first.answer == "Paris: sunny in Paris\nTokyo: sunny in Tokyo"
    assert [run.output for run in first.tool_runs] == ["sunny in Paris", "sunny in Tokyo"]
    assert (first.rounds, second.rounds) == (1, 1)
    assert second.answer == "sunny in Oslo"
    bodies = [r.json for r in emu.requests if r.path == "/v1/responses"]
    assert len(bodies) == 4
    assert all(body["tools"][0]["strict"] is True for body in bodies)
    if store:
        assert [("previous_response_id" in body) for body in bodies] == [False, True, True, True]
        assert [len(body["input"]) for body in bodies] == [1, 2, 1, 1]
    else:
        assert not any("previous_response_id" in body for body in bodies)
        kinds = [item.get("type") for item in bodies[-1]["input"]]
        assert kinds.count("function_call_output") == 3 and kinds.count("reasoning") == 2
    conversation = emu.conversation(emu.conversation_ids()[-1])
    assert conversation.pending_call_ids == ()
    assert set(conversation.accepted_outputs.values()) == {1}


def test_a_restart_continues_from_the_exported_state(emu: Emulator) -> None:
    with Bridge(platform_for(emu, store=True), tools=[get_weather]) as bridge:
        conv = bridge.conversation()
        conv.ask("What is the weather in Paris?")
        state = json.loads(json.dumps(bridge.platform.export_state(conv.id)))  # type: ignore[attr-defined]
        conversation_id = conv.id
    after = platform_for(emu, store=True)
    after.import_state(conversation_id, state)
    with Bridge(after, tools=[get_weather]) as bridge:
        result = bridge.conversation(conversation_id).ask("What is the weather in Lima?")
    assert result.answer == "sunny in Lima"
    assert emu.requests[-2].json["previous_response_id"] == state["previous_response_id"]


@pytest.mark.parametrize("store", [True, False])
def test_the_registry_builds_it_on_its_emulator(store: bool) -> None:
    from bridge import open_platform

    with open_platform("responses", emulator=True, store=store) as platform:
        assert isinstance(platform, OpenAIResponsesPlatform) and platform.store is store
        assert "serves model" in platform.check()
        with Bridge(platform, tools=[get_weather]) as bridge:
            assert bridge.ask("What is the weather in Paris?").answer == "sunny in Paris"


@pytest.mark.parametrize(
    ("faults", "error"),
    [
        ("drop_after=3", StreamInterruptedError),
        ("malformed=2", ProtocolError),
        ("inband=server_error,inband_after=2,message=boom", None),
        ("inband=max_output_tokens", None),
    ],
)
def test_the_emulators_faults_reach_the_adapter_as_errors(
    faults: str, error: type[Exception] | None
) -> None:
    with Emulator(protocol="responses", faults=faults) as emulator:
        platform = platform_for(emulator, store=True)
        conversation = platform.create_conversation()
        events = platform.start(conversation, "What is the weather in Paris?", tools=[])
        if error is not None:
            with pytest.raises(error):
                list(events)
        else:
            last = list(events)[-1]
            assert isinstance(last, RunFailed)
            if "boom" in faults:
                assert (last.code, last.message) == ("server_error", "boom")
            else:
                assert last.code == "incomplete" and "(max_output_tokens)" in last.message
        assert platform.previous_response_id(conversation) is None
        platform.close()


def test_a_503_is_retried_then_the_conversation_goes_on() -> None:
    with Emulator(protocol="responses", faults="status=503,times=1") as emulator:
        platform = platform_for(emulator, store=True)
        with Bridge(platform, tools=[get_weather]) as bridge:
            result = bridge.ask("What is the weather in Paris?")
        assert result.answer == "sunny in Paris"
        assert [r.status for r in emulator.requests][:2] == [503, 200]


def test_after_an_interrupted_round_the_next_question_goes_on_in_a_new_chain() -> None:
    """A stream lost after the outputs were sent leaves the chain's last response waiting;
    the server refuses a new question on it, and the loop continues in a new conversation."""
    with Emulator(protocol="responses", faults="drop_after=2,round=1,times=1") as emulator:
        with Bridge(platform_for(emulator, store=True), tools=[get_weather]) as bridge:
            conv = bridge.conversation()
            with pytest.raises(BridgeError):
                conv.ask("What is the weather in Paris?")
            lost = conv.platform_conversation_id
            result = conv.ask("What is the weather in Oslo?")
        assert result.answer == "sunny in Oslo"
        assert conv.platform_conversation_id != lost
        assert [r.status for r in emulator.requests].count(400) == 1  # the refused question


def test_a_second_process_continues_a_store_false_conversation_from_the_journal(
    tmp_path: Path,
) -> None:
    """The transcript (reasoning with its encrypted_content included) survives the journal's
    round trip and redaction: the new process resends it and the emulator accepts it."""
    with Emulator(protocol="responses", faults="") as emulator:
        journal = SQLiteJournal(tmp_path / "journal.db")
        try:
            with Bridge(
                platform_for(emulator, store=False), [get_weather], journal=journal
            ) as first:
                conv = first.conversation()
                assert conv.ask("What is the weather in Paris?").answer == "sunny in Paris"
                cid = conv.id
            with Bridge(
                platform_for(emulator, store=False), [get_weather], journal=journal
            ) as second:
                result = second.conversation(cid).ask("What is the weather in Oslo?")
        finally:
            journal.close()
        assert result.answer == "sunny in Oslo"
        posts = [r.json for r in emulator.requests if r.path == "/v1/responses"]
        resent = posts[2]["input"]
        assert [item.get("type", "message") for item in resent][:4] == [
            "message",
            "reasoning",
            "function_call",
            "function_call_output",
        ]
        assert resent[1]["encrypted_content"]
        assert resent[-1] == {
            "type": "message",
            "role": "user",
            "content": "What is the weather in Oslo?",
        }
