"""The HTTP kernel over real loopback HTTP: retries, Retry-After, status readers, bodies.

The translation table itself (every exception class) is covered in test_transport_errors.py.
"""

from __future__ import annotations

import logging
import socket
from collections import deque
from collections.abc import AsyncIterator, Iterator
from contextlib import closing
from dataclasses import dataclass, field
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from bridge._serve import serve_in_thread
from bridge.errors import (
    AuthenticationError,
    BadRequestError,
    PlatformConnectionError,
    PlatformStatusError,
    PlatformTimeoutError,
    RateLimitError,
    ServerError,
    StreamInterruptedError,
)
from bridge.platforms._transport import ERROR_BODY_LIMIT, KEPT_BODY, ErrorAnswer, Transport
from bridge.platforms.retry import RetryNotice, RetryPolicy


@dataclass
class Reply:
    status: int = 200
    body: bytes = b"{}"
    headers: dict[str, str] = field(default_factory=dict)
    chunks: list[bytes] | None = None
    drop_after: int | None = None


class _DroppedError(Exception):
    """Raised inside a streamed body so that uvicorn aborts the connection."""


class Server:
    """Answers any path with the next scripted reply and records each request."""

    def __init__(self) -> None:
        self.replies: deque[Reply] = deque()
        self.requests: list[dict[str, Any]] = []
        self.base_url = ""
        self.app = Starlette(
            routes=[Route("/{path:path}", self._handle, methods=["GET", "POST", "PUT"])]
        )

    def script(self, *replies: Reply) -> None:
        self.replies.clear()
        self.requests.clear()
        self.replies.extend(replies)

    async def _handle(self, request: Request) -> Response:
        self.requests.append(
            {
                "method": request.method,
                "path": request.url.path,
                "query": dict(request.query_params),
                "headers": dict(request.headers),
                "body": await request.body(),
            }
        )
        if not self.replies:
            return Response(b"no scripted reply left", status_code=599)
        reply = self.replies.popleft()
        if reply.chunks is None:
            return Response(reply.body, status_code=reply.status, headers=reply.headers)

        async def body() -> AsyncIterator[bytes]:
            assert reply.chunks is not None
            for index, piece in enumerate(reply.chunks):
                if index == reply.drop_after:
                    raise _DroppedError("scripted drop")
                yield piece

        return StreamingResponse(body(), status_code=reply.status, headers=reply.headers)


@pytest.fixture(scope="module")
def module_server() -> Iterator[Server]:
    server = Server()
    with serve_in_thread(server.app) as handle:
        server.base_url = handle.base_url
        yield server


@pytest.fixture
def server(module_server: Server) -> Server:
    module_server.script()
    return module_server


def read_error(answer: ErrorAnswer) -> PlatformStatusError:
    body = answer.json()
    hint = "check the key" if answer.status == 401 else ""
    return answer.error(
        body.get("message"), code=body.get("code"), hint=hint, request_id=body.get("rid")
    )


_OPEN: list[Transport] = []


@pytest.fixture(autouse=True)
def _close_transports() -> Iterator[None]:
    yield
    while _OPEN:
        _OPEN.pop().close()


class Recorder:
    def __init__(self) -> None:
        self.sleeps: list[float] = []
        self.notices: list[RetryNotice] = []


def make(recorder: Recorder | None = None, *, max_retries: int = 3, **kwargs: Any) -> Transport:
    recorder = recorder or Recorder()
    policy = RetryPolicy(
        max_retries=max_retries, backoff_base=0.5, jitter=0.0, on_retry=recorder.notices.append
    )
    options: dict[str, Any] = {
        "label": "Test",
        "headers": {"Authorization": "Bearer sk-test-0123456789"},
        "connect_timeout": 5.0,
        "idle_timeout": 10.0,
        "retry_policy": policy,
        "read_status_error": read_error,
        "request_id_header": "x-request-id",
        "sleep": recorder.sleeps.append,
    }
    options.update(kwargs)
    transport = Transport(**options)
    _OPEN.append(transport)
    return transport


