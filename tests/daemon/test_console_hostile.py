"""The console never runs markup from data: hostile queries, tool arguments and outputs,
run errors, approval notes and deep-link ids are shown as text (Debian's chromium)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest
import requests
from playwright.sync_api import BrowserContext, Page, expect

from bridge.emulator import Emulator
from tests.daemon.conftest import DaemonProcess
from tests.daemon.console_setup import API_KEY, start_console_daemon
from tests.daemon.test_console import chromium

TIMEOUT = 30_000
PAYLOAD = "<img src=x onerror=window.__pwned=1><script>window.__pwned=2</script>"

SCENARIO: dict[str, Any] = {
    "settings": {"fallback": "plain", "chunk_chars": 4},
    "rules": [
        {
            "match": r"boom (?P<p>.+)",
            "steps": [{"tool": "get_weather", "arguments": {"city": "{p}"}}],
            "answer": "never shown",
            "faults": "inband=ServiceError,message=" + PAYLOAD.replace(",", " ") + ",round=1",
        },
        {
            "match": r"pay (?P<p>.+)",
            "steps": [{"tool": "wire", "arguments": {"amount": "3", "to": "{p}"}}],
            "answer": "paid {p}: {outputs.wire}",
        },
        {
            "match": r"xss (?P<p>.+)",
            "steps": [{"tool": "get_weather", "arguments": {"city": "{p}"}}],
            "answer": "{p} {outputs.get_weather.city}",
        },
    ],
}


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    with Emulator(scenario=SCENARIO) as emu:
        proc = start_console_daemon(emu, tmp_path_factory.mktemp("hostile"))
        try:
            yield proc
        finally:
            proc.stop()


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrowserContext]:
    with chromium(tmp_path_factory.mktemp("profile")) as context:
        yield context


def enter_key(page: Page) -> None:
    """The key, unless the browser still holds it from an earlier page.

    The form shows only once the daemon has answered 401, after the page's load event, so
    wait for either outcome rather than looking once (which raced the first API request).
    """
    page.wait_for_function(
        "() => !document.getElementById('key-form').hidden"
        " || document.getElementById('live-state').textContent === 'live'",
        timeout=TIMEOUT,
    )
    if page.locator("#key-input").is_visible():
        page.fill("#key-input", API_KEY)
        page.click("#key-form button")


def open_page(browser: BrowserContext, url: str) -> Page:
    page = browser.new_page()
    page.goto(url)
    enter_key(page)
    expect(page.get_by_test_id("live-state")).to_have_text("live", timeout=TIMEOUT)
    return page


def not_pwned(page: Page) -> None:
    assert page.evaluate("window.__pwned") is None
    assert page.locator("img[src=x]").count() == 0
    assert page.locator("#transcript script, #approvals script").count() == 0


def test_hostile_text_is_never_markup(browser: BrowserContext, daemon: DaemonProcess) -> None:
    cid = daemon.new_conversation()
    page = open_page(browser, f"{daemon.url}/#/c/{cid}")
    try:
        assert daemon.ask(cid, "xss " + PAYLOAD).status_code == 200
        assert daemon.ask(cid, "boom " + PAYLOAD).status_code == 502
        replies: list[requests.Response] = []
        thread = threading.Thread(
            target=lambda: replies.append(daemon.ask(cid, "pay " + PAYLOAD)), daemon=True
        )
        thread.start()
        card = page.get_by_test_id("approval")
        expect(card).to_have_count(1, timeout=TIMEOUT)
        expect(card.get_by_test_id("approval-arguments")).to_contain_text(
            "<img src=x", timeout=TIMEOUT
        )
        card.get_by_label("Note (optional)").fill(PAYLOAD)
        card.get_by_test_id("reject").click()
        thread.join(timeout=60)
        assert replies and replies[0].status_code == 200, replies
        expect(page.get_by_test_id("tool-call").last).to_contain_text("rejected", timeout=TIMEOUT)
        expect(page.get_by_test_id("conversation-title")).to_contain_text("<img src=x")
        expect(page.get_by_test_id("transcript")).to_contain_text(PAYLOAD, timeout=TIMEOUT)
        page.reload()
        enter_key(page)
        expect(page.get_by_test_id("transcript")).to_contain_text(PAYLOAD, timeout=TIMEOUT)
        not_pwned(page)
    finally:
        page.close()


@pytest.mark.parametrize(
    "bad_id",
    [
        PAYLOAD,
        "javascript:window.__pwned=1",
        "../../v1/info",
        "%",
        "x" * 5000,
        "00000000-0000-4000-8000-000000000000",  # well-formed, deleted or never there
    ],
)
def test_hostile_deep_links(browser: BrowserContext, daemon: DaemonProcess, bad_id: str) -> None:
    page = browser.new_page()
    problems: list[str] = []
    page.on("pageerror", lambda error: problems.append(str(error)))
    try:
        hash_id = bad_id if bad_id == "%" else quote(bad_id, safe="")
        page.goto(f"{daemon.url}/#/c/{hash_id}")
        enter_key(page)
        # The bad link is an error in the status line; the page still follows the daemon.
        expect(page.get_by_test_id("live-state")).to_have_text("live", timeout=TIMEOUT)
        expect(page.get_by_test_id("status")).to_have_class("error")
        not_pwned(page)
    finally:
        page.close()
    assert problems == [], problems
