"""The console in Debian's chromium (Playwright), live across clients.

A daemon of its own (`console_setup`): another client (``requests``) sends messages, fails a
run, and asks for approvals while a page is open; the page must show each as it happens,
answer approvals, describe and call tools, and fit 800 px and phone widths. With
``TOOLBRIDGE_SCREENSHOTS=docs/images`` the main views are saved there for the docs.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from playwright.sync_api import BrowserContext, Page, expect

from bridge.emulator import Emulator
from tests.daemon.conftest import DaemonProcess, wait_for
from tests.daemon.console_setup import API_KEY, SCENARIO, screenshot_dir, start_console_daemon
from tests.daemon.test_console import chromium

TIMEOUT = 30_000


@pytest.fixture(scope="module")
def emulator() -> Iterator[Emulator]:
    with Emulator(scenario=SCENARIO) as emu:
        yield emu


@pytest.fixture(scope="module")
def daemon(emulator: Emulator, tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    proc = start_console_daemon(emulator, tmp_path_factory.mktemp("console"))
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrowserContext]:
    viewport = {"width": 1280, "height": 860}
    with chromium(tmp_path_factory.mktemp("profile"), viewport=viewport) as context:
        yield context


@pytest.fixture
def page(browser: BrowserContext, daemon: DaemonProcess) -> Iterator[Page]:
    """A console page, key entered, live stream up; fails the test on any script error."""
    page = browser.new_page()
    problems: list[str] = []
    page.on("pageerror", lambda error: problems.append(str(error)))
    page.goto(daemon.url + "/")
    expect(page.locator("#key-form")).to_be_visible(timeout=TIMEOUT)
    page.fill("#key-input", API_KEY)
    page.click("#key-form button")
    expect(page.get_by_test_id("status")).to_have_text("connected", timeout=TIMEOUT)
    expect(page.get_by_test_id("live-state")).to_have_text("live", timeout=TIMEOUT)
    try:
        yield page
    finally:
        page.close()
    assert problems == [], problems


def shot(page: Page, name: str, tmp_path: Path) -> None:
    page.screenshot(path=str(tmp_path / f"{name}.png"))
    where = screenshot_dir()
    if where is not None:
        where.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(where / f"console-{name}.png"))


def in_background(
    daemon: DaemonProcess, cid: str, query: str
) -> tuple[threading.Thread, list[Any]]:
    """Send a message from another client without waiting for the answer here."""
    replies: list[requests.Response] = []
    thread = threading.Thread(target=lambda: replies.append(daemon.ask(cid, query)), daemon=True)
    thread.start()
    return thread, replies


def no_horizontal_scroll(page: Page) -> None:
    widths = page.evaluate(
        "[document.documentElement.scrollWidth, document.documentElement.clientWidth]"
    )
    assert widths[0] <= widths[1], f"horizontal scroll: scrollWidth {widths[0]} > {widths[1]}"


def no_null(page: Page) -> None:
    """A literal null (or undefined) never reaches the screen."""
    text = page.locator("body").inner_text()
    assert not re.search(r"\b(null|undefined)\b", text), text


def test_the_header_names_the_platform_health_and_tools(
    page: Page, daemon: DaemonProcess, emulator: Emulator
) -> None:
    expect(page.get_by_test_id("platform-kind")).to_have_text("appbuilder emulator")
    expect(page.get_by_test_id("platform-url")).to_have_text(emulator.base_url)
    expect(page.get_by_test_id("platform-app")).to_have_text(emulator.app_id)
    expect(page.get_by_test_id("health")).to_have_text(re.compile("ready"), timeout=TIMEOUT)
    expect(page.get_by_test_id("tool-count")).to_have_text("4")
    assert emulator.token not in page.content()
    no_null(page)


def test_a_message_from_another_client_appears_live(
    page: Page, daemon: DaemonProcess, tmp_path: Path
) -> None:
    streams: list[str] = []
    page.on("request", lambda r: streams.append(r.url) if "/v1/events" in r.url else None)
    cid = daemon.new_conversation()
    # The list updates live: the new conversation shows up without a reload.
    item = page.locator(f'[data-testid="conversation-item"][data-id="{cid}"]')
    expect(item).to_be_visible(timeout=TIMEOUT)
    item.get_by_role("button").click()
    expect(page).to_have_url(re.compile(f"#/c/{cid}$"))
    expect(page.get_by_test_id("conversation-title")).to_have_text("New conversation")
    form = page.locator("#send-form").bounding_box()

    thread, replies = in_background(daemon, cid, "what is the weather in Tokyo?")
    transcript = page.get_by_test_id("transcript")
    expect(transcript.get_by_test_id("user-message")).to_contain_text(
        "what is the weather in Tokyo?", timeout=TIMEOUT
    )
    expect(transcript.get_by_test_id("live-answer")).to_have_text(
        "Tokyo: 22 degrees", timeout=TIMEOUT
    )
    call = transcript.get_by_test_id("tool-call")
    expect(call.get_by_test_id("tool-name")).to_have_text("get_weather")
    expect(call.get_by_test_id("tool-arguments")).to_contain_text('"city": "Tokyo"')
    expect(call.get_by_test_id("tool-output")).to_contain_text('"temp": 22')
    expect(transcript.get_by_test_id("run-status")).to_have_text("finished", timeout=TIMEOUT)
    expect(transcript.get_by_test_id("answer")).to_contain_text(re.compile(r"\d+(\.\d)? (ms|s)"))
    thread.join(timeout=60)
    assert replies and replies[0].status_code == 200
    assert page.locator("#send-form").bounding_box() == form  # the answer did not move it

    # The title is the first message, in the list and the heading; no "null" anywhere.
    expect(page.get_by_test_id("conversation-title")).to_have_text(
        "what is the weather in Tokyo?", timeout=TIMEOUT
    )
    expect(item).to_contain_text("what is the weather in Tokyo?", timeout=TIMEOUT)
    expect(item).to_contain_text("1 message(s)")
    assert "null" not in page.get_by_test_id("transcript").inner_text()

    # A second message from the other client lands in the same open page.
    daemon.ask(cid, "what is the weather in Paris?")
    expect(transcript.get_by_test_id("user-message")).to_have_count(2, timeout=TIMEOUT)
    expect(transcript.get_by_test_id("answer").last).to_contain_text(
        "Paris: 18 degrees", timeout=TIMEOUT
    )
    expect(transcript.get_by_test_id("run-status").last).to_have_text("finished")
    expect(item).to_contain_text("2 message(s)", timeout=TIMEOUT)
    assert streams == [], streams  # the one stream opened with the page carried all of it
    no_null(page)
    shot(page, "conversation", tmp_path)


def test_an_error_appears_live_and_stays(page: Page, daemon: DaemonProcess) -> None:
    page.get_by_test_id("message-input").fill("explode")
    page.get_by_test_id("message-input").press("Enter")
    answer = page.get_by_test_id("answer").last
    expect(answer.get_by_test_id("run-error")).to_contain_text(
        "the code node failed", timeout=TIMEOUT
    )
    expect(answer.get_by_test_id("error-kind")).to_have_text(re.compile("run_failed"))
    expect(answer.get_by_test_id("run-status")).to_have_text("failed", timeout=TIMEOUT)
    # Still there once the run has ended (the `done` of the run no longer hides it) ...
    expect(answer.get_by_test_id("run-error")).to_contain_text("the code node failed")
    expect(page.get_by_test_id("tool-call")).to_contain_text("Oslo")
    # ... and for a watcher in another page, from another client's message.
    cid = daemon.new_conversation()
    other = page.context.new_page()
    try:
        other.goto(f"{daemon.url}/#/c/{cid}")
        other.fill("#key-input", API_KEY)
        other.click("#key-form button")
        expect(other.get_by_test_id("live-state")).to_have_text("live", timeout=TIMEOUT)
        expect(other.get_by_test_id("conversation-title")).to_have_text("New conversation")
        response = daemon.ask(cid, "explode, from elsewhere")
        assert response.status_code == 502
        error = other.get_by_test_id("run-error")
        expect(error).to_contain_text("the code node failed", timeout=TIMEOUT)
        expect(error.get_by_test_id("error-kind")).to_have_text("run_failed")
        expect(other.get_by_test_id("run-status")).to_have_text("failed")
    finally:
        other.close()


def test_the_tools_page_shows_schemas_and_tries_tools(
    page: Page, daemon: DaemonProcess, tmp_path: Path
) -> None:
    page.get_by_test_id("view-tools").click()
    weather = page.locator('[data-testid="tool"][data-name="get_weather"]')
    expect(weather).to_be_visible()
    city = weather.locator('[data-testid="tool-param"][data-name="city"]')
    expect(city).to_contain_text("string")
    expect(city).to_contain_text("required")
    expect(city).to_contain_text("City name, e.g. Paris.")
    unit = weather.locator('[data-testid="tool-param"][data-name="unit"]')
    expect(unit).to_contain_text("optional")
    expect(unit.get_by_test_id("tool-enum")).to_contain_text('"C", "F"')
    expect(weather.get_by_test_id("tool-source")).to_contain_text("Python")
    expect(weather.get_by_test_id("tool-source")).to_contain_text("console_tools.py:get_weather")
    expect(weather).to_contain_text("idempotent")
    expect(weather).to_contain_text("timeout 20.0 s")
    tickets = page.locator('[data-testid="tool"][data-name="list_tickets"]')
    expect(tickets.get_by_test_id("tool-source")).to_contain_text("HTTP manifest")
    expect(page.locator('[data-testid="tool"][data-name="big_report"]')).to_contain_text(
        "read-only"
    )

    # Try it, with the keyboard: the summary opens the form, labels name the fields.
    weather.get_by_test_id("try-it").locator("summary").focus()
    page.keyboard.press("Enter")
    weather.get_by_label("city").fill("Tokyo")
    weather.get_by_label("unit").select_option(label="F")
    weather.get_by_test_id("try-run").click()
    expect(weather.get_by_test_id("try-output")).to_contain_text('"temp": 72', timeout=TIMEOUT)
    expect(weather.get_by_test_id("try-state")).to_have_text("ok")
    shot(page, "tools", tmp_path)

    # A confirm tool is refused without the explicit confirmation, and runs with it.
    wire = page.locator('[data-testid="tool"][data-name="wire"]')
    expect(wire).to_contain_text("needs approval")
    wire.get_by_test_id("try-it").locator("summary").click()
    wire.get_by_label("amount").fill("7")
    wire.get_by_label("to").fill("carol")
    wire.get_by_test_id("try-run").click()
    expect(wire.get_by_test_id("try-error")).to_contain_text(
        "confirmation_required", timeout=TIMEOUT
    )
    wire.get_by_test_id("try-confirm").check()
    wire.get_by_test_id("try-run").click()
    expect(wire.get_by_test_id("try-output")).to_have_text("wired 7 to carol", timeout=TIMEOUT)
    no_null(page)


def test_an_approval_is_answered_from_the_page(
    page: Page, daemon: DaemonProcess, tmp_path: Path
) -> None:
    cid = daemon.new_conversation()
    thread, replies = in_background(daemon, cid, "wire 5 to bob")
    approvals = page.get_by_test_id("approvals")
    expect(approvals).to_be_visible(timeout=TIMEOUT)
    card = approvals.get_by_test_id("approval")
    expect(card.get_by_test_id("approval-tool")).to_have_text("wire")
    expect(card.get_by_test_id("approval-arguments")).to_contain_text('"amount": 5')
    expect(card).to_contain_text("asked by default")
    expect(card.get_by_role("link")).to_have_text("wire 5 to bob", timeout=TIMEOUT)
    expect(card).to_contain_text("min left")
    item = page.locator(f'[data-testid="conversation-item"][data-id="{cid}"]')
    expect(item.get_by_test_id("approval-badge")).to_be_visible(timeout=TIMEOUT)
    expect(page.get_by_test_id("approvals-count")).to_contain_text("1")

    item.get_by_role("button").click()
    expect(page.get_by_test_id("tool-call")).to_contain_text(
        "waiting for approval", timeout=TIMEOUT
    )
    shot(page, "approvals", tmp_path)

    card.get_by_label("Note (optional)").fill("ok for bob")
    card.get_by_test_id("approve").click()
    expect(approvals).to_be_hidden(timeout=TIMEOUT)
    expect(item.get_by_test_id("approval-badge")).to_have_count(0, timeout=TIMEOUT)
    expect(page.get_by_test_id("answer").last).to_contain_text(
        "result: wired 5 to bob", timeout=TIMEOUT
    )
    thread.join(timeout=60)
    assert replies and replies[0].status_code == 200, replies
    decided = daemon.request("GET", "/v1/approvals?status=approved").json()["items"]
    assert [(a["decided_by"], a["note"]) for a in decided] == [("default", "ok for bob")]

    # A rejection from another page, with its note, is what the model reads.
    thread, replies = in_background(daemon, cid, "wire 9 to mallory")
    card = page.get_by_test_id("approval")
    expect(card).to_have_count(1, timeout=TIMEOUT)
    # Titled by its own call, not by the conversation (whose title is its first message).
    [pending] = daemon.request("GET", "/v1/approvals?status=pending").json()["items"]
    expect(card.get_by_test_id("approval-call")).to_have_text(f"call {pending['call_id']}")
    expect(card).to_have_attribute("aria-label", f"approval of wire (call {pending['call_id']})")
    card.get_by_label("Note (optional)").fill("not mallory")
    card.get_by_test_id("reject").click()
    thread.join(timeout=60)
    assert replies and "not mallory" in replies[0].json()["tool_runs"][0]["output"]
    expect(page.get_by_test_id("tool-call").last).to_contain_text("rejected", timeout=TIMEOUT)


@pytest.mark.parametrize("width", [800, 390])
def test_narrow_layouts_have_no_horizontal_scroll(
    browser: BrowserContext, page: Page, daemon: DaemonProcess, width: int, tmp_path: Path
) -> None:
    cid = daemon.new_conversation()
    assert daemon.ask(cid, "what is the weather in Paris?").status_code == 200
    assert daemon.ask(cid, "report 40").status_code == 200
    page.set_viewport_size({"width": width, "height": 900})
    page.goto(f"{daemon.url}/#/c/{cid}")
    expect(page.get_by_test_id("answer").last).to_contain_text(
        "the report has 40 rows", timeout=TIMEOUT
    )
    expect(page.locator(f'li.selected[data-id="{cid}"]')).to_have_count(1)
    output = page.get_by_test_id("tool-output").last
    expect(output).not_to_contain_text("row 40")  # long outputs are folded ...
    page.get_by_test_id("show-all").last.click()
    expect(output).to_contain_text("row 40")  # ... until asked
    no_horizontal_scroll(page)
    no_null(page)
    if width == 390:
        page.get_by_test_id("show-all").last.click()  # folded again
        page.evaluate("document.getElementById('transcript').scrollTop = 0; window.scrollTo(0, 0)")
        shot(page, "phone", tmp_path)
    page.get_by_test_id("view-tools").click()
    expect(page.get_by_test_id("tool")).to_have_count(4)
    no_horizontal_scroll(page)
    page.get_by_test_id("view-conversations").click()

    # Keyboard: Tab reaches the list, the message box and the send button.
    page.get_by_test_id("new-conversation").focus()
    reached: list[str] = []
    for _ in range(60):
        page.keyboard.press("Tab")
        reached.append(page.evaluate("document.activeElement.dataset.testid || ''"))
        if "send-button" in reached:
            break
    assert "message-input" in reached and "send-button" in reached, reached
    wait_for(lambda: page.get_by_test_id("live-state").inner_text() == "live", "live")


def test_without_the_event_stream_the_page_polls(
    browser: BrowserContext, daemon: DaemonProcess
) -> None:
    """A proxy that cannot stream: the page says so, and still shows other clients' work.

    The page's clock is Playwright's: it runs as usual, and the test moves it on instead of
    waiting out the reconnection delays and the polling interval (what is checked is that the
    page falls back to polling and that a poll shows the change).
    """
    browser.clock.install()
    page = browser.new_page()

    def moved(until: Callable[[], bool]) -> Callable[[], bool]:
        def check() -> bool:
            browser.clock.fast_forward(1000)
            return until()

        return check

    try:
        page.route("**/v1/events*", lambda route: route.abort())
        page.goto(daemon.url + "/")
        page.fill("#key-input", API_KEY)
        page.click("#key-form button")
        live = page.get_by_test_id("live-state")
        wait_for(moved(lambda: live.inner_text() == "polling"), "the page to poll")
        cid = daemon.new_conversation()
        item = page.locator(f'[data-testid="conversation-item"][data-id="{cid}"]')
        wait_for(moved(item.is_visible), "a poll to list the new conversation")
        item.get_by_role("button").click()
        assert daemon.ask(cid, "what is the weather in Oslo?").status_code == 200
        answers = page.get_by_test_id("answer")

        def shown() -> bool:
            return "Oslo: 4 degrees" in " ".join(answers.all_inner_texts())

        wait_for(moved(shown), "a poll to show the answer")
        expect(answers).to_contain_text("Oslo: 4 degrees")
        expect(page.get_by_test_id("tool-output")).to_contain_text('"temp": 4')
    finally:
        page.close()
