"""Scripted FollowUpQuery and multiple_dialog_event events (scenario ``follow_up``,
``app.follow_up_queries``, ``multiple_dialog_event``), raw HTTP.

The official SDK reads them in tests/platforms/appbuilder/test_conformance_sdk.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from bridge.emulator import Emulator, ScenarioError, load_scenario
from tests.emulator.helpers import WEATHER, Api, body_events, statuses

SCENARIO: dict[str, Any] = {
    "app": {"follow_up_queries": ["More about {query}?"]},
    "rules": [
        {
            "name": "capabilities",
            "match": "^what can you do",
            "answer": "weather",
            "follow_up": ["Weather in Paris?", "Why {query}?"],
        },
        {"name": "quiet", "match": "^quiet", "answer": "ok", "follow_up": []},
        {
            "name": "dialog",
            "match": "^back to (?P<topic>\\w+)",
            "answer": "back",
            "follow_up": [],
            "multiple_dialog_event": {"topic": "{topic}", "depth": 2, "path": ["{query}"]},
        },
    ],
}


@pytest.fixture(scope="module")
def emu() -> Iterator[Emulator]:
    with Emulator(scenario=SCENARIO, faults="") as emulator:
        yield emulator


def _follow_ups(chunks: list[dict[str, Any]]) -> list[list[str]]:
    return [
        e["outputs"]["json"]["follow_up_querys"]
        for e in body_events(chunks)
        if e["event_type"] == "FollowUpQuery"
    ]


@pytest.mark.parametrize("stream", [True, False])
def test_a_rule_suggests_follow_up_questions_after_its_answer(api: Api, stream: bool) -> None:
    chunks = api.chunks(api.create(), "what can you do", stream=stream)
    assert statuses(chunks)[-3:] == ["text/done", "json/done", "status/success"]
    assert _follow_ups(chunks) == [["Weather in Paris?", "Why what can you do?"]]
    assert "".join(c["answer"] for c in chunks) == "weather"


def test_the_default_planner_answer_gets_the_app_follow_ups(api: Api) -> None:
    chunks = api.chunks(api.create(), "weather in Oslo", stream=False, tools=[WEATHER])
    call_id = body_events(chunks)[-1]["tool_calls"][0]["id"]
    final = api.submit(chunks[0]["conversation_id"], {call_id: "sunny"}, stream=False)
    assert _follow_ups(final) == [["More about weather in Oslo?"]]


def test_an_empty_follow_up_list_sends_none(api: Api) -> None:
    assert _follow_ups(api.chunks(api.create(), "quiet please", stream=True)) == []


@pytest.mark.parametrize("stream", [True, False])
def test_a_multiple_dialog_event_comes_after_preparing(api: Api, stream: bool) -> None:
    chunks = api.chunks(api.create(), "back to flights", stream=stream)
    assert statuses(chunks)[:2] == ["status/preparing", "multiple_dialog_event/done"]
    event = body_events(chunks)[1]
    assert event["event_type"] == "chatflow"
    assert event["outputs"] == {"topic": "flights", "depth": 2, "path": ["back to flights"]}


@pytest.mark.parametrize(
    ("scenario", "expected"),
    [
        (
            {"rules": [{"match": "x", "answer": "a", "follow_up": ["{nope}"]}]},
            r"rules\[0\]\.follow_up\[0\]: unknown placeholder \{nope\}",
        ),
        (
            {"rules": [{"match": "x", "multiple_dialog_event": {"a": {"b": "{outputs.t}"}}}]},
            r"rules\[0\]\.multiple_dialog_event\.a\.b: .*uses the output 't'",
        ),
        (
            {"app": {"follow_up_queries": ["{city}"]}},
            r"app\.follow_up_queries\[0\]: unknown placeholder \{city\}",
        ),
        (
            {"rules": [{"match": "x", "follow_up": "not a list"}]},
            r"rules\[0\]\.follow_up: Input should be a valid list",
        ),
    ],
)
def test_bad_follow_ups_name_the_key(scenario: dict[str, Any], expected: str) -> None:
    with pytest.raises(ScenarioError, match=expected):
        load_scenario(scenario)
