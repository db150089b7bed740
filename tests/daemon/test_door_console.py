"""The console for callers with some permissions only (Debian's chromium): a chat user
(``converse``, two tools) sees its conversations and tools and no approvals panel, without an
error; an approver (``approve`` only) sees and decides the chat user's approval."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from playwright.sync_api import Page, expect

from bridge.emulator import Emulator
from tests.daemon.conftest import DaemonProcess
from tests.daemon.console_setup import SCENARIO, write_tools
from tests.daemon.test_console import chromium
from tests.daemon.test_door import as_, key_of, write_callers

TIMEOUT = 20_000


@pytest.fixture(scope="module")
def emulator() -> Iterator[Emulator]:
    with Emulator(scenario=SCENARIO) as emu:
        yield emu


@pytest.fixture(scope="module")
def daemon(emulator: Emulator, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    folder = tmp_path_factory.mktemp("door-console")
    callers = write_callers(
        folder / "callers.toml",
        {
            "chat": {"roles": ["converse"], "tools": ["get_weather", "wire"]},
            "approver": {"roles": ["approve"]},
        },
    )
    argv = [
        *write_tools(folder / "tools"),
        "--port",
        "0",
        "--db",
        str(folder / "journal.db"),
        "--callers",
        str(callers),
    ]
    proc = DaemonProcess(argv, env={**emulator.env(), "TB_TOOLS_DIR": str(folder / "tools")})
    try:
        yield proc
    finally:
        proc.stop()


def sign_in(page: Page, daemon: DaemonProcess, who: str) -> None:
    page.goto(daemon.url + "/")
    expect(page.locator("#key-form")).to_be_visible(timeout=TIMEOUT)
    page.fill("#key-input", key_of(who))
    page.click("#key-form button")
    expect(page.get_by_test_id("status")).to_have_text("connected", timeout=TIMEOUT)


def test_a_chat_user_sees_its_own_conversations_and_tools_and_no_errors(
    daemon: DaemonProcess, tmp_path: Path
) -> None:
    with chromium(tmp_path / "profile") as context:
        page = context.new_page()
        problems: list[str] = []
        page.on("pageerror", lambda error: problems.append(str(error)))
        sign_in(page, daemon, "chat")
        expect(page.get_by_test_id("live-state")).to_have_text("live", timeout=TIMEOUT)
        expect(page.get_by_test_id("approvals")).to_be_hidden()
        expect(page.get_by_test_id("tool-count")).to_have_text("2")
        page.get_by_test_id("view-tools").click()
        expect(page.get_by_test_id("tools")).to_contain_text("get_weather")
        expect(page.get_by_test_id("tools")).not_to_contain_text("big_report")
        page.get_by_test_id("view-conversations").click()

        page.get_by_test_id("message-input").fill("what is the weather in Paris?")
        page.get_by_test_id("send-button").click()
        expect(page.get_by_test_id("live-answer")).to_have_text(
            "Paris: 18 degrees", timeout=TIMEOUT
        )
        expect(page.get_by_test_id("conversation-item")).to_have_count(1, timeout=TIMEOUT)
        expect(page.get_by_test_id("status")).not_to_have_class(re.compile("error"))
        assert problems == [], problems


def test_an_approver_decides_the_chat_users_call_from_the_page(
    daemon: DaemonProcess, tmp_path: Path
) -> None:
    created = requests.post(
        daemon.url + "/v1/conversations", json={}, headers=as_("chat"), timeout=30
    )
    cid = created.json()["conversation_id"]
    answer: dict[str, requests.Response] = {}

    def send() -> None:
        answer["r"] = requests.post(
            f"{daemon.url}/v1/conversations/{cid}/messages",
            json={"query": "wire 5 to bob"},
            headers=as_("chat"),
            timeout=60,
        )

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    with chromium(tmp_path / "profile") as context:
        page = context.new_page()
        problems: list[str] = []
        page.on("pageerror", lambda error: problems.append(str(error)))
        sign_in(page, daemon, "approver")
        approvals = page.get_by_test_id("approvals")
        expect(approvals).to_be_visible(timeout=TIMEOUT)
        card = approvals.get_by_test_id("approval")
        expect(card.get_by_test_id("approval-tool")).to_have_text("wire")
        card.get_by_test_id("approve").click()
        expect(approvals).to_be_hidden(timeout=TIMEOUT)
        sender.join(60)
        assert answer["r"].status_code == 200, answer["r"].text
        assert answer["r"].json()["answer"] == "result: wired 5 to bob"
        expect(page.get_by_test_id("status")).not_to_have_class(re.compile("error"))
        assert problems == [], problems
