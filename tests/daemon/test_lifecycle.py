"""Stopping and restarting: SIGTERM drains within --grace and exits 0; resources are released."""

from __future__ import annotations

import contextlib
import signal
import threading
from pathlib import Path

import pytest
import requests

from bridge.emulator import Emulator
from tests.daemon.conftest import executions, start_daemon, wait_for


def test_idle_release_and_sigterm_drain(
    emulator: Emulator, tools_dir: Path, tmp_path: Path
) -> None:
    (tools_dir / "executions.log").unlink(missing_ok=True)
    db = tmp_path / "journal.db"
    daemon = start_daemon(emulator, tools_dir, db, "--idle-timeout", "0.3", "--grace", "30")
    try:
        cid = daemon.new_conversation()
        assert daemon.ask(cid, "note first").json()["answer"] == "noted first"
        wait_for(lambda: "session_closed -" in executions(tools_dir), "the idle session release")
        assert executions(tools_dir).count("session_open -") == 1

        answer: dict[str, requests.Response] = {}
        thread = threading.Thread(target=lambda: answer.update(r=daemon.ask(cid, "slow 1.5")))
        thread.start()
        wait_for(lambda: "slow_step 1.5" in executions(tools_dir), "the slow tool to start")
        daemon.proc.send_signal(signal.SIGTERM)
        code = daemon.wait_exit()
        thread.join(timeout=30)
    finally:
        daemon.stop()
    assert code == 0, daemon.log
    assert "slow_step_end 1.5" in executions(tools_dir), "the running tool call finished"
    assert answer["r"].status_code == 200 and answer["r"].json()["answer"] == "slept 1.5"
    assert "get up to 30 s to finish" in daemon.log

    again = start_daemon(emulator, tools_dir, db)
    try:
        detail = again.request("GET", f"/v1/conversations/{cid}").json()
        assert [m["status"] for m in detail["messages"]] == ["finished", "finished"]
        assert again.ask(cid, "weather in Tokyo").json()["answer"] == "Tokyo: 22 degrees"
    finally:
        again.stop()


def test_grace_expiry_leaves_the_rest_in_the_journal(
    emulator: Emulator, tools_dir: Path, tmp_path: Path
) -> None:
    (tools_dir / "executions.log").unlink(missing_ok=True)
    db = tmp_path / "journal.db"
    daemon = start_daemon(emulator, tools_dir, db, "--grace", "0.5")
    try:
        cid = daemon.new_conversation()
        thread = threading.Thread(target=lambda: _quietly(daemon.ask, cid, "slow 4.5"), daemon=True)
        thread.start()
        wait_for(lambda: "slow_step 4.5" in executions(tools_dir), "the slow tool to start")
        daemon.proc.send_signal(signal.SIGINT)
        code = daemon.wait_exit()
    finally:
        daemon.stop()
    assert code == 0, daemon.log
    assert "left for recovery" in daemon.log
    assert "slow_step_end 4.5" not in executions(tools_dir)

    again = start_daemon(emulator, tools_dir, db)
    try:
        message = wait_for(
            lambda: (
                (m := again.request("GET", f"/v1/conversations/{cid}").json()["messages"][-1])[
                    "status"
                ]
                != "running"
                and m
            ),
            "the interrupted message to end",
        )
    finally:
        again.stop()
    assert message["status"] == "finished"
    assert "interrupted by a restart" in message["answer"]
    assert executions(tools_dir).count("slow_step 4.5") == 1


def _quietly(fn: object, *args: object) -> None:
    with contextlib.suppress(requests.RequestException):
        fn(*args)  # type: ignore[operator]


def test_a_question_pending_at_shutdown_is_answered_after_a_restart(
    emulator: Emulator, tools_dir: Path, tmp_path: Path
) -> None:
    db = tmp_path / "journal.db"
    daemon = start_daemon(emulator, tools_dir, db)
    try:
        cid = daemon.new_conversation()
        paused = daemon.ask(cid, "book a room please")
        assert paused.status_code == 200, paused.text
        daemon.proc.send_signal(signal.SIGTERM)
        assert daemon.wait_exit() == 0
    finally:
        daemon.stop()
    assert paused.json()["status"] == "waiting_input", paused.text
    assert paused.json()["human_input_prompt"] == "For which day?"

    again = start_daemon(emulator, tools_dir, db)
    try:
        answered = again.ask(cid, "friday")
        assert answered.status_code == 200, answered.text
        assert answered.json()["answer"] == "booked a room for friday (value of friday)"
    finally:
        again.stop()


@pytest.mark.parametrize("kind", ["daemon", "emulator"])
def test_connections_to_the_listening_socket_send_without_delay_on_any_event_loop(
    kind: str,
) -> None:
    """asyncio's own loop (no uvloop) sets TCP_NODELAY only on connections of a socket made
    for TCP: without it each answer waits for the client's delayed ACK (about 40 ms)."""
    import asyncio
    import socket

    from bridge.cli.emulator_cmd import _bind
    from bridge.daemon.server import bind

    async def accepted_nodelay() -> int:
        sock = (bind if kind == "daemon" else _bind)("127.0.0.1", 0)
        seen: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        class Probe(asyncio.Protocol):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                conn = transport.get_extra_info("socket")
                seen.set_result(conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
                transport.close()

        server = await asyncio.get_running_loop().create_server(Probe, sock=sock)
        try:
            port = sock.getsockname()[1]
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            try:
                return await asyncio.wait_for(seen, 10)
            finally:
                writer.close()
        finally:
            server.close()
            await server.wait_closed()

    loop = asyncio.new_event_loop()  # the standard library's, whatever uvicorn would pick
    try:
        assert loop.run_until_complete(accepted_nodelay()) != 0
    finally:
        loop.close()
