"""Live across replicas (issue 13, point 5): two daemons on one PostgreSQL journal hear each
other's runs through LISTEN/NOTIFY (`bridge.daemon.relay`).

A client of replica B sees, on ``/v1/events`` and on a conversation's ``/events``, the run that
replica A is doing; an approval a run on A waits for, decided through B, wakes that run at
once; the listener comes back after the database server is killed and restarted; the console
served by B follows a run on A. Payloads always fit NOTIFY's limit (hypothesis).
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from hypothesis import given, settings
from hypothesis import strategies as st
from playwright.sync_api import expect

from bridge.daemon.relay_codec import PAYLOAD_LIMIT, Notice, coalesce, decode, encode
from bridge.daemon.relay_pipe import BYE, HELLO, RelayPipe
from bridge.emulator import Emulator
from tests.daemon.conftest import DaemonProcess, executions, start_daemon, wait_for
from tests.daemon.console_setup import SCENARIO as CONSOLE_SCENARIO
from tests.daemon.console_setup import write_tools
from tests.daemon.test_console import chromium
from tests.support.postgres import PostgresServer

KEY = "relay-key-0123456789abcdef"
TIMEOUT = 60.0
UI_TIMEOUT = 30_000


class Follower:
    """Reads an SSE stream in a thread; `events` holds (name, data) as they come."""

    def __init__(self, daemon: DaemonProcess, path: str) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.ended = threading.Event()
        self.response = daemon.request("GET", path, stream=True, timeout=(10, 300))
        assert self.response.status_code == 200, self.response.text
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        name, data = "message", ""
        try:
            for line in self.response.iter_lines(decode_unicode=True):
                if line.startswith("event:"):
                    name = line[6:].strip()
                elif line.startswith("data:"):
                    data += line[5:].strip()
                elif line == "" and data:
                    self.events.append((name, json.loads(data)))
                    name, data = "message", ""
        except (requests.RequestException, ValueError, AttributeError):
            pass  # closed under the reader
        finally:
            self.ended.set()

    def wait(self, check: Callable[[tuple[str, dict[str, Any]]], bool], what: str) -> Any:
        return wait_for(
            lambda: next((e for e in list(self.events) if check(e)), None), what, TIMEOUT
        )

    def names(self, cid: str) -> list[str]:
        return [n for n, d in list(self.events) if d.get("conversation_id") == cid]

    def close(self) -> None:
        self.response.close()


@pytest.fixture
def pair(
    postgres: PostgresServer, emulator: Emulator, tools_dir: Path
) -> Iterator[tuple[DaemonProcess, DaemonProcess]]:
    """Replicas A and B on one fresh database (both started before any message: each daemon's
    start-up recovery would otherwise resume the other's running messages)."""
    dsn = postgres.create_database(f"r_{uuid.uuid4().hex[:12]}")
    a = start_daemon(emulator, tools_dir, dsn, api_key=KEY)
    try:
        b = start_daemon(emulator, tools_dir, dsn, api_key=KEY)
        try:
            yield a, b
        finally:
            b.stop()
    finally:
        a.stop()


def test_a_follower_of_b_sees_the_runs_of_a(pair: tuple[DaemonProcess, DaemonProcess]) -> None:
    a, b = pair
    follower = Follower(b, "/v1/events")
    try:
        follower.wait(lambda e: e[0] == "hello", "B's hello")
        cid = a.new_conversation()
        first = a.ask(cid, "weather in Paris")
        second = a.ask(cid, "lookup colour")
        assert first.status_code == 200 and second.status_code == 200, (first.text, second.text)

        def both_ended() -> list[dict[str, Any]] | None:
            ends = [d for n, d in list(follower.events) if n == "run_ended"]
            return ends if len(ends) >= 2 else None

        ends = wait_for(both_ended, "both runs of A to end on B's stream", TIMEOUT)
    finally:
        follower.close()
    names = follower.names(cid)
    assert names[0] == "conversation_created"
    for expected in ("run_started", "tool_calls", "tool_call_started", "tool_call_finished"):
        assert expected in names, names
    assert names.count("run_started") == 2 and names.count("run_ended") == 2
    assert [d["answer"] for d in ends] == ["Paris: 18 degrees", "result: value of colour"]
    assert all(d["status"] == "finished" for d in ends)
    # Every event of A is marked with the replica it came from; B's own are not.
    theirs = [d for n, d in follower.events if d.get("conversation_id") == cid]
    assert all(isinstance(d.get("replica"), str) and d["replica"] for d in theirs)
    finished = [d for n, d in follower.events if n == "tool_call_finished"]
    assert [d["name"] for d in finished] == ["get_weather", "lookup"]
    # The answer streamed too (text deltas travel, joined).
    text = "".join(d["text"] for n, d in follower.events if n == "text_delta")
    assert "Paris: 18 degrees" in text and "result: value of colour" in text
    # Operators see the relay's traffic in /metrics.
    sent = _counter(a.request("GET", "/metrics").text, "toolbridge_relay_sent_total")
    received = _counter(b.request("GET", "/metrics").text, "toolbridge_relay_received_total")
    assert sent >= len(theirs) and received >= len(theirs)


def test_a_replica_alone_sends_no_events_and_one_that_joins_hears_the_next_run(
    postgres: PostgresServer, emulator: Emulator, tools_dir: Path
) -> None:
    dsn = postgres.create_database(f"r_{uuid.uuid4().hex[:12]}")
    a = start_daemon(emulator, tools_dir, dsn, api_key=KEY)
    try:
        cid = a.new_conversation()
        assert a.ask(cid, "weather in Paris").status_code == 200
        metrics = a.request("GET", "/metrics").text
        # Nobody listens: only its own announcement went out, every event was skipped.
        assert _counter(metrics, "toolbridge_relay_sent_total") == 1
        assert _counter(metrics, "toolbridge_relay_skipped_total") >= 5
        b = start_daemon(emulator, tools_dir, dsn, api_key=KEY)
        try:
            # B started only once A had answered its hello: A's next run reaches B at once.
            follower = Follower(b, "/v1/events")
            try:
                follower.wait(lambda e: e[0] == "hello", "B's hello")
                assert a.ask(cid, "weather in Tokyo").status_code == 200
                ended = follower.wait(lambda e: e[0] == "run_ended", "A's run on B's stream")
            finally:
                follower.close()
            assert ended[1]["answer"] == "Tokyo: 22 degrees"
            assert "reset" not in [n for n, _ in follower.events]  # B missed nothing it shows
        finally:
            b.stop()
    finally:
        a.stop()


def _counter(exposition: str, name: str) -> float:
    [line] = [x for x in exposition.splitlines() if x.startswith(name + " ")]
    return float(line.split()[1])


def test_the_conversation_stream_on_b_follows_a_run_on_a(
    pair: tuple[DaemonProcess, DaemonProcess], tools_dir: Path
) -> None:
    a, b = pair
    cid = a.new_conversation()
    idle = b.request("GET", f"/v1/conversations/{cid}/events", timeout=30)
    assert idle.text.startswith("event: idle"), idle.text
    block = tools_dir / "block-slow_step"
    block.touch()
    replies: list[requests.Response] = []
    sender = threading.Thread(target=lambda: replies.append(a.ask(cid, "slow 0.05")), daemon=True)
    try:
        sender.start()
        wait_for(lambda: "slow_step 0.05" in executions(tools_dir), "the tool to run on A")
        assert b.request("GET", f"/v1/conversations/{cid}").json()["busy"] is True
        follower = Follower(b, f"/v1/conversations/{cid}/events")
    finally:
        block.unlink(missing_ok=True)
    try:
        done = follower.wait(lambda e: e[0] == "done", "the run's done event on B")[1]
        sender.join(TIMEOUT)
    finally:
        follower.close()
    assert replies and replies[0].status_code == 200, replies
    names = [n for n, _ in follower.events]
    assert "tool_call_finished" in names and names[-1] == "done", names
    assert done["status"] == "finished"
    assert done["result"]["answer"] == "slept 0.05" == replies[0].json()["answer"]
    assert [r["name"] for r in done["result"]["tool_runs"]] == ["slow_step"]
    assert done["message_id"] == replies[0].json()["message_id"]
    assert b.request("GET", f"/v1/conversations/{cid}").json()["busy"] is False
    again = b.request("GET", f"/v1/conversations/{cid}/events", timeout=30)
    assert again.text.startswith("event: idle"), again.text


def test_an_approval_decided_on_b_wakes_the_run_on_a(
    postgres: PostgresServer, tmp_path: Path
) -> None:
    dsn = postgres.create_database(f"r_{uuid.uuid4().hex[:12]}")
    with Emulator(scenario=CONSOLE_SCENARIO) as emulator:
        argv = [*write_tools(tmp_path / "tools"), "--port", "0", "--db", dsn, "--api-key", KEY]
        env = {**emulator.env(), "TB_TOOLS_DIR": str(tmp_path / "tools")}
        # A looks at the journal only every ten minutes by itself: only the notification of B's
        # decision can end the run within the test's timeout.
        a = DaemonProcess(argv, env={**env, "TOOLBRIDGE_APPROVAL_POLL_SECONDS": "600"}, api_key=KEY)
        try:
            b = DaemonProcess(argv, env=env, api_key=KEY)
            try:
                cid = a.new_conversation()
                replies: list[requests.Response] = []
                sender = threading.Thread(
                    target=lambda: replies.append(a.ask(cid, "wire 5 to bob", stream=False)),
                    daemon=True,
                )
                sender.start()
                pending = wait_for(
                    lambda: b.request("GET", "/v1/approvals").json()["items"],
                    "the approval request, listed on B",
                )
                decided = b.request(
                    "POST",
                    f"/v1/approvals/{pending[0]['approval_id']}",
                    json={"decision": "approve"},
                )
                assert decided.status_code == 200, decided.text
                sender.join(TIMEOUT)
                assert not sender.is_alive(), "the run on A was not woken by B's decision"
            finally:
                b.stop()
        finally:
            a.stop()
    assert replies[0].status_code == 200, replies[0].text
    assert replies[0].json()["answer"] == "result: wired 5 to bob"


def test_the_listener_comes_back_after_the_database_restarts(
    postgres: PostgresServer,  # only so that the test is skipped where no server exists
    emulator: Emulator,
    tools_dir: Path,
) -> None:
    with PostgresServer() as server:
        a = start_daemon(emulator, tools_dir, server.dsn, api_key=KEY)
        try:
            b = start_daemon(emulator, tools_dir, server.dsn, api_key=KEY)
            try:
                follower = Follower(b, "/v1/events")
                try:
                    follower.wait(lambda e: e[0] == "hello", "B's hello")
                    server.kill()
                    server.start()
                    wait_for(
                        lambda: "relay: listening again" in b.log,
                        "B's listener to reconnect",
                        TIMEOUT,
                    )
                    follower.wait(lambda e: e[0] == "reset", "a reset: B may have missed events")
                    cid = a.new_conversation()
                    reply = a.ask(cid, "weather in Tokyo")
                    assert reply.status_code == 200, reply.text
                    ended = follower.wait(
                        lambda e: e[0] == "run_ended" and e[1].get("conversation_id") == cid,
                        "A's run after the restart, on B's stream",
                    )[1]
                finally:
                    follower.close()
            finally:
                b.stop()
        finally:
            a.stop()
    assert ended["answer"] == "Tokyo: 22 degrees"
    assert server.password not in a.log and server.password not in b.log


def test_the_console_on_b_follows_a_run_on_a(
    pair: tuple[DaemonProcess, DaemonProcess], tools_dir: Path, tmp_path: Path
) -> None:
    a, b = pair
    cid = a.new_conversation()
    block = tools_dir / "block-get_weather"  # holds the run on A while the page looks
    with chromium(tmp_path / "profile", viewport={"width": 1280, "height": 860}) as context:
        page = context.new_page()
        problems: list[str] = []
        page.on("pageerror", lambda error: problems.append(str(error)))
        page.goto(b.url + "/")
        expect(page.locator("#key-form")).to_be_visible(timeout=UI_TIMEOUT)
        page.fill("#key-input", KEY)
        page.click("#key-form button")
        expect(page.get_by_test_id("live-state")).to_have_text("live", timeout=UI_TIMEOUT)
        # Created on A, listed on B (from the journal both share).
        item = page.locator(f'[data-testid="conversation-item"][data-id="{cid}"]')
        expect(item).to_be_visible(timeout=UI_TIMEOUT)
        item.get_by_role("button").click()
        expect(page.get_by_test_id("conversation-title")).to_have_text("New conversation")

        replies: list[requests.Response] = []
        sender = threading.Thread(
            target=lambda: replies.append(a.ask(cid, "what is the weather in Tokyo?")),
            daemon=True,
        )
        block.touch()
        try:
            sender.start()
            transcript = page.get_by_test_id("transcript")
            expect(transcript.get_by_test_id("user-message")).to_contain_text(
                "what is the weather in Tokyo?", timeout=UI_TIMEOUT
            )
            call = transcript.get_by_test_id("tool-call")
            expect(call.get_by_test_id("tool-name")).to_have_text("get_weather", timeout=UI_TIMEOUT)
            expect(call.get_by_test_id("tool-state")).to_have_text("running…", timeout=UI_TIMEOUT)
            expect(transcript.get_by_test_id("run-status")).to_have_text("running…")
        finally:
            block.unlink(missing_ok=True)
        expect(call.get_by_test_id("tool-output")).to_contain_text('"temp": 22', timeout=UI_TIMEOUT)
        expect(transcript.get_by_test_id("answer")).to_contain_text(
            "Tokyo: 22 degrees", timeout=UI_TIMEOUT
        )
        expect(transcript.get_by_test_id("run-status")).to_have_text("finished")
        expect(transcript.get_by_test_id("user-message")).to_have_count(1)
        # The list on B counts the message A answered; the page stayed on its live stream.
        expect(item).to_contain_text("1 message(s)", timeout=UI_TIMEOUT)
        expect(page.get_by_test_id("live-state")).to_have_text("live")
        sender.join(TIMEOUT)
        page.close()
    assert replies and replies[0].status_code == 200, replies
    assert problems == [], problems


# --- payloads ---------------------------------------------------------------------------------

# Long strings built cheaply (one character repeated): generating 10,000 random ones is slow.
LONG = st.builds(lambda c, n: c * n, st.characters(), st.integers(0, 12_000))
JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=40)
    | LONG,
    lambda inner: (
        st.lists(inner, max_size=30) | st.dictionaries(st.text(max_size=30), inner, max_size=30)
    ),
    max_leaves=120,
)


