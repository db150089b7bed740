"""AppBuilderPlatform: client chunks to neutral events, and what start/submit/resume send."""

from __future__ import annotations

import json
from typing import Any

import pytest
from ab_fakes import (
    NO_WAIT,
    TOKEN,
    FakeAppBuilder,
    chunk,
    error_event,
    final_chunk,
    interrupt_event,
    json_reply,
    sse_reply,
    status_event,
    text_event,
    tool_call,
)

from bridge.errors import ProtocolError, StreamInterruptedError, UsageError
from bridge.platforms import create_platform
from bridge.platforms.appbuilder import AppBuilderClient, AppBuilderPlatform
from bridge.platforms.base import Platform
from bridge.types import (
    Event,
    HumanInputRequested,
    Other,
    RunFailed,
    RunFinished,
    TextDelta,
    ToolBatch,
    ToolCall,
    ToolCallsRequested,
    ToolResult,
)

USAGE = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15, "name": "ERNIE"}
HEADERS = {"X-Appbuilder-Request-Id": "srv-1"}


@pytest.fixture
def platform(client: AppBuilderClient) -> AppBuilderPlatform:
    return AppBuilderPlatform(client)


def _kinds(events: list[Event]) -> list[str]:
    return [event.kind for event in events]


def _start(platform: AppBuilderPlatform, *, stream: bool = True, **options: Any) -> list[Event]:
    return list(platform.start("conv-1", "北京天气?", tools=[], stream=stream, **options))


def _batch(events: list[Event]) -> ToolBatch:
    [requested] = [e for e in events if isinstance(e, ToolCallsRequested)]
    return requested.batch


# --- protocol ------------------------------------------------------------------------------------


def test_it_is_a_platform(platform: AppBuilderPlatform) -> None:
    checked: Platform = platform
    assert isinstance(checked, Platform)
    assert (platform.name, platform.dialect) == ("appbuilder", "appbuilder")
    assert TOKEN not in repr(platform) and "[secure]" in repr(platform)


def test_factory_builds_it(fake_url: str) -> None:
    built = create_platform(
        "appbuilder", app_id="app-1", token=TOKEN, base_url=fake_url, idle_timeout=5, max_retries=1
    )
    assert isinstance(built, AppBuilderPlatform)
    assert built.client.idle_timeout == 5.0 and built.client.retry_policy.max_retries == 1
    built.close()


def test_client_and_settings_are_exclusive(client: AppBuilderClient) -> None:
    with pytest.raises(UsageError, match=r"either client=\.\.\. or the client.s settings"):
        AppBuilderPlatform(client, app_id="other")


def test_check_opens_a_conversation(platform: AppBuilderPlatform, fake: FakeAppBuilder) -> None:
    fake.push(json_reply({"request_id": "r", "conversation_id": "conv-check"}))
    summary = platform.check()
    assert "conv-check" in summary and "app-1" in summary
    assert fake.requests[0].path == "/v2/app/conversation"


def test_check_reports_a_bad_token(platform: AppBuilderPlatform, fake: FakeAppBuilder) -> None:
    from bridge.errors import AuthenticationError

    fake.push(json_reply({"code": "PermissionDeniedError", "message": "没有权限"}, status=401))
    with pytest.raises(AuthenticationError, match="没有权限"):
        platform.check()


def test_create_conversation_and_upload(
    platform: AppBuilderPlatform, fake: FakeAppBuilder, tmp_path: Any
) -> None:
    fake.push(json_reply({"request_id": "r", "conversation_id": "conv-9"}))
    assert platform.create_conversation(end_user_id="user-123456") == "conv-9"
    path = tmp_path / "a.txt"
    path.write_text("hello")
    fake.push(json_reply({"request_id": "r", "id": "file-1", "conversation_id": "conv-9"}))
    assert platform.upload_file("conv-9", path) == "file-1"


# --- stream mapping -------------------------------------------------------------------------------


def test_text_run_in_stream_mode(platform: AppBuilderPlatform, fake: FakeAppBuilder) -> None:
    fake.push(
        sse_reply(
            chunk("", [status_event("preparing")]),
            chunk("北京", [text_event("北京")]),
            chunk("晴", [text_event("晴", status="done", usage=USAGE)]),
            chunk("", [status_event("success")], message_id="m-5"),
            final_chunk(message_id="m-5"),
            headers=HEADERS,
        )
    )
    events = _start(platform)
    # The "running" text event is only a TextDelta; the "done" text event (with usage) and
    # status events reach listeners as Other.
    assert _kinds(events) == ["other", "text_delta", "text_delta", "other", "other", "finished"]
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["北京", "晴"]
    finished = events[-1]
    assert isinstance(finished, RunFinished)
    assert (finished.answer, finished.message_id, finished.request_id) == ("北京晴", "m-5", "srv-1")
    assert finished.usage == USAGE


