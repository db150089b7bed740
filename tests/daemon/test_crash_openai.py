"""A daemon on the openai platform, stopped dead at a journal step and restarted on its journal.

An OpenAI-compatible server is stateless: the platform adapter keeps each conversation's
history in the daemon's memory, and journals it after every round (with the batch it has
pending, and when a run ends). The restarted daemon takes the history back: the interrupted
message is finished (its outputs delivered, no call run twice) and the next message continues
in the same platform conversation, the server seeing the whole history.

The daemons run in process (`tests/daemon/inprocess.py`: the daemon's failpoint, then no more
journal writes); a real `kill -9` at each journal step is `test_crash_matrix.py`'s.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.daemon.conftest import TOOLS, executions, wait_for
from tests.daemon.inprocess import InProcessDaemon, marker_of
from tests.daemon.test_crash_matrix import _in_background
from tests.platforms.openai_fakes import Reply, ScriptedServer, text_stream, tool_call_stream


@pytest.fixture
def llm() -> Iterator[ScriptedServer]:
    with ScriptedServer().running() as server:
        yield server


@pytest.fixture
def daemons() -> Iterator[list[InProcessDaemon]]:
    started: list[InProcessDaemon] = []
    yield started
    for daemon in reversed(started):
        daemon.bury()


def _daemon(
    llm: ScriptedServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    started: list[InProcessDaemon],
    failpoint: str | None = None,
) -> InProcessDaemon:
    tools = tmp_path / "tools"
    tools.mkdir(exist_ok=True)
    (tools / "daemon_tools.py").write_text(TOOLS, encoding="utf-8")
    argv = ["--tools", str(tools / "daemon_tools.py")]
    argv += ["--db", str(tmp_path / "journal.db"), "--platform", "openai"]
    argv += ["--base-url", llm.base_url, "--model", "m"]
    env = {"TB_TOOLS_DIR": str(tools)}
    daemon = InProcessDaemon(argv, env=env, monkeypatch=monkeypatch, failpoint=failpoint)
    started.append(daemon)
    return daemon


@pytest.mark.parametrize(
    "step", ["received", "started", "submitting", "platform_state", "message_end"]
)
def test_a_conversation_goes_on_with_its_history_after_a_crash(
    step: str,
    llm: ScriptedServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    daemons: list[InProcessDaemon],
) -> None:
    llm.script(
        Reply(stream=tool_call_stream("call_3", "charge", {"amount": 3})),
        Reply(stream=text_stream("paid 3")),
    )
    failpoint, marker = marker_of(tmp_path, step)
    first = _daemon(llm, tmp_path, monkeypatch, daemons, failpoint)
    cid = first.new_conversation()
    worker = _in_background(lambda: first.ask(cid, "pay 3"))
    wait_for(lambda: marker.exists() or not worker.is_alive(), f"the {step!r} step")
    assert marker.exists(), first.log
    first.crash()

    answered = step in ("platform_state", "message_end")  # the answer had arrived
    replies = [] if answered else [Reply(stream=text_stream("paid 3"))]
    llm.script(*replies, Reply(stream=text_stream("hello again")))
    second = _daemon(llm, tmp_path, monkeypatch, daemons)

    def ended() -> bool:
        detail = second.request("GET", f"/v1/conversations/{cid}").json()
        return all(m["status"] != "running" for m in detail["messages"])

    wait_for(ended, "the interrupted message to end", timeout=60)
    [before] = second.request("GET", f"/v1/conversations/{cid}").json()["messages"]
    if step == "platform_state":
        # The history has the answer, the message had not recorded its end: the stream
        # that carried it is gone, as after any crash while the agent answers.
        assert (before["status"], before["error_code"]) == ("failed", "interrupted"), before
    else:
        assert (before["status"], before["answer"]) == ("finished", "paid 3"), before
    reply = second.ask(cid, "hello")
    assert reply.status_code == 200, reply.text
    assert reply.json()["answer"] == "hello again"
    detail = second.request("GET", f"/v1/conversations/{cid}").json()
    second.stop()
    ran = executions(tmp_path / "tools")
    # Held at "received" it never ran (it runs after the restart); held at "started" it may
    # have run (it is not idempotent: it gets an "interrupted" output, never a second run).
    assert ran == ([] if step == "started" else ["charge 3"]), ran
    # The same platform conversation throughout: its history survived the restart.
    assert len(detail["platform_conversations"]) == 1, detail["platform_conversations"]
    sent = llm.bodies[-1]["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool", "assistant", "user"]
    assert [m["content"] for m in sent if m["role"] == "user"] == ["pay 3", "hello"]
    assert sent[1]["tool_calls"][0]["id"] == "call_3"
    assert sent[2]["tool_call_id"] == "call_3"
    expected = "interrupted by a restart" if step == "started" else "charged 3"
    assert expected in sent[2]["content"], sent[2]
    assert sent[3]["content"] == "paid 3"
    if not answered:
        # The recovery posted the outputs to the history it had taken back.
        recovered = llm.bodies[0]["messages"]
        assert [m["role"] for m in recovered] == ["user", "assistant", "tool"]
