"""Delivery across crashes: `kill -9` the daemon at every journal step, and at random times.

For each failpoint (the daemon holds right after that journal step, the test kills it there),
and for a seeded soak of random kill times, a second process on the same journal must show:

- 0 duplicate runs of a non-idempotent call (each tool execution is logged by the tool);
- 0 finished outputs lost: every call whose finish was durable before the kill has its output
  accepted by the platform (the emulator counts acceptances per call id), and no call is left
  finished-but-unsent;
- 0 outputs accepted twice;
- every message ended (finished or failed, never left running);
- the conversation takes its next message.
"""

from __future__ import annotations

import contextlib
import json
import random
import sqlite3
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from playwright.sync_api import expect

from bridge.daemon.failpoints import STEPS
from bridge.emulator import Emulator
from tests.daemon.conftest import (
    TOOLS,
    DaemonProcess,
    daemon_env,
    executions,
    start_daemon,
    wait_for,
)
from tests.daemon.inprocess import InProcessDaemon
from tests.daemon.test_console import chromium

SCENARIO: dict[str, Any] = {
    "settings": {"fallback": "plain", "chunk_chars": 4},
    "rules": [
        {
            # One batch of two non-idempotent calls: "started" must be written per call.
            "match": r"pair (?P<n>\d+) (?P<to>\w+)",
            "steps": [
                {
                    "calls": [
                        {"tool": "charge", "arguments": {"amount": "{n}"}},
                        {"tool": "send_email", "arguments": {"to": "{to}"}},
                    ]
                }
            ],
            "answer": "done: {outputs.charge}; {outputs.send_email}",
        },
        {
            # Two rounds: a crash after round 1 leaves the platform waiting for round 2.
            "match": r"chain (?P<n>\d+) (?P<to>\w+)",
            "steps": [
                {"tool": "charge", "arguments": {"amount": "{n}"}},
                {"tool": "send_email", "arguments": {"to": "{to}"}},
            ],
            "answer": "chained: {outputs.charge}; {outputs.send_email}",
        },
        {
            # The platform takes the outputs, then holds its answer: kill in that window.
            "match": r"stall (?P<n>\d+)",
            "steps": [{"tool": "charge", "arguments": {"amount": "{n}"}}],
            "answer": "stalled: {outputs.charge}",
            "faults": "stall=10,round=1",
        },
        {
            # The soak: a chained round, then a parallel one; streamed slowly.
            "match": r"soak (?P<n>\d+)",
            "steps": [
                {"tool": "charge", "arguments": {"amount": "{n}"}},
                {
                    "calls": [
                        {"tool": "send_email", "arguments": {"to": "u{n}"}},
                        {"tool": "lookup", "arguments": {"key": "k{n}"}},
                    ]
                },
            ],
            "answer": "soaked: {outputs.charge}; {outputs.send_email}; {outputs.lookup}",
            "faults": "delay=0.02",
        },
        {
            "match": r"pay (?P<n>\d+)",
            "steps": [{"tool": "charge", "arguments": {"amount": "{n}"}}],
            "answer": "paid: {outputs.charge}",
        },
    ],
}

NON_IDEMPOTENT = ("charge", "send_email")


@pytest.fixture(scope="module")
def emulator() -> Iterator[Emulator]:
    with Emulator(scenario=SCENARIO) as emu:
        yield emu


