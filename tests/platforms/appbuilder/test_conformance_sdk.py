"""Conformance: the OFFICIAL appbuilder-sdk 1.1.5 accepts the emulator.

The SDK pins old dependencies, so it runs in its own venv (`.venv-conformance/`, built once by
`tests.support.sdk_venv`) as a subprocess that drives one emulator through the SDK's public
API (`tests/support/sdk_drive.py`) and prints what it saw as JSON. If the venv cannot be built
(PyPI unreachable, no Python 3.10-3.12) these tests fail loudly; they never skip.
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bridge.emulator import Emulator, RecordedRequest
from tests.support.sdk_venv import ensure_sdk_venv

pytestmark = [pytest.mark.conformance, pytest.mark.timeout(1800)]

SCRIPT = Path(__file__).resolve().parents[2] / "support" / "sdk_drive.py"

SCENARIO: dict[str, Any] = {
    "settings": {"chunk_chars": 5},
    "app": {
        "name": "天气助手",
        "description": "查询天气",
        "type": "agent",
        "instruction": "你是一个天气助手",
        "prologue": "你好",
        "example_queries": ["北京天气怎么样？"],
        "components": [
            {
                "code": "WeatherQuery",
                "name": "天气查询",
                "parameters": {
                    "type": "object",
                    "properties": {"city": {"type": "string"}},
                    "required": ["city"],
                },
                "answer": "{city}：晴",
            }
        ],
    },
    "rules": [
        {
            "name": "compare",
            "match": r"Compare (?P<a>\w+) and (?P<b>\w+)",
            "steps": [
                {
                    "calls": [
                        {
                            "tool": "get_current_weather",
                            "as": "a",
                            "arguments": {"location": "{a}", "unit": "celsius"},
                        },
                        {
                            "tool": "get_current_weather",
                            "as": "b",
                            "arguments": {"location": "{b}", "unit": "celsius"},
                        },
                    ]
                }
            ],
            "answer": "{a}: {outputs.a.temp}°C; {b}: {outputs.b.temp}°C",
        },
        {
            "name": "wear",
            "match": r"wear in (?P<city>\w+)",
            "steps": [
                {
                    "tool": "get_current_weather",
                    "arguments": {"location": "{city}", "unit": "celsius"},
                },
                {
                    "tool": "suggest_clothes",
                    "arguments": {"temperature": "{outputs.get_current_weather.temp}"},
                },
            ],
            "answer": "It is {outputs.get_current_weather.temp}°C in {city}: "
            "{outputs.suggest_clothes}",
        },
        {
            "name": "rate-limit",
            "match": "^rate limit me",
            "answer": "finally through",
            "faults": "status=429,retry_after=1,times=1",
        },
        {"name": "malformed", "match": "^malformed", "answer": "never", "faults": "malformed=1"},
        {
            "name": "capabilities",
            "match": "^你能做什么",
            "answer": "我能查天气",
            "follow_up": ["北京天气怎么样？", "{query}还有什么？"],
        },
        {
            "name": "dialog",
            "match": "^查天气",
            "steps": [{"ask": "哪个城市？", "as": "city"}],
            "answer": "{answers.city}：晴",
            "multiple_dialog_event": {"dialog": "weather", "city": "{answers.city}"},
        },
        {
            "name": "inband",
            "match": "^in-band",
            "answer": "never",
            "faults": "inband=ServiceError,message=code node failed",
        },
    ],
}

_SDK_ENV_PREFIXES = ("APPBUILDER_", "GATEWAY_URL", "CONSOLE_OPENAPI_", "SECRET_KEY_PREFIX")


@pytest.fixture(scope="module")
def conformance() -> Iterator[tuple[dict[str, Any], Emulator, list[RecordedRequest]]]:
    """Build the SDK venv, run the SDK script against one emulator, return what it saw."""
    python = ensure_sdk_venv()
    with Emulator(scenario=SCENARIO, faults="") as emu:
        env = {k: v for k, v in os.environ.items() if not k.startswith(_SDK_ENV_PREFIXES)}
        env.update({"GATEWAY_URL_V2": emu.base_url, "APPBUILDER_TOKEN": emu.token})
        done = subprocess.run(
            [str(python), str(SCRIPT), emu.app_id],
            env=env,
            capture_output=True,
            text=True,
            encoding="utf-8",
            timeout=600,
            check=False,
        )
        assert done.returncode == 0, f"SDK script failed:\n{done.stdout}\n{done.stderr}"
        results = json.loads(done.stdout.strip().splitlines()[-1])
        crashed = {k: v for k, v in results.items() if isinstance(v, dict) and "crashed" in v}
        assert not crashed, json.dumps(crashed, indent=2, ensure_ascii=False)
        yield results, emu, emu.requests


def test_the_sdk_is_the_pinned_version(conformance: tuple[dict[str, Any], Any, Any]) -> None:
    results, _, _ = conformance
    assert results["sdk_version"] == "1.1.5"


def test_non_stream_run_with_a_manifest_tool(conformance: tuple[dict[str, Any], Any, Any]) -> None:
    got = conformance[0]["non_stream_manifest"]
    assert (got["status"], got["event_type"], got["content_type"]) == (
        "interrupt",
        "Interrupt",
        "contexts",
    )
    assert got["tool"] == "get_current_weather"
    assert got["arguments"] == {"location": "Beijing", "unit": "fahrenheit"}
    assert "get_current_weather" in got["thought"]
    assert got["interrupt_answer"] == ""
    assert got["answer"] == got["output"]  # the default planner answers with the tool output
    statuses = got["final_statuses"]
    assert statuses[0] == "preparing" and statuses[-2:] == ["done", "success"]
    assert set(statuses[1:-2]) == {"running"}
    assert got["message_ids"][0] == got["message_ids"][1]
    text_usage = [u for u in got["usage"] if u]
    assert text_usage and all(u["name"] == "ERNIE-4.0-8K" for u in text_usage)


def test_stream_run_with_a_dict_tool(conformance: tuple[dict[str, Any], Any, Any]) -> None:
    got = conformance[0]["stream_dict_tool"]
    assert got["first_statuses"] == ["preparing", "interrupt"]
    assert got["tool"] == "get_time" and got["arguments"] == {"timezone": "Asia/Tokyo"}
    assert got["statuses"][0] == "preparing" and got["statuses"][-2:] == ["done", "success"]
    assert set(got["statuses"][1:-2]) == {"running"}
    assert got["empty_last_chunk"] is True
    assert got["answer"] == "10:30" and got["deltas"] == ["10:30"]


def test_tool_call_event_handler_parallel_stream(
    conformance: tuple[dict[str, Any], Emulator, Any],
) -> None:
    results, emu, _ = conformance
    got = results["parallel_handler_stream"]
    assert got["result"] == "Paris: 21°C; London: 21°C"
    (message,) = emu.conversation(got["conversation_id"]).messages
    assert [c.arguments["location"] for c in message.tool_calls] == ["Paris", "London"]


def test_tool_call_event_handler_parallel_non_stream(
    conformance: tuple[dict[str, Any], Emulator, Any],
) -> None:
    results, emu, _ = conformance
    got = results["parallel_handler_non_stream"]
    # SDK 1.1.5 bug (docs/wire/appbuilder.md, "What the official SDK does differently"):
    # non-stream, after a tool round, reset_state() wipes `result`. The run itself finished;
    # the emulator has the answer.
    assert got["result"] == ""
    (message,) = emu.conversation(got["conversation_id"]).messages
    assert message.answer == "Paris: 21°C; London: 21°C" and message.status == "success"


def test_tool_call_event_handler_chained_rounds(
    conformance: tuple[dict[str, Any], Emulator, Any],
) -> None:
    results, emu, _ = conformance
    got = results["chained_handler"]
    assert got["result"] == "It is 21°C in Oslo: a light jacket"
    (message,) = emu.conversation(got["conversation_id"]).messages
    assert [(c.name, c.arguments) for c in message.tool_calls] == [
        ("get_current_weather", {"location": "Oslo", "unit": "celsius"}),
        ("suggest_clothes", {"temperature": 21}),
    ]


@pytest.mark.parametrize("mode", ["stream", "non_stream"])
def test_custom_event_handler(conformance: tuple[dict[str, Any], Any, Any], mode: str) -> None:
    got = conformance[0][f"recorder_{mode}"]
    assert got["calls"] == [{"name": "get_current_weather", "arguments": {"location": "Shanghai"}}]
    assert got["thoughts"] == [
        "To answer the question I need to call get_current_weather: weather in Shanghai please"
    ]
    assert json.loads(got["answer"]) == {"location": "Shanghai", "temp": 21, "condition": "sunny"}
    if mode == "stream":
        assert got["seen"][:3] == ["preparing", "interrupt", "preparing"]
        assert got["seen"][-2:] == ["done", "success"]
        assert set(got["seen"][3:-2]) == {"running"}
    else:  # the SDK looks at the last event of each response only
        assert got["seen"] == ["interrupt", "success"]


def test_files_and_feedback(conformance: tuple[dict[str, Any], Emulator, Any]) -> None:
    results, emu, _ = conformance
    got = results["files_and_feedback"]
    for file_id in got["file_ids"]:
        uuid.UUID(file_id)
    snapshot = emu.conversation(got["conversation_id"])
    local, remote = snapshot.files
    assert local.filename and local.filename.endswith(".txt") and local.size == 17
    assert remote.url == "https://example.com/chart.png"
    assert "No tool matched" in got["answer"]
    uuid.UUID(got["feedback_request_id"])
    (feedback,) = snapshot.feedback
    assert feedback["type"] == "downvote" and feedback["flag"] == ["没有帮助"]


def test_the_async_client_uploads_a_file_url(
    conformance: tuple[dict[str, Any], Emulator, Any],
) -> None:
    results, emu, requests = conformance
    got = results["async_upload_url"]
    uuid.UUID(got["file_id"])
    (record,) = emu.conversation(got["conversation_id"]).files
    assert record.url == "https://example.com/report.pdf" and record.file_id == got["file_id"]
    (upload,) = [
        r
        for r in requests
        if r.path.endswith("/file/upload")
        and r.form
        and r.form.get("file_url", "").endswith(".pdf")
    ]
    assert upload.headers["content-type"].startswith("application/x-www-form-urlencoded")


def test_the_sdk_request_ids_are_echoed(conformance: tuple[dict[str, Any], Any, Any]) -> None:
    requests = conformance[2]
    assert requests
    for request in requests:
        assert request.request_id == request.headers["x-appbuilder-request-id"], request.path
    assert len({r.request_id for r in requests}) == len(requests)


def test_the_console_lists_and_describes_the_app(
    conformance: tuple[dict[str, Any], Emulator, Any],
) -> None:
    results, emu, requests = conformance
    got = results["console"]
    (listed,) = got["describe_apps"]
    assert {k: listed[k] for k in ("id", "name", "description", "appType", "isPublished")} == {
        "id": emu.app_id,
        "name": "天气助手",
        "description": "查询天气",
        "appType": "agent",
        "isPublished": True,
    }
    assert isinstance(listed["updateTime"], int) and len(str(listed["updateTime"])) < 13
    # SDK 1.1.5 builds DescribeAppsRequest(MaxKeys=, Marker=), names its model does not have,
    # so its body is always {"maxKeys": 10, "marker": null}: the marker never reaches the wire.
    assert got["describe_apps_after"] == [listed] and got["get_app_list_after"] == []
    bodies = [r.json for r in requests if r.path == "/v2/app"]
    assert {"maxKeys": 10, "marker": None} in bodies and {"id": emu.app_id} in bodies
    assert got["get_app_list"] == [listed] and got["get_all_apps"] == [emu.app_id]
    described = got["describe_app"]
    assert (described["id"], described["instruction"], described["prologue"]) == (
        emu.app_id,
        "你是一个天气助手",
        "你好",
    )
    assert described["exampleQueries"] == ["北京天气怎么样？"] and described["requestId"]
    assert described["components"] == [
        {"code": "WeatherQuery", "name": "天气查询", "description": ""}
    ]
    paths = {(r.method, r.path) for r in requests if r.path in ("/v2/app", "/v2/apps")}
    assert paths == {("POST", "/v2/app"), ("GET", "/v2/apps")}
    assert results["errors"]["unknown_app_described"]["type"] == "NotFoundException"


def test_tool_choice_runs_one_of_the_app_components(
    conformance: tuple[dict[str, Any], Emulator, Any],
) -> None:
    results, emu, _ = conformance
    got = results["component_choice"]
    for events, city in ((got["events"], "北京"), (got["stream_events"], "上海")):
        call = {"arguments": {"city": city}, "component_code": "WeatherQuery"}
        assert events[0][:3] == ["ChatAgent", "function_call", "done"]
        assert events[0][3]["text"] == {**call, "component_name": "天气查询"}
        assert [e[:3] for e in events[1:4]] == [
            ["WeatherQuery", "status", "preparing"],
            ["WeatherQuery", "text", "done"],
            ["WeatherQuery", "status", "success"],
        ]
        assert events[2][3] == {"text": f"{city}：晴"}
        assert [e[:3] for e in events[4:5]] == [["ChatAgent", "status", "preparing"]]
        assert [e[:3] for e in events[-2:]] == [
            ["ChatAgent", "text", "done"],
            ["ChatAgent", "status", "success"],
        ]
    # input {} and one required input: the query fills it.
    assert got["answer"] == "北京：晴" and got["stream_answer"] == "上海：晴"
    messages = emu.conversation(got["conversation_id"]).messages
    assert [(m.query, m.answer, m.tool_calls) for m in messages] == [
        ("北京", "北京：晴", ()),
        ("天气", "上海：晴", ()),
    ]


def test_follow_up_queries_and_dialog_events_reach_the_sdk(
    conformance: tuple[dict[str, Any], Any, Any],
) -> None:
    got = conformance[0]["follow_up_and_dialog"]
    assert got["streamed"] == ["北京天气怎么样？", "你能做什么还有什么？"]
    assert got["handler"] == got["streamed"]
    assert got["dialog_events"] == [["chatflow", {"dialog": "weather", "city": "北京的"}]]


def test_the_default_planner_reads_a_docstring_manifest_as_a_model_would(
    conformance: tuple[dict[str, Any], Any, Any],
) -> None:
    got = conformance[0]["docstring_manifest"]
    # Two cities, two calls; 华氏度 is the unit the docstring offers ("fahrenheit").
    assert got["北京和上海今天天气怎么样，用华氏度"] == [
        {"location": "北京", "unit": "fahrenheit"},
        {"location": "上海", "unit": "fahrenheit"},
    ]
    # The docstring's example ("北京") is no word of the tool's; an unnamed required unit gets
    # the first choice, as a required enum does.
    assert got["上海的天气怎么样？"] == [{"location": "上海", "unit": "celsius"}]


def test_errors_reach_the_sdk_as_its_own_exceptions(
    conformance: tuple[dict[str, Any], Any, Any],
) -> None:
    got = conformance[0]["errors"]
    assert got["bad_token"]["type"] == "UnAuthorizedException"
    assert "http status code is 401" in got["bad_token"]["message"]
    assert "PermissionDeniedError" in got["bad_token"]["message"]
    assert "request_id= ," not in got["bad_token"]["message"]  # the header id was read
    assert got["unknown_app"]["type"] == "NotFoundException"
    assert got["unknown_conversation"]["type"] == "NotFoundException"
    assert got["wrong_tool_call_id"]["type"] == "BadRequestException"
    assert "unknown tool_call_id(s) made-up" in got["wrong_tool_call_id"]["message"]
    assert got["rate_limited"]["type"] == "TooManyRequestsException"
    assert got["after_rate_limit"] == {"type": None, "value": "finally through"}
    assert got["malformed_stream"]["type"] == "AppBuilderServerException"
    assert "json decoder failed" in got["malformed_stream"]["message"]
    # 1.1.5 reads an in-band error as an empty answer (docs/wire/appbuilder.md, "What the
    # official SDK does differently").
    assert got["inband"] == {"type": None, "value": {"answer": "", "events": 0}}


def test_the_emulator_recorded_the_sdk_wire(
    conformance: tuple[dict[str, Any], Any, list[RecordedRequest]],
) -> None:
    requests = conformance[2]
    runs = [r for r in requests if r.path == "/v2/app/conversation/runs"]
    first = runs[0]
    assert list(first.json) == [
        "query",
        "stream",
        "conversation_id",
        "file_ids",
        "app_id",
        "tools",
        "tool_outputs",
        "tool_choice",
        "end_user_id",
        "action",
        "mcp_authorization",
        "parameters",
        "custom_metadata",
    ]
    submission = runs[1]
    assert submission.json["query"] == "" and submission.json["tools"] == []
    assert first.headers["x-appbuilder-origin"] == "appbuilder_sdk"
    assert json.loads(first.headers["x-appbuilder-sdk-config"])["appbuilder_sdk_version"] == "1.1.5"
    assert first.headers["authorization"] == "Bearer [secure]"
    assert all(r.status is not None for r in requests)
