"""Wire models: exact request bytes (docs/wire/appbuilder.md, "The run request") and tolerant
response parsing."""

from __future__ import annotations

import json

import pytest

from bridge.platforms.appbuilder import (
    Action,
    FeedbackRequest,
    RunRequest,
    RunResponse,
    ToolOutput,
    WireToolChoice,
)

# Verbatim from docs/wire/appbuilder.md, "The run request" (observed from appbuilder-sdk 1.1.5).
OBSERVED_FIRST_CALL = (
    '{"query": "\\u5317\\u4eac\\u5929\\u6c14?", "stream": false, "conversation_id": "conv-1", '
    '"file_ids": [], "app_id": "app-1", "tools": [{"type": "function", "function": {"name": '
    '"get_current_weather", "description": "weather", "parameters": {"type": "object", '
    '"properties": {"location": {"type": "string"}}, "required": ["location"]}}}], '
    '"tool_outputs": null, "tool_choice": null, "end_user_id": "user_123456", "action": null, '
    '"mcp_authorization": null, "parameters": null, "custom_metadata": null}'
)
OBSERVED_SUBMISSION = (
    '{"query": "", "stream": true, "conversation_id": "conv-1", "file_ids": [], "app_id": '
    '"app-1", "tools": [], "tool_outputs": [{"tool_call_id": "tc-1", "output": '
    '"35\\u5ea6"}], "tool_choice": null, "end_user_id": null, "action": null, '
    '"mcp_authorization": null, "parameters": null, "custom_metadata": null}'
)
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_current_weather",
        "description": "weather",
        "parameters": {
            "type": "object",
            "properties": {"location": {"type": "string"}},
            "required": ["location"],
        },
    },
}


def test_first_call_body_is_byte_identical_to_the_sdk() -> None:
    request = RunRequest(
        query="北京天气?",
        stream=False,
        conversation_id="conv-1",
        app_id="app-1",
        tools=[WEATHER_TOOL],
        end_user_id="user_123456",
    )
    assert request.to_wire() == OBSERVED_FIRST_CALL.encode()


def test_tool_output_submission_is_byte_identical_to_the_sdk() -> None:
    request = RunRequest(
        stream=True,
        conversation_id="conv-1",
        app_id="app-1",
        tool_outputs=[ToolOutput(tool_call_id="tc-1", output="35度")],
    )
    assert request.to_wire() == OBSERVED_SUBMISSION.encode()


def test_all_thirteen_keys_in_wire_order() -> None:
    body = json.loads(RunRequest(conversation_id="c", app_id="a").to_wire())
    assert list(body) == [
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


def test_tool_choice_and_resume_action_shapes() -> None:
    request = RunRequest(
        query="q",
        conversation_id="c",
        app_id="a",
        tool_choice=WireToolChoice.for_function("WeatherQuery"),
        action=Action.resume("ev-1"),
    )
    body = json.loads(request.to_wire())
    assert body["tool_choice"] == {
        "type": "function",
        "function": {"name": "WeatherQuery", "input": {}},
    }
    assert body["action"] == {
        "action_type": "resume",
        "parameters": {"interrupt_event": {"id": "ev-1", "type": "chat"}},
    }
    assert (
        b'"tool_choice": {"type": "function", "function": {"name": "WeatherQuery", "input": {}}}'
        in (request.to_wire())
    )


def test_feedback_body_drops_nulls() -> None:
    body = FeedbackRequest(app_id="a", conversation_id="c", message_id="m", type="upvote").to_wire()
    assert body == b'{"app_id": "a", "conversation_id": "c", "message_id": "m", "type": "upvote"}'
    full = FeedbackRequest(
        app_id="a",
        conversation_id="c",
        message_id="m",
        type="downvote",
        flag=["没有帮助"],
        reason="r",
    ).to_wire()
    assert json.loads(full)["flag"] == ["没有帮助"]
    assert b"\\u6ca1" in full  # ensure_ascii, like json.dumps defaults


# --- tolerant parsing --------------------------------------------------------------------------


def test_null_content_and_outputs_and_unknown_fields_are_accepted() -> None:
    chunk = RunResponse.model_validate(
        {
            "request_id": "r",
            "answer": None,
            "content": [
                {
                    "event_type": "X",
                    "outputs": None,
                    "usage": None,
                    "brand_new": 1,
                    "tool_calls": None,
                }
            ],
            "is_completion": None,
            "surprise": {"a": 1},
        }
    )
    assert chunk.answer == ""
    assert chunk.content[0].outputs == {}
    assert chunk.is_completion is False
    assert RunResponse.model_validate({"content": None}).content == []


def test_arguments_as_object_or_json_string() -> None:
    chunk = RunResponse.model_validate(
        {
            "content": [
                {
                    "event_status": "interrupt",
                    "tool_calls": [
                        {
                            "id": "a",
                            "type": "function",
                            "function": {"name": "f", "arguments": {"x": 1}},
                        },
                        {
                            "id": "b",
                            "type": "function",
                            "function": {"name": "g", "arguments": '{"y": 2}'},
                        },
                        {"id": "c", "function": {"name": "h", "arguments": "not json"}},
                        {"id": "d", "function": {"name": "i", "arguments": ""}},
                        {"id": "e", "function": {"name": "j", "arguments": None}},
                        {"id": "f", "function": {"name": "k", "arguments": [1, 2]}},
                    ],
                }
            ]
        }
    )
    calls = chunk.content[0].tool_calls
    assert calls is not None
    assert [(c.function.arguments, c.function.raw_arguments) for c in calls] == [
        ({"x": 1}, None),
        ({"y": 2}, '{"y": 2}'),
        ("not json", "not json"),
        ({}, ""),
        ({}, None),
        ("[1, 2]", "[1, 2]"),
    ]


def test_event_failure_and_interrupt_flags() -> None:
    events = RunResponse.model_validate(
        {
            "content": [
                {"event_status": "error"},
                {"event_code": 17},
                {"event_code": "0", "event_status": "done"},
                {"event_status": "interrupt"},
                {"event_type": "Interrupt"},
                {"outputs": "bare text"},
            ]
        }
    ).content
    assert [e.failed for e in events] == [True, True, False, False, False, False]
    assert [e.is_interrupt for e in events] == [False, False, False, True, True, False]
    assert events[5].outputs == {"text": "bare text"}


@pytest.mark.parametrize(
    ("body", "is_error"),
    [
        ({"request_id": "r", "code": "PermissionDeniedError", "message": "没有权限"}, True),
        ({"code": 500, "message": "boom", "content": None}, True),
        ({"code": 500, "message": "boom", "content": []}, True),
        ({"code": 0, "message": "ok", "content": []}, False),
        ({"code": "0", "message": "ok"}, False),
        ({"answer": "hi", "content": []}, False),
        ({"code": 1, "message": "partial", "content": [{"event_status": "done"}]}, False),
    ],
)
def test_in_band_error_detection(body: dict[str, object], is_error: bool) -> None:
    assert RunResponse.model_validate(body).is_error is is_error


def test_http_request_id_is_not_part_of_the_dump() -> None:
    chunk = RunResponse.model_validate({"request_id": "r"})
    chunk.http_request_id = "h"
    assert "http_request_id" not in chunk.model_dump()
