"""Human-input pauses end to end: Bridge + AppBuilder adapter + emulator over loopback HTTP.

A scenario ``ask`` step makes the emulated workflow ask a question (a chatflow interrupt);
`Result.human_input` carries it, `Conversation.resume` answers it and the run goes on (tools,
then the answer). `toolbridge chat` answers a pending question with the next line typed.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from bridge import (
    BadRequestError,
    Bridge,
    HumanInputRequested,
    Other,
    RunFinished,
    TextDelta,
    ToolCallFinished,
    ToolCallsRequested,
    ToolCallStarted,
    manifest,
)
from bridge.cli import app
from bridge.emulator import Emulator
from bridge.platforms.appbuilder import AppBuilderPlatform

BOOKED: list[tuple[str, str]] = []
_lock = threading.Lock()


@manifest(description="Book a meeting room or a restaurant table for a day.")
def book_room(what: str, date: str) -> str:
    """Book it.

    Args:
        what: 会议室 or 餐厅.
        date: The day, as the person said it.
    """
    with _lock:
        BOOKED.append((what, date))
    return f"订单 {what}-{date}"


SCENARIO: dict[str, Any] = {
    "rules": [
        {
            "name": "booking",
            "match": "预订(?P<what>会议室|餐厅)",
            "steps": [
                {"ask": "您要预订哪一天的{what}？", "as": "date"},
                {"tool": "book_room", "arguments": {"what": "{what}", "date": "{answers.date}"}},
            ],
            "answer": "已为您预订{answers.date}的{what}：{outputs.book_room}",
        },
        {
            "name": "trip",
            "match": "^plan a trip",
            "steps": [
                {"ask": "From where?", "as": "origin"},
                {"ask": "And from {answers.origin} to where?", "as": "dest"},
            ],
            "answer": "{answers.origin} -> {answers.dest}",
        },
    ]
}

QUESTION = "您要预订哪一天的会议室？"
ANSWER = "已为您预订明天的会议室：订单 会议室-明天"


@pytest.fixture(scope="module")
def emulator() -> Iterator[Emulator]:
    with Emulator(scenario=SCENARIO, faults="") as emu:
        yield emu


@pytest.fixture(autouse=True)
def _reset() -> None:
    BOOKED.clear()


def make_bridge(emu: Emulator, **options: Any) -> Bridge:
    platform = AppBuilderPlatform(
        app_id=emu.app_id, token=emu.token, base_url=emu.base_url, max_retries=1
    )
    return Bridge(platform, [book_room], **options)


@pytest.mark.parametrize("stream", [True, False])
def test_ask_pauses_and_resume_runs_the_tool_with_the_reply(
    emulator: Emulator, stream: bool
) -> None:
    with make_bridge(emulator, stream=stream) as bridge, bridge.conversation() as conv:
        paused = conv.ask("请帮我预订会议室")
        human = paused.human_input
        assert isinstance(human, HumanInputRequested)
        assert (human.prompt, human.interrupt_type) == (QUESTION, "chat")
        assert human.interrupt_id == emulator.conversation(conv.id).pending_interrupt_id
        assert conv.pending_input == human
        # The workflow's question travels in its publish_message event, not as answer text.
        assert (paused.answer, paused.rounds, paused.tool_runs) == ("", 0, [])
        assert BOOKED == []

        done = conv.resume("明天")
        assert done.answer == ANSWER
        assert done.human_input is None and conv.pending_input is None
        assert done.rounds == 1 and done.conversation_id == paused.conversation_id
        [run] = done.tool_runs
        assert (run.name, run.arguments, run.error) == (
            "book_room",
            {"what": "会议室", "date": "明天"},
            None,
        )
        assert BOOKED == [("会议室", "明天")]

    resume = [r.json for r in emulator.requests if r.json and r.json.get("action")]
    assert resume[-1]["query"] == "明天"
    assert resume[-1]["action"] == {
        "action_type": "resume",
        "parameters": {"interrupt_event": {"id": human.interrupt_id, "type": "chat"}},
    }
    snapshot = emulator.conversation(done.conversation_id)
    assert [m.status for m in snapshot.messages] == ["human_input", "success"]
    assert snapshot.pending_input is None


@pytest.mark.parametrize("stream", [True, False])
def test_stream_yields_human_input_requested(emulator: Emulator, stream: bool) -> None:
    with make_bridge(emulator, stream=stream) as bridge, bridge.conversation() as conv:
        events = list(conv.stream("请帮我预订餐厅"))
        human = events[-1]
        assert isinstance(human, HumanInputRequested)
        assert human.prompt == "您要预订哪一天的餐厅？"
        assert not any(isinstance(e, ToolCallsRequested | RunFinished) for e in events)
        assert conv.pending_input == human

        resumed = list(conv.stream_resume("周五"))
        kinds = [type(e) for e in resumed]
        assert ToolCallsRequested in kinds and ToolCallStarted in kinds
        assert kinds.index(ToolCallFinished) < kinds.index(RunFinished)
        finished = resumed[-1]
        assert isinstance(finished, RunFinished)
        text = "".join(e.text for e in resumed if isinstance(e, TextDelta))
        assert text == finished.answer == "已为您预订周五的餐厅：订单 餐厅-周五"
        assert conv.pending_input is None
    assert BOOKED == [("餐厅", "周五")]


def test_questions_in_a_row_are_resumed_one_by_one(emulator: Emulator) -> None:
    with make_bridge(emulator) as bridge, bridge.conversation() as conv:
        first = conv.ask("plan a trip")
        assert first.human_input is not None and first.human_input.prompt == "From where?"
        second = conv.resume("Oslo")
        assert second.human_input is not None
        assert second.human_input.prompt == "And from Oslo to where?"
        assert second.human_input.interrupt_id != first.human_input.interrupt_id
        final = conv.resume("Rome")
        assert final.answer == "Oslo -> Rome" and final.human_input is None


def test_a_plain_question_while_one_waits_is_taken_as_the_reply(
    emulator: Emulator,
) -> None:
    # The service goes on when a query arrives without `action` while a chatflow question
    # waits (the official SDK's non-stream handler sends replies that way), so `ask` is not
    # refused: the platform reads it as the person's reply and the pause ends.
    with make_bridge(emulator) as bridge, bridge.conversation() as conv:
        human = conv.ask("请帮我预订会议室").human_input
        assert human is not None
        final = conv.ask("明天")
        assert final.answer == ANSWER and final.human_input is None
        assert conv.pending_input is None


@pytest.mark.parametrize("stream", [True, False])
def test_the_adapter_takes_the_prompt_from_the_publish_message(
    emulator: Emulator, stream: bool
) -> None:
    platform = AppBuilderPlatform(
        app_id=emulator.app_id, token=emulator.token, base_url=emulator.base_url
    )
    try:
        conversation_id = platform.create_conversation()
        events = list(platform.start(conversation_id, "plan a trip", tools=[], stream=stream))
    finally:
        platform.close()
    human = events[-1]
    assert isinstance(human, HumanInputRequested)
    assert human.prompt == "From where?"
    assert human.interrupt_id == emulator.conversation(conversation_id).pending_interrupt_id
    assert human.raw["content_type"] == "chatflow_interrupt"
    # The message event itself still reaches listeners, untouched.
    published = [e.raw for e in events if isinstance(e, Other)]
    assert [
        r["outputs"]["message"] for r in published if r["content_type"] == "publish_message"
    ] == ["From where?"]
    assert not any(isinstance(e, TextDelta) for e in events)


# --- toolbridge chat --------------------------------------------------------------------------

TOOLS = '''
from bridge import manifest

@manifest(description="Book a meeting room or a restaurant table for a day.")
def book_room(what: str, date: str) -> str:
    """Book it.

    Args:
        what: 会议室 or 餐厅.
        date: The day.
    """
    return f"订单 {what}-{date}"
'''


@pytest.mark.parametrize("stream", ["--stream", "--no-stream"])
def test_chat_answers_the_question_with_the_next_line(
    emulator: Emulator, tmp_path: Path, stream: str
) -> None:
    tools_file = tmp_path / "booking_tools.py"
    tools_file.write_text(TOOLS, encoding="utf-8")
    env = {"APPBUILDER_TOKEN": "", "APPBUILDER_APP_ID": "", "GATEWAY_URL_V2": "", **emulator.env()}
    result = CliRunner().invoke(
        app,
        ["chat", "-t", str(tools_file), stream],
        env=env,
        input="请帮我预订会议室\n明天\n/exit\n",
    )
    assert result.exit_code == 0, result.output
    assert f"the agent asks for input {QUESTION}" in result.stderr
    assert "(answer the question above)" in result.stderr
    assert "book_room" in result.stderr
    assert ANSWER in result.stdout
    assert QUESTION not in result.stdout


def test_a_refused_resume_keeps_the_pause(emulator: Emulator) -> None:
    with make_bridge(emulator) as bridge, bridge.conversation() as conv:
        human = conv.ask("请帮我预订会议室").human_input
        assert human is not None
        with pytest.raises(BadRequestError):
            conv.resume("明天", interrupt_id="not-the-pending-id")
        assert conv.pending_input == human
        assert conv.resume("明天").answer == ANSWER


def test_resume_a_pause_seen_by_another_process(emulator: Emulator) -> None:
    with make_bridge(emulator) as bridge:
        first = bridge.ask("请帮我预订会议室")
        assert first.human_input is not None
        later = bridge.conversation(first.conversation_id)
        result = later.resume("明天", interrupt_id=first.human_input.interrupt_id)
    assert result.answer == ANSWER


def test_run_reports_the_pause_and_resume_answers_it(emulator: Emulator, tmp_path: Path) -> None:
    import json

    tools_file = tmp_path / "booking_tools.py"
    tools_file.write_text(TOOLS, encoding="utf-8")
    env = {"APPBUILDER_TOKEN": "", "APPBUILDER_APP_ID": "", "GATEWAY_URL_V2": "", **emulator.env()}
    runner = CliRunner()
    tools = ["-t", str(tools_file)]
    asked = runner.invoke(app, ["run", "请帮我预订会议室", *tools, "--json"], env=env)
    assert asked.exit_code == 0, asked.output
    body = json.loads(asked.stdout)
    assert body["human_input"]["prompt"] == QUESTION
    assert body["request_ids"] == [body["human_input"]["request_id"]]  # for support tickets
    terminal = runner.invoke(app, ["run", "请帮我预订餐厅", "-t", str(tools_file)], env=env)
    assert "--resume" in terminal.stderr and "您要预订哪一天的餐厅？" in terminal.stderr
    assert terminal.stderr.count("您要预订哪一天的餐厅？") == 1  # the question, printed once
    paused = body["conversation_id"], body["human_input"]["interrupt_id"]
    answered = runner.invoke(
        app,
        ["run", "明天", *tools, "--json", "--conversation-id", paused[0], "--resume", paused[1]],
        env=env,
    )
    assert answered.exit_code == 0, answered.output
    assert json.loads(answered.stdout)["answer"] == ANSWER
    lost = runner.invoke(app, ["run", "明天", "-t", str(tools_file), "--resume", "x"], env=env)
    assert lost.exit_code == 2
    assert "--conversation-id" in lost.stderr


def test_a_pause_survives_a_restart_through_the_journal(emulator: Emulator, tmp_path: Path) -> None:
    from bridge import SQLiteJournal

    db = tmp_path / "journal.db"
    first = SQLiteJournal(db)
    try:
        with make_bridge(emulator, journal=first) as bridge:
            paused = bridge.ask("请帮我预订会议室")
    finally:
        first.close()
    assert paused.human_input is not None
    # A new process: a new journal object on the same file, a new Bridge, only the id known.
    second = SQLiteJournal(db)
    try:
        with make_bridge(emulator, journal=second) as bridge:
            conversation = bridge.conversation(paused.conversation_id)
            assert conversation.pending_input is not None
            assert conversation.pending_input.interrupt_id == paused.human_input.interrupt_id
            assert conversation.pending_input.prompt == QUESTION
            assert conversation.resume("明天").answer == ANSWER
            assert bridge.conversation(paused.conversation_id).pending_input is None
    finally:
        second.close()
