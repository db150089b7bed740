"""A daemon on a PostgreSQL journal (`serve --db postgresql://...`): it serves a two-turn
conversation on the emulator, survives kill -9 (the journal in the database says what ran) and
never shows the URL's password in its log, `/v1/info` or `/healthz`."""

from __future__ import annotations

import contextlib
import threading
import uuid
from pathlib import Path

import requests

from bridge.emulator import Emulator
from tests.daemon.conftest import DaemonProcess, daemon_env, executions, start_daemon, wait_for
from tests.support.postgres import PostgresServer

KEY = "pg-daemon-key-0123456789abcdef"


def test_two_turns_then_kill_9_and_recovery_on_postgres(
    postgres: PostgresServer, emulator: Emulator, tools_dir: Path, tmp_path: Path
) -> None:
    dsn = postgres.create_database(f"d_{uuid.uuid4().hex[:12]}")
    mark = tmp_path / "hit-finished"
    first = start_daemon(
        emulator,
        tools_dir,
        dsn,
        api_key=KEY,
        env={"TOOLBRIDGE_FAILPOINT": f"finished:{mark}"},
    )
    try:
        cid = first.new_conversation()

        # The failpoint holds the first 'finished' write: turn one is the held one.
        def send() -> None:
            with contextlib.suppress(requests.RequestException):  # killed under the request
                first.ask(cid, "email carol")

        first_turn = threading.Thread(target=send, daemon=True)
        first_turn.start()
        wait_for(mark.exists, "the call's output to be journaled as finished")
        info = first.request("GET", "/v1/info").text
        health = first.request("GET", "/healthz").text
        first.kill9()
    finally:
        first.stop()
    assert postgres.password not in info and postgres.password not in health
    assert postgres.password not in first.log
    sent_before = executions(tools_dir).count("send_email carol")
    assert sent_before >= 1

    second = start_daemon(emulator, tools_dir, dsn, api_key=KEY)
    try:

        def ended() -> dict[str, object] | None:
            messages = second.request("GET", f"/v1/conversations/{cid}").json()["messages"]
            return messages[-1] if messages[-1]["status"] != "running" else None

        turn_one = wait_for(ended, "the killed message to be recovered", timeout=60)
        response = second.ask(cid, "weather in Paris")
        assert response.status_code == 200, response.text
        turn_two = response.json()
        detail = second.request("GET", f"/v1/conversations/{cid}").json()
        info = second.request("GET", "/v1/info").text
    finally:
        second.stop()
    assert turn_one["status"] == "finished" and turn_one["answer"] == "result: sent to carol"
    assert executions(tools_dir).count("send_email carol") == sent_before, "never run twice"
    assert turn_two["status"] == "finished", turn_two
    assert "Paris" in turn_two["answer"]
    assert [m["status"] for m in detail["messages"]] == ["finished", "finished"]
    assert postgres.password not in info and postgres.password not in second.log
    assert "resuming message" in second.log


def test_a_wrong_password_stops_the_daemon_without_showing_it(
    postgres: PostgresServer, emulator: Emulator, tools_dir: Path
) -> None:
    wrong = postgres.dsn.replace(postgres.password, "wrong-password-abcdef123")
    proc = DaemonProcess(
        ["--tools", str(tools_dir / "daemon_tools.py"), "--port", "0", "--db", wrong],
        env=daemon_env(emulator, tools_dir),
        wait=False,
    )
    try:
        assert proc.wait_exit(timeout=60) != 0
    finally:
        proc.stop()
    assert "cannot connect to the journal" in proc.log
    assert "wrong-password-abcdef123" not in proc.log


def test_a_database_outage_is_a_503_saying_so_and_the_daemon_serves_again_after_it(
    postgres: PostgresServer,  # only so that the test is skipped where no server exists
    emulator: Emulator,
    tools_dir: Path,
) -> None:
    with PostgresServer() as server:
        daemon = start_daemon(emulator, tools_dir, server.dsn, api_key=KEY)
        try:
            cid = daemon.new_conversation()
            server.kill()
            listing = daemon.request("GET", "/v1/conversations")
            message = daemon.ask(cid, "weather in Paris")
            server.start()
            after = wait_for(
                lambda: (r := daemon.ask(cid, "weather in Paris")).status_code == 200 and r,
                "the daemon to serve again once the database is back",
            )
        finally:
            daemon.stop()
    for response in (listing, message):
        assert response.status_code == 503, response.text
        assert response.headers["Retry-After"] == "5"
        error = response.json()["error"]
        assert error["code"] == "journal_unavailable"
        assert "nothing was changed: retry when the database is back" in error["message"]
        assert server.password not in response.text
    assert after.json()["answer"] == "Paris: 18 degrees"
    assert "Traceback" not in daemon.log and server.password not in daemon.log
