"""The daemon's stream limits: `toolbridge serve --run-timeout` against a server that sends only
keep-alives fails the message (504 ``platform_timeout``, one line naming the limit and its
flag), journals it as failed, and answers the next message of the same conversation."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.daemon.conftest import TOOLS, DaemonProcess
from tests.platforms.endless_fakes import PING_CAP, EndlessServer


@pytest.fixture
def server() -> Iterator[EndlessServer]:
    with EndlessServer("openai", "keepalive").running() as endless:
        yield endless


def test_the_daemon_fails_a_run_past_its_total_time_and_the_conversation_goes_on(
    server: EndlessServer, tmp_path: Path
) -> None:
    (tmp_path / "daemon_tools.py").write_text(TOOLS, encoding="utf-8")
    argv = ["--tools", str(tmp_path / "daemon_tools.py"), "--port", "0"]
    argv += ["--db", str(tmp_path / "journal.db"), "--platform", "openai"]
    argv += ["--base-url", server.url + "/v1", "--model", "m", "--run-timeout", "1"]
    daemon = DaemonProcess(argv, env={"TB_TOOLS_DIR": str(tmp_path)})
    try:
        cid = daemon.new_conversation()
        stopped = daemon.ask(cid, "go on forever")
        assert stopped.status_code == 504, stopped.text
        error = stopped.json()["error"]
        assert error["code"] == "platform_timeout"
        assert "total time limit of 1 s (run_timeout)" in error["message"]
        assert "--run-timeout or TOOLBRIDGE_RUN_TIMEOUT" in error["message"]
        assert server.sent < PING_CAP
        server.mode = "answer"
        again = daemon.ask(cid, "and now briefly")
        assert again.status_code == 200, again.text
        assert again.json()["answer"] == "fine"
        messages = daemon.request("GET", f"/v1/conversations/{cid}").json()["messages"]
        assert [m["status"] for m in messages] == ["failed", "finished"]
        assert "(run_timeout)" in (messages[0]["error_message"] or "")
    finally:
        daemon.stop()
