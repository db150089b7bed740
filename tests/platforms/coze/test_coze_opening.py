"""A Coze conversation is opened by its first chat, not by a ``conversation/create`` request:
the bridge names it with a local handle and journals the id the chat returns before anything
needs it; after a restart it continues there, and a crash before the mapping was written loses
nothing that ran."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from bridge import Bridge, Toolbox
from bridge.cli import app
from bridge.emulator import Emulator
from bridge.errors import ConversationLostError
from bridge.journal import SQLiteJournal
from bridge.journal.records import MessageEnd
from bridge.platforms.coze import CozePlatform

RUNS: list[str] = []


def get_weather(city: str) -> str:
    """Get the current weather for a city.

    Args:
        city: City name.
    """
    RUNS.append(city)
    return f"{city}: 21 C, sunny"


TOOLBOX = Toolbox([get_weather])
CHAT = "/v3/chat"
CREATE = "/v1/conversation/create"
SUBMIT = "/v3/chat/submit_tool_outputs"


@pytest.fixture
def emu() -> Iterator[Emulator]:
    RUNS.clear()
    scenario = {"coze": {"plugins": TOOLBOX.manifests("openai")}}
    with Emulator(protocol="coze", scenario=scenario, faults="") as emulator:
        yield emulator


def _platform(emu: Emulator, **options: Any) -> CozePlatform:
    env = emu.env()
    return CozePlatform(env["COZE_API_TOKEN"], env["COZE_BOT_ID"], env["COZE_API_BASE"], **options)


def _paths(emu: Emulator) -> list[str]:
    return [r.path for r in emu.requests]


@pytest.mark.parametrize("stream", [True, False])
def test_the_first_chat_opens_the_conversation_without_a_create_request(
    emu: Emulator, stream: bool
) -> None:
    platform = _platform(emu, poll_interval=0.01)
    with Bridge(platform, TOOLBOX, stream=stream) as bridge, bridge.conversation() as conv:
        first = conv.ask("What is the weather in Paris?")
        second = conv.ask("What is the weather in Rome?")
        opened = conv.platform_conversation_id
        history = bridge.journal.platform_conversations(conv.id)  # the in-memory journal
    assert [(h.platform_conversation_id, h.reason) for h in history] == [(opened, "")]
    assert first.answer == "Paris: 21 C, sunny" and second.answer == "Rome: 21 C, sunny"
    assert CREATE not in _paths(emu), "the chat opened the conversation"
    if stream:  # a question and its tool outputs: two requests per tool conversation
        assert _paths(emu) == [CHAT, SUBMIT, CHAT, SUBMIT]
    # One conversation on Coze, holding both questions; the bridge's id is a handle for it.
    assert emu.conversation_ids() == [opened]
    assert first.conversation_id == second.conversation_id == conv.id != opened
    assert [m.answer for m in emu.conversation(opened).messages] == [first.answer, second.answer]


def test_the_opened_conversation_is_journaled_before_the_run_goes_on(
    emu: Emulator, tmp_path: Path
) -> None:
    steps: list[str] = []
    journal = SQLiteJournal(tmp_path / "journal.db", on_write=steps.append)
    with Bridge(_platform(emu), TOOLBOX, journal=journal) as bridge:
        result = bridge.ask("What is the weather in Paris?")
        record = journal.get_conversation(result.conversation_id)
        history = journal.platform_conversations(result.conversation_id)
    journal.close()
    assert record is not None
    (opened,) = emu.conversation_ids()
    assert record.platform_id == opened != result.conversation_id
    # The handle was never a Coze conversation: the opened one is the first and only one.
    assert [(h.platform_conversation_id, h.reason) for h in history] == [(opened, "")]
    # Written right after the question's message, before its batch and anything after.
    assert steps[: steps.index("received") + 1] == [
        "conversation",
        "message",
        "platform_conversation",
        "received",
    ]


def test_a_conversation_continues_in_its_coze_conversation_after_a_restart(
    emu: Emulator, tmp_path: Path
) -> None:
    path = tmp_path / "journal.db"
    with Bridge(_platform(emu), TOOLBOX, journal=SQLiteJournal(path)) as first:
        cid = first.ask("What is the weather in Paris?").conversation_id
    # Another process: a new platform object (it never saw the handle) on the same journal.
    with (
        Bridge(_platform(emu), TOOLBOX, journal=SQLiteJournal(path)) as second,
        second.conversation(cid) as conv,
    ):
        assert conv.ask("What is the weather in Rome?").answer == "Rome: 21 C, sunny"
    (opened,) = emu.conversation_ids()
    asked = [m.query for m in emu.conversation(opened).messages]
    assert asked == ["What is the weather in Paris?", "What is the weather in Rome?"]
    assert CREATE not in _paths(emu)
    assert RUNS == ["Paris", "Rome"]


class _CrashError(Exception):
    """Stops the first process right after a journal write."""


def test_a_crash_before_the_opened_conversation_was_journaled_runs_nothing_twice(
    emu: Emulator, tmp_path: Path
) -> None:
    """`kill -9` after the first chat started and before its conversation's id was written:
    no tool had run; the conversation takes its next message in a new Coze conversation (the
    journal says why) and every tool runs once."""
    image = tmp_path / "image.db"

    def crash(step: str) -> None:
        if step == "message":  # the last write before the chat: what a kill -9 leaves on disk
            with sqlite3.connect(tmp_path / "journal.db") as source, sqlite3.connect(image) as to:
                source.backup(to)
        if step == "platform_conversation":
            raise _CrashError(step)

    journal = SQLiteJournal(tmp_path / "journal.db", on_write=crash)
    try:
        with Bridge(_platform(emu), TOOLBOX, journal=journal) as first, first.conversation() as c:
            with pytest.raises(_CrashError):
                c.ask("What is the weather in Paris?")
            cid = c.id
    finally:
        journal.close()
    assert RUNS == [], "the crash came before any tool could run"

    journal = SQLiteJournal(image)
    try:
        [message] = journal.unfinished_messages()
        assert journal.pending(message.message_id) is None, "no batch was received"
        # What a restart's recovery does with a message interrupted while the agent answered.
        journal.end_message(
            message.message_id,
            MessageEnd(status="failed", error_code="interrupted", platform_settled=False),
        )
        with (
            Bridge(_platform(emu), TOOLBOX, journal=journal) as second,
            second.conversation(cid) as conv,
        ):
            assert conv.ask("What is the weather in Rome?").answer == "Rome: 21 C, sunny"
            opened = conv.platform_conversation_id
        record = journal.get_conversation(cid)
        history = journal.platform_conversations(cid)
    finally:
        journal.close()
    assert record is not None and record.platform_id == opened != cid
    # The handle never got its Coze conversation journaled: the new one replaces it.
    assert [h.platform_conversation_id for h in history] == [cid, opened]
    assert f"the platform no longer knows {cid}" in history[1].reason
    assert RUNS == ["Rome"]
    # The interrupted chat's conversation is left behind on Coze, never answered.
    assert opened in emu.conversation_ids() and len(emu.conversation_ids()) == 2
    assert _paths(emu).count(CREATE) == 1


def test_a_handle_from_a_process_whose_journal_is_gone_is_refused_clearly(
    emu: Emulator,
) -> None:
    """In-memory journals: a later process cannot map another's handle, so it says so rather
    than open an empty conversation; the Coze conversation id continues it."""
    with Bridge(_platform(emu), TOOLBOX) as first, first.conversation() as conv:
        conv.ask("What is the weather in Paris?")
        handle, opened = conv.id, conv.platform_conversation_id
    with Bridge(_platform(emu), TOOLBOX) as second:
        with pytest.raises(ConversationLostError, match="named by another process"):
            second.conversation(handle).ask("What is the weather in Rome?")
        assert (
            second.conversation(opened).ask("And the weather in Rome?").answer
            == "Rome: 21 C, sunny"
        )
    asked = [m.query for m in emu.conversation(opened).messages]
    assert asked == ["What is the weather in Paris?", "And the weather in Rome?"]
    assert emu.conversation_ids() == [opened] and CREATE not in _paths(emu)


def test_toolbridge_run_prints_an_id_a_later_run_continues(emu: Emulator, tmp_path: Path) -> None:
    """`toolbridge run` keeps its journal in memory: the id it prints is Coze's, which the
    next command continues."""
    tools = tmp_path / "weather.py"
    tools.write_text(
        "from bridge.tools import manifest\n\n\n"
        "@manifest\n"
        "def get_weather(city: str) -> str:\n"
        '    """Get the current weather for a city.\n\n'
        "    Args:\n"
        "        city: City name.\n"
        '    """\n'
        '    return f"{city}: 21 C, sunny"\n',
        encoding="utf-8",
    )
    args = ["run", "-t", str(tools), "--platform", "coze", "--json"]
    env = emu.env()
    first = CliRunner().invoke(app, [*args, "What is the weather in Paris?"], env=env)
    assert first.exit_code == 0, first.output
    printed = json.loads(first.stdout)["conversation_id"]
    assert printed in emu.conversation_ids()
    again = CliRunner().invoke(
        app, [*args, "What is the weather in Rome?", "--conversation-id", printed], env=env
    )
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout)["answer"] == "Rome: 21 C, sunny"
    assert emu.conversation_ids() == [printed] and CREATE not in _paths(emu)
