"""Faults over real HTTP: statuses, retries, in-band errors, drops, idle streams, bad payloads."""

from __future__ import annotations

import logging
import socket

import pytest
from ab_fakes import (
    NO_WAIT,
    TOKEN,
    FakeAppBuilder,
    Reply,
    chunk,
    final_chunk,
    json_reply,
    sse_reply,
    text_event,
)

from bridge.errors import (
    AuthenticationError,
    BadRequestError,
    BridgeError,
    ConflictError,
    InBandError,
    NotFoundError,
    PlatformConnectionError,
    PlatformError,
    PlatformStatusError,
    PlatformTimeoutError,
    PreconditionError,
    ProtocolError,
    RateLimitError,
    ServerError,
    StreamInterruptedError,
)
from bridge.platforms.appbuilder import AppBuilderClient, RetryPolicy, StreamTimeoutError

DOCUMENTED_401 = {"request_id": "rq-401", "code": "PermissionDeniedError", "message": "没有权限"}


def _conversation_ok() -> Reply:
    return json_reply({"request_id": "r", "conversation_id": "conv-1"})


# --- HTTP statuses ------------------------------------------------------------------------------


def test_401_with_the_documented_body(client: AppBuilderClient, fake: FakeAppBuilder) -> None:
    fake.push(json_reply(DOCUMENTED_401, status=401, headers={"X-Appbuilder-Request-Id": "hdr-1"}))
    with pytest.raises(AuthenticationError) as info:
        client.create_conversation()
    error = info.value
    assert (error.status_code, error.code, error.request_id) == (
        401,
        "PermissionDeniedError",
        "hdr-1",
    )
    assert "没有权限" in error.message and "HTTP 401" in error.message
    assert error.body is not None and "PermissionDeniedError" in error.body
    assert len(fake.requests) == 1  # never retried


@pytest.mark.parametrize(
    ("status", "cls"),
    [
        (400, BadRequestError),
        (403, AuthenticationError),
        (404, NotFoundError),
        (405, PlatformStatusError),
        (409, ConflictError),
        (412, PreconditionError),
        (422, BadRequestError),
        (428, PreconditionError),
        (501, ServerError),
    ],
)
def test_status_classes(
    client: AppBuilderClient, fake: FakeAppBuilder, status: int, cls: type[PlatformStatusError]
) -> None:
    body = {"request_id": "body-id", "code": f"E{status}", "message": f"failure {status}"}
    fake.push(json_reply(body, status=status))
    with pytest.raises(cls) as info:
        client.run("conv-1", "hi", stream=False)
    error = info.value
    assert type(error) is cls
    assert (error.status_code, error.code) == (status, f"E{status}")
    assert error.request_id == "body-id"  # no header: the body's id
    assert f"failure {status}" in str(error)
    assert len(fake.requests) == 1


def test_error_without_any_request_id_reports_the_one_sent(
    client: AppBuilderClient, fake: FakeAppBuilder
) -> None:
    fake.push(Reply(status=404, body=b"not found", content_type="text/plain"))
    with pytest.raises(NotFoundError) as info:
        client.create_conversation()
    assert info.value.request_id == fake.requests[0].header("x-appbuilder-request-id")
    assert "not found" in str(info.value)
    assert info.value.code is None


@pytest.mark.parametrize("status", [429, 500, 502, 503, 504])
def test_retryable_status_then_success(
    client: AppBuilderClient, fake: FakeAppBuilder, status: int
) -> None:
    fake.push(
        json_reply(
            {"code": "Busy", "message": "try later"}, status=status, headers={"Retry-After": "0"}
        ),
        _conversation_ok(),
    )
    assert client.create_conversation() == "conv-1"
    assert len(fake.requests) == 2
    first, second = fake.requests
    # One request id per logical request, kept across its retries.
    assert first.header("x-appbuilder-request-id") == second.header("x-appbuilder-request-id")
    assert first.body == second.body


def test_stream_run_is_retried_before_any_byte(
    client: AppBuilderClient, fake: FakeAppBuilder
) -> None:
    fake.push(
        json_reply({"code": "Busy", "message": "x"}, status=503),
        sse_reply(chunk("ok"), final_chunk()),
    )
    assert [c.answer for c in client.run("conv-1", "hi")] == ["ok", ""]
    assert len(fake.requests) == 2


def test_retries_are_exhausted(client: AppBuilderClient, fake: FakeAppBuilder) -> None:
    fake.push(*[json_reply({"code": "Down", "message": "down"}, status=503) for _ in range(5)])
    with pytest.raises(ServerError) as info:
        client.create_conversation()
    assert info.value.status_code == 503
    assert len(fake.requests) == 4  # 1 + max_retries
    assert fake.pending == 1


