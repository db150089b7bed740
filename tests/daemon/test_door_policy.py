"""The daemon with ``--policy`` (Cedar) and callers: direct calls take the policy's decision
(refused: 403 naming the policy; approval: 409, a direct call cannot wait), calls in a
conversation too (refused: the model reads why; approval: the approvals queue), and every
step is in the audit record of the daemon's journal (refusals at the door as ``identity``)."""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bridge.emulator import Emulator
from tests.daemon.conftest import DaemonProcess, executions, start_daemon, wait_for
from tests.daemon.test_door import call, write_callers

POLICY = """
@id("everyday-tools")
permit (principal, action == Action::"call", resource)
when { resource == Tool::"lookup" || resource == Tool::"get_weather" };

@id("no-secrets")
@reason("secrets stay put")
forbid (principal, action == Action::"call", resource == Tool::"lookup")
when { context.arguments has key && context.arguments.key == "secret" };

@id("big-lookups")
@approval("required")
permit (principal, action == Action::"call", resource == Tool::"lookup")
when { context.arguments has key && context.arguments.key == "big" };
"""


@pytest.fixture
def governed(emulator: Emulator, tools_dir: Path, tmp_path: Path) -> Iterator[DaemonProcess]:
    callers = write_callers(
        tmp_path / "callers.toml",
        {
            "ops": {"roles": ["call_tools"], "tools": ["lookup"]},
            "chat": {"roles": ["converse"], "tools": ["lookup"]},
            "pat": {"roles": ["approve"]},
        },
    )
    policy = tmp_path / "policy.cedar"
    policy.write_text(POLICY, encoding="utf-8")
    db = tmp_path / "journal.db"
    daemon = start_daemon(
        emulator, tools_dir, db, "--callers", str(callers), "--policy", str(policy)
    )
    daemon.db = db  # type: ignore[attr-defined]
    try:
        yield daemon
    finally:
        daemon.stop()


def audit(daemon: DaemonProcess) -> list[dict[str, Any]]:
    """The audit record's entries, read from the running daemon's SQLite journal."""
    uri = f"file:{daemon.db}?mode=ro"  # type: ignore[attr-defined]
    with contextlib.closing(sqlite3.connect(uri, uri=True)) as db:
        rows = db.execute("SELECT entry FROM audit ORDER BY chain, seq").fetchall()
    return [json.loads(entry) for (entry,) in rows]


def lookup(daemon: DaemonProcess, who: str | None, key: str) -> Any:
    return call(daemon, who, "POST", "/v1/tools/lookup/call", json={"arguments": {"key": key}})


def test_a_direct_call_takes_the_policys_decision_and_is_audited(
    governed: DaemonProcess, tools_dir: Path
) -> None:
    ok = lookup(governed, "ops", "k1")
    assert ok.status_code == 200 and ok.json()["error"] is None, ok.text

    refused = lookup(governed, "ops", "secret")
    assert refused.status_code == 403, refused.text
    error = refused.json()["error"]
    assert error["code"] == "policy_refused"
    assert "no-secrets" in error["message"] and "secrets stay put" in error["message"]

    waits = lookup(governed, "ops", "big")
    assert waits.status_code == 409 and waits.json()["error"]["code"] == "approval_required"
    assert "big-lookups" in waits.json()["error"]["message"]
    assert [line for line in executions(tools_dir) if "secret" in line or "big" in line] == []

    entries = audit(governed)
    seen = {(e.get("kind"), e.get("outcome"), e.get("caller")) for e in entries}
    assert {
        ("policy", "allow", "ops"),
        ("direct_call", "ok", "ops"),
        ("policy", "refuse", "ops"),
        ("direct_call", "refused", "ops"),
        ("policy", "approval", "ops"),
    } <= seen, seen


def test_refusals_at_the_door_are_audited_as_identity_events(governed: DaemonProcess) -> None:
    assert lookup(governed, None, "k").status_code == 401
    assert lookup(governed, "chat", "k").status_code == 403
    identity = [e for e in audit(governed) if e.get("kind") == "identity"]
    assert [(e["outcome"], e.get("caller")) for e in identity] == [
        ("unauthorized", None),
        ("forbidden", "chat"),
    ]
    assert "POST /v1/tools/lookup/call" in json.dumps(identity[1])


def test_in_a_conversation_the_policy_refuses_or_sends_to_approval(
    governed: DaemonProcess, tools_dir: Path
) -> None:
    cid = call(governed, "chat", "POST", "/v1/conversations", json={}).json()["conversation_id"]
    path = f"/v1/conversations/{cid}/messages"
    refused = call(governed, "chat", "POST", path, json={"query": "lookup secret"})
    assert refused.status_code == 200, refused.text
    assert (
        "no-secrets" in refused.json()["answer"] and "secrets stay put" in refused.json()["answer"]
    )
    assert not any("secret" in line for line in executions(tools_dir))

    answer: dict[str, Any] = {}
    sender = threading.Thread(
        target=lambda: answer.update(
            r=call(governed, "chat", "POST", path, json={"query": "lookup big"})
        ),
        daemon=True,
    )
    sender.start()
    [request] = wait_for(
        lambda: call(governed, "pat", "GET", "/v1/approvals").json()["items"], "the approval"
    )
    assert request["tool"] == "lookup" and request["requested_by"] == "chat"
    decided = call(
        governed,
        "pat",
        "POST",
        f"/v1/approvals/{request['approval_id']}",
        json={"decision": "approve"},
    )
    assert decided.status_code == 200, decided.text
    sender.join(60)
    assert answer["r"].status_code == 200, answer["r"].text
    assert any("lookup big" in line for line in executions(tools_dir))
    kinds = {(e.get("kind"), e.get("outcome")) for e in audit(governed)}
    assert {("message", "sent"), ("approval", "approved"), ("policy", "refuse")} <= kinds