@pytest.fixture(params=["full", "normal"])
def sqlite_sync(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each crash test runs under both of the journal's fsync policies (``--sqlite-sync``):
    ``normal`` skips the fsync at commit, which a killed process must not notice."""
    monkeypatch.setenv("TOOLBRIDGE_SQLITE_SYNC", request.param)
    return str(request.param)


@pytest.fixture
def tools_dir(tmp_path: Path) -> Path:
    """A fresh tools folder per test, so its executions log counts only this test's runs."""
    folder = tmp_path / "tools"
    folder.mkdir()
    (folder / "daemon_tools.py").write_text(TOOLS, encoding="utf-8")
    return folder


class Journal:
    """Read-only look at a journal file (the daemon that wrote it is dead)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def call_states(self) -> dict[str, str]:
        with contextlib.closing(sqlite3.connect(self.path)) as db:
            return dict(db.execute("SELECT call_id, state FROM calls").fetchall())


def _in_background(fn: Any) -> threading.Thread:
    def run() -> None:
        with contextlib.suppress(requests.RequestException):  # killed under the request
            fn()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _conversations(daemon: DaemonProcess) -> list[dict[str, Any]]:
    page = daemon.request("GET", "/v1/conversations", params={"limit": 200}).json()
    return list(page["items"])


def _detail(daemon: DaemonProcess, cid: str) -> dict[str, Any]:
    return dict(daemon.request("GET", f"/v1/conversations/{cid}").json())


def _wait_all_ended(daemon: DaemonProcess) -> None:
    def ended() -> bool:
        return not any(c["status"] == "running" for c in _conversations(daemon))

    wait_for(ended, "every message to end after recovery", timeout=60)


def _accepted(emulator: Emulator) -> Counter[str]:
    """How many times the platform accepted each call id's output (every conversation)."""
    counts: Counter[str] = Counter()
    for cid in emulator.conversation_ids():
        counts.update(emulator.conversation(cid).accepted_outputs)
    return counts


def _check_delivery(
    daemon: DaemonProcess, emulator: Emulator, tools: Path, before: dict[str, str]
) -> dict[str, int]:
    """The invariants of the module docstring, over every conversation of the daemon."""
    ran = Counter(executions(tools))
    twice = [line for line, n in ran.items() if n > 1 and line.split()[0] in NON_IDEMPOTENT]
    assert twice == [], f"non-idempotent calls ran twice: {twice}"
    accepted = _accepted(emulator)
    final: dict[str, str] = {}
    for conversation in _conversations(daemon):
        detail = _detail(daemon, conversation["conversation_id"])
        assert all(m["status"] != "running" for m in detail["messages"]), detail["messages"]
        final.update({c["call_id"]: c["state"] for c in detail["tool_calls"]})
    finished_before = [c for c, state in before.items() if state not in ("received", "started")]
    lost = [call_id for call_id in finished_before if accepted[call_id] != 1]
    assert lost == [], f"finished outputs never accepted by the platform: {lost}"
    unsent = {c: state for c, state in final.items() if state != "submitted"}
    assert unsent == {}, f"calls left without a delivered output: {unsent}"
    assert [c for c in final if accepted[c] != 1] == []
    assert max(accepted.values(), default=0) <= 1, f"outputs accepted twice: {accepted}"
    return {"calls": len(final), "finished_before_kill": len(finished_before)}


def _next_message_works(daemon: DaemonProcess, cid: str, amount: int) -> None:
    reply = daemon.ask(cid, f"pay {amount}")
    assert reply.status_code == 200, reply.text
    assert reply.json()["answer"] == f"paid: charged {amount}"


CALL_STEPS = ("received", "started", "finished", "submitting", "submitted")
"""A tool call's journal steps: at each, the daemon process is killed for real (`kill -9`).
At the other steps the daemon runs in process and stops dead there (`tests/daemon/inprocess.py`,
the same failpoint), as on the other platforms."""


@pytest.mark.parametrize("step", STEPS)
@pytest.mark.usefixtures("sqlite_sync")
def test_kill_9_right_after_each_journal_step(
    step: str,
    emulator: Emulator,
    tools_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    db = tmp_path / "journal.db"
    marker = tmp_path / f"hit-{step}"
    failpoint = f"{step}:{marker}"
    buried: list[InProcessDaemon] = []

    def start(failpoint: str | None = None) -> DaemonProcess | InProcessDaemon:
        if step in CALL_STEPS:
            env = {"TOOLBRIDGE_FAILPOINT": failpoint} if failpoint else {}
            return start_daemon(emulator, tools_dir, db, env=env)
        argv = ["--tools", str(tools_dir / "daemon_tools.py"), "--db", str(db)]
        daemon = InProcessDaemon(
            argv,
            env=daemon_env(emulator, tools_dir),
            monkeypatch=monkeypatch,
            failpoint=failpoint,
        )
        buried.append(daemon)
        return daemon

    try:
        _each_step(step, start, db, marker, emulator, tools_dir, failpoint)
    finally:
        for daemon in buried:
            daemon.bury()


def _each_step(
    step: str,
    start: Callable[..., DaemonProcess | InProcessDaemon],
    db: Path,
    marker: Path,
    emulator: Emulator,
    tools_dir: Path,
    failpoint: str,
) -> None:
    first = start(failpoint)
    try:
        worker = _in_background(
            lambda: first.ask(first.new_conversation(), "pair 3 bob").raise_for_status()
        )
        wait_for(lambda: marker.exists() or not worker.is_alive(), f"the {step!r} step")
        # Every step but a platform conversation's replacement happens on this path, and but
        # a platform state: AppBuilder keeps none (the conversation id is all it needs).
        unreached = ("platform_conversation", "platform_state")
        assert marker.exists() == (step not in unreached), first.log
        if marker.exists():
            if isinstance(first, DaemonProcess):
                first.kill9()
            else:
                first.crash()
    finally:
        first.stop()
    before = Journal(db).call_states()
    if step == "started":
        # Calls are journaled "started" one at a time, right before each runs: the kill came
        # after the first, so the second is still "received" and simply runs after restart.
        assert sorted(before.values()) == ["received", "started"], before
    second = start()
    try:
        _wait_all_ended(second)
        _check_delivery(second, emulator, tools_dir, before)
        [conversation] = _conversations(second)
        detail = _detail(second, conversation["conversation_id"])
        _next_message_works(second, conversation["conversation_id"], 9)
    finally:
        second.stop()
    ran = executions(tools_dir)
    if step == "started":
        assert ran.count("send_email bob") == 1, "the call that never started ran after restart"
        assert ran.count("charge 3") == 0, "the held call never ran, and is not run again"
        outputs = {c["name"]: c["output"] for c in detail["tool_calls"]}
        assert "interrupted by a restart" in outputs["charge"]
        assert outputs["send_email"] == "sent to bob"
    if step in ("received", "submitting", "message_end", *unreached):
        [message] = detail["messages"]
        assert message["status"] == "finished", message
        assert message["answer"] == "done: charged 3; sent to bob"


def test_outputs_the_platform_took_before_the_crash_are_not_sent_twice(
    emulator: Emulator, tools_dir: Path, tmp_path: Path
) -> None:
    """Killed after the platform accepted the outputs, before the bridge heard back."""
    db = tmp_path / "journal.db"
    first = start_daemon(emulator, tools_dir, db)
    try:
        cid = first.new_conversation()
        _in_background(lambda: first.ask(cid, "stall 4"))
        wait_for(lambda: emulator.conversation(cid).accepted_outputs, "the outputs to arrive")
        first.kill9()
    finally:
        first.stop()
    before = Journal(db).call_states()
    assert list(before.values()) == ["submitting"], before
    second = start_daemon(emulator, tools_dir, db)
    try:
        _wait_all_ended(second)
        _check_delivery(second, emulator, tools_dir, before)
        [message] = _detail(second, cid)["messages"]
        _next_message_works(second, cid, 5)
        log = second.log
    finally:
        second.stop()
    assert message["status"] == "failed" and message["error_code"] == "interrupted", message
    assert "ask again" in message["error_message"]
    assert "had reached the platform before the restart" in log
    assert executions(tools_dir).count("charge 4") == 1


def test_a_platform_conversation_left_waiting_is_replaced_on_the_next_message(
    emulator: Emulator, tools_dir: Path, tmp_path: Path
) -> None:
    """Killed after round 1 was accepted: the platform then asked for round 2 in a stream
    nobody read, so it waits for a call the bridge never saw."""
    db = tmp_path / "journal.db"
    marker = tmp_path / "hit-submitted"
    first = start_daemon(
        emulator, tools_dir, db, env={"TOOLBRIDGE_FAILPOINT": f"submitted:{marker}"}
    )
    try:
        cid = first.new_conversation()
        _in_background(lambda: first.ask(cid, "chain 2 ann"))
        wait_for(marker.exists, "round 1 to be accepted")
        first.kill9()
    finally:
        first.stop()
    assert emulator.conversation(cid).pending_call_ids, "the platform waits for round 2"
    before = Journal(db).call_states()
    second = start_daemon(emulator, tools_dir, db)
    try:
        _wait_all_ended(second)
        _check_delivery(second, emulator, tools_dir, before)
        _next_message_works(second, cid, 7)
        detail = _detail(second, cid)
        note = _console_transcript(second, cid, tmp_path)
        log = second.log
    finally:
        second.stop()
    assert "continued in a new platform conversation" in note
    assert "waiting for tool outputs" in note
    interrupted, answered = detail["messages"]
    assert interrupted["error_code"] == "interrupted"
    assert answered["status"] == "finished"
    history = detail["platform_conversations"]
    assert len(history) == 2, history
    assert history[0]["platform_conversation_id"] == cid
    new_id = history[1]["platform_conversation_id"]
    assert "waiting for tool outputs" in history[1]["reason"]
    assert detail["conversation"]["platform_conversation_id"] == new_id
    assert emulator.conversation(new_id).messages[-1].answer == "paid: charged 7"
    assert "continues in a new platform conversation" in log
    assert executions(tools_dir) == ["charge 2", "charge 7"], "round 2 never ran"


def _console_transcript(daemon: DaemonProcess, cid: str, tmp_path: Path) -> str:
    """The console's note on a replaced platform conversation, read in a real browser."""
    with chromium(tmp_path / "profile") as context:
        page = context.new_page()
        page.goto(daemon.url + "/")
        item = page.locator(f'[data-testid="conversation-item"][data-id="{cid}"]')
        item.click(timeout=15_000)
        note = page.get_by_test_id("platform-switch")
        expect(note).to_be_visible(timeout=15_000)
        return note.inner_text()


SOAK_SEED = 9
SOAK_CONVERSATIONS = 30


@pytest.mark.usefixtures("sqlite_sync")
def test_soak_random_kill_times(emulator: Emulator, tools_dir: Path, tmp_path: Path) -> None:
    """30 conversations, each a chained and a parallel round, under seeded random `kill -9`s."""
    rng = random.Random(SOAK_SEED)
    db = tmp_path / "journal.db"
    started: dict[int, str] = {}
    kills = 0
    logs: list[str] = []
    before: dict[str, str] = {}
    next_index = 0
    while next_index < SOAK_CONVERSATIONS:
        daemon = start_daemon(emulator, tools_dir, db, env={"TB_TOOL_SECONDS": "0.1"})
        try:
            _wait_all_ended(daemon)
            wave = range(next_index, min(next_index + rng.randint(3, 6), SOAK_CONVERSATIONS))
            for index in wave:
                cid = started[index] = daemon.new_conversation()
                _in_background(lambda d=daemon, c=cid, i=index: d.ask(c, f"soak {i}"))
            next_index = wave.stop
            threading.Event().wait(rng.uniform(0.05, 0.7))
            daemon.kill9()
            kills += 1
        finally:
            daemon.stop()
            logs.append(daemon.log)
        # What the journal held at each kill: the finishes that were durable then.
        for call_id, state in Journal(db).call_states().items():
            if before.get(call_id) in (None, "received", "started"):
                before[call_id] = state
    final = start_daemon(emulator, tools_dir, db)
    try:
        _wait_all_ended(final)
        figures = _check_delivery(final, emulator, tools_dir, before)
        outcomes: Counter[str] = Counter()
        replaced = not_rerun = 0
        for index, cid in started.items():
            detail = _detail(final, cid)
            not_rerun += sum(
                "interrupted by a restart" in c["output"] for c in detail["tool_calls"]
            )
            messages = detail["messages"]
            # A kill can come before a wave's message reached the daemon: nothing to end.
            outcomes[
                messages[-1]["error_code"] or messages[-1]["status"] if messages else "not sent"
            ] += 1
            _next_message_works(final, cid, 1000 + index)
            replaced += len(_detail(final, cid)["platform_conversations"]) > 1
    finally:
        final.stop()
        logs.append(final.log)
    assert sum(outcomes.values()) == SOAK_CONVERSATIONS
    log = "\n".join(logs)
    summary = {
        "kills": kills,
        **figures,
        "messages": dict(outcomes),
        "resumed": log.count("resuming message"),
        "outputs_posted_again": log.count("posting them again"),
        "already_delivered": log.count("had reached the platform before the restart"),
        "started_not_rerun": not_rerun,
        "platform_conversations_replaced": replaced,
        "executions": len(executions(tools_dir)),
    }
    (tmp_path / "soak.json").write_text(json.dumps(summary), encoding="utf-8")
    print(f"\nsoak: {json.dumps(summary)}")
