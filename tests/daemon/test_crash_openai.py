"""A daemon on the openai platform, killed with `kill -9` and restarted on its journal.

An OpenAI-compatible server is stateless: the platform adapter keeps each conversation's
history in the daemon's memory, so a restart loses it. The conversations of the journal must
still take their next message: it continues in a new platform conversation, recorded with the
reason. (Outputs of a run interrupted by the crash cannot reach a history that is gone; the
message ends, it never stays running.)
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.daemon.conftest import TOOLS, DaemonProcess, executions, wait_for
from tests.daemon.test_crash_matrix import _in_background
from tests.platforms.openai_fakes import Reply, ScriptedServer, chunk, text_stream


def _charge_stream(amount: int) -> list[Any]:
    """A streamed answer asking for one `charge` call (not idempotent)."""
    call = {
        "index": 0,
        "id": f"call_{amount}",
        "type": "function",
        "function": {"name": "charge", "arguments": json.dumps({"amount": amount})},
    }
    return [
        chunk({"role": "assistant", "tool_calls": [call]}),
        chunk({}, "tool_calls"),
        b"data: [DONE]\n\n",
    ]


@pytest.fixture
def llm() -> Iterator[ScriptedServer]:
    with ScriptedServer().running() as server:
        yield server


def _daemon(
    llm: ScriptedServer, tmp_path: Path, env: dict[str, str] | None = None
) -> DaemonProcess:
    tools = tmp_path / "tools"
    tools.mkdir(exist_ok=True)
    (tools / "daemon_tools.py").write_text(TOOLS, encoding="utf-8")
    argv = ["--tools", str(tools / "daemon_tools.py"), "--port", "0"]
    argv += ["--db", str(tmp_path / "journal.db"), "--platform", "openai"]
    argv += ["--base-url", llm.base_url, "--model", "m"]
    return DaemonProcess(argv, env={"TB_TOOLS_DIR": str(tools), **(env or {})})


@pytest.mark.parametrize("step", ["received", "started", "submitting", "message_end"])
def test_a_conversation_takes_its_next_message_after_kill_9(
    step: str, llm: ScriptedServer, tmp_path: Path
) -> None:
    llm.script(Reply(stream=_charge_stream(3)), Reply(stream=text_stream("paid 3")))
    marker = tmp_path / "hit"
    first = _daemon(llm, tmp_path, {"TOOLBRIDGE_FAILPOINT": f"{step}:{marker}"})
    try:
        cid = first.new_conversation()
        worker = _in_background(lambda: first.ask(cid, "pay 3"))
        wait_for(lambda: marker.exists() or not worker.is_alive(), f"the {step!r} step")
        assert marker.exists(), first.log
        first.kill9()
    finally:
        first.stop()

    llm.script(Reply(stream=text_stream("hello again")))
    second = _daemon(llm, tmp_path)
    try:

        def ended() -> bool:
            detail = second.request("GET", f"/v1/conversations/{cid}").json()
            return all(m["status"] != "running" for m in detail["messages"])

        wait_for(ended, "the interrupted message to end", timeout=60)
        [before] = second.request("GET", f"/v1/conversations/{cid}").json()["messages"]
        if step in ("received", "started"):
            # The history the outputs belong to is gone: the calls are not run (their outputs
            # could never be delivered, and "ask again" would repeat their effects).
            assert before["status"] == "failed", before
            assert before["error_code"] == "ConversationLostError", before
            assert "1 pending call(s) were not run" in before["error_message"]
        elif step == "submitting":
            # The outputs were never posted and the history they belonged to is gone.
            assert before["status"] == "failed", before
            assert before["error_code"] == "ConversationLostError", before
            assert "outputs of 1 finished call(s) could not be" in before["error_message"]
        else:
            assert (before["status"], before["answer"]) == ("finished", "paid 3"), before
        reply = second.ask(cid, "hello")
        assert reply.status_code == 200, reply.text
        assert reply.json()["answer"] == "hello again"
        detail = second.request("GET", f"/v1/conversations/{cid}").json()
    finally:
        second.stop()
    ran = executions(tmp_path / "tools")
    # Held at "received" (before it ran) or "started" (right before it ran): never run at all.
    assert ran == ([] if step in ("received", "started") else ["charge 3"]), ran
    history = detail["platform_conversations"]
    assert len(history) == 2, history
    assert "no longer knows" in history[1]["reason"]
    assert (
        detail["conversation"]["platform_conversation_id"] == history[1]["platform_conversation_id"]
    )
    # The new platform conversation starts from the new query alone: the old history is gone.
    sent = llm.bodies[-1]["messages"]
    assert [m["content"] for m in sent if m["role"] == "user"] == ["hello"]