def test_a_2xx_is_returned_with_the_body_unread(server: Server) -> None:
    server.script(Reply(body=b'{"ok": true}', headers={"x-request-id": "r-1"}))
    with closing(make()) as transport:
        response = transport.request(
            "POST",
            server.base_url + "/x",
            json={"q": "héllo"},
            params={"a": "1"},
            headers={"X-Extra": "yes"},
            stream=True,
            operation="run",
        )
        assert not response._content_consumed  # type: ignore[attr-defined]
        assert response.json() == {"ok": True}
        assert transport.request_id(response) == "r-1"
    sent = server.requests[0]
    assert sent["body"] == '{"q": "héllo"}'.encode()
    assert sent["query"] == {"a": "1"}
    assert sent["headers"]["content-type"] == "application/json"
    assert sent["headers"]["authorization"] == "Bearer sk-test-0123456789"
    assert sent["headers"]["x-extra"] == "yes"


def test_stream_false_reads_the_whole_body(server: Server) -> None:
    server.script(Reply(chunks=[b'{"a": ', b"1}"]))
    transport = make()
    response = transport.request("GET", server.base_url + "/x", stream=False)
    assert response.json() == {"a": 1}


def test_a_body_dropped_mid_answer_is_interrupted_and_not_retried(server: Server) -> None:
    server.script(Reply(chunks=[b'{"a": ', b"1}"], drop_after=1), Reply())
    transport = make()
    with pytest.raises(StreamInterruptedError, match=r"Test run: the connection to .* dropped"):
        transport.request("POST", server.base_url + "/x", stream=False, operation="run")
    assert len(server.requests) == 1


def test_5xx_is_retried_with_backoff_then_succeeds(
    server: Server, caplog: pytest.LogCaptureFixture
) -> None:
    server.script(
        Reply(status=503, body=b'{"message": "busy"}'),
        Reply(status=502, body=b"bad gateway"),
        Reply(body=b"{}"),
    )
    recorder = Recorder()
    with caplog.at_level(logging.INFO, logger="bridge.platforms._transport"):
        response = make(recorder).request("POST", server.base_url + "/x", json={}, stream=True)
    assert response.status_code == 200
    assert recorder.sleeps == [0.5, 1.0]
    assert [(n.attempt, n.status) for n in recorder.notices] == [(2, 503), (3, 502)]
    retries = [r for r in caplog.records if r.getMessage().startswith("Test: retrying POST")]
    assert [r.levelno for r in retries] == [logging.INFO, logging.INFO]
    assert "answered HTTP 503: busy" in retries[0].getMessage()
    assert "(retry 1 of 3)" in retries[0].getMessage()
    assert len(server.requests) == 3


def test_retry_after_is_honoured_and_exhaustion_says_so(server: Server) -> None:
    server.script(
        *[Reply(status=429, body=b'{"message": "slow down"}', headers={"Retry-After": "2"})] * 3
    )
    recorder = Recorder()
    with pytest.raises(RateLimitError) as info:
        make(recorder, max_retries=2).request("GET", server.base_url + "/x", stream=True)
    assert recorder.sleeps == [2.0, 2.0]
    error = info.value
    assert error.retry_after == 2.0
    assert str(error).startswith(
        f"Test: {server.base_url}/x answered HTTP 429: slow down (gave up after 3 attempts)"
    )


def test_a_retry_after_too_long_is_not_waited_for(
    server: Server, caplog: pytest.LogCaptureFixture
) -> None:
    server.script(Reply(status=503, body=b"down", headers={"Retry-After": "3600"}), Reply())
    recorder = Recorder()
    with (
        caplog.at_level(logging.INFO, logger="bridge.platforms._transport"),
        pytest.raises(ServerError, match="answered HTTP 503: down"),
    ):
        make(recorder).request("GET", server.base_url + "/x", stream=True)
    assert recorder.sleeps == []
    assert any("Retry-After 3600 is over 120 s" in r.getMessage() for r in caplog.records)
    assert len(server.requests) == 1


