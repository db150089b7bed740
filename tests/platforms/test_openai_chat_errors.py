"""OpenAIChatPlatform failures on a scripted loopback server: statuses, retries, broken streams.

Every error the adapter can raise is provoked for real (tests/platforms/openai_fakes.py); the
transport exceptions a loopback server cannot provoke are covered in test_openai_http.py.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest
from openai_fakes import (
    DROP,
    FAST_RETRIES,
    Reply,
    ScriptedServer,
    chunk,
    completion,
    sse,
    text_stream,
)

from bridge.errors import (
    AuthenticationError,
    BadRequestError,
    InBandError,
    NotFoundError,
    PlatformConnectionError,
    PlatformTimeoutError,
    ProtocolError,
    RateLimitError,
    ServerError,
    StreamInterruptedError,
)
from bridge.platforms.openai_chat import OpenAIChatPlatform
from bridge.types import (
    Event,
    RunFailed,
    RunFinished,
    TextDelta,
)

TIME = {
    "type": "function",
    "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}},
}


def _run(events: Iterator[Event]) -> list[Event]:
    return list(events)


def _tool_delta(**fragment: Any) -> dict[str, Any]:
    return chunk({"tool_calls": [fragment]})


# --- in-band and stream errors ------------------------------------------------------------------


def test_error_payload_in_the_stream_is_a_run_failed_event(
    server: ScriptedServer, platform: OpenAIChatPlatform
) -> None:
    server.script(
        Reply(
            stream=[
                chunk({"content": "Partial"}),
                sse(
                    {
                        "error": {
                            "message": "CUDA out of memory",
                            "type": "server_error",
                            "code": 500,
                        }
                    }
                ),
            ],
            headers={"x-request-id": "req-9"},
        )
    )
    conv = platform.create_conversation()
    events = _run(platform.start(conv, "hi", tools=[]))
    assert events[0] == TextDelta(text="Partial")
    failed = events[-1]
    assert isinstance(failed, RunFailed)
    assert (failed.code, failed.message, failed.request_id) == (
        "500",
        "CUDA out of memory",
        "req-9",
    )
    assert platform.history(conv) == []  # the failed turn is not kept


def test_error_body_with_http_200_is_an_in_band_error(
    server: ScriptedServer, platform: OpenAIChatPlatform
) -> None:
    server.script(
        Reply(
            json={
                "object": "error",
                "message": "model overloaded",
                "type": "ServiceUnavailable",
                "code": 503,
            },
            headers={"x-request-id": "r"},
        )
    )
    conv = platform.create_conversation()
    with pytest.raises(InBandError) as info:
        _run(platform.start(conv, "hi", tools=[], stream=False))
    assert "model overloaded" in str(info.value)
    assert (info.value.code, info.value.request_id) == ("503", "r")


def test_error_body_with_http_200_to_a_stream_request_is_the_same_in_band_error(
    server: ScriptedServer, platform: OpenAIChatPlatform
) -> None:
    """A gateway that answers `stream: true` with a JSON error body, not SSE."""
    body = {"error": {"message": "model overloaded", "type": "server_error", "code": 503}}
    conv = platform.create_conversation()
    errors = []
    for stream in (True, False):
        server.script(Reply(json=body, headers={"x-request-id": "r-json"}))
        with pytest.raises(InBandError) as info:
            _run(platform.start(conv, "hi", tools=[], stream=stream))
        [sent] = server.bodies
        assert sent["stream"] is stream
        errors.append(info.value)
    streamed, whole = errors
    assert (streamed.code, streamed.request_id, streamed.status_code) == ("503", "r-json", 200)
    assert "model overloaded" in streamed.message
    assert str(streamed) == str(whole)


def test_dropped_stream_keeps_what_arrived(
    server: ScriptedServer, platform: OpenAIChatPlatform
) -> None:
    server.script(
        Reply(
            stream=[chunk({"content": "Half an"}), chunk({"content": " answer"}), DROP],
            headers={"x-request-id": "req-d"},
        )
    )
    conv = platform.create_conversation()
    with pytest.raises(StreamInterruptedError) as info:
        _run(platform.start(conv, "hi", tools=[]))
    assert "dropped mid-answer" in str(info.value)
    assert info.value.received == [TextDelta(text="Half an"), TextDelta(text=" answer")]
    assert info.value.request_id == "req-d"
    assert len(server.requests) == 1  # never retried once the answer had started
    assert platform.history(conv) == []


def test_stream_ending_without_finish_reason_is_interrupted(
    server: ScriptedServer, platform: OpenAIChatPlatform
) -> None:
    server.script(
        Reply(
            stream=[
                chunk({"content": "Cut"}),
                _tool_delta(index=0, id="c", function={"name": "get_time"}),
            ]
        )
    )
    conv = platform.create_conversation()
    with pytest.raises(StreamInterruptedError, match="no finish_reason"):
        _run(platform.start(conv, "hi", tools=[TIME]))


@pytest.mark.parametrize(
    ("stream_bytes", "message"),
    [
        (b"data: {not json\n\n", "a stream chunk is not valid JSON"),
        (b"data: [1, 2]\n\n", "a stream chunk is a JSON list, expected an object"),
        (b"data: \xff\xfe\n\n", "not UTF-8"),
        (sse(chunk() | {"choices": {"0": {}}}), "choices is not a list"),
        (sse(chunk({"tool_calls": {"index": 0}})), "tool_calls is not a list"),
        (sse(chunk({"tool_calls": ["oops"]})), "a tool_calls entry is not an object"),
    ],
    ids=["bad-json", "not-object", "not-utf8", "choices", "tool-calls", "fragment"],
)
def test_undecodable_stream_is_a_protocol_error(
    server: ScriptedServer, platform: OpenAIChatPlatform, stream_bytes: bytes, message: str
) -> None:
    server.script(Reply(stream=[stream_bytes], headers={"x-request-id": "req-p"}))
    conv = platform.create_conversation()
    with pytest.raises(ProtocolError, match=message) as info:
        _run(platform.start(conv, "hi", tools=[]))
    assert info.value.request_id == "req-p"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"<html>oops</html>", "the response body is not valid JSON"),
        (b'{"id": "x", "choices": []}', "answered without a choice"),
    ],
)
def test_undecodable_body_is_a_protocol_error(
    server: ScriptedServer, platform: OpenAIChatPlatform, body: bytes, message: str
) -> None:
    server.script(Reply(body=body))
    conv = platform.create_conversation()
    with pytest.raises(ProtocolError, match=message):
        _run(platform.start(conv, "hi", tools=[], stream=False))


def test_body_that_cannot_be_decompressed_is_a_protocol_error(
    server: ScriptedServer, platform: OpenAIChatPlatform
) -> None:
    server.script(Reply(stream=[b"this is not gzip"], headers={"content-encoding": "gzip"}))
    conv = platform.create_conversation()
    with pytest.raises(ProtocolError, match="cannot decode the answer"):
        _run(platform.start(conv, "hi", tools=[]))


# --- HTTP statuses and retries ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "error_class", "hint"),
    [
        (400, BadRequestError, "the server rejected the request"),
        (403, AuthenticationError, "check the API key"),
        (404, NotFoundError, "check the base URL"),
        (422, BadRequestError, "the server rejected the request"),
    ],
)
def test_client_error_statuses_are_mapped_and_not_retried(
    server: ScriptedServer,
    platform: OpenAIChatPlatform,
    status: int,
    error_class: type[Exception],
    hint: str,
) -> None:
    server.script(
        Reply(status=status, json={"error": {"message": "The model `m` does not exist."}})
    )
    conv = platform.create_conversation()
    with pytest.raises(error_class) as info:
        _run(platform.start(conv, "hi", tools=[]))
    assert f"answered HTTP {status}: The model `m` does not exist." in str(info.value)
    assert hint in str(info.value)
    assert len(server.requests) == 1


@pytest.mark.parametrize("status", [429, 500, 502, 503])
def test_retryable_status_then_success(
    server: ScriptedServer, platform: OpenAIChatPlatform, status: int
) -> None:
    server.script(
        Reply(status=status, json={"error": {"message": "busy"}}, headers={"retry-after": "0"}),
        Reply(stream=text_stream("Recovered.")),
    )
    conv = platform.create_conversation()
    events = _run(platform.start(conv, "hi", tools=[]))
    assert isinstance(events[-1], RunFinished) and events[-1].answer == "Recovered."
    assert len(server.requests) == 2
    assert server.bodies[0] == server.bodies[1]


def test_rate_limit_exhausted_carries_retry_after(
    server: ScriptedServer, platform: OpenAIChatPlatform
) -> None:
    limited = Reply(
        status=429, json={"error": {"message": "slow down"}}, headers={"retry-after": "0"}
    )
    server.script(limited, limited, limited, limited)
    conv = platform.create_conversation()
    with pytest.raises(RateLimitError) as info:
        _run(platform.start(conv, "hi", tools=[]))
    assert info.value.retry_after == 0.0
    assert "gave up after 3 attempts" in str(info.value)
    assert len(server.requests) == 3


def test_retry_after_beyond_the_cap_is_not_waited_for(
    server: ScriptedServer, platform: OpenAIChatPlatform
) -> None:
    server.script(
        Reply(
            status=429,
            body=b"Too Many Requests",
            media_type="text/plain",
            headers={"retry-after": "3600"},
        )
    )
    conv = platform.create_conversation()
    with pytest.raises(RateLimitError) as info:
        _run(platform.start(conv, "hi", tools=[]))
    assert info.value.retry_after == 3600.0
    assert "answered HTTP 429: Too Many Requests" in str(info.value)
    assert len(server.requests) == 1


def test_server_error_with_html_body(server: ScriptedServer, platform: OpenAIChatPlatform) -> None:
    page = b"<html><body>502 Bad Gateway</body></html>"
    bad = Reply(status=502, body=page, media_type="text/html", headers={"retry-after": "0"})
    server.script(bad, bad, bad)
    conv = platform.create_conversation()
    with pytest.raises(ServerError) as info:
        _run(platform.start(conv, "hi", tools=[]))
    assert info.value.status_code == 502
    assert "<html><body>502 Bad Gateway</body></html>" in str(info.value)
    assert len(server.requests) == 3


def test_max_retries_zero_sends_once(server: ScriptedServer) -> None:
    server.script(Reply(status=503, json={"error": "down"}), Reply(json=completion("late")))
    platform = OpenAIChatPlatform(server.base_url, "m", max_retries=0)
    conv = platform.create_conversation()
    with pytest.raises(ServerError, match="answered HTTP 503: down"):
        _run(platform.start(conv, "hi", tools=[]))
    assert len(server.requests) == 1


def test_unreachable_server_is_a_connection_error() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    platform = OpenAIChatPlatform(f"http://127.0.0.1:{port}/v1", "m", retry_policy=FAST_RETRIES)
    conv = platform.create_conversation()
    with pytest.raises(PlatformConnectionError) as info:
        _run(platform.start(conv, "hi", tools=[]))
    assert not isinstance(info.value, PlatformTimeoutError)
    # The OS's words, not urllib3's "HTTPConnectionPool(host=...): Max retries exceeded".
    assert str(info.value) == (
        f"cannot connect to http://127.0.0.1:{port} (connection refused); is the server running?"
    )


def test_no_answer_within_idle_timeout(server: ScriptedServer) -> None:
    server.script(Reply(json=completion("too late"), delay=1.5))
    platform = OpenAIChatPlatform(server.base_url, "m", idle_timeout=0.2, retry_policy=FAST_RETRIES)
    conv = platform.create_conversation()
    with pytest.raises(PlatformTimeoutError, match=r"sent nothing for 0.2 s \(idle_timeout\)"):
        _run(platform.start(conv, "hi", tools=[]))
    assert len(server.requests) == 1  # the request may have arrived: not resent


def test_stream_going_quiet_hits_idle_timeout(server: ScriptedServer) -> None:
    server.script(Reply(stream=[chunk({"content": "Thinking"}), 5.0, chunk({}, "stop")]))
    platform = OpenAIChatPlatform(server.base_url, "m", idle_timeout=0.3)
    conv = platform.create_conversation()
    with pytest.raises(PlatformTimeoutError, match="idle_timeout") as info:
        _run(platform.start(conv, "hi", tools=[]))
    # Also a StreamInterruptedError: the answer had started, so it is not simply resent.
    assert isinstance(info.value, StreamInterruptedError)
    assert info.value.received == [TextDelta(text="Thinking")]
    assert len(server.requests) == 1


def test_each_retry_is_announced_to_on_retry(server: ScriptedServer) -> None:
    from bridge.platforms.retry import RetryNotice, RetryPolicy

    notices: list[RetryNotice] = []
    policy = RetryPolicy(backoff_base=0, on_retry=notices.append)
    server.script(
        Reply(status=503, json={"error": {"message": "busy"}}),
        Reply(status=429, json={"error": {"message": "slow"}}, headers={"retry-after": "0"}),
        Reply(json=completion("late")),
    )
    platform = OpenAIChatPlatform(server.base_url, "m", retry_policy=policy)
    events = _run(platform.start(platform.create_conversation(), "hi", tools=[], stream=False))
    assert isinstance(events[-1], RunFinished)
    assert [str(n) for n in notices] == [
        "platform busy (HTTP 503), retrying in 0.0 s (attempt 2 of 4)",
        "platform rate limit (HTTP 429), retrying in 0.0 s (attempt 3 of 4)",
    ]
