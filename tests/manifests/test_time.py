"""manifests/time.py: current time, conversions, and refusals of bad zones, times and dates."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime

import pytest

from bridge.tools import Toolbox
from tests.manifests.conftest import Call, loaded


@pytest.fixture(scope="module")
def box() -> Toolbox:
    return loaded("time.py")


@pytest.fixture
def call(box: Toolbox, call_in: Callable[[Toolbox], Call]) -> Call:
    return call_in(box)


def test_loadable_and_described(box: Toolbox) -> None:
    assert box.names() == ["current_time", "convert_time", "find_timezones"]
    [convert] = [m for m in box.manifests() if m["function"]["name"] == "convert_time"]
    props = convert["function"]["parameters"]["properties"]
    assert props["time"]["description"].startswith("The time in the source zone, 24-hour HH:MM")
    assert convert["function"]["parameters"]["required"] == [
        "time",
        "source_timezone",
        "target_timezone",
    ]


def test_current_time(call: Call) -> None:
    result = call("current_time", {"timezone": "Asia/Tokyo"})
    assert result.error is None, result.output
    now = json.loads(result.output)
    assert now["timezone"] == "Asia/Tokyo"
    assert now["utc_offset"] == "+09:00"
    assert datetime.fromisoformat(now["datetime"]).utcoffset() is not None


def test_convert_time_across_a_daylight_saving_change(call: Call) -> None:
    before = json.loads(
        call(
            "convert_time",
            {
                "time": "09:30",
                "source_timezone": "Europe/Paris",
                "target_timezone": "America/New_York",
                "date": "2025-03-20",
            },
        ).output
    )
    assert before["target"]["datetime"] == "2025-03-20T04:30:00-04:00"
    assert before["time_difference"] == "-05:00"
    after = json.loads(
        call(
            "convert_time",
            {
                "time": "09:30",
                "source_timezone": "Europe/Paris",
                "target_timezone": "America/New_York",
                "date": "2025-04-02",
            },
        ).output
    )
    assert after["target"]["datetime"] == "2025-04-02T03:30:00-04:00"
    assert after["source"]["is_dst"] is True


def test_find_timezones(call: Call) -> None:
    assert json.loads(call("find_timezones", {"query": "tokyo"}).output) == ["Asia/Tokyo"]
    assert call("find_timezones", {"query": " "}).error == "tool_error"


@pytest.mark.parametrize(
    ("tool", "arguments", "message"),
    [
        (
            "current_time",
            {"timezone": "Europe/Pari"},
            "ValueError: timezone: unknown time zone 'Europe/Pari'; expected an IANA name such "
            "as Europe/Paris, Asia/Shanghai or UTC; did you mean Europe/Paris",
        ),
        (
            "current_time",
            {"timezone": "../../etc/passwd"},
            "ValueError: timezone: unknown time zone '../../etc/passwd'",
        ),
        (
            "convert_time",
            {"time": "25:00", "source_timezone": "UTC", "target_timezone": "UTC"},
            "ValueError: time: expected 24-hour HH:MM such as 09:30 or 18:05 (got '25:00')",
        ),
        (
            "convert_time",
            {"time": "noon", "source_timezone": "UTC", "target_timezone": "Mars/Olympus"},
            "ValueError: target_timezone: unknown time zone 'Mars/Olympus'",
        ),
        (
            "convert_time",
            {"time": "12:00", "source_timezone": "UTC", "target_timezone": "UTC", "date": "soon"},
            "ValueError: date: expected YYYY-MM-DD such as 2025-03-30 (got 'soon')",
        ),
        (
            "find_timezones",
            {"query": "a", "limit": 0},
            "ValueError: limit: expected 1 to 100 (got 0)",
        ),
    ],
)
def test_refusals(call: Call, tool: str, arguments: dict[str, object], message: str) -> None:
    result = call(tool, arguments)
    assert result.error == "tool_error"
    assert result.output.startswith(message), result.output