def test_tool_call_interrupt(platform: AppBuilderPlatform, fake: FakeAppBuilder) -> None:
    call = tool_call("tc-1", "get_current_weather", {"location": "北京"})
    fake.push(
        sse_reply(
            chunk("", [status_event("preparing")], message_id="m-1"),
            chunk("", [interrupt_event(call)], message_id="m-1"),
            headers=HEADERS,
        )
    )
    events = _start(platform)
    assert _kinds(events) == ["other", "tool_calls"]
    batch = _batch(events)
    assert batch.batch_id == "m-1"
    assert batch.resume == {"request_id": "srv-1", "message_id": "m-1"}
    assert batch.calls == (
        ToolCall(call_id="tc-1", name="get_current_weather", arguments={"location": "北京"}),
    )


def test_arguments_as_a_json_string_keep_the_raw_text(
    platform: AppBuilderPlatform, fake: FakeAppBuilder
) -> None:
    raw = '{"location": "上海", "unit": "c"}'
    bad = "{not json"
    fake.push(
        sse_reply(
            chunk("", [interrupt_event(tool_call("a", "w", raw), tool_call("b", "w", bad))]),
        )
    )
    calls = _batch(_start(platform)).calls
    assert calls[0].arguments == {"location": "上海", "unit": "c"}
    assert calls[0].raw_arguments == raw
    assert (calls[1].arguments, calls[1].raw_arguments) == (bad, bad)


def test_several_calls_in_one_event_form_one_batch(
    platform: AppBuilderPlatform, fake: FakeAppBuilder
) -> None:
    calls = [tool_call(f"tc-{i}", "weather", {"city": city}) for i, city in enumerate("ABC")]
    fake.push(sse_reply(chunk("", [interrupt_event(*calls)])))
    batch = _batch(_start(platform))
    assert [c.call_id for c in batch.calls] == ["tc-0", "tc-1", "tc-2"]


def test_interrupt_that_is_not_the_last_event_of_its_chunk(
    platform: AppBuilderPlatform, fake: FakeAppBuilder
) -> None:
    fake.push(
        sse_reply(
            chunk(
                "",
                [
                    status_event("running"),
                    interrupt_event(tool_call("tc-1", "f", {})),
                    status_event("done", event_type="Interrupt"),
                ],
            ),
            final_chunk(),
        )
    )
    events = _start(platform)
    assert _kinds(events) == ["other", "other", "tool_calls"]
    assert [c.call_id for c in _batch(events).calls] == ["tc-1"]


def test_duplicated_interrupt_events_give_one_call(
    platform: AppBuilderPlatform, fake: FakeAppBuilder
) -> None:
    event = interrupt_event(tool_call("tc-1", "f", {"x": 1}))
    fake.push(sse_reply(chunk("", [event]), chunk("", [event, event])))
    events = _start(platform)
    assert len(_batch(events).calls) == 1
    assert _kinds(events) == ["tool_calls"]


def test_interrupt_described_only_in_its_outputs(
    platform: AppBuilderPlatform, fake: FakeAppBuilder
) -> None:
    event = interrupt_event(tool_call("tc-7", "lookup", '{"q": "x"}'))
    event.pop("tool_calls")
    fake.push(sse_reply(chunk("", [event])))
    [call] = _batch(_start(platform)).calls
    assert (call.call_id, call.name, call.arguments, call.raw_arguments) == (
        "tc-7",
        "lookup",
        {"q": "x"},
        '{"q": "x"}',
    )


def test_a_tool_call_without_an_id_is_a_protocol_error(
    platform: AppBuilderPlatform, fake: FakeAppBuilder
) -> None:
    event = interrupt_event(tool_call("", "f", {}))
    event["outputs"] = {}
    fake.push(sse_reply(chunk("", [event])))
    with pytest.raises(ProtocolError, match="has no id"):
        _start(platform)


def test_batch_id_is_generated_without_a_message_id(
    platform: AppBuilderPlatform, fake: FakeAppBuilder
) -> None:
    fake.push(sse_reply(chunk("", [interrupt_event(tool_call("t", "f", {}))], message_id="")))
    batch = _batch(_start(platform))
    assert batch.batch_id.startswith("batch-")
    assert batch.resume["message_id"] is None
    assert batch.resume["request_id"] == "req-1"  # no header: the body's request id


