"""The console shows a tool call a `kill -9` interrupted as such: its duration is not known,
so it is not shown as "0.0 ms" (what the journal records) nor as the time since it started."""

from __future__ import annotations

from pathlib import Path

from playwright.sync_api import expect

from bridge.emulator import Emulator
from tests.daemon.conftest import executions, in_background, start_daemon, stopped, wait_for
from tests.daemon.test_console import chromium


def test_an_interrupted_call_says_its_duration_is_unknown(
    emulator: Emulator, tools_dir: Path, tmp_path: Path
) -> None:
    db = tmp_path / "journal.db"
    block = tools_dir / "block-charge"
    block.touch()
    first = start_daemon(emulator, tools_dir, db)
    with stopped(first):
        cid = first.new_conversation()
        in_background(lambda: first.ask(cid, "charge 41"))
        wait_for(lambda: "charge 41" in executions(tools_dir), "the charge to start")
        first.kill9()
    block.unlink()
    second = start_daemon(emulator, tools_dir, db)
    with stopped(second):
        wait_for(
            lambda: (
                second.request("GET", f"/v1/conversations/{cid}").json()["messages"][-1]["status"]
                != "running"
            ),
            "the interrupted message to end",
        )
        [call] = second.request("GET", f"/v1/conversations/{cid}").json()["tool_calls"]
        assert call["error"] == "tool_error" and call["duration_ms"] == 0  # what is journaled
        with chromium(tmp_path / "profile") as context:
            page = context.new_page()
            page.goto(f"{second.url}/#/c/{cid}")
            card = page.get_by_test_id("tool-call")
            expect(card.get_by_test_id("tool-name")).to_have_text("charge", timeout=15_000)
            duration = card.get_by_test_id("tool-duration")
            expect(duration).to_have_text("interrupted by a restart: ran for an unknown time")
            expect(card).not_to_contain_text("0.0 ms")
