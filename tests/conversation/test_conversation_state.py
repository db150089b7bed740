"""A conversation's platform state goes through the journal: another `Bridge` (a restarted
process, a second daemon on the same database) continues it with its whole history.

The platform is the OpenAI-compatible one (its history lives in the adapter's memory) against a
scripted loopback server that records what it is sent.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bridge import Bridge, ToolBatch, Toolbox, ToolCall, manifest
from bridge.emulator import Emulator
from bridge.emulator.protocols import PROTOCOLS
from bridge.errors import ConversationLostError
from bridge.journal import SQLiteJournal, StateSnapshot
from bridge.platforms.openai_chat import OpenAIChatPlatform
from bridge.platforms.registry import get_entry
from bridge.types import RunFinished
from tests.platforms.openai_fakes import (
    FAST_RETRIES,
    Reply,
    ScriptedServer,
    text_stream,
    tool_call_stream,
)


@manifest(description="Weather for a city.")
def get_weather(city: str) -> str:
    """Weather.

    Args:
        city: City name.
    """
    return f"sunny in {city}"


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
    llm.script(
        Reply(stream=tool_call_stream("call_1", "get_weather", {"city": "Paris"})),
        Reply(stream=text_stream("Sunny.")),
    )
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


def test_a_kept_conversation_follows_a_replacement_made_by_another_process(
    llm: ScriptedServer, tmp_path: Path
) -> None:
    """The daemon keeps a conversation object between messages: it must read the journal
    again, since another process may have moved the conversation to a new platform one."""
    journal = SQLiteJournal(tmp_path / "journal.db")
    try:
        with _bridge(llm, journal) as bridge, bridge.conversation() as conv:
            llm.script(Reply(stream=text_stream("one")))
            conv.ask("first")
            # What the other process did: a new platform conversation, its history journaled.
            journal.replace_platform_conversation(conv.id, "p2", reason="by the other process")
            moved = [{"role": "user", "content": "asked elsewhere"}, {"role": "assistant"}]
            journal.save_platform_state(
                conv.id,
                StateSnapshot(
                    platform_conversation_id="p2",
                    platform="openai",
                    state={"version": 1, "messages": moved},
                    writer="the-other-process",
                ),
            )
            llm.script(Reply(stream=text_stream("two")))
            conv.ask("second")
            assert conv.platform_conversation_id == "p2"
    finally:
        journal.close()
    assert _user_turns(llm.bodies[-1]) == ["asked elsewhere", "second"]


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
            caplog.at_level(logging.WARNING, logger="bridge.platform_state"),
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
            caplog.at_level(logging.WARNING, logger="bridge.platform_state"),
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


# --- every platform with an emulator: a crash image of the journal, another process -----------

RUNS: list[str] = []


@manifest(description="Charge a card: must never run twice.")
def charge(amount: int) -> str:
    """Charge.

    Args:
        amount: Euros.
    """
    RUNS.append(f"charge {amount}")
    return f"charged {amount}"


@manifest(description="Look a key up (safe to repeat).", idempotent=True)
def lookup(key: str) -> str:
    """Lookup.

    Args:
        key: The key.
    """
    RUNS.append(f"lookup {key}")
    return f"value of {key}"


def _rule(match: str, tool: str, arguments: dict[str, str], answer: str) -> dict[str, Any]:
    return {"match": match, "steps": [{"tool": tool, "arguments": arguments}], "answer": answer}


EMULATED = {
    "rules": [
        _rule(r"charge (?P<n>\d+)", "charge", {"amount": "{n}"}, "result: {outputs.charge}"),
        _rule(r"lookup (?P<k>\w+)", "lookup", {"key": "{k}"}, "result: {outputs.lookup}"),
    ]
}


def _emulated_bridge(
    name: str, emulator: Emulator, journal: SQLiteJournal, **options: Any
) -> Bridge:
    entry = get_entry(name)
    platform = entry.create(**entry.emulator_options(emulator.env()), **options)
    return Bridge(platform, [charge, lookup], journal=journal)


@pytest.mark.parametrize(
    ("name", "options"),
    [
        *((name, {}) for name in sorted(PROTOCOLS)),
        ("responses", {"store": False}),  # the transcript is resent: it is the state
    ],
)
def test_every_emulated_platform_continues_after_a_crash_image_of_the_journal(
    name: str, options: dict[str, Any], tmp_path: Path
) -> None:
    """The journal as `kill -9` would leave it with a batch received: another process (a new
    platform object on a copy of the file) delivers the outputs and goes on."""
    toolbox = Toolbox([charge, lookup])
    scenario = dict(EMULATED)
    if name == "coze":
        scenario["coze"] = {"plugins": toolbox.manifests("openai")}  # the bot's local plugin
    RUNS.clear()
    image = tmp_path / "image.db"
    armed = False

    def crash_after(step: str) -> None:
        # What `kill -9` right after this write leaves on disk; this process goes no further.
        if armed and step == "received":
            with sqlite3.connect(tmp_path / "journal.db") as source, sqlite3.connect(image) as copy:
                source.backup(copy)
            raise _CrashError(step)

    with Emulator(protocol=name, scenario=scenario) as emulator:
        journal = SQLiteJournal(tmp_path / "journal.db", on_write=crash_after)
        try:
            with (
                _emulated_bridge(name, emulator, journal, **options) as first,
                first.conversation() as conv,
            ):
                assert conv.ask("lookup k1").answer == "result: value of k1"
                cid = conv.id
                armed = True
                with pytest.raises(_CrashError):
                    conv.ask("charge 3")
        finally:
            journal.close()
        assert RUNS == ["lookup k1"]

        journal = SQLiteJournal(image)
        try:
            [message] = journal.unfinished_messages()
            pending = journal.pending(message.message_id)
            assert pending is not None
            with _emulated_bridge(name, emulator, journal, **options) as second:
                with second.conversation(cid) as conv:
                    recovered = list(conv.stream_recovered(message.message_id, pending.batch))
                    assert isinstance(recovered[-1], RunFinished), recovered
                    assert recovered[-1].answer == "result: charged 3"
                    assert conv.ask("lookup k2").answer == "result: value of k2"
                (opened,) = journal.platform_conversations(cid)
        finally:
            journal.close()
        if name == "responses":
            posts = [r.json for r in emulator.requests if r.path.endswith("/responses") and r.json]
            if options.get("store") is False:
                # Nothing stored server-side: the last request resends the whole transcript.
                sent = json.dumps(posts[-1]["input"])
                assert all(q in sent for q in ("lookup k1", "charge 3", "lookup k2")), sent
                assert "charged 3" in sent
            else:
                assert posts[-1].get("previous_response_id"), posts[-1]
        elif name == "openai":
            # Chat Completions keeps nothing server-side: the last request holds the history.
            posts = [r.json for r in emulator.requests if r.path.endswith("/chat/completions")]
            sent = json.dumps(posts[-1]["messages"], ensure_ascii=False)
            assert all(q in sent for q in ("lookup k1", "charge 3", "lookup k2")), sent
            assert "charged 3" in sent
        else:
            # (Coze's first chat opened the conversation: `cid` is a handle mapped to it.)
            platform_id = opened.platform_conversation_id
            asked = [m.query for m in emulator.conversation(platform_id).messages]
            assert asked == ["lookup k1", "charge 3", "lookup k2"], asked
    assert RUNS == ["lookup k1", "charge 3", "lookup k2"], RUNS


class _CrashError(Exception):
    """Stops the first process right after a journal write."""


@pytest.mark.parametrize("name", ["appbuilder", "coze"])
def test_a_question_for_a_person_is_answered_from_another_process(
    name: str, tmp_path: Path
) -> None:
    """Paused on the agent's question in one process, answered in another: the pause and the
    platform's state both come from the journal."""
    toolbox = Toolbox([charge, lookup])
    scenario: dict[str, Any] = {
        "rules": [
            {
                "match": r"book a room",
                "steps": [
                    {"ask": "For which day?", "as": "day"},
                    {"tool": "lookup", "arguments": {"key": "{answers.day}"}},
                ],
                "answer": "booked for {answers.day} ({outputs.lookup})",
            }
        ]
    }
    if name == "coze":
        scenario["coze"] = {"plugins": toolbox.manifests("openai")}
    RUNS.clear()
    db = tmp_path / "journal.db"
    with Emulator(protocol=name, scenario=scenario) as emulator:
        journal = SQLiteJournal(db)
        try:
            with _emulated_bridge(name, emulator, journal) as first, first.conversation() as conv:
                paused = conv.ask("book a room")
                assert paused.human_input is not None
                assert paused.human_input.prompt == "For which day?"
                cid = conv.id
        finally:
            journal.close()
        journal = SQLiteJournal(db)
        try:
            with (
                _emulated_bridge(name, emulator, journal) as second,
                second.conversation(cid) as conv,
            ):
                assert conv.pending_input is not None
                assert conv.resume("monday").answer == "booked for monday (value of monday)"
            assert len(journal.platform_conversations(cid)) == 1
        finally:
            journal.close()
    assert RUNS == ["lookup monday"]
