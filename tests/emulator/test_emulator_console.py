"""The console endpoints over real HTTP: DescribeApps, DescribeApp, GET /v2/apps.

The official SDK's own calls are in tests/platforms/appbuilder/test_conformance_sdk.py; here
the edges it never sends (cursors, bad bodies, bad tokens) and the scenario's ``app`` section.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import requests

from bridge.emulator import Emulator, ScenarioError, load_scenario
from tests.emulator.helpers import TIMEOUT

APP = {
    "name": "Helpdesk",
    "description": "Opens tickets",
    "type": "chatflow",
    "instruction": "Be brief",
    "prologue": "Hi!",
    "example_queries": ["open a ticket"],
}


@pytest.fixture(scope="module")
def described() -> Iterator[Emulator]:
    with Emulator(scenario={"app": APP}, faults="") as emulator:
        yield emulator


def _post(emu: Emulator, action: str | None, body: Any, token: str | None = None) -> Any:
    params = {"Action": action} if action is not None else {}
    headers = {"Authorization": f"Bearer {token or emu.token}"}
    return requests.post(
        f"{emu.base_url}/v2/app", params=params, json=body, headers=headers, timeout=TIMEOUT
    )


def _get(emu: Emulator, **params: Any) -> Any:
    headers = {"Authorization": f"Bearer {emu.token}"}
    return requests.get(f"{emu.base_url}/v2/apps", params=params, headers=headers, timeout=TIMEOUT)


def _message(response: Any, status: int) -> str:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"request_id", "code", "message"}
    return str(body["message"])


def test_describe_apps_lists_the_one_app(described: Emulator) -> None:
    response = _post(described, "DescribeApps", {"maxKeys": 5, "marker": None})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["requestId"] == response.headers["X-Appbuilder-Request-Id"]
    assert (body["maxKeys"], body["isTruncated"], body["nextMarker"]) == (5, False, "")
    (app,) = body["data"]
    assert app["id"] == described.app_id and app["appType"] == "chatflow"
    assert (app["name"], app["description"], app["isPublished"]) == (
        "Helpdesk",
        "Opens tickets",
        True,
    )


def test_a_page_after_a_marker_is_empty(described: Emulator) -> None:
    body = _post(described, "DescribeApps", {"marker": described.app_id}).json()
    assert body["data"] == [] and body["marker"] == described.app_id


def test_describe_app_gives_the_scenario_app(described: Emulator) -> None:
    body = _post(described, "DescribeApp", {"id": described.app_id}).json()
    assert body["id"] == described.app_id
    assert (body["instruction"], body["prologue"], body["exampleQueries"]) == (
        "Be brief",
        "Hi!",
        ["open a ticket"],
    )


def test_describe_app_of_another_app_is_404(described: Emulator) -> None:
    message = _message(_post(described, "DescribeApp", {"id": "other"}), 404)
    assert "app 'other' not found" in message and described.app_id in message


@pytest.mark.parametrize(
    ("action", "body", "expected"),
    [
        (None, {}, "unknown or missing Action None"),
        ("DeleteApp", {}, "expected ?Action=DescribeApps or ?Action=DescribeApp"),
        ("DescribeApps", {"maxKeys": 0}, "maxKeys: Input should be greater than or equal to 1"),
        ("DescribeApps", {"maxKeys": "10"}, "maxKeys: Input should be a valid integer"),
        ("DescribeApp", {}, "id: required field is missing"),
        ("DescribeApp", [], "must be a JSON object"),
    ],
)
def test_bad_console_requests_say_what_was_expected(
    described: Emulator, action: str | None, body: Any, expected: str
) -> None:
    assert expected in _message(_post(described, action, body), 400)


def test_console_endpoints_check_the_token(described: Emulator) -> None:
    message = _message(_post(described, "DescribeApps", {}, token="wrong"), 401)
    assert "does not carry this emulator's token" in message


def test_the_app_list(described: Emulator) -> None:
    response = _get(described, limit=3)
    assert response.status_code == 200, response.text
    body = response.json()
    assert set(body) == {"request_id", "data"} and body["data"][0]["id"] == described.app_id
    assert _get(described, after=described.app_id).json()["data"] == []
    assert _get(described, before=described.app_id).json()["data"] == []


def test_the_app_list_checks_its_limit(described: Emulator) -> None:
    assert "limit: Input should be less than or equal to 100" in _message(
        _get(described, limit=500), 400
    )
    assert "limit: Input should be a valid integer" in _message(_get(described, limit="x"), 400)


def test_the_app_list_is_get_only(described: Emulator) -> None:
    headers = {"Authorization": f"Bearer {described.token}"}
    response = requests.post(f"{described.base_url}/v2/apps", headers=headers, timeout=TIMEOUT)
    assert "POST is not allowed on /v2/apps; use GET" in _message(response, 405)


def test_without_an_app_section_the_app_has_default_names() -> None:
    with Emulator(faults="") as emu:
        (app,) = _post(emu, "DescribeApps", {}).json()["data"]
    assert (app["name"], app["appType"]) == ("Emulated app", "agent")


def test_a_bad_app_section_names_the_key() -> None:
    with pytest.raises(ScenarioError, match=r"app\.type: Input should be 'agent' or 'chatflow'"):
        load_scenario({"app": {"type": "robot"}})
    with pytest.raises(ScenarioError, match=r"app\.color: unknown field"):
        load_scenario({"app": {"color": "red"}})


def test_console_requests_take_header_faults(described: Emulator) -> None:
    headers = {"Authorization": f"Bearer {described.token}", "X-Emulator-Fault": "status=503"}
    listing = requests.post(
        f"{described.base_url}/v2/app",
        params={"Action": "DescribeApps"},
        json={},
        headers=headers,
        timeout=TIMEOUT,
    )
    assert "emulated fault: HTTP 503" in _message(listing, 503)
    apps = requests.get(f"{described.base_url}/v2/apps", headers=headers, timeout=TIMEOUT)
    assert "emulated fault: HTTP 503" in _message(apps, 503)


def test_a_global_fault_on_any_endpoint_reaches_the_console() -> None:
    with Emulator(faults="on=any,status=429,times=1") as emu:
        assert _post(emu, "DescribeApps", {}).status_code == 429
        assert _post(emu, "DescribeApps", {}).status_code == 200