def test_error_event_fails_the_run_and_stops(
    platform: AppBuilderPlatform, fake: FakeAppBuilder
) -> None:
    fake.push(
        sse_reply(
            chunk("部分", [text_event("部分")]),
            chunk("", [error_event(code=5001, message="code node crashed")]),
            chunk("more", [text_event("more")]),
            final_chunk(),
            headers=HEADERS,
        )
    )
    events = _start(platform)
    assert _kinds(events) == ["text_delta", "failed"]
    failed = events[-1]
    assert isinstance(failed, RunFailed)
    assert (failed.code, failed.message, failed.request_id) == (
        "5001",
        "code node crashed",
        "srv-1",
    )


def test_non_zero_event_code_alone_fails_the_run(
    platform: AppBuilderPlatform, fake: FakeAppBuilder
) -> None:
    event = text_event("x", status="done")
    event["event_code"] = 17
    event["event_message"] = ""
    fake.push(sse_reply(chunk("", [event])))
    failed = _start(platform)[-1]
    assert isinstance(failed, RunFailed)
    assert failed.code == "17" and "ChatAgent" in failed.message


def test_error_status_with_zero_code(platform: AppBuilderPlatform, fake: FakeAppBuilder) -> None:
    fake.push(sse_reply(chunk("", [error_event(code=0, message="boom")])))
    failed = _start(platform)[-1]
    assert isinstance(failed, RunFailed) and failed.code == "event_error"


def test_in_band_error_mid_stream_is_a_failed_run(
    platform: AppBuilderPlatform, fake: FakeAppBuilder
) -> None:
    fake.push(
        sse_reply(
            chunk("a", [text_event("a")]),
            {"request_id": "ib", "code": "Quota", "message": "quota exceeded", "content": None},
        )
    )
    events = _start(platform)
    assert _kinds(events) == ["text_delta", "failed"]
    failed = events[-1]
    assert isinstance(failed, RunFailed)
    assert (failed.code, failed.request_id) == ("Quota", "ib")
    assert "quota exceeded" in failed.message


def test_in_band_error_at_the_start_is_a_failed_run(
    platform: AppBuilderPlatform, fake: FakeAppBuilder
) -> None:
    fake.push(json_reply({"request_id": "ib", "code": "E1", "message": "workflow failed"}))
    [failed] = _start(platform, stream=False)
    assert isinstance(failed, RunFailed) and failed.code == "E1"


def test_chatflow_interrupt_asks_for_human_input(
    platform: AppBuilderPlatform, fake: FakeAppBuilder
) -> None:
    question = {
        "event_code": 0,
        "event_type": "ChatFlow",
        "event_status": "interrupt",
        "content_type": "chatflow_interrupt",
        "outputs": {"interrupt_event_id": "ev-42", "interrupt_event_type": "chat"},
    }
    fake.push(
        sse_reply(chunk("请问出发城市?", [text_event("请问出发城市?")]), chunk("", [question]))
    )
    events = _start(platform)
    human = events[-1]
    assert isinstance(human, HumanInputRequested)
    assert (human.interrupt_id, human.interrupt_type, human.prompt) == (
        "ev-42",
        "chat",
        "请问出发城市?",
    )


def test_chatflow_interrupt_without_an_id(
    platform: AppBuilderPlatform, fake: FakeAppBuilder
) -> None:
    question = {"event_status": "interrupt", "content_type": "chatflow_interrupt", "outputs": {}}
    fake.push(sse_reply(chunk("", [question])))
    with pytest.raises(ProtocolError, match="interrupt_event_id"):
        _start(platform)


# --- how a stream may end -------------------------------------------------------------------------


def test_text_and_final_chunk_without_success_is_finished(
    platform: AppBuilderPlatform, fake: FakeAppBuilder
) -> None:
    fake.push(sse_reply(chunk("hi", [text_event("hi")]), final_chunk()))
    finished = _start(platform)[-1]
    assert isinstance(finished, RunFinished) and finished.answer == "hi"


@pytest.mark.parametrize(
    "payloads",
    [
        [chunk("hi", [text_event("hi")])],  # text, no final chunk
        [chunk("", [status_event("running")]), final_chunk()],  # final chunk, no text
        [],  # nothing at all
    ],
    ids=["no-final-chunk", "no-text", "empty"],
)
def test_stream_ending_early_is_interrupted(
    platform: AppBuilderPlatform, fake: FakeAppBuilder, payloads: list[Any]
) -> None:
    fake.push(sse_reply(*payloads))
    with pytest.raises(StreamInterruptedError, match="ended before the run finished") as info:
        _start(platform)
    assert len(info.value.received) == len(payloads)