def test_rate_limit_exhausted_carries_retry_after(
    client: AppBuilderClient, fake: FakeAppBuilder
) -> None:
    fake.push(
        *[
            json_reply(
                {"code": "Slow", "message": "slow"}, status=429, headers={"Retry-After": "0"}
            )
            for _ in range(4)
        ]
    )
    with pytest.raises(RateLimitError) as info:
        client.create_conversation()
    assert info.value.retry_after == 0.0
    assert len(fake.requests) == 4


def test_retry_after_over_the_limit_is_not_waited_for(
    client: AppBuilderClient, fake: FakeAppBuilder
) -> None:
    fake.push(
        json_reply(
            {"code": "Slow", "message": "slow"}, status=429, headers={"Retry-After": "3600"}
        ),
        _conversation_ok(),
    )
    with pytest.raises(RateLimitError) as info:
        client.create_conversation()
    assert info.value.retry_after == 3600.0
    assert len(fake.requests) == 1


def test_the_wait_between_attempts_is_injectable(fake: FakeAppBuilder, fake_url: str) -> None:
    busy = json_reply({"code": "Busy", "message": "x"}, status=503)
    fake.push(busy, busy, _conversation_ok())
    waits: list[float] = []
    policy = RetryPolicy(max_retries=3, backoff_base=0.5, jitter=0.0)
    with AppBuilderClient("app-1", TOKEN, fake_url, retry_policy=policy, sleep=waits.append) as c:
        assert c.create_conversation() == "conv-1"
    assert waits == [0.5, 1.0]
    assert len(fake.requests) == 3


def test_max_retries_zero(fake: FakeAppBuilder, fake_url: str) -> None:
    fake.push(json_reply({"code": "Down", "message": "down"}, status=500), _conversation_ok())
    with (
        AppBuilderClient("app-1", TOKEN, fake_url, max_retries=0) as client,
        pytest.raises(ServerError),
    ):
        client.create_conversation()
    assert len(fake.requests) == 1


def test_retries_are_logged_at_info(
    client: AppBuilderClient, fake: FakeAppBuilder, caplog: pytest.LogCaptureFixture
) -> None:
    fake.push(json_reply({"code": "Busy", "message": "x"}, status=502), _conversation_ok())
    with caplog.at_level(logging.INFO, logger="bridge.platforms"):
        client.create_conversation()
    retries = [r for r in caplog.records if "retrying POST" in r.getMessage()]
    assert len(retries) == 1 and retries[0].levelno == logging.INFO
    message = retries[0].getMessage()
    assert message.startswith("AppBuilder create_conversation: retrying POST http://")
    assert "answered HTTP 502: x" in message and "(retry 1 of 3)" in message


# --- connection-level failures --------------------------------------------------------------------


def _closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_connection_refused_is_retried_then_reported(caplog: pytest.LogCaptureFixture) -> None:
    port = _closed_port()
    client = AppBuilderClient("app-1", TOKEN, f"http://127.0.0.1:{port}", retry_policy=NO_WAIT)
    with (
        client,
        caplog.at_level(logging.INFO, logger="bridge.platforms"),
        pytest.raises(PlatformConnectionError) as info,
    ):
        client.create_conversation()
    error = info.value
    assert not isinstance(error, PlatformTimeoutError)
    # The OS's words, not urllib3's "HTTPConnectionPool(host=...): Max retries exceeded".
    assert error.message == (
        f"AppBuilder create_conversation: cannot connect to http://127.0.0.1:{port} "
        "(connection refused); is the server running?"
    )
    assert isinstance(error.__cause__, Exception)
    assert error.request_id  # the id that was sent
    retries = [r for r in caplog.records if "cannot connect" in r.getMessage()]
    assert len(retries) == 3


def test_each_retry_is_announced_to_on_retry() -> None:
    from bridge.platforms.retry import RetryNotice

    port = _closed_port()
    notices: list[RetryNotice] = []
    policy = RetryPolicy(max_retries=2, backoff_base=0, on_retry=notices.append)
    with (
        AppBuilderClient("app-1", TOKEN, f"http://127.0.0.1:{port}", retry_policy=policy) as c,
        pytest.raises(PlatformConnectionError),
    ):
        c.create_conversation()
    assert [(n.attempt, n.attempts, n.status) for n in notices] == [(2, 3, None), (3, 3, None)]
    assert str(notices[0]) == (
        f"cannot connect to http://127.0.0.1:{port} (connection refused), retrying in 0.0 s "
        "(attempt 2 of 3)"
    )