@settings(max_examples=120, deadline=None)
@given(
    data=st.dictionaries(st.text(max_size=50), JSON, max_size=30),
    name=st.text(max_size=40) | LONG,
    replica=st.text(max_size=40) | LONG,
)
def test_any_event_fits_in_one_notification(data: dict[str, Any], name: str, replica: str) -> None:
    payload = encode(Notice(replica, uuid.uuid4().hex, 7, name, data))
    assert len(payload.encode("utf-8")) <= PAYLOAD_LIMIT
    assert "\x00" not in payload
    json.loads(payload)  # valid JSON (no NaN)
    notice = decode(payload)
    assert notice is not None and notice.seq == 7
    if len(json.dumps(data)) < 1000 and all(
        isinstance(v, (str, int, bool)) or v is None for v in data.values()
    ):
        assert notice.data == data  # small events travel whole


def test_a_huge_event_keeps_its_ids_and_says_it_was_cut() -> None:
    data = {
        "conversation_id": "c-1",
        "message_id": 4,
        "call_id": "call-9",
        "name": "big_report",
        "output": "x" * 100_000,
        "arguments": {f"k{i}": "v" * 100 for i in range(500)},
    }
    notice = decode(encode(Notice("a:1", "i", 1, "tool_call_finished", data)))
    assert notice is not None
    got = notice.data
    assert (got["conversation_id"], got["message_id"], got["call_id"], got["name"]) == (
        "c-1",
        4,
        "call-9",
        "big_report",
    )
    assert got["output"].startswith("xxx") and "more characters]" in got["output"]


