"""`toolbridge policy replay`: a candidate policy evaluated against every call in a journal of
more than a thousand calls, counting exactly the decisions that would change, while the
journal's file stays untouched."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bridge.access import AuditEvent, AuditLog
from bridge.cli import app
from bridge.journal import SQLiteJournal
from bridge.types import ToolBatch, ToolCall

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[2]
DEMO_POLICY = ROOT / "examples" / "policies" / "demo.cedar"
DEMO = "bridge.demo.tools"
CONVERSATIONS = 60
CALLS_PER_MESSAGE = 18  # 60 x 18 = 1,080 calls, and one direct call

CALLERS = """\
[roles.staff]
permissions = ["converse"]
tools = ["*"]

[roles.guest]
permissions = ["converse"]
tools = ["*"]

[callers.alice]
key_sha256 = "{a}"
roles = ["staff"]

[callers.bob]
key_sha256 = "{b}"
roles = ["guest"]
""".format(a="a" * 64, b="b" * 64)


def _calls(n: int) -> list[ToolCall]:
    """Each message: lookups, bookings in Beijing, and in Shenzhen (which the old policy
    refused, as the audit record says)."""
    kinds = [
        ("get_weather", {"city": "北京"}),
        ("find_employee", {"name": "张伟"}),
        ("book_meeting_room", {"city": "北京", "attendee": "张伟", "time": "10:00"}),
        ("book_meeting_room", {"city": "深圳", "attendee": "张伟", "time": "11:00"}),
        ("get_weather", {"city": "上海"}),
        ("find_employee", {"name": "李娜"}),
    ]
    return [
        ToolCall(call_id=f"c{n}-{i}", name=kinds[i % 6][0], arguments=kinds[i % 6][1])
        for i in range(CALLS_PER_MESSAGE)
    ]


@pytest.fixture(scope="module")
def journal_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("replay") / "journal.db"
    journal = SQLiteJournal(path)
    audit = AuditLog(journal)
    try:
        for n in range(CONVERSATIONS):
            cid = f"conv-{n:03d}"
            journal.add_conversation(cid)
            sender = "alice" if n % 2 == 0 else "bob"
            message = journal.begin_message(cid, "book rooms", sent_by=sender)
            calls = _calls(n)
            journal.receive(
                cid, ToolBatch(batch_id=f"b{n}", calls=tuple(calls)), message_id=message
            )
            for call in calls:
                if call.arguments == {"city": "深圳", "attendee": "张伟", "time": "11:00"}:
                    audit.record(
                        AuditEvent(
                            kind="policy",
                            outcome="refuse",
                            caller=sender,
                            conversation_id=cid,
                            call_id=call.call_id,
                            tool=call.name,
                        )
                    )
        direct = ToolCall(call_id="direct-1", name="wire", arguments={"amount": 5})
        journal.begin_direct_call(direct, called_by="alice", approved_by=None)
    finally:
        journal.close()
    return path


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_replay_counts_every_change_over_a_thousand_calls(
    journal_path: Path, tmp_path: Path
) -> None:
    callers = tmp_path / "callers.toml"
    callers.write_text(CALLERS, encoding="utf-8")
    before = _digest(journal_path)
    args = ["policy", "replay", str(DEMO_POLICY), "--db", str(journal_path), "--tools", DEMO]
    result = runner.invoke(app, [*args, "--callers", str(callers), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    per_message = CALLS_PER_MESSAGE // 6  # each kind of call, per message
    bob_messages = CONVERSATIONS // 2
    assert report["calls"] == CONVERSATIONS * CALLS_PER_MESSAGE + 1
    changes = {(c["before"], c["after"]): c for c in report["changes"]}
    # Bookings in Beijing ran unasked; the candidate asks a person.
    assert changes["allow", "approval"]["count"] == CONVERSATIONS * per_message
    # bob is a guest: the directory is for staff; and nothing permits the direct wire call.
    refused = changes["allow", "refuse"]
    assert refused["count"] == bob_messages * per_message * 2 + 1
    assert set(changes) == {("allow", "approval"), ("allow", "refuse")}  # Shenzhen: unchanged
    example = refused["examples"][0]
    assert example["caller"] == "bob" and example["policies"] == ["directory-is-for-staff"]
    assert example["reason"] == "the staff directory is for staff only"
    weather = CONVERSATIONS * per_message * 2
    alice_directory = (CONVERSATIONS - bob_messages) * per_message * 2
    assert report["decisions"] == {
        "allow": weather + alice_directory,
        "approval": CONVERSATIONS * per_message,
        "refuse": CONVERSATIONS * per_message + bob_messages * per_message * 2 + 1,
    }
    assert _digest(journal_path) == before  # read from a snapshot: nothing written


def test_replay_prints_what_would_change(journal_path: Path) -> None:
    # Without --callers nobody is a guest: only the bookings and the direct call change.
    args = ["policy", "replay", str(DEMO_POLICY), "--db", str(journal_path), "--tools", DEMO]
    result = runner.invoke(app, [*args, "--examples", "1"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].startswith(f"replayed {CONVERSATIONS * CALLS_PER_MESSAGE + 1} call(s)")
    assert lines[1] == f"{CONVERSATIONS * 3 + 1} decision(s) would change:"
    assert "  allowed -> approval: 180" in lines
    assert "  allowed -> refused: 1" in lines
    assert any("direct call, call direct-1: wire by alice" in line for line in lines)


def test_replay_refuses_what_it_cannot_read(tmp_path: Path) -> None:
    result = runner.invoke(
        app, ["policy", "replay", str(DEMO_POLICY), "--db", str(tmp_path / "none.db")]
    )
    assert result.exit_code == 2
    assert "no journal at" in result.output
    bad = tmp_path / "bad.cedar"
    bad.write_text("permit (principal, action, resource) when { nonsense", encoding="utf-8")
    result = runner.invoke(app, ["policy", "replay", str(bad), "--db", str(tmp_path / "x.db")])
    assert result.exit_code == 2
    assert "bad.cedar" in result.output
