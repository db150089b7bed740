"""The web console in a real headless browser (Debian's chromium driven by Playwright).

`make test` installs chromium when it is missing; if it cannot be found this test fails (it
is never skipped), naming what to install.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from playwright.sync_api import BrowserContext, expect, sync_playwright

from tests.daemon.conftest import API_KEY, DaemonProcess

CHROMIUM = Path("/usr/bin/chromium")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
    "--no-first-run",
]


@contextmanager
def chromium(profile: Path, **options: Any) -> Iterator[BrowserContext]:
    """Debian's chromium, headless, with a fresh profile; closed on the way out."""
    assert CHROMIUM.exists(), (
        f"{CHROMIUM} is missing: the console tests need Debian's chromium "
        "(`apt-get install -y chromium`; `make test` does it)"
    )
    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(profile), executable_path=str(CHROMIUM), headless=True, args=FLAGS, **options
        )
        try:
            yield context
        finally:
            context.close()


def test_console_sends_a_message_and_shows_the_answer_and_tool_call(
    daemon: DaemonProcess, tmp_path: Path
) -> None:
    with chromium(tmp_path / "profile") as context:
        page = context.new_page()
        problems: list[str] = []
        page.on("pageerror", lambda error: problems.append(str(error)))
        page.goto(daemon.url + "/")
        # The daemon has an API key: the console asks for it.
        expect(page.locator("#key-form")).to_be_visible(timeout=15_000)
        page.fill("#key-input", API_KEY)
        page.click("#key-form button")
        expect(page.get_by_test_id("status")).to_have_text("connected", timeout=15_000)
        expect(page.get_by_test_id("tool-count")).to_have_text(re.compile(r"^\d+$"))
        page.get_by_test_id("view-tools").click()
        expect(page.get_by_test_id("tools")).to_contain_text("get_weather")
        page.get_by_test_id("view-conversations").click()

        page.get_by_test_id("new-conversation").click()
        expect(page.get_by_test_id("message-input")).to_be_enabled(timeout=15_000)
        page.get_by_test_id("message-input").fill("what is the weather in Paris?")
        page.get_by_test_id("send-button").click()

        answer = page.get_by_test_id("live-answer")
        expect(answer).to_have_text("Paris: 18 degrees", timeout=30_000)
        call = page.get_by_test_id("tool-call").first
        expect(call.get_by_test_id("tool-name")).to_have_text("get_weather")
        expect(call.get_by_test_id("tool-arguments")).to_contain_text('"city": "Paris"')
        expect(call.get_by_test_id("tool-output")).to_contain_text('"temp": 18')
        expect(call).to_contain_text(" ms")
        cid = page.url.split("#/c/", 1)[1]
        item = page.locator(f'[data-testid="conversation-item"][data-id="{cid}"]')
        expect(item).to_contain_text("1 message", timeout=15_000)

        # Reopening the conversation renders it from the journal.
        page.get_by_test_id("view-conversations").click()
        expect(page.locator("#conversation-title")).to_have_text("No conversation selected")
        item.get_by_role("button").click()
        expect(page.get_by_test_id("answer").last).to_contain_text("Paris: 18 degrees")
        expect(page.get_by_test_id("tool-output").first).to_contain_text('"temp": 18')
        page.screenshot(path=str(tmp_path / "console.png"))

        # Typing first, with no conversation chosen, starts one; Enter sends.
        expect(page.locator("#conversation-title")).to_have_text("what is the weather in Paris?")
        first_url = page.url
        page.goto(daemon.url + "/")
        expect(page.get_by_test_id("status")).to_have_text("connected", timeout=15_000)
        expect(page.locator("#conversation-title")).to_have_text("No conversation selected")
        page.get_by_test_id("message-input").fill("what is the weather in Paris?")
        page.get_by_test_id("message-input").press("Enter")
        expect(page.get_by_test_id("live-answer")).to_have_text("Paris: 18 degrees", timeout=30_000)
        expect(page.locator("#conversation-title")).to_have_text("what is the weather in Paris?")
        assert "#/c/" in page.url and page.url != first_url  # a new one, not the last one
        assert problems == [], problems