def test_client_errors_are_not_retried_and_the_reader_shapes_them(server: Server) -> None:
    server.script(
        Reply(
            status=401,
            body=b'{"message": "bad key Bearer sk-test-0123456789", "code": "auth", "rid": "b"}',
            headers={"x-request-id": "hdr"},
        ),
        Reply(status=400, body=b'{"message": "no", "rid": "body-id"}'),
    )
    transport = make()
    with pytest.raises(AuthenticationError) as info:
        transport.request("POST", server.base_url + "/x", json={}, stream=True, operation="run")
    error = info.value
    assert (error.status_code, error.code, error.request_id) == (401, "auth", "hdr")
    assert "Test run: " in error.message and "; check the key" in error.message
    assert "sk-test-0123456789" not in str(error) and "sk-test-0123456789" not in (error.body or "")
    with pytest.raises(BadRequestError) as info2:
        transport.request(
            "POST", server.base_url + "/x", json={}, headers={"x-request-id": "sent"}, stream=True
        )
    assert info2.value.request_id == "body-id"  # the header's wins, then the body's, then sent
    assert len(server.requests) == 2


def test_the_sent_request_id_is_kept_across_retries_and_reported(server: Server) -> None:
    server.script(Reply(status=500, body=b"x"), Reply(status=500, body=b"y"))
    with pytest.raises(ServerError) as info:
        make(max_retries=1).request(
            "POST", server.base_url + "/x", headers={"X-Request-Id": "mine"}, stream=True
        )
    assert info.value.request_id == "mine"
    assert [r["headers"]["x-request-id"] for r in server.requests] == ["mine", "mine"]


def test_error_bodies_are_bounded(server: Server) -> None:
    server.script(Reply(status=400, body=b"y" * (ERROR_BODY_LIMIT * 2)))
    with pytest.raises(BadRequestError) as info:
        make().request("GET", server.base_url + "/x", stream=True)
    assert info.value.body is not None and len(info.value.body) == KEPT_BODY + 1
    assert len(info.value.message) < 500


def _closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_refused_connections_are_retried_then_reported(caplog: pytest.LogCaptureFixture) -> None:
    port = _closed_port()
    recorder = Recorder()
    with (
        caplog.at_level(logging.INFO, logger="bridge.platforms._transport"),
        pytest.raises(PlatformConnectionError) as info,
    ):
        make(recorder, max_retries=2).request(
            "POST",
            f"http://127.0.0.1:{port}/v1/x",
            headers={"x-request-id": "sent-1"},
            stream=True,
            operation="create",
        )
    error = info.value
    assert not isinstance(error, PlatformTimeoutError)
    assert error.message == (
        f"Test create: cannot connect to http://127.0.0.1:{port} (connection refused); "
        "is the server running?"
    )
    assert error.request_id == "sent-1"
    assert recorder.sleeps == [0.5, 1.0]
    assert str(recorder.notices[0]) == (
        f"cannot connect to http://127.0.0.1:{port} (connection refused), retrying in 0.5 s "
        "(attempt 2 of 3)"
    )
    retries = [r for r in caplog.records if "cannot connect" in r.getMessage()]
    assert len(retries) == 2 and all(r.levelno == logging.INFO for r in retries)


def test_files_are_fresh_for_every_attempt_and_closed(server: Server, tmp_path: Any) -> None:
    path = tmp_path / "doc.txt"
    path.write_bytes(b"content")
    handles: list[Any] = []

    def files() -> dict[str, tuple[str | None, Any]]:
        handle = path.open("rb")
        handles.append(handle)
        return {"name": (None, "v"), "file": ("doc.txt", handle)}

    server.script(Reply(status=503, body=b"x"), Reply())
    make().request("POST", server.base_url + "/upload", files=files, stream=False)
    assert len(handles) == 2 and all(h.closed for h in handles)
    assert all(b"content" in r["body"] for r in server.requests)


def test_a_secret_in_the_url_stays_out_of_logs_and_errors(caplog: pytest.LogCaptureFixture) -> None:
    secret = "url-secret-0123456789"
    url = f"http://127.0.0.1:{_closed_port()}/v1/x?api_key={secret}"
    with (
        caplog.at_level(logging.DEBUG, logger="bridge.platforms._transport"),
        pytest.raises(PlatformConnectionError) as info,
    ):
        make(max_retries=1).request("GET", url, stream=True)
    assert caplog.records and all(secret not in r.getMessage() for r in caplog.records)
    assert secret not in str(info.value)
