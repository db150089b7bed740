"""A conversation's platform state goes through the journal: another `Bridge` (a restarted
process, a second daemon on the same database) continues it with its whole history.

The platform is the OpenAI-compatible one (its history lives in the adapter's memory) against a
scripted loopback server that records what it is sent.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bridge import Bridge, ToolBatch, ToolCall, manifest
from bridge.errors import ConversationLostError
from bridge.journal import SQLiteJournal, StateSnapshot
from bridge.platforms.openai_chat import OpenAIChatPlatform
from tests.platforms.openai_fakes import FAST_RETRIES, Reply, ScriptedServer, chunk, text_stream


@manifest(description="Weather for a city.")
def get_weather(city: str) -> str:
    """Weather.

    Args:
        city: City name.
    """
    return f"sunny in {city}"


def _call_stream(call_id: str, city: str) -> list[Any]:
    call = {
        "index": 0,
        "id": call_id,
        "type": "function",
        "function": {"name": "get_weather", "arguments": json.dumps({"city": city})},
    }
    return [
        chunk({"role": "assistant", "tool_calls": [call]}),
        chunk({}, "tool_calls"),
        b"data: [DONE]\n\n",
    ]


@pytest.fixture
def llm() -> Iterator[ScriptedServer]:
    with ScriptedServer().running() as server:
        yield server


def _bridge(llm: ScriptedServer, journal: SQLiteJournal) -> Bridge:
    platform = OpenAIChatPlatform(llm.base_url, "m", retry_policy=FAST_RETRIES)
    return Bridge(platform, [get_weather], journal=journal)


def _user_turns(body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "user"]


def test_a_new_process_continues_the_conversation_with_its_history(
    llm: ScriptedServer, tmp_path: Path
) -> None:
    db = tmp_path / "journal.db"
    llm.script(Reply(stream=_call_stream("call_1", "Paris")), Reply(stream=text_stream("Sunny.")))
    journal = SQLiteJournal(db)
    with _bridge(llm, journal) as first:
        result = first.ask("Weather in Paris?")
        cid = result.conversation_id
    journal.close()

    llm.script(Reply(stream=text_stream("You asked about Paris.")))
    journal = SQLiteJournal(db)
    try:
        with _bridge(llm, journal) as second, second.conversation(cid) as conv:
            assert conv.ask("Which city did I ask about?").answer == "You asked about Paris."
        record = journal.platform_state(cid, cid)
        assert record is not None and record.platform == "openai"
        assert record.writer == second.state_writer
        [conversation] = journal.list_conversations()[0]
        assert conversation.platform_id == cid  # the same platform conversation, not a new one
    finally:
        journal.close()
    sent = llm.bodies[-1]["messages"]
    assert [(m["role"], m.get("content")) for m in sent] == [
        ("user", "Weather in Paris?"),
        ("assistant", None),
        ("tool", "sunny in Paris"),
        ("assistant", "Sunny."),
        ("user", "Which city did I ask about?"),
    ]


def test_two_processes_taking_turns_each_see_the_others_turns(
    llm: ScriptedServer, tmp_path: Path
) -> None:
    db = tmp_path / "journal.db"
    first_journal, second_journal = SQLiteJournal(db), SQLiteJournal(db)
    try:
        with _bridge(llm, first_journal) as first, _bridge(llm, second_journal) as second:
            llm.script(Reply(stream=text_stream("one")))
            cid = first.ask("first").conversation_id
            llm.script(Reply(stream=text_stream("two")))
            with second.conversation(cid) as conv:
                conv.ask("second")
            llm.script(Reply(stream=text_stream("three")))
            with first.conversation(cid) as conv:
                conv.ask("third")
    finally:
        first_journal.close()
        second_journal.close()
    # The first process held its own, older history: it took the second's from the journal.
    assert _user_turns(llm.bodies[-1]) == ["first", "second", "third"]


def test_a_state_of_another_platform_is_not_imported(
    llm: ScriptedServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    journal = SQLiteJournal(tmp_path / "journal.db")
    try:
        journal.add_conversation("c1")
        journal.begin_message("c1", "earlier")
        journal.save_platform_state(
            "c1",
            StateSnapshot(platform_conversation_id="c1", platform="coze", state={"chat_id": "x"}),
        )
        llm.script(Reply(stream=text_stream("fresh start")))
        with (
            caplog.at_level(logging.WARNING, logger="bridge.conversation"),
            _bridge(llm, journal) as bridge,
            bridge.conversation("c1") as conv,
        ):
            assert conv.ask("hello").answer == "fresh start"
        assert "is for the coze platform, not openai" in caplog.text
        # As with a lost history: a new platform conversation, the reason kept.
        [_, moved] = journal.platform_conversations("c1")
        assert "no longer knows c1" in moved.reason
    finally:
        journal.close()
    assert _user_turns(llm.bodies[-1]) == ["hello"]


def test_a_state_the_platform_refuses_is_reported_and_the_conversation_goes_on(
    llm: ScriptedServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    journal = SQLiteJournal(tmp_path / "journal.db")
    try:
        journal.add_conversation("c1")
        journal.begin_message("c1", "earlier")
        journal.save_platform_state(
            "c1",
            StateSnapshot(platform_conversation_id="c1", platform="openai", state={"x": 1}),
        )
        llm.script(Reply(stream=text_stream("fresh start")))
        with (
            caplog.at_level(logging.WARNING, logger="bridge.conversation"),
            _bridge(llm, journal) as bridge,
            bridge.conversation("c1") as conv,
        ):
            assert conv.ask("hello").answer == "fresh start"
        assert "the openai platform refused the journaled state of c1" in caplog.text
        assert "messages: Field required" in caplog.text
    finally:
        journal.close()


def test_recovery_without_a_journaled_state_runs_nothing_it_could_not_deliver(
    llm: ScriptedServer, tmp_path: Path
) -> None:
    """A journal with the batch but no state (written before states were journaled, or by a
    platform that exports none): the outputs could never reach a history that is gone."""
    journal = SQLiteJournal(tmp_path / "journal.db")
    try:
        message = journal.begin_message("c1", "weather in Oslo")
        batch = ToolBatch(
            batch_id="b1", calls=(ToolCall(call_id="call_1", name="get_weather", arguments={}),)
        )
        journal.receive("c1", batch, message_id=message)
        lost = "1 pending call\\(s\\) were not run"
        with (
            _bridge(llm, journal) as bridge,
            bridge.conversation("c1") as conv,
            pytest.raises(ConversationLostError, match=lost),
        ):
            conv.stream_recovered(message, batch)
        [record] = journal.messages("c1")
        assert (record.status, record.error_code) == ("failed", "ConversationLostError")
        assert journal.get_call("c1", "call_1").state == "received"  # type: ignore[union-attr]
    finally:
        journal.close()
    assert llm.bodies == []