def test_idle_stream_times_out(fake: FakeAppBuilder, fake_url: str) -> None:
    fake.push(sse_reply(chunk("a", [text_event("a")]), chunk("never"), hang_after=1))
    # 1 s leaves the first chunk ample time to arrive on a loaded machine.
    with AppBuilderClient(
        "app-1", TOKEN, fake_url, idle_timeout=1.0, retry_policy=NO_WAIT
    ) as client:
        stream = client.run("conv-1", "hi")
        with pytest.raises(PlatformTimeoutError) as info:
            for _ in stream:
                pass
    error = info.value
    assert isinstance(error, StreamTimeoutError) and isinstance(error, StreamInterruptedError)
    assert [c.answer for c in error.received] == ["a"]
    assert "was idle for more than 1 s (idle_timeout) after 1 event(s)" in error.message
    assert len(fake.requests) == 1


def test_no_answer_at_all_times_out_without_retry(fake: FakeAppBuilder, fake_url: str) -> None:
    fake.push(Reply(hang_before_start=True), _conversation_ok())
    with (
        AppBuilderClient(
            "app-1", TOKEN, fake_url, idle_timeout=0.3, retry_policy=NO_WAIT
        ) as client,
        pytest.raises(PlatformTimeoutError) as info,
    ):
        client.create_conversation()
    assert not isinstance(info.value, StreamInterruptedError)
    assert "sent nothing for 0.3 s (idle_timeout)" in info.value.message
    assert len(fake.requests) == 1  # the server may have acted on it: never resent


@pytest.mark.parametrize("after", [0, 1, 3])
def test_dropped_stream_keeps_what_arrived_and_is_not_retried(
    client: AppBuilderClient, fake: FakeAppBuilder, after: int
) -> None:
    payloads = [chunk(str(i), [text_event(str(i))]) for i in range(4)] + [final_chunk()]
    fake.push(sse_reply(*payloads, drop_after=after), sse_reply(final_chunk()))
    stream = client.run("conv-1", "hi")
    seen = []
    with pytest.raises(StreamInterruptedError) as info:
        for item in stream:
            seen.append(item.answer)
    error = info.value
    assert not isinstance(error, PlatformTimeoutError)
    assert [c.answer for c in error.received] == seen == [str(i) for i in range(after)]
    assert "dropped mid-answer (" in error.message
    assert error.message.endswith(f"after {after} event(s)")
    assert len(fake.requests) == 1
    assert fake.pending == 1


def test_dropped_non_stream_body_is_interrupted(
    client: AppBuilderClient, fake: FakeAppBuilder
) -> None:
    fake.push(Reply(chunks=[b'{"answer": "par', b'tial"}'], drop_after=1))
    with pytest.raises(StreamInterruptedError):
        client.run("conv-1", "hi", stream=False)
    assert len(fake.requests) == 1


# --- in-band errors and undecodable payloads ---------------------------------------------------


def test_in_band_error_in_a_json_body(client: AppBuilderClient, fake: FakeAppBuilder) -> None:
    body = {
        "request_id": "ib-1",
        "code": "WorkflowCodeNodeError",
        "message": "code node failed",
        "content": None,
    }
    fake.push(json_reply(body))
    with pytest.raises(InBandError) as info:
        client.run("conv-1", "hi", stream=False)
    error = info.value
    assert (error.status_code, error.code, error.request_id) == (
        200,
        "WorkflowCodeNodeError",
        "ib-1",
    )
    assert "code node failed" in error.message
    assert len(fake.requests) == 1


def test_in_band_error_on_create_conversation(
    client: AppBuilderClient, fake: FakeAppBuilder
) -> None:
    fake.push(json_reply({"request_id": "ib-2", "code": 40001, "message": "app not published"}))
    with pytest.raises(InBandError, match="app not published") as info:
        client.create_conversation()
    assert info.value.code == "40001"


def test_in_band_error_inside_a_stream(client: AppBuilderClient, fake: FakeAppBuilder) -> None:
    fake.push(
        sse_reply(
            chunk("a", [text_event("a")]),
            {"request_id": "ib-3", "code": "Quota", "message": "quota exceeded", "content": []},
            final_chunk(),
            headers={"X-Appbuilder-Request-Id": "hdr-3"},
        )
    )
    stream = client.run("conv-1", "hi")
    assert next(stream).answer == "a"
    with pytest.raises(InBandError) as info:
        next(stream)
    assert (info.value.code, info.value.request_id) == ("Quota", "hdr-3")


