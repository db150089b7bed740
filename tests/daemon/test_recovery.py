"""Crash recovery: `kill -9` the daemon at each journal state, restart it, check every call.

One daemon process is stopped with five conversations at five different points:

    A  "charge 5"      held right after its batch was written "received" (the tool never ran)
    B  "lookup k"      its idempotent tool started and is blocked when the process dies
    C  "charge 7"      its non-idempotent tool started and is blocked when the process dies
    D  "email bob"     held after its call was written "finished", before "submitted"
    E  "weather in X"  held after "submitted" (outputs may or may not have been sent)

then `kill -9`. A second process on the same --db must run nothing twice (except B, whose
tool is idempotent), submit D's recorded output, and end every message.
"""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path
from typing import Any

import requests
from prometheus_client.parser import text_string_to_metric_families

from bridge.emulator import Emulator
from tests.daemon.conftest import DaemonProcess, executions, start_daemon, wait_for


def _send_in_background(daemon: DaemonProcess, cid: str, query: str) -> threading.Thread:
    def send() -> None:
        with contextlib.suppress(requests.RequestException):  # killed under the request
            daemon.ask(cid, query)

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    return thread


def _last_message(daemon: DaemonProcess, cid: str) -> dict[str, Any]:
    detail = daemon.request("GET", f"/v1/conversations/{cid}").json()
    return dict(detail["messages"][-1])


def test_kill_9_at_each_journal_state_then_restart(
    emulator: Emulator, tools_dir: Path, tmp_path: Path
) -> None:
    (tools_dir / "executions.log").unlink(missing_ok=True)
    db = tmp_path / "journal.db"
    marks = {step: tmp_path / f"hit-{step}" for step in ("received", "finished", "submitted")}
    failpoints = ",".join(f"{step}:{path}" for step, path in marks.items())
    (tools_dir / "block-lookup").touch()
    (tools_dir / "block-charge").touch()
    first = start_daemon(emulator, tools_dir, db, env={"TOOLBRIDGE_FAILPOINT": failpoints})
    try:
        ids = {key: first.new_conversation() for key in "ABCDE"}
        _send_in_background(first, ids["A"], "charge 5")
        wait_for(marks["received"].exists, "A to be held after 'received'")
        _send_in_background(first, ids["B"], "lookup k")
        _send_in_background(first, ids["C"], "charge 7")
        wait_for(lambda: {"lookup k", "charge 7"} <= set(executions(tools_dir)), "B and C to run")
        _send_in_background(first, ids["D"], "email bob")
        wait_for(marks["finished"].exists, "D to be held after 'finished'")
        _send_in_background(first, ids["E"], "weather in Paris")
        wait_for(marks["submitted"].exists, "E to be held after 'submitted'")
        first.kill9()
    finally:
        first.stop()
    before = executions(tools_dir)
    assert sorted(before) == ["charge 7", "get_weather Paris", "lookup k", "send_email bob"]
    assert emulator.conversation(ids["D"]).pending_call_ids, "D's output was never sent"

    (tools_dir / "block-lookup").unlink()
    (tools_dir / "block-charge").unlink()
    second = start_daemon(emulator, tools_dir, db)
    try:
        ended = {
            key: wait_for(
                lambda cid=cid: (m := _last_message(second, cid))["status"] != "running" and m,
                f"conversation {key} to end",
            )
            for key, cid in ids.items()
        }
        metrics = second.request("GET", "/metrics").text
        detail_c = second.request("GET", f"/v1/conversations/{ids['C']}").json()
    finally:
        second.stop()

    after = executions(tools_dir)
    assert after.count("charge 5") == 1, "A's call never started before the crash: it runs once"
    assert after.count("lookup k") == 2, "B's tool is idempotent: it runs again"
    assert after.count("charge 7") == 1, "C started and is not idempotent: never run twice"
    assert after.count("send_email bob") == 1, "D finished: its recorded output is sent"
    assert after.count("get_weather Paris") == 1, "E is not run again"

    assert ended["A"]["status"] == "finished" and ended["A"]["answer"] == "result: charged 5"
    assert ended["B"]["status"] == "finished" and ended["B"]["answer"] == "result: value of k"
    assert ended["C"]["status"] == "finished"
    assert "interrupted by a restart" in ended["C"]["answer"]
    assert "not marked idempotent" in ended["C"]["answer"]
    [call_c] = detail_c["tool_calls"]
    assert call_c["state"] == "submitted" and call_c["error"] == "tool_error"
    assert ended["D"]["status"] == "finished" and ended["D"]["answer"] == "result: sent to bob"
    assert ended["E"]["status"] == "failed" and ended["E"]["error_code"] == "interrupted"
    assert "ask again" in ended["E"]["error_message"]
    assert emulator.conversation(ids["D"]).pending_call_ids == ()
    recovered = {
        sample.labels["action"]: sample.value
        for family in text_string_to_metric_families(metrics)
        for sample in family.samples
        if sample.name == "toolbridge_recovered_messages_total"
    }
    assert recovered == {"resumed": 4, "failed": 1}
    assert "resuming message" in second.log
