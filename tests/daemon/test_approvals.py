"""Approvals in the daemon: real `toolbridge serve` processes, a confirm tool, the HTTP API.

The tools (`TOOLS`) log each execution to ``executions.log`` in their folder; ``wire`` needs a
person's approval, ``balance`` does not. The emulated agent asks for both in one batch
("wire 5 to bob and check main"), or for ``wire`` alone ("wire 5 to bob").
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from bridge.emulator import Emulator
from tests.daemon.conftest import DaemonProcess, executions, wait_for

TOOLS = '''
"""Tools for the approval tests: each execution is logged."""

import os
from pathlib import Path

from bridge import manifest

HERE = Path(os.environ["TB_TOOLS_DIR"])


def _run(name: str, detail: object) -> None:
    with open(HERE / "executions.log", "a", encoding="utf-8") as log:
        log.write(f"{name} {detail}\\n")
        log.flush()
        os.fsync(log.fileno())


@manifest(description="Wire money: a person approves each call.", confirm=True)
def wire(amount: int, to: str) -> str:
    """Wire.

    Args:
        amount: Euros.
        to: Recipient.
    """
    _run("wire", f"{amount} {to}")
    return f"wired {amount} to {to}"


@manifest(description="Read a balance.", idempotent=True)
def balance(account: str) -> str:
    """Balance.

    Args:
        account: Account.
    """
    _run("balance", account)
    return f"{account} has 100"
'''

SCENARIO: dict[str, Any] = {
    "settings": {"fallback": "plain"},
    "rules": [
        {
            "match": r"wire (?P<n>\d+) to (?P<to>\w+) and check (?P<acct>\w+)",
            "steps": [
                {
                    "calls": [
                        {"tool": "wire", "arguments": {"amount": "{n}", "to": "{to}"}},
                        {"tool": "balance", "arguments": {"account": "{acct}"}},
                    ]
                }
            ],
            "answer": "{outputs.wire} | {outputs.balance}",
        },
        {
            "match": r"wire (?P<n>\d+) to (?P<to>\w+)",
            "steps": [{"tool": "wire", "arguments": {"amount": "{n}", "to": "{to}"}}],
            "answer": "result: {outputs.wire}",
        },
    ],
}

ALICE = "alice-key-0123456789abcdef"
BOB = "bob-key-0123456789abcdef00"
CAROL = "carol-key-0123456789abcdef"


@pytest.fixture(scope="module")
def emulator() -> Iterator[Emulator]:
    with Emulator(scenario=SCENARIO) as emu:
        yield emu


@pytest.fixture
def tools_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "tools"
    folder.mkdir()
    (folder / "approval_tools.py").write_text(TOOLS, encoding="utf-8")
    return folder


class Receiver:
    """A loopback HTTP server that records the JSON bodies POSTed to it."""

    def __init__(self, status: int = 200) -> None:
        self.bodies: list[dict[str, Any]] = []
        received = self.bodies

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                size = int(self.headers.get("content-length", "0"))
                received.append(json.loads(self.rfile.read(size)))
                self.send_response(status)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks/toolbridge"
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def start(
    emulator: Emulator, tools_dir: Path, db: Path, *args: str, key: str | None = None
) -> DaemonProcess:
    argv = [
        "--tools",
        str(tools_dir / "approval_tools.py"),
        "--port",
        "0",
        "--db",
        str(db),
        "--grace",
        "1",
        *args,
    ]
    env = {**emulator.env(), "TB_TOOLS_DIR": str(tools_dir)}
    return DaemonProcess(argv, env=env, api_key=key)


def as_(daemon: DaemonProcess, key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"} if key else {}


def pending(daemon: DaemonProcess, cid: str) -> list[dict[str, Any]]:
    response = daemon.request("GET", "/v1/approvals", params={"conversation_id": cid})
    assert response.status_code == 200, response.text
    return list(response.json()["items"])


def wait_pending(daemon: DaemonProcess, cid: str) -> dict[str, Any]:
    items = wait_for(lambda: pending(daemon, cid), "an approval request")
    assert len(items) == 1, items
    return dict(items[0])


def decide(
    daemon: DaemonProcess, approval_id: str, decision: str, note: str = "", **headers: str
) -> requests.Response:
    return daemon.request(
        "POST",
        f"/v1/approvals/{approval_id}",
        json={"decision": decision, "note": note},
        headers=headers,
    )


class Stream:
    """A message sent with ``stream: true``, read on a thread: its SSE events as they come."""

    def __init__(self, daemon: DaemonProcess, cid: str, query: str) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.done = threading.Event()
        self.response = daemon.request(
            "POST",
            f"/v1/conversations/{cid}/messages",
            json={"query": query, "stream": True},
            stream=True,
        )
        assert self.response.status_code == 200, self.response.text
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        name = ""
        with contextlib.suppress(requests.RequestException):
            for line in self.response.iter_lines(decode_unicode=True):
                if line.startswith("event: "):
                    name = line[7:]
                elif line.startswith("data: "):
                    self.events.append((name, json.loads(line[6:])))
        self.done.set()

    def names(self) -> list[str]:
        return [name for name, _ in self.events]

    def result(self) -> dict[str, Any]:
        assert self.done.wait(60), "the run did not end"
        name, data = self.events[-1]
        assert name == "done", self.events
        return data


def send_in_background(daemon: DaemonProcess, cid: str, query: str, key: str | None = None) -> None:
    def send() -> None:
        with contextlib.suppress(requests.RequestException):  # killed under the request
            daemon.request(
                "POST",
                f"/v1/conversations/{cid}/messages",
                json={"query": query},
                headers=as_(daemon, key),
            )

    threading.Thread(target=send, daemon=True).start()


def last_message(daemon: DaemonProcess, cid: str) -> dict[str, Any]:
    detail = daemon.request("GET", f"/v1/conversations/{cid}").json()
    return dict(detail["messages"][-1])


def metric(daemon: DaemonProcess, name: str, **labels: str) -> float:
    text = daemon.request("GET", "/metrics").text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return float(sample.value)
    return 0.0


# --- one daemon with named keys and a webhook --------------------------------------------------


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    hook = Receiver()
    yield hook
    hook.close()


@pytest.fixture
def keyed(
    emulator: Emulator, tools_dir: Path, tmp_path: Path, receiver: Receiver
) -> Iterator[DaemonProcess]:
    """A daemon with named keys (alice, bob) and an approval webhook."""
    keys = tmp_path / "keys.txt"
    keys.write_text(f"# who may use the daemon\nalice: {ALICE}\n\nbob: {BOB}\n", encoding="utf-8")
    daemon = start(
        emulator,
        tools_dir,
        tmp_path / "journal.db",
        "--api-key-file",
        str(keys),
        "--approval-webhook",
        receiver.url,
        key=ALICE,
    )
    daemon.keys = keys  # type: ignore[attr-defined]
    try:
        yield daemon
    finally:
        daemon.stop()


def test_a_confirm_call_waits_while_its_batch_runs_and_runs_once_approved(
    keyed: DaemonProcess, tools_dir: Path, receiver: Receiver
) -> None:
    cid = keyed.new_conversation()
    stream = Stream(keyed, cid, "wire 5 to bob and check main")
    request = wait_pending(keyed, cid)
    wait_for(lambda: "balance main" in executions(tools_dir), "the batch's other call to run")
    assert executions(tools_dir) == ["balance main"], "the confirm call ran before a decision"
    assert request["tool"] == "wire" and request["arguments"] == {"amount": 5, "to": "bob"}
    assert request["status"] == "pending" and request["requested_by"] == "alice"
    assert request["deadline"] > request["requested_at"] and request["decided_by"] is None
    assert keyed.request("GET", f"/v1/approvals/{request['approval_id']}").json() == request
    assert metric(keyed, "toolbridge_approvals_pending") == 1

    decided = decide(keyed, request["approval_id"], "approve", "ok", **as_(keyed, BOB))
    assert decided.status_code == 200, decided.text
    body = decided.json()
    assert (body["status"], body["decided_by"], body["note"]) == ("approved", "bob", "ok")

    result = stream.result()
    assert result["status"] == "finished"
    assert result["result"]["answer"] == "wired 5 to bob | main has 100"
    assert sorted(executions(tools_dir)) == ["balance main", "wire 5 bob"]
    names = stream.names()
    assert names.index("approval_requested") < names.index("approval_decided")
    wire_done = [
        i
        for i, (n, d) in enumerate(stream.events)
        if n == "tool_call_finished" and d["name"] == "wire"
    ]
    assert wire_done and wire_done[0] > names.index("approval_decided")
    requested = dict(stream.events)["approval_requested"]
    assert requested["approval_id"] == request["approval_id"]

    again = decide(keyed, request["approval_id"], "reject", **as_(keyed, BOB))
    assert again.status_code == 409, again.text
    assert again.json()["error"]["code"] == "approval_decided"
    assert "already approved by bob" in again.json()["error"]["message"]
    assert executions(tools_dir).count("wire 5 bob") == 1

    detail = keyed.request("GET", f"/v1/conversations/{cid}").json()
    assert detail["messages"][-1]["sent_by"] == "alice"
    [call] = [c for c in detail["tool_calls"] if c["name"] == "wire"]
    assert call["state"] == "submitted" and call["output"] == "wired 5 to bob"

    [hook] = wait_for(lambda: receiver.bodies, "the webhook's POST")
    assert hook["event"] == "approval_requested"
    assert hook["approval"]["approval_id"] == request["approval_id"]
    assert hook["approve_url"] == f"{keyed.url}/v1/approvals/{request['approval_id']}"
    assert metric(keyed, "toolbridge_approvals_total", outcome="approved") == 1
    assert metric(keyed, "toolbridge_approvals_pending") == 0


def test_a_rejection_with_a_note_is_what_the_model_reads(
    keyed: DaemonProcess, tools_dir: Path
) -> None:
    cid = keyed.new_conversation()
    stream = Stream(keyed, cid, "wire 9 to eve")
    request = wait_pending(keyed, cid)
    busy = keyed.ask(cid, "wire 1 to eve")
    assert busy.status_code == 409, busy.text
    assert (
        f"waits for a person's decision (approval {request['approval_id']}"
        in (busy.json()["error"]["message"])
    )
    decided = decide(keyed, request["approval_id"], "reject", "eve is not a customer")
    assert decided.status_code == 200 and decided.json()["decided_by"] == "alice"
    result = stream.result()["result"]
    assert result["answer"] == (
        "result: The tool call was not run: rejected by alice: eve is not a customer"
    )
    assert result["tool_runs"][0]["error"] == "rejected"
    assert executions(tools_dir) == [], "a rejected call never runs"
    listed = keyed.request("GET", "/v1/approvals", params={"status": "rejected"}).json()
    assert [r["approval_id"] for r in listed["items"]] == [request["approval_id"]]
    assert listed["total"] == 1
    assert metric(keyed, "toolbridge_approvals_total", outcome="rejected") == 1


def test_bad_requests_get_clear_errors(keyed: DaemonProcess) -> None:
    missing = decide(keyed, "no-such-approval", "approve")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "approval_not_found"
    assert keyed.request("GET", "/v1/approvals/no-such-approval").status_code == 404
    bad = keyed.request("POST", "/v1/approvals/abc", json={"decision": "maybe"})
    assert bad.status_code == 422 and "decision" in bad.json()["error"]["message"]
    extra = keyed.request("POST", "/v1/approvals/abc", json={"decision": "approve", "x": 1})
    assert extra.status_code == 422
    status = keyed.request("GET", "/v1/approvals", params={"status": "done"})
    assert status.status_code == 422 and "status" in status.json()["error"]["message"]
    nobody = keyed.request("GET", "/v1/approvals", headers={"Authorization": "Bearer wrong-key"})
    assert nobody.status_code == 401
    assert keyed.request("GET", "/v1/approvals", headers=as_(keyed, BOB)).status_code == 200


def test_sighup_reloads_the_key_file_and_a_broken_one_keeps_the_keys(
    keyed: DaemonProcess,
) -> None:
    keys: Path = keyed.keys  # type: ignore[attr-defined]
    keys.write_text(f"alice: {ALICE}\ncarol: {CAROL}\n", encoding="utf-8")
    keyed.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: "callers reloaded" in keyed.log, "the reload")
    assert keyed.request("GET", "/v1/approvals", headers=as_(keyed, CAROL)).status_code == 200
    assert keyed.request("GET", "/v1/approvals", headers=as_(keyed, BOB)).status_code == 401

    keys.write_text(f"alice: {ALICE}\ncarol: tiny-key\n", encoding="utf-8")
    keyed.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: "were not reloaded" in keyed.log, "the refused reload")
    assert "line 2" in keyed.log and "tiny-key" not in keyed.log
    assert keyed.request("GET", "/v1/approvals", headers=as_(keyed, CAROL)).status_code == 200
    assert keyed.proc.poll() is None


# --- deadlines, restarts, start-up errors ---------------------------------------------------------


def test_an_unanswered_request_expires_with_a_clear_note(
    emulator: Emulator, tools_dir: Path, tmp_path: Path
) -> None:
    daemon = start(
        emulator,
        tools_dir,
        tmp_path / "journal.db",
        "--approval-timeout",
        "1",
        "--approval-webhook",
        "http://127.0.0.1:1/refused",
    )
    try:
        cid = daemon.new_conversation()
        response = daemon.ask(cid, "wire 3 to dan")
        assert response.status_code == 200, response.text
        answer = response.json()["answer"]
        assert answer.startswith("result: The tool call was not run: rejected: no one approved ")
        assert "within 1 second" in answer
        assert executions(tools_dir) == []
        [record] = daemon.request(
            "GET", "/v1/approvals", params={"status": "expired", "conversation_id": cid}
        ).json()["items"]
        assert record["decided_by"] is None and record["note"].startswith("no one approved")
        late = decide(daemon, record["approval_id"], "approve")
        assert late.status_code == 409 and "already expired" in late.json()["error"]["message"]
        assert metric(daemon, "toolbridge_approvals_total", outcome="expired") == 1
        wait_for(lambda: "could not post approval" in daemon.log, "the webhook failure logged")
        assert "/refused" not in daemon.log, "the webhook URL may hold a credential"
    finally:
        daemon.stop()


def test_a_pending_approval_survives_kill_9_and_approving_it_continues_the_run(
    emulator: Emulator, tools_dir: Path, tmp_path: Path
) -> None:
    db = tmp_path / "journal.db"
    first = start(emulator, tools_dir, db)
    try:
        cid = first.new_conversation()
        send_in_background(first, cid, "wire 7 to eve and check savings")
        request = wait_pending(first, cid)

        def balance_finished() -> bool:
            calls = first.request("GET", f"/v1/conversations/{cid}").json()["tool_calls"]
            return any(c["name"] == "balance" and c["state"] == "finished" for c in calls)

        # Journaled "finished", not only logged: a kill between the two would rightly run the
        # idempotent tool again.
        wait_for(balance_finished, "the other call to finish")
    finally:
        first.kill9()
    second = start(emulator, tools_dir, db)
    try:
        again = wait_pending(second, cid)
        assert again["approval_id"] == request["approval_id"] and again["status"] == "pending"
        assert again["deadline"] == request["deadline"], "the deadline is the original one"
        assert last_message(second, cid)["status"] == "running"
        decided = decide(second, again["approval_id"], "approve")
        assert decided.status_code == 200, decided.text
        message = wait_for(
            lambda: (m := last_message(second, cid))["status"] != "running" and m,
            "the resumed run to end",
        )
        assert message["status"] == "finished", message
        assert message["answer"] == "wired 7 to eve | savings has 100"
        assert executions(tools_dir).count("wire 7 eve") == 1
        assert executions(tools_dir).count("balance savings") == 1, "a finished call never reruns"
    finally:
        second.stop()


def test_a_stop_while_a_call_waits_leaves_it_pending_for_the_next_start(
    emulator: Emulator, tools_dir: Path, tmp_path: Path
) -> None:
    db = tmp_path / "journal.db"
    first = start(emulator, tools_dir, db)  # --grace 1
    cid = first.new_conversation()
    send_in_background(first, cid, "wire 2 to ann")
    request = wait_pending(first, cid)
    first.proc.send_signal(signal.SIGTERM)
    assert first.wait_exit(60) == 0, first.log
    second = start(emulator, tools_dir, db)
    try:
        assert wait_pending(second, cid)["approval_id"] == request["approval_id"]
        assert decide(second, request["approval_id"], "reject", "not now").status_code == 200
        message = wait_for(
            lambda: (m := last_message(second, cid))["status"] != "running" and m,
            "the resumed run to end",
        )
        assert (
            message["answer"] == "result: The tool call was not run: rejected by anonymous: not now"
        )
        assert executions(tools_dir) == []
    finally:
        second.stop()


def test_a_broken_key_file_stops_the_daemon_at_start(emulator: Emulator, tmp_path: Path) -> None:
    keys = tmp_path / "keys.txt"
    keys.write_text(f"alice: {ALICE}\nbob {BOB}\nalice: {CAROL}\n", encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "bridge", "serve", "--api-key-file", str(keys), "--port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **emulator.env(), "TOOLBRIDGE_DB": str(tmp_path / "journal.db")},
        cwd=tmp_path,
    )
    assert done.returncode == 2, done.stderr
    assert "line 2: expected 'name: key'" in done.stderr
    assert "line 3: the name 'alice' is used on line 1 too" in done.stderr
    assert ALICE not in done.stderr and BOB not in done.stderr
    assert not (tmp_path / "journal.db").exists()
