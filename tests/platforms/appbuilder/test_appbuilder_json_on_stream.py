"""A stream request answered with HTTP 200 and a plain JSON body instead of SSE.

AppBuilder does this when, for example, a workflow node fails: the body is
``{"code", "message", "content": null}`` with ``Content-Type: application/json``. It must be
read as the platform's answer, exactly as the same body is on a non-streamed request: an error
with its code, message and request id, or the whole answer.
"""

from __future__ import annotations

from typing import Any

import pytest
from ab_fakes import FakeAppBuilder, Reply, chunk, json_reply, status_event, text_event

from bridge.errors import InBandError
from bridge.platforms.appbuilder import AppBuilderClient, AppBuilderPlatform
from bridge.types import RunFailed, RunFinished, ToolBatch, ToolCall, ToolResult

ERROR = {
    "request_id": "body-rid-1",
    "code": "WorkflowCodeNodeError",
    "message": "the code node failed: division by zero",
    "content": None,
}


def _error_reply(
    body: dict[str, Any], *, headers: dict[str, str] | None = None, content_type: str = ""
) -> Reply:
    reply = json_reply(body, headers=headers)
    if content_type:
        reply.content_type = content_type
    return reply


@pytest.mark.parametrize(
    ("body", "headers", "content_type", "request_id"),
    [
        (ERROR, None, "", "body-rid-1"),
        (ERROR, {"X-Appbuilder-Request-Id": "hdr-rid-1"}, "", "hdr-rid-1"),
        (
            {k: v for k, v in ERROR.items() if k != "request_id"},
            {"X-Appbuilder-Request-Id": "hdr-rid-2"},
            "application/json; charset=utf-8",
            "hdr-rid-2",
        ),
    ],
    ids=["request-id-in-body", "request-id-in-header", "charset-and-header-only"],
)
def test_a_json_error_on_a_stream_request_is_the_same_error_as_without_stream(
    client: AppBuilderClient,
    fake: FakeAppBuilder,
    body: dict[str, Any],
    headers: dict[str, str] | None,
    content_type: str,
    request_id: str,
) -> None:
    fake.push(_error_reply(body, headers=headers, content_type=content_type))
    with pytest.raises(InBandError) as streamed:
        client.run("conv-1", "hi", stream=True)
    fake.push(_error_reply(body, headers=headers, content_type=content_type))
    with pytest.raises(InBandError) as whole:
        client.run("conv-1", "hi", stream=False)
    for error in (streamed.value, whole.value):
        assert (error.status_code, error.code, error.request_id) == (
            200,
            "WorkflowCodeNodeError",
            request_id,
        )
        assert "the code node failed: division by zero" in error.message
    assert str(streamed.value) == str(whole.value)
    assert len(fake.requests) == 2, "an answer that arrived is never retried"
    assert fake.requests[0].json()["stream"] is True


def test_a_json_answer_on_a_stream_request_is_the_whole_answer(
    client: AppBuilderClient, fake: FakeAppBuilder
) -> None:
    body = chunk("晴", [text_event("晴", status="done"), status_event("success")], message_id="m")
    fake.push(json_reply(body, headers={"X-Appbuilder-Request-Id": "srv-7"}))
    stream = client.run("conv-1", "hi", stream=True)
    assert stream.whole_answer is not None
    [only] = list(stream)
    assert (only.answer, only.message_id, only.http_request_id) == ("晴", "m", "srv-7")
    assert stream.received == [only]


def test_an_sse_answer_is_still_read_as_a_stream(
    client: AppBuilderClient, fake: FakeAppBuilder
) -> None:
    """The check is on Content-Type: a real stream is untouched."""
    fake.push(
        Reply(
            chunks=[b'data: {"answer": "a", "content": []}\n\n'],
            content_type="text/event-stream; charset=utf-8",
        )
    )
    stream = client.run("conv-1", "hi", stream=True)
    assert stream.whole_answer is None
    assert [c.answer for c in stream] == ["a"]


# --- through the adapter: start and submit ------------------------------------------------------


@pytest.fixture
def platform(client: AppBuilderClient) -> AppBuilderPlatform:
    return AppBuilderPlatform(client)


def _batch() -> tuple[ToolBatch, list[ToolResult]]:
    batch = ToolBatch(
        batch_id="m-1",
        calls=(ToolCall(call_id="tc-1", name="f"),),
        resume={"request_id": "r", "message_id": "m-1"},
    )
    return batch, [ToolResult(call_id="tc-1", output="42")]


@pytest.mark.parametrize("step", ["start", "submit"])
def test_start_and_submit_report_the_platforms_code_message_and_request_id(
    platform: AppBuilderPlatform, fake: FakeAppBuilder, step: str
) -> None:
    fake.push(json_reply(ERROR, headers={"X-Appbuilder-Request-Id": "hdr-9"}))
    if step == "start":
        events = list(platform.start("conv-1", "hi", tools=[]))
    else:
        batch, results = _batch()
        events = list(platform.submit("conv-1", batch, results))
    [failed] = events
    assert isinstance(failed, RunFailed)
    assert (failed.code, failed.request_id) == ("WorkflowCodeNodeError", "hdr-9")
    assert "the code node failed: division by zero" in failed.message
    assert fake.requests[0].json()["stream"] is True


@pytest.mark.parametrize("step", ["start", "submit"])
def test_start_and_submit_read_a_json_answer_like_a_non_streamed_one(
    platform: AppBuilderPlatform, fake: FakeAppBuilder, step: str
) -> None:
    body = chunk("晴", [text_event("晴", status="done"), status_event("success")], message_id="m")

    def run(stream: bool) -> list[Any]:
        fake.push(json_reply(body, headers={"X-Appbuilder-Request-Id": "srv-8"}))
        if step == "start":
            return list(platform.start("conv-1", "hi", tools=[], stream=stream))
        batch, results = _batch()
        return list(platform.submit("conv-1", batch, results, stream=stream))

    streamed, whole = run(True), run(False)
    assert streamed == whole
    finished = streamed[-1]
    assert isinstance(finished, RunFinished)
    assert (finished.answer, finished.request_id) == ("晴", "srv-8")
