"""The conversation loop end to end: Bridge + AppBuilder adapter + emulator over loopback HTTP."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bridge import (
    BadRequestError,
    Bridge,
    HumanInputRequested,
    MaxRoundsError,
    RunFailedError,
    RunFinished,
    ServerError,
    TextDelta,
    ToolCall,
    ToolCallFinished,
    ToolCallsRequested,
    ToolCallStarted,
    UsageError,
    manifest,
)
from bridge.emulator import Emulator
from bridge.platforms.appbuilder import AppBuilderPlatform

CALLS: Counter[str] = Counter()
_lock = threading.Lock()


def _count(name: str) -> None:
    with _lock:
        CALLS[name] += 1


@manifest(description="Current weather of a city.")
def get_weather(city: str) -> dict[str, Any]:
    """Weather lookup.

    Args:
        city: City name.
    """
    _count("get_weather")
    temps = {"Paris": 18, "Tokyo": 22, "北京": 12}
    return {"city": city, "temp": temps.get(city, 0)}


@manifest(description="Find the office city of a colleague.")
def find_employee(name: str) -> dict[str, str]:
    """Directory lookup.

    Args:
        name: Full name.
    """
    _count("find_employee")
    return {"name": name, "city": "Paris"}


@manifest(description="Delete a record; needs a person's approval.", confirm=True)
def delete_record(record_id: int) -> str:
    """Dangerous.

    Args:
        record_id: The record.
    """
    _count("delete_record")
    return f"deleted {record_id}"


TOOLS = [get_weather, find_employee, delete_record]

SCENARIO: dict[str, Any] = {
    "rules": [
        {
            "name": "parallel",
            "match": r"weather in (?P<a>\w+) and (?P<b>\w+)",
            "steps": [
                {
                    "calls": [
                        {"tool": "get_weather", "as": "a", "arguments": {"city": "{a}"}},
                        {"tool": "get_weather", "as": "b", "arguments": {"city": "{b}"}},
                    ]
                }
            ],
            "answer": "{a}: {outputs.a.temp}, {b}: {outputs.b.temp}",
        },
        {
            "name": "chained",
            "match": r"weather where (?P<name>\w+) works",
            "steps": [
                {"tool": "find_employee", "arguments": {"name": "{name}"}},
                {"tool": "get_weather", "arguments": {"city": "{outputs.find_employee.city}"}},
            ],
            "answer": "{name} works in {outputs.find_employee.city}: {outputs.get_weather.temp}",
        },
        {
            "name": "duplicate",
            "match": r"twice",
            "steps": [{"tool": "get_weather", "arguments": {"city": "Tokyo"}}],
            "answer": "Tokyo {outputs.get_weather.temp}",
            "faults": "duplicate_interrupt",
        },
        {
            "name": "runaway",
            "match": r"loop forever",
            "steps": [
                {"tool": "get_weather", "as": f"w{i}", "arguments": {"city": "Paris"}}
                for i in range(4)
            ],
            "answer": "done",
        },
        {
            "name": "broken-submission",
            "match": r"platform breaks",
            "steps": [{"tool": "get_weather", "arguments": {"city": "Paris"}}],
            "answer": "never",
            "faults": "status=500,round=1",
        },
        {
            "name": "failing-run",
            "match": r"workflow fails",
            "steps": [{"tool": "get_weather", "arguments": {"city": "Paris"}}],
            "answer": "never",
            "faults": "inband=WorkflowError,message=code node failed,round=1",
        },
        {
            "name": "dangerous-and-safe",
            "match": r"delete (?P<rid>\d+) and weather in (?P<city>\w+)",
            "steps": [
                {
                    "calls": [
                        {"tool": "delete_record", "arguments": {"record_id": "{rid}"}},
                        {"tool": "get_weather", "arguments": {"city": "{city}"}},
                    ]
                }
            ],
            "answer": "{outputs.delete_record} / {outputs.get_weather.temp}",
        },
        {
            "name": "dangerous",
            "match": r"delete (?P<rid>\d+)",
            "steps": [{"tool": "delete_record", "arguments": {"record_id": "{rid}"}}],
            "answer": "result: {outputs.delete_record}",
        },
    ]
}


@pytest.fixture(scope="module")
def emulator() -> Iterator[Emulator]:
    with Emulator(scenario=SCENARIO) as emu:
        yield emu


@pytest.fixture(autouse=True)
def _reset() -> None:
    CALLS.clear()


def make_bridge(emu: Emulator, **options: Any) -> Bridge:
    platform = AppBuilderPlatform(
        app_id=emu.app_id, token=emu.token, base_url=emu.base_url, max_retries=1
    )
    return Bridge(platform, TOOLS, **options)


@pytest.mark.parametrize("stream", [True, False])
def test_parallel_batch_is_one_round(emulator: Emulator, stream: bool) -> None:
    with make_bridge(emulator, stream=stream) as bridge:
        result = bridge.ask("what is the weather in Paris and Tokyo?")
    assert result.answer == "Paris: 18, Tokyo: 22"
    assert result.rounds == 1
    assert [run.arguments for run in result.tool_runs] == [{"city": "Paris"}, {"city": "Tokyo"}]
    assert all(run.error is None for run in result.tool_runs)
    assert CALLS["get_weather"] == 2
    assert result.request_ids, "every platform request id is reported"
    assert result.conversation_id in emulator.conversation_ids()


def test_chained_calls_take_two_rounds(emulator: Emulator) -> None:
    with make_bridge(emulator) as bridge:
        result = bridge.ask("what's the weather where Alice works?")
    assert result.answer == "Alice works in Paris: 18"
    assert result.rounds == 2
    assert [run.name for run in result.tool_runs] == ["find_employee", "get_weather"]


def test_two_turns_share_one_conversation(emulator: Emulator) -> None:
    with make_bridge(emulator) as bridge, bridge.conversation() as conv:
        first = conv.ask("weather in Paris and Tokyo")
        second = conv.ask("what's the weather where Bob works?")
    assert first.conversation_id == second.conversation_id
    assert second.answer == "Bob works in Paris: 18"
    snapshot = emulator.conversation(first.conversation_id)
    assert snapshot is not None


def test_continuing_a_conversation_by_id(emulator: Emulator) -> None:
    with make_bridge(emulator) as bridge:
        first = bridge.ask("weather in Paris and Tokyo")
        conv = bridge.conversation(first.conversation_id)
        again = conv.ask("weather in Tokyo and Paris")
    assert again.conversation_id == first.conversation_id
    assert again.answer == "Tokyo: 22, Paris: 18"


def test_duplicated_interrupt_runs_the_tool_once(emulator: Emulator) -> None:
    with make_bridge(emulator) as bridge:
        result = bridge.ask("ask twice please")
    assert CALLS["get_weather"] == 1
    assert result.answer == "Tokyo 22"
    assert len(result.tool_runs) == 1


def test_a_call_id_seen_again_sends_the_recorded_output() -> None:
    """A platform that repeats a call id in a later round gets the first output again."""
    from bridge.conversation import Conversation
    from bridge.types import ToolBatch

    bridge = Bridge(_NullPlatform(), TOOLS)
    conv = Conversation(bridge, "c1", end_user_id=None)
    call = ToolCall(call_id="same", name="get_weather", arguments={"city": "Paris"})
    first = list(conv._run_batch(ToolBatch(batch_id="b1", calls=(call,))))
    second = list(conv._run_batch(ToolBatch(batch_id="b2", calls=(call,))))
    assert CALLS["get_weather"] == 1
    assert [type(e).__name__ for e in first] == ["ToolCallStarted", "ToolCallFinished"]
    assert second == []
    assert conv.ledger["same"].output == '{"city": "Paris", "temp": 18}'


def test_max_rounds_stops_a_runaway_loop(emulator: Emulator) -> None:
    with make_bridge(emulator, max_rounds=2) as bridge, pytest.raises(MaxRoundsError) as info:
        bridge.ask("loop forever")
    error = info.value
    assert "more than 2 rounds" in str(error)
    assert len(error.tool_runs) == 2, "the runs already done are kept on the error"
    assert CALLS["get_weather"] == 2


def test_platform_error_mid_conversation_keeps_tool_outputs(emulator: Emulator) -> None:
    with make_bridge(emulator) as bridge, pytest.raises(ServerError) as info:
        bridge.ask("the platform breaks now")
    error = info.value
    assert error.status_code == 500
    assert error.request_id
    assert [run.name for run in error.tool_runs] == ["get_weather"]
    assert error.tool_runs[0].output == '{"city": "Paris", "temp": 18}'


def test_in_band_failure_raises_run_failed_with_request_id(emulator: Emulator) -> None:
    with make_bridge(emulator) as bridge, pytest.raises(Exception) as info:
        bridge.ask("the workflow fails")
    error = info.value
    assert "code node failed" in str(error)
    assert getattr(error, "request_id", None)
    assert [run.name for run in error.tool_runs] == ["get_weather"]  # type: ignore[attr-defined]


def test_rejected_confirm_tool_is_not_run(emulator: Emulator) -> None:
    asked: list[ToolCall] = []

    def approve(call: ToolCall) -> bool:
        asked.append(call)
        return False

    with make_bridge(emulator, approve=approve) as bridge:
        result = bridge.ask("delete 42")
    assert CALLS["delete_record"] == 0
    assert [call.name for call in asked] == ["delete_record"]
    assert result.tool_runs[0].error == "rejected"
    assert result.answer == "result: The tool call was not run: rejected by the user"


def test_approved_confirm_tool_runs(emulator: Emulator) -> None:
    with make_bridge(emulator, approve=lambda call: True) as bridge:
        result = bridge.ask("delete 7")
    assert CALLS["delete_record"] == 1
    assert result.answer == "result: deleted 7"


def test_confirm_tool_without_approver_is_rejected(emulator: Emulator) -> None:
    with make_bridge(emulator) as bridge:
        result = bridge.ask("delete 9")
    assert CALLS["delete_record"] == 0
    assert "no approver" in result.tool_runs[0].output


def test_stream_yields_events_in_order(emulator: Emulator) -> None:
    with make_bridge(emulator) as bridge, bridge.conversation() as conv:
        events = list(conv.stream("weather in Paris and Tokyo"))
    kinds = [type(e).__name__ for e in events]
    first_tool = kinds.index("ToolCallsRequested")
    assert kinds.count("ToolCallStarted") == 2
    assert kinds.count("ToolCallFinished") == 2
    assert kinds.index("ToolCallStarted") > first_tool
    assert kinds[-1] == "RunFinished"
    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert text == "Paris: 18, Tokyo: 22"


def test_hooks_see_everything(emulator: Emulator) -> None:
    seen: list[str] = []
    calls: list[str] = []
    results: list[str] = []
    with make_bridge(
        emulator,
        on_event=lambda e: seen.append(type(e).__name__),
        on_tool_call=lambda c: calls.append(c.name),
        on_tool_result=lambda r: results.append(r.output),
        keep_events=True,
    ) as bridge:
        result = bridge.ask("weather in Paris and Tokyo")
    assert calls == ["get_weather", "get_weather"] or sorted(calls) == calls
    assert len(results) == 2
    assert "ToolCallsRequested" in seen and "RunFinished" in seen
    assert result.events is not None
    assert [type(e).__name__ for e in result.events] == seen
    assert any(isinstance(e, ToolCallsRequested) for e in result.events)
    assert any(isinstance(e, ToolCallStarted) for e in result.events)
    assert any(isinstance(e, ToolCallFinished) for e in result.events)
    assert isinstance(result.events[-1], RunFinished)


def test_end_user_tool_choice_and_files_reach_the_platform(
    emulator: Emulator, tmp_path: Path
) -> None:
    attachment = tmp_path / "notes.txt"
    attachment.write_text("hello", encoding="utf-8")
    emulator.clear_requests()
    with make_bridge(emulator, end_user_id="user-123456", tool_choice="get_weather") as bridge:
        conv = bridge.conversation()
        result = conv.ask("weather in Paris and Tokyo", files=[attachment])
    runs = [r for r in emulator.requests if r.path.endswith("/runs")]
    first = runs[0].json
    assert first["end_user_id"] == "user-123456"
    assert first["tool_choice"] == {
        "type": "function",
        "function": {"name": "get_weather", "input": {}},
    }
    assert first["file_ids"] and len(first["file_ids"]) == 1
    assert [t["function"]["name"] for t in first["tools"]] == [
        "get_weather",
        "find_employee",
        "delete_record",
    ]
    assert any(r.path.endswith("/file/upload") for r in emulator.requests)
    assert result.answer


def test_resume_without_pending_input_is_a_usage_error(emulator: Emulator) -> None:
    with (
        make_bridge(emulator) as bridge,
        bridge.conversation() as conv,
        pytest.raises(UsageError, match="nothing to resume"),
    ):
        conv.resume("yes")


def test_max_rounds_must_be_positive(emulator: Emulator) -> None:
    with pytest.raises(UsageError, match="max_rounds"):
        make_bridge(emulator, max_rounds=0)


def test_run_failed_error_type() -> None:
    assert issubclass(RunFailedError, Exception)
    assert HumanInputRequested(interrupt_id="x").interrupt_type == "chat"


class _NullPlatform:
    """A platform that is never asked anything (for loop-only tests)."""

    name = "null"
    dialect = "appbuilder"

    def close(self) -> None:
        pass


def test_close_releases_what_the_bridge_made_but_not_a_given_toolbox() -> None:
    from bridge import Toolbox

    made = Bridge(_NullPlatform(), TOOLS)
    made.close()
    with pytest.raises(UsageError, match="closed"):
        made.dispatcher.run([ToolCall(call_id="x", name="get_weather", arguments={})])

    closed: list[str] = []
    given = Toolbox(TOOLS)
    given.close = lambda: closed.append("toolbox")  # type: ignore[method-assign]
    Bridge(_NullPlatform(), given).close()
    assert closed == []


def test_a_failed_run_is_journaled_with_its_platform_code(emulator: Emulator) -> None:
    with make_bridge(emulator) as bridge, bridge.conversation() as conv:
        with pytest.raises(RunFailedError):
            conv.ask("the workflow fails")
        assert conv.message_id is not None
        message = bridge.journal.messages(conv.id)[-1]
    assert (message.status, message.error_code) == ("failed", "WorkflowError")
    assert "code node failed" in (message.error_message or "")


def test_a_platform_conversation_left_waiting_is_replaced_by_the_next_question(
    emulator: Emulator,
) -> None:
    """max_rounds stops the loop while the agent waits for outputs: the platform conversation
    is stuck, so the next question continues in a new one (recorded in the journal)."""
    with make_bridge(emulator, max_rounds=1) as bridge:
        conversation = bridge.conversation()
        with pytest.raises(MaxRoundsError):
            conversation.ask("loop forever")
        stuck = conversation.id
        assert emulator.conversation(stuck).pending_call_ids, "the platform still waits"
        result = conversation.ask("weather in Tokyo")
        assert "Tokyo" in result.answer
        assert result.conversation_id == stuck, "the conversation keeps its id"
        assert conversation.platform_conversation_id != stuck
        history = bridge.journal.platform_conversations(stuck)
        assert [h.platform_conversation_id for h in history] == [
            stuck,
            conversation.platform_conversation_id,
        ]
        assert "waiting for tool outputs" in history[1].reason
        again = conversation.ask("weather in Paris")
        assert "Paris" in again.answer, "the new platform conversation is kept"
        assert len(bridge.journal.platform_conversations(stuck)) == 2


def test_a_refusal_after_a_settled_run_is_reported_not_papered_over(emulator: Emulator) -> None:
    """Only a conversation an interrupted run may have left waiting is replaced."""
    with make_bridge(emulator) as bridge:
        conversation = bridge.conversation()
        conversation.ask("weather in Tokyo")
        with pytest.raises(BadRequestError, match="file_ids"):
            conversation.ask("weather in Paris", file_ids=["never-uploaded"])
        assert len(bridge.journal.platform_conversations(conversation.id)) == 1


class _Desk:
    """A deferred approver: decides each call once `release` is set (or at once)."""

    def __init__(self, decision: str, note: str = "", *, release: threading.Event | None = None):
        self.decision = decision
        self.note = note
        self.release = release
        self.asked: list[Any] = []
        self.released_in_time = True

    def ask(self, request: Any) -> Any:
        from bridge.tools.approval import verdict_for_decision

        self.asked.append(request)
        if self.release is not None:
            self.released_in_time = self.release.wait(30)
        return verdict_for_decision(self.decision, decided_by="alice", note=self.note)  # type: ignore[arg-type]


def test_a_deferred_approval_pauses_only_its_call(emulator: Emulator) -> None:
    """The weather call of the same batch runs while the delete waits for its decision."""
    weather_done = threading.Event()

    def on_result(run: Any) -> None:
        if run.name == "get_weather":
            weather_done.set()

    desk = _Desk("approved", release=weather_done)
    with make_bridge(emulator, approve=desk, on_tool_result=on_result) as bridge:
        result = bridge.ask("delete 5 and weather in Paris")
    assert desk.released_in_time, "the batch's other call did not run while one waited"
    [request] = desk.asked
    assert request.call.name == "delete_record" and request.message_id is not None
    assert request.conversation_id == result.conversation_id
    assert CALLS["delete_record"] == 1 and CALLS["get_weather"] == 1
    assert result.answer == "deleted 5 / 18"
    assert [r.name for r in result.tool_runs] == ["get_weather", "delete_record"]


def test_a_deferred_rejection_reaches_the_model_with_its_note(emulator: Emulator) -> None:
    desk = _Desk("rejected", note="not on a Friday")
    with make_bridge(emulator, approve=desk) as bridge:
        result = bridge.ask("delete 6")
    assert CALLS["delete_record"] == 0
    assert result.tool_runs[0].error == "rejected"
    assert result.answer == (
        "result: The tool call was not run: rejected by alice: not on a Friday"
    )


def test_a_failing_deferred_approver_refuses_the_call(emulator: Emulator) -> None:
    class Broken:
        def ask(self, request: Any) -> Any:
            raise OSError("the desk is gone")

    with make_bridge(emulator, approve=Broken()) as bridge:
        result = bridge.ask("delete 8")
    assert CALLS["delete_record"] == 0
    assert result.answer.endswith("rejected: asking for approval failed (OSError)")


def test_a_run_the_platform_failed_after_a_tool_round_does_not_wedge_the_conversation(
    emulator: Emulator,
) -> None:
    """An in-band error answering the tool outputs leaves their calls pending on the platform:
    the next question continues in a new platform conversation."""
    with make_bridge(emulator) as bridge:
        conversation = bridge.conversation()
        with pytest.raises(RunFailedError):
            conversation.ask("workflow fails")
        assert emulator.conversation(conversation.id).pending_call_ids
        result = conversation.ask("weather in Tokyo")
        assert "Tokyo" in result.answer
        assert len(bridge.journal.platform_conversations(conversation.id)) == 2