def test_an_empty_chunk_early_on_is_not_an_ending(
    platform: AppBuilderPlatform, fake: FakeAppBuilder
) -> None:
    fake.push(sse_reply(final_chunk(), chunk("hi", [text_event("hi")])))
    with pytest.raises(StreamInterruptedError):
        _start(platform)


def test_dropped_connection_propagates_with_chunks(
    platform: AppBuilderPlatform, fake: FakeAppBuilder
) -> None:
    fake.push(sse_reply(chunk("a", [text_event("a")]), chunk("b"), final_chunk(), drop_after=1))
    seen: list[Event] = []
    with pytest.raises(StreamInterruptedError) as info:
        for event in platform.start("conv-1", "q", tools=[]):
            seen.append(event)
    assert _kinds(seen) == ["text_delta"]
    assert len(info.value.received) == 1


# --- non-stream mapping ---------------------------------------------------------------------------


def test_non_stream_answer_comes_once(platform: AppBuilderPlatform, fake: FakeAppBuilder) -> None:
    body = chunk(
        "北京晴",
        [text_event("北京晴", status="done", usage=USAGE), status_event("success")],
        message_id="m-2",
    )
    fake.push(json_reply(body, headers=HEADERS))
    events = _start(platform, stream=False)
    assert _kinds(events) == ["other", "other", "text_delta", "finished"]
    finished = events[-1]
    assert isinstance(finished, RunFinished)
    assert (finished.answer, finished.usage, finished.request_id) == ("北京晴", USAGE, "srv-1")
    assert fake.requests[0].json()["stream"] is False


def test_non_stream_interrupt(platform: AppBuilderPlatform, fake: FakeAppBuilder) -> None:
    body = chunk("", [status_event("preparing"), interrupt_event(tool_call("tc-1", "f", {"a": 1}))])
    fake.push(json_reply(body))
    events = _start(platform, stream=False)
    assert _kinds(events) == ["other", "tool_calls"]
    assert _batch(events).calls[0].arguments == {"a": 1}


def test_non_stream_error_event(platform: AppBuilderPlatform, fake: FakeAppBuilder) -> None:
    fake.push(json_reply(chunk("partial", [error_event()])))
    events = _start(platform, stream=False)
    assert _kinds(events) == ["text_delta", "failed"]


def test_non_stream_without_success_is_still_finished(
    platform: AppBuilderPlatform, fake: FakeAppBuilder
) -> None:
    fake.push(json_reply(chunk("ok", [text_event("ok", status="done")])))
    assert isinstance(_start(platform, stream=False)[-1], RunFinished)


# --- what is sent ---------------------------------------------------------------------------------


WEATHER = {
    "type": "function",
    "function": {"name": "weather", "description": "d", "parameters": {"type": "object"}},
}


def test_start_sends_query_tools_and_choice(
    platform: AppBuilderPlatform, fake: FakeAppBuilder
) -> None:
    fake.push(json_reply(chunk("ok", [status_event("success")])))
    list(
        platform.start(
            "conv-1",
            "hi",
            tools=[WEATHER],
            tool_choice="weather",
            end_user_id="user-123456",
            file_ids=["f-1"],
            stream=False,
        )
    )
    body = fake.requests[0].json()
    assert body["query"] == "hi" and body["tools"] == [WEATHER]
    assert body["tool_choice"] == {"type": "function", "function": {"name": "weather", "input": {}}}
    assert (body["end_user_id"], body["file_ids"], body["stream"]) == (
        "user-123456",
        ["f-1"],
        False,
    )


@pytest.mark.parametrize("choice", [None, "auto"])
def test_no_or_auto_tool_choice_sends_null(
    platform: AppBuilderPlatform, fake: FakeAppBuilder, choice: str | None
) -> None:
    fake.push(json_reply(chunk("ok", [status_event("success")])))
    list(platform.start("conv-1", "hi", tools=[], tool_choice=choice, stream=False))
    assert fake.requests[0].json()["tool_choice"] is None