@pytest.mark.parametrize(
    "payload",
    [
        b"data: {not json\n\n",
        b"data: [1, 2]\n\n",
        b"data: \xff\xfe\n\n",
        b'data: {"content": "not a list"}\n\n',
    ],
    ids=["broken-json", "not-an-object", "not-utf8", "wrong-shape"],
)
def test_malformed_sse_payload_is_a_protocol_error(
    client: AppBuilderClient, fake: FakeAppBuilder, payload: bytes
) -> None:
    fake.push(sse_reply(chunk("a"), payload, final_chunk()))
    stream = client.run("conv-1", "hi")
    assert next(stream).answer == "a"
    with pytest.raises(ProtocolError) as info:
        next(stream)
    assert "AppBuilder run" in info.value.message
    assert not isinstance(info.value.__cause__, BridgeError) or info.value.__cause__ is None


@pytest.mark.parametrize(
    ("reply", "call"),
    [
        (Reply(body=b"<html>gateway</html>", content_type="text/html"), "create_conversation"),
        (Reply(body=b"[]"), "create_conversation"),
        (json_reply({"request_id": "r"}), "create_conversation"),
        (Reply(body=b"{oops"), "run"),
        (json_reply({"request_id": "r"}), "upload"),
    ],
    ids=["html", "array", "no-conversation-id", "broken-json-run", "no-file-id"],
)
def test_undecodable_json_bodies(
    client: AppBuilderClient, fake: FakeAppBuilder, reply: Reply, call: str, tmp_path: object
) -> None:
    fake.push(reply)
    with pytest.raises(ProtocolError):
        if call == "create_conversation":
            client.create_conversation()
        elif call == "run":
            client.run("conv-1", "hi", stream=False)
        else:
            client.upload_file("conv-1", url="https://example.com/x.pdf")


# --- secrets -----------------------------------------------------------------------------------


def test_the_token_never_leaks(
    client: AppBuilderClient, fake: FakeAppBuilder, caplog: pytest.LogCaptureFixture
) -> None:
    echo = {"code": "PermissionDeniedError", "message": f"bad token Bearer {TOKEN}", "token": TOKEN}
    fake.push(
        json_reply(echo, status=401),
        json_reply(echo, status=503),
        json_reply(echo, status=503),
        json_reply(echo, status=503),
        json_reply(echo, status=503),
    )
    errors: list[PlatformError] = []
    with caplog.at_level(logging.DEBUG):
        for _ in range(2):
            try:
                client.create_conversation()
            except PlatformError as exc:
                errors.append(exc)
    assert len(errors) == 2
    secret_parts = (TOKEN, "0123456789abcdef")
    for error in errors:
        for text in (str(error), repr(error), error.message, error.body or ""):
            assert not any(part in text for part in secret_parts), text
        assert "[secure]" in (error.body or "")
    assert not any(part in caplog.text for part in secret_parts)
    assert not any(part in repr(client) for part in secret_parts)


def test_default_policy_is_used_when_none_given(fake_url: str) -> None:
    client = AppBuilderClient("app-1", TOKEN, fake_url, max_retries=5)
    assert client.retry_policy == RetryPolicy(max_retries=5)
    client.close()


# --- whole bodies read in one go (a Content-Length within the bound) ---------------------------


def test_a_body_over_the_bound_is_refused_not_read(
    client: AppBuilderClient, fake: FakeAppBuilder, monkeypatch: pytest.MonkeyPatch
) -> None:
    from bridge.platforms import _body

    monkeypatch.setattr(_body, "MAX_BODY_BYTES", 1024)
    padding = "x" * 4096
    fake.push(Reply(body=b'{"conversation_id": "c-1", "pad": "' + padding.encode() + b'"}'))
    with pytest.raises(PlatformError, match="larger than 1024 bytes"):
        client.create_conversation()
    # Within the bound, the same body is read whole, in one read.
    monkeypatch.setattr(_body, "MAX_BODY_BYTES", 8192)
    fake.push(Reply(body=b'{"conversation_id": "c-1", "pad": "' + padding.encode() + b'"}'))
    assert client.create_conversation() == "c-1"


def test_a_body_shorter_than_its_content_length_is_interrupted(
    client: AppBuilderClient, fake: FakeAppBuilder
) -> None:
    fake.push(Reply(body=b'{"conversation_id": "c', headers={"content-length": "64"}))
    with pytest.raises(StreamInterruptedError) as info:
        client.create_conversation()
    assert "create_conversation" in info.value.message, info.value.message