def test_a_pipe_alone_skips_events_and_marks_the_first_one_after() -> None:
    lost: list[str] = []
    pipe = RelayPipe(lambda: None, "a", on_notice=lambda notice: None, on_lost=lost.append)

    class Loop:
        def call_soon_threadsafe(self, fn: Callable[..., None], *args: Any) -> None:
            fn(*args)

    pipe._loop = Loop()  # type: ignore[assignment]
    pipe.post("run_started", {"conversation_id": "c"}, True)
    assert pipe.skipped == 1 and pipe._outbox.empty() and pipe.peers == 0
    # A replica that starts listening: it gets a reply, and nothing it shows was skipped.
    hello = Notice("b", "instance-b", 1, HELLO, {"reply": True})
    pipe._receive(encode(hello))
    assert pipe.peers == 1 and pipe._outbox.get_nowait()[0] == HELLO and not pipe._skipped
    pipe.post("run_started", {"conversation_id": "c"}, True)
    assert pipe._outbox.get_nowait()[0] == "run_started"
    # A peer marks the first event it sends after skipping some: this side resets.
    pipe._receive(encode(Notice("b", "instance-b", 2, "run_ended", {}, True, gap=True)))
    assert lost == ["events of replica b were missed"]
    pipe._receive(encode(Notice("b", "instance-b", 3, BYE, {})))
    assert pipe.peers == 0


def test_text_deltas_of_one_message_are_joined_in_order() -> None:
    def delta(cid: str, text: str) -> tuple[str, dict[str, Any], bool]:
        return ("text_delta", {"conversation_id": cid, "message_id": 1, "text": text}, False)

    batch = [
        delta("c1", "ab"),
        delta("c1", "cd"),
        ("tool_calls", {"conversation_id": "c1"}, True),
        delta("c1", "ef"),
        delta("c2", "zz"),
        delta("c1", "gh"),
    ]
    out = coalesce(batch)
    assert [(n, d.get("text")) for n, d, _ in out] == [
        ("text_delta", "abcd"),
        ("tool_calls", None),
        ("text_delta", "ef"),
        ("text_delta", "zz"),
        ("text_delta", "gh"),
    ]