def test_submit_sends_every_output_in_one_request(
    platform: AppBuilderPlatform, fake: FakeAppBuilder
) -> None:
    batch = ToolBatch(
        batch_id="m-1",
        calls=(ToolCall(call_id="tc-1", name="f"), ToolCall(call_id="tc-2", name="g")),
        resume={"request_id": "r", "message_id": "m-1"},
    )
    results = [
        ToolResult(call_id="tc-2", output='{"temp": 35}'),
        ToolResult(call_id="tc-1", output="35度", is_error=False),
    ]
    fake.push(
        sse_reply(
            chunk("好", [text_event("好")]), chunk("", [status_event("success")]), final_chunk()
        )
    )
    events = list(platform.submit("conv-1", batch, results, end_user_id="user-123456"))
    assert isinstance(events[-1], RunFinished)
    [request] = fake.requests
    assert request.body == (
        b'{"query": "", "stream": true, "conversation_id": "conv-1", "file_ids": [], "app_id": '
        b'"app-1", "tools": [], "tool_outputs": [{"tool_call_id": "tc-2", "output": '
        b'"{\\"temp\\": 35}"}, {"tool_call_id": "tc-1", "output": "35\\u5ea6"}], "tool_choice": '
        b'null, "end_user_id": "user-123456", "action": null, "mcp_authorization": null, '
        b'"parameters": null, "custom_metadata": null}'
    )


@pytest.mark.parametrize(
    ("results", "message"),
    [
        ([], "no results for batch m-1"),
        ([ToolResult(call_id="tc-1", output="x")], "missing outputs for ['tc-2']"),
        (
            [
                ToolResult(call_id="tc-1", output="x"),
                ToolResult(call_id="tc-2", output="y"),
                ToolResult(call_id="zz", output="z"),
            ],
            "outputs for calls not in the batch ['zz']",
        ),
        (
            [
                ToolResult(call_id="tc-1", output="x"),
                ToolResult(call_id="tc-1", output="x"),
                ToolResult(call_id="tc-2", output="y"),
            ],
            "several outputs for ['tc-1']",
        ),
    ],
)
def test_submit_checks_the_results_against_the_batch(
    platform: AppBuilderPlatform, fake: FakeAppBuilder, results: list[ToolResult], message: str
) -> None:
    batch = ToolBatch(
        batch_id="m-1",
        calls=(ToolCall(call_id="tc-1", name="f"), ToolCall(call_id="tc-2", name="g")),
    )
    with pytest.raises(UsageError) as info:
        platform.submit("conv-1", batch, results)
    assert message in str(info.value)
    assert fake.requests == []


def test_resume_answers_a_workflow_question(
    platform: AppBuilderPlatform, fake: FakeAppBuilder
) -> None:
    fake.push(json_reply(chunk("好的", [status_event("success")])))
    events = list(platform.resume("conv-1", "ev-42", "北京", tools=[WEATHER], stream=False))
    assert isinstance(events[-1], RunFinished)
    body = fake.requests[0].json()
    assert body["query"] == "北京" and body["tools"] == [WEATHER]
    assert body["action"] == {
        "action_type": "resume",
        "parameters": {"interrupt_event": {"id": "ev-42", "type": "chat"}},
    }


@pytest.mark.parametrize(
    ("interrupt_id", "answer", "message"),
    [("", "x", "interrupt_id is empty"), ("ev-1", "", "answer is empty")],
)
def test_resume_argument_checks(
    platform: AppBuilderPlatform, fake: FakeAppBuilder, interrupt_id: str, answer: str, message: str
) -> None:
    with pytest.raises(UsageError, match=message):
        platform.resume("conv-1", interrupt_id, answer)
    assert fake.requests == []


def test_http_errors_surface_when_the_run_is_started(
    platform: AppBuilderPlatform, fake: FakeAppBuilder
) -> None:
    from bridge.errors import AuthenticationError

    fake.push(json_reply({"code": "PermissionDeniedError", "message": "没有权限"}, status=401))
    with pytest.raises(AuthenticationError):
        platform.start("conv-1", "hi", tools=[])


def test_other_events_keep_the_raw_event(
    platform: AppBuilderPlatform, fake: FakeAppBuilder
) -> None:
    rag = {
        "event_type": "RAGAgent",
        "event_status": "done",
        "content_type": "rag",
        "outputs": {"text": "t", "references": [{"id": "1", "from": "kb"}]},
    }
    fake.push(sse_reply(chunk("", [rag]), chunk("x", [status_event("success")]), final_chunk()))
    events = _start(platform)
    other = events[0]
    assert isinstance(other, Other)
    assert other.raw["outputs"]["references"] == [{"id": "1", "from": "kb"}]
    assert json.dumps(other.raw)  # JSON-serialisable for journals and transcripts


def test_platform_passes_client_options(fake_url: str) -> None:
    platform = AppBuilderPlatform(
        app_id="app-1", token=TOKEN, base_url=fake_url, retry_policy=NO_WAIT, connect_timeout=3
    )
    assert platform.client.connect_timeout == 3.0 and platform.client.retry_policy is NO_WAIT
    platform.close()
