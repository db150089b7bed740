"""`toolbridge serve --emulator --db FILE`, killed with `kill -9` during a tool call, restarted.

The embedded emulator keeps its state beside the journal (``FILE.emulator.json``), so the
restarted daemon's emulator knows the conversation and the tool call it was waiting for: the
interrupted message finishes (its idempotent call runs again, its output is delivered), and the
next message in the same conversation is answered in the same platform conversation.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.daemon.conftest import TOOLS, DaemonProcess, executions, wait_for
from tests.daemon.test_crash_matrix import _in_background


def _daemon(tmp_path: Path) -> DaemonProcess:
    tools = tmp_path / "tools"
    tools.mkdir(exist_ok=True)
    (tools / "daemon_tools.py").write_text(TOOLS, encoding="utf-8")
    argv = ["--tools", str(tools / "daemon_tools.py"), "--port", "0", "--emulator"]
    argv += ["--db", str(tmp_path / "journal.db")]
    return DaemonProcess(argv, env={"TB_TOOLS_DIR": str(tools)})


def _killed_during_a_tool_call(tmp_path: Path) -> str:
    """A conversation whose daemon was killed with `kill -9` while its idempotent tool call
    (``lookup alpha``) ran; the call stays blocked until ``tools/block-lookup`` is removed."""
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "block-lookup").touch()
    first = _daemon(tmp_path)
    try:
        cid = first.new_conversation()
        _in_background(lambda: first.ask(cid, "lookup the key alpha"))
        wait_for(lambda: "lookup alpha" in executions(tools), "the tool call to start")
        first.kill9()
    finally:
        first.stop()
    return cid


def _interrupted_message(daemon: DaemonProcess, cid: str) -> dict[str, Any]:
    """The conversation's only message, once the restarted `daemon` has ended it."""

    def ended() -> bool:
        detail = daemon.request("GET", f"/v1/conversations/{cid}").json()
        return all(m["status"] != "running" for m in detail["messages"])

    wait_for(ended, "the interrupted message to end", timeout=60)
    [message] = daemon.request("GET", f"/v1/conversations/{cid}").json()["messages"]
    return message


def test_serve_emulator_survives_kill_9_during_a_tool_call(tmp_path: Path) -> None:
    tools = tmp_path / "tools"
    cid = _killed_during_a_tool_call(tmp_path)
    (tools / "block-lookup").unlink()

    second = _daemon(tmp_path)
    try:
        resumed = _interrupted_message(second, cid)
        assert (resumed["status"], resumed["answer"]) == ("finished", "value of alpha"), (
            resumed,
            second.log,
        )
        reply = second.ask(cid, "lookup the key beta")
        assert reply.status_code == 200, reply.text
        assert reply.json()["answer"] == "value of beta"
        detail = second.request("GET", f"/v1/conversations/{cid}").json()
    finally:
        second.stop()
    assert (tmp_path / "journal.db.emulator.json").exists()
    # The emulator knew the conversation: no replacement was needed.
    assert len(detail["platform_conversations"]) == 1, detail["platform_conversations"]
    assert "NotFound" not in second.log and "not found" not in second.log, second.log
    ran = executions(tools)
    assert ran.count("lookup alpha") == 2, ran  # idempotent: run again after the restart
    assert ran.count("lookup beta") == 1, ran


def test_serve_emulator_state_lost_continues_in_a_new_platform_conversation(
    tmp_path: Path,
) -> None:
    """Without the emulator's state (the file deleted), the conversation still goes on: the
    interrupted message ends with a clear error, the next one continues in a new platform
    conversation with the reason recorded."""
    tools = tmp_path / "tools"
    cid = _killed_during_a_tool_call(tmp_path)
    (tmp_path / "journal.db.emulator.json").unlink(missing_ok=True)
    (tools / "block-lookup").unlink()

    second = _daemon(tmp_path)
    try:
        resumed = _interrupted_message(second, cid)
        assert resumed["status"] == "failed", resumed
        assert "no longer knows conversation" in resumed["error_message"], resumed
        assert "ask again" in resumed["error_message"], resumed
        for key in ("beta", "gamma"):
            reply = second.ask(cid, f"lookup the key {key}")
            assert reply.status_code == 200, reply.text
            assert reply.json()["answer"] == f"value of {key}"
        detail = second.request("GET", f"/v1/conversations/{cid}").json()
    finally:
        second.stop()
    history = detail["platform_conversations"]
    assert len(history) == 2, history  # replaced once, then kept
    assert "no longer knows" in history[1]["reason"], history
    assert "lost its state" in history[1]["reason"], history
