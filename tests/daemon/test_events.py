"""The daemon-wide event stream (/v1/events), /v1/info, tool sources and direct tool calls.

Real `toolbridge serve` processes against the emulator; events are read from the SSE stream
with `requests` as any client would.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from bridge.daemon.hub import ID_SPAN, EventHub
from bridge.daemon.routers.tools import source_of
from bridge.emulator import Emulator
from bridge.loading import load_tools
from tests.daemon.conftest import DaemonProcess, wait_for
from tests.daemon.console_setup import API_KEY, SCENARIO, start_console_daemon


@pytest.fixture(scope="module")
def emulator() -> Iterator[Emulator]:
    with Emulator(scenario=SCENARIO) as emu:
        yield emu


@pytest.fixture(scope="module")
def daemon(emulator: Emulator, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    proc = start_console_daemon(emulator, tmp_path_factory.mktemp("events"))
    try:
        yield proc
    finally:
        proc.stop()


class EventReader:
    """Reads /v1/events on a thread; `until` waits for an event matching a test."""

    def __init__(self, daemon: DaemonProcess, **headers: str) -> None:
        self.events: list[tuple[str | None, str, dict[str, Any]]] = []
        self._changed = threading.Condition()
        self.response = daemon.request(
            "GET", "/v1/events", headers=headers, stream=True, timeout=(10, 60)
        )
        assert self.response.status_code == 200, self.response.text
        assert self.response.headers["content-type"].startswith("text/event-stream")
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        name, event_id, data = "message", None, []
        try:
            for raw in self.response.iter_lines(decode_unicode=True):
                line = raw or ""
                if not line:
                    if data:
                        with self._changed:
                            self.events.append((event_id, name, json.loads("\n".join(data))))
                            self._changed.notify_all()
                    name, event_id, data = "message", None, []
                elif line.startswith("event:"):
                    name = line[6:].strip()
                elif line.startswith("id:"):
                    event_id = line[3:].strip()
                elif line.startswith("data:"):
                    data.append(line[5:].lstrip())
        except (requests.RequestException, AttributeError):
            pass  # closed by the test

    def until(
        self, name: str, timeout: float = 30, **match: Any
    ) -> tuple[str | None, dict[str, Any]]:
        def found() -> tuple[str | None, dict[str, Any]] | None:
            for event_id, event_name, data in self.events:
                if event_name == name and all(data.get(k) == v for k, v in match.items()):
                    return event_id, data
            return None

        with self._changed:
            if not self._changed.wait_for(lambda: found() is not None, timeout):
                raise AssertionError(f"no {name} event {match} in {self.names()}")
        result = found()
        assert result is not None
        return result

    def names(self) -> list[str]:
        return [name for _, name, _ in self.events]

    def close(self) -> None:
        # Closing the response alone waits for the reading thread's next line (a keepalive
        # comment comes every 15 s): shut the socket so that read ends now.
        connection = getattr(self.response.raw, "_connection", None)
        sock = getattr(connection, "sock", None)
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self._thread.join(timeout=10)
        self.response.close()


def test_info_names_the_platform_and_never_its_token(
    daemon: DaemonProcess, emulator: Emulator
) -> None:
    response = daemon.request("GET", "/v1/info")
    assert response.status_code == 200, response.text
    info = response.json()
    assert info["platform"] == "appbuilder"
    assert info["base_url"] == emulator.base_url
    assert info["app_id"] == emulator.app_id
    assert info["is_emulator"] is True
    assert info["tools"] == 4
    assert info["auth"] is True
    assert emulator.token not in response.text
    assert API_KEY not in response.text
    assert requests.get(daemon.url + "/v1/info", timeout=10).status_code == 401


def test_events_carry_another_clients_run_and_resume_after_last_event_id(
    daemon: DaemonProcess,
) -> None:
    reader = EventReader(daemon)
    try:
        cid = daemon.new_conversation()
        reader.until("conversation_created", conversation_id=cid)
        answer = daemon.ask(cid, "what is the weather in Paris?")
        assert answer.status_code == 200, answer.text
        started_id, started = reader.until("run_started", conversation_id=cid)
        assert started["query"] == "what is the weather in Paris?"
        _, finished = reader.until("tool_call_finished", conversation_id=cid)
        assert finished["name"] == "get_weather" and '"temp": 18' in finished["output"]
        assert isinstance(finished["message_id"], int)
        _, ended = reader.until("run_ended", conversation_id=cid)
        assert ended["status"] == "finished"
        assert ended["answer"] == "Paris: 18 degrees"
        assert ended["error"] is None
        assert "text_delta" in reader.names()  # live followers get the answer as it streams
        assert reader.events[0][:2] == (None, "hello")  # no id: nothing to resume from
        ids = [int(i) for i, _, _ in reader.events if i is not None]
        assert ids == sorted(ids) and len(set(ids)) == len(ids)
    finally:
        reader.close()

    # A client that lost the stream after run_started gets the rest again (not the text).
    again = EventReader(daemon, **{"Last-Event-ID": str(started_id)})
    try:
        again.until("run_ended", conversation_id=cid)
        replayed = [(name, data.get("conversation_id")) for _, name, data in again.events]
        assert ("run_started", cid) not in replayed
        assert ("tool_call_finished", cid) in replayed
        assert "text_delta" not in [name for name, _ in replayed]
    finally:
        again.close()


def test_a_failed_run_tells_its_error_kind_and_message(daemon: DaemonProcess) -> None:
    reader = EventReader(daemon)
    try:
        cid = daemon.new_conversation()
        response = daemon.ask(cid, "explode")
        assert response.status_code == 502, response.text
        _, failed = reader.until("failed", conversation_id=cid)
        assert "the code node failed" in failed["message"]
        _, ended = reader.until("run_ended", conversation_id=cid)
        assert ended["status"] == "failed"
        assert ended["error"]["code"] == "run_failed"
        assert "the code node failed" in ended["error"]["message"]
    finally:
        reader.close()


@pytest.mark.parametrize(
    ("header", "expected"),
    [("soon", "must be an event id"), ("-3", "0 or more")],
)
def test_a_bad_last_event_id_is_refused(daemon: DaemonProcess, header: str, expected: str) -> None:
    response = daemon.request("GET", "/v1/events", headers={"Last-Event-ID": header})
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "bad_last_event_id"
    assert expected in response.json()["error"]["message"]


def test_a_last_event_id_from_before_a_restart_gets_a_reset(daemon: DaemonProcess) -> None:
    reader = EventReader(daemon, **{"Last-Event-ID": "999999999"})
    try:
        _, hello = reader.until("hello")
        _, reset = reader.until("reset")
        assert reset["last_id"] == hello["last_id"] != 999999999
    finally:
        reader.close()


def test_an_id_from_another_hub_is_never_replayed_against_this_one() -> None:
    """Replicas behind a load balancer, or a restart: the same number means other events."""
    mine, other = EventHub(base=ID_SPAN), EventHub(base=2 * ID_SPAN)
    for n in range(5):
        mine.publish("tick", {"n": n})
        other.publish("tick", {"n": n})
    assert mine.since(mine.last_id - 2) == (mine.since(mine.last_id - 2)[0], False)
    assert [e.data["n"] for e in mine.since(mine.last_id - 2)[0]] == [3, 4]
    assert other.since(mine.last_id - 2) == ([], True)
    assert mine.since(0)[0][0].data["n"] == 0  # 0: from the first
    assert EventHub().last_id % ID_SPAN == 0 and EventHub().last_id < 2**52


def test_the_tools_api_says_where_each_tool_comes_from(daemon: DaemonProcess) -> None:
    tools = {t["name"]: t for t in daemon.request("GET", "/v1/tools").json()["tools"]}
    assert tools["get_weather"]["source"]["kind"] == "python"
    assert tools["get_weather"]["source"]["location"].endswith("console_tools.py:get_weather")
    assert tools["list_tickets"]["source"] == {
        "kind": "http",
        "location": tools["list_tickets"]["source"]["location"],
    }
    assert tools["list_tickets"]["source"]["location"].endswith("tickets.yaml")
    assert tools["big_report"]["read_only"] is True
    assert tools["wire"]["confirm"] is True
    assert tools["get_weather"]["timeout"] == 20


@pytest.mark.parametrize(
    ("origin", "kind", "location"),
    [
        ("mcp:uvx mcp-server-time:now", "mcp", "mcp:uvx mcp-server-time"),
        ("mcp+http://127.0.0.1:8000/mcp:now", "mcp", "mcp+http://127.0.0.1:8000/mcp"),
        ("openapi:http://h:1/api.json:now", "openapi", "http://h:1/api.json"),
        ("/srv/tools/crm.yml:now", "http", "/srv/tools/crm.yml"),
        ("pkg.tools:now", "python", "pkg.tools:now"),
    ],
)
def test_source_of_reads_each_loaders_origin(origin: str, kind: str, location: str) -> None:
    import dataclasses

    spec = next(iter(load_tools(["manifests/time.py"])))
    source = source_of(dataclasses.replace(spec, name="now", origin=origin))
    assert (source.kind, source.location) == (kind, location)


def test_an_openapi_tool_is_an_openapi_source(tmp_path: Path) -> None:
    document = {
        "openapi": "3.0.0",
        "info": {"title": "t", "version": "1"},
        "servers": [{"url": "http://127.0.0.1:9"}],
        "paths": {"/ping": {"get": {"operationId": "ping", "summary": "Ping."}}},
    }
    path = tmp_path / "api.json"
    path.write_text(json.dumps(document), encoding="utf-8")
    with load_tools([f"openapi:{path}"]) as box:
        source = source_of(box.get("ping"))  # type: ignore[arg-type]
    assert source.kind == "openapi"
    assert source.location == str(path)


def test_calling_a_tool_directly(daemon: DaemonProcess) -> None:
    ok = daemon.request(
        "POST", "/v1/tools/get_weather/call", json={"arguments": {"city": "Tokyo", "unit": "F"}}
    )
    assert ok.status_code == 200, ok.text
    body = ok.json()
    assert body["error"] is None and json.loads(body["output"])["temp"] == 72
    assert body["duration_ms"] >= 0 and body["name"] == "get_weather"

    bad = daemon.request("POST", "/v1/tools/get_weather/call", json={"arguments": {"unit": "K"}})
    assert bad.status_code == 200
    assert bad.json()["error"] == "invalid_arguments"
    assert "city" in bad.json()["output"]

    unknown = daemon.request("POST", "/v1/tools/nope/call", json={"arguments": {}})
    assert unknown.status_code == 404
    assert unknown.json()["error"]["code"] == "tool_not_found"
    assert "get_weather" in unknown.json()["error"]["message"]

    extra = daemon.request("POST", "/v1/tools/get_weather/call", json={"args": {}})
    assert extra.status_code == 422


def test_a_confirm_tool_runs_directly_only_when_confirmed(daemon: DaemonProcess) -> None:
    arguments = {"amount": 5, "to": "bob"}
    refused = daemon.request("POST", "/v1/tools/wire/call", json={"arguments": arguments})
    assert refused.status_code == 409
    assert refused.json()["error"]["code"] == "confirmation_required"
    assert '"confirm": true' in refused.json()["error"]["message"]
    confirmed = daemon.request(
        "POST", "/v1/tools/wire/call", json={"arguments": arguments, "confirm": True}
    )
    assert confirmed.status_code == 200, confirmed.text
    assert confirmed.json()["output"] == "wired 5 to bob"
    # The log line is read from the daemon's output by another thread: wait for it.
    wait_for(
        lambda: "tool wire called directly by default (confirmed): ok" in daemon.log,
        "the direct call's log line",
    )
    for loose in ("yes", "true", 1, "on"):  # only a JSON true is a confirmation
        body = {"arguments": arguments, "confirm": loose}
        coerced = daemon.request("POST", "/v1/tools/wire/call", json=body)
        assert coerced.status_code == 422, coerced.text
        assert "confirm" in coerced.json()["error"]["message"]


def test_a_stop_ends_the_event_streams(emulator: Emulator, tmp_path: Path) -> None:
    """An open console page must not hold a stopping daemon until its grace runs out."""
    proc = start_console_daemon(emulator, tmp_path, "--grace", "120")
    reader = EventReader(proc)
    try:
        proc.new_conversation()
        reader.until("conversation_created")
        proc.stop()  # SIGTERM; kills after 30 s, and the exit code says which it was
        assert proc.proc.returncode == 0, proc.log
        reader.until("closing")
    finally:
        reader.close()
        proc.stop()


def test_the_hub_keeps_a_bounded_history_and_serves_any_thread() -> None:
    async def scenario() -> list[str]:
        hub = EventHub(history=3, base=0)
        hub.bind(asyncio.get_running_loop())
        for n in range(5):
            hub.publish("tick", {"n": n})
        assert [e.data["n"] for e in hub.since(2)[0]] == [2, 3, 4]
        assert hub.since(1) == (hub.since(1)[0], True)  # event 2 was pushed out
        hub.publish("text_delta", {"text": "x"}, replay=False)
        assert hub.last_id == 6 and len(hub.since(0)[0]) == 3
        seen: list[str] = []

        async def follow() -> None:
            async for event in hub.follow(1, keepalive=None):
                assert event is not None
                seen.append(event.name)
                if event.name == "done":
                    return

        task = asyncio.create_task(follow())
        await asyncio.sleep(0.01)
        worker = threading.Thread(target=hub.publish, args=("done", {}))
        worker.start()
        worker.join()
        await asyncio.wait_for(task, 10)
        return seen

    assert asyncio.run(scenario()) == ["hello", "reset", "done"]
