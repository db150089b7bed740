"""The platforms' HTTP as OpenTelemetry CLIENT spans: one span per attempt (retries counted in
`http.request.resend_count`), the stable HTTP attributes without a query string, userinfo or
credential, the W3C ``traceparent`` each attempt sends, a streamed answer's span ended with
its headers, nothing sent when nothing traces, and a platform handed the bridge's provider.

Real loopback servers: a recording Starlette app for the transport itself, the emulator for
an adapter. Every provider comes from `recorded()` (never the global one).
"""

from __future__ import annotations

import socket
from collections import deque
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from bridge._serve import serve_in_thread
from bridge.emulator import Emulator
from bridge.errors import PlatformConnectionError, ServerError, StreamInterruptedError
from bridge.platforms import create_platform
from bridge.platforms._transport import ErrorAnswer, Transport
from bridge.platforms.appbuilder import AppBuilderPlatform
from bridge.platforms.base import use_tracing
from bridge.platforms.retry import RetryPolicy
from bridge.tracing import Tracing, context_of, traceparent_of
from bridge.types import RunFinished
from tests.support.tracing import attributes, by_name, recorded

SECRET_KEY = "sk-trace-0123456789abcdef"
QUERY_SECRET = "q-secret-fedcba9876543210"
PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@dataclass
class Reply:
    status: int = 200
    body: bytes = b"{}"
    headers: dict[str, str] = field(default_factory=dict)
    drop: bool = False
    """Send `body`, then cut the connection mid-answer."""


class _DroppedError(Exception):
    """Raised inside a streamed body so that uvicorn aborts the connection."""


class Recording:
    """Answers with the scripted replies, in order, and keeps each request's headers."""

    def __init__(self) -> None:
        self.replies: deque[Reply] = deque()
        self.headers: list[dict[str, str]] = []
        self.base_url = ""
        self.app = Starlette(routes=[Route("/{path:path}", self._handle, methods=["GET", "POST"])])

    def script(self, *replies: Reply) -> None:
        self.replies.clear()
        self.headers.clear()
        self.replies.extend(replies)

    async def _handle(self, request: Request) -> Response:
        self.headers.append(dict(request.headers))
        reply = self.replies.popleft() if self.replies else Reply(599, b"none left")
        if reply.drop:

            async def cut() -> AsyncIterator[bytes]:
                yield reply.body
                raise _DroppedError("scripted drop")

            return StreamingResponse(cut(), status_code=reply.status, headers=reply.headers)
        return Response(reply.body, status_code=reply.status, headers=reply.headers)


@pytest.fixture(scope="module")
def module_server() -> Iterator[Recording]:
    server = Recording()
    with serve_in_thread(server.app) as handle:
        server.base_url = handle.base_url
        yield server


@pytest.fixture
def server(module_server: Recording) -> Recording:
    module_server.script()
    return module_server


def read_error(answer: ErrorAnswer) -> ServerError:
    error = answer.error()
    assert isinstance(error, ServerError)
    return error


def transport(tracing: Tracing | None = None, *, max_retries: int = 2) -> Transport:
    return Transport(
        label="Test",
        headers={"Authorization": f"Bearer {SECRET_KEY}"},
        connect_timeout=5.0,
        idle_timeout=10.0,
        retry_policy=RetryPolicy(max_retries=max_retries, backoff_base=0.0, jitter=0.0),
        read_status_error=read_error,
        request_id_header="x-request-id",
        sleep=lambda _: None,
        tracing=tracing,
    )


def ids(span: ReadableSpan) -> tuple[str, str]:
    assert span.context is not None
    return f"{span.context.trace_id:032x}", f"{span.context.span_id:016x}"


def traceparent_of_readable(span: ReadableSpan) -> str:
    assert span.context is not None
    return f"00-{ids(span)[0]}-{ids(span)[1]}-{int(span.context.trace_flags):02x}"


def no_secret_in(spans: list[ReadableSpan]) -> None:
    for span in spans:
        for value in [*attributes(span).values(), span.status.description or ""]:
            text = str(value)
            assert SECRET_KEY not in text and QUERY_SECRET not in text, (span.name, text)
            assert "Bearer" not in text and "user:pw" not in text, (span.name, text)


def test_each_attempt_is_a_client_span_under_the_current_one_and_sends_its_traceparent(
    server: Recording,
) -> None:
    provider, exporter = recorded()
    tracing = Tracing(provider)
    server.script(
        Reply(503, b'{"message": "busy"}', {"x-request-id": "rid-1"}),
        Reply(200, b'{"ok": true}', {"x-request-id": "rid-2"}),
    )
    url = server.base_url.replace("://", "://user:pw@") + f"/v1/run?key={QUERY_SECRET}#frag"
    with closing_transport(tracing) as http, tracing.span("invoke_agent test") as parent:
        response = http.request("POST", url, json={"q": 1}, stream=False, operation="run")
        assert response.json() == {"ok": True}
    spans = by_name(exporter.get_finished_spans(), "POST")
    assert len(spans) == 2
    first, second = spans
    trace_id, parent_id = ids(exporter.get_finished_spans()[-1])
    assert (traceparent_of(parent) or "").startswith(f"00-{trace_id}-{parent_id}-")
    host, port = server.base_url.removeprefix("http://").split(":")
    for span, status in ((first, 503), (second, 200)):
        assert span.kind is SpanKind.CLIENT
        assert span.parent is not None and f"{span.parent.span_id:016x}" == parent_id
        assert ids(span)[0] == trace_id
        found = attributes(span)
        assert found["http.request.method"] == "POST"
        assert found["url.full"] == f"http://{host}:{port}/v1/run"
        assert found["server.address"] == host and found["server.port"] == int(port)
        assert found["http.response.status_code"] == status
    assert attributes(first)["error.type"] == "503"
    assert first.status.status_code is StatusCode.ERROR
    assert "http.request.resend_count" not in attributes(first)
    assert attributes(second)["http.request.resend_count"] == 1
    assert "error.type" not in attributes(second)
    assert attributes(first)["toolbridge.platform.request_id"] == "rid-1"
    assert attributes(second)["toolbridge.platform.request_id"] == "rid-2"
    # Each attempt sent its own span's context: the server can continue the trace.
    sent = [headers["traceparent"] for headers in server.headers]
    assert sent == [traceparent_of_readable(first), traceparent_of_readable(second)]
    assert [text.split("-")[1:3] for text in sent] == [[trace_id, ids(s)[1]] for s in spans]
    no_secret_in(list(exporter.get_finished_spans()))


def test_a_connection_refused_is_a_failed_span_and_each_retry_another(server: Recording) -> None:
    provider, exporter = recorded()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, never listening: refused
        with closing_transport(Tracing(provider)) as http, pytest.raises(PlatformConnectionError):
            url = f"http://127.0.0.1:{port}/v1/models?key={QUERY_SECRET}"
            http.request("GET", url, stream=False)
    spans = by_name(exporter.get_finished_spans(), "GET")
    assert [attributes(s).get("http.request.resend_count") for s in spans] == [None, 1, 2]
    for span in spans:
        assert attributes(span)["error.type"] == "ConnectionError"
        assert span.status.status_code is StatusCode.ERROR
        assert span.status.description == "connection refused"
        assert "http.response.status_code" not in attributes(span)
    no_secret_in(spans)


def test_a_streamed_answer_span_ends_with_its_headers(server: Recording) -> None:
    provider, exporter = recorded()
    server.script(Reply(200, b"data: {}\n\n", {"content-type": "text/event-stream"}))
    with closing_transport(Tracing(provider)) as http:
        response = http.request("POST", server.base_url + "/v1/run", json={}, stream=True)
        [span] = exporter.get_finished_spans()  # ended before a byte of the body was read
        assert attributes(span)["http.response.status_code"] == 200
        assert response.content == b"data: {}\n\n"
        response.close()


def test_a_whole_answer_span_covers_reading_it_and_fails_when_it_breaks_off(
    server: Recording,
) -> None:
    provider, exporter = recorded()
    server.script(Reply(200, b'{"a": ', drop=True))
    with closing_transport(Tracing(provider)) as http, pytest.raises(StreamInterruptedError):
        http.request("POST", server.base_url + f"/v1/run?key={QUERY_SECRET}", stream=False)
    [span] = exporter.get_finished_spans()
    assert attributes(span)["http.response.status_code"] == 200
    assert attributes(span)["error.type"] == "StreamInterruptedError"
    assert span.status.status_code is StatusCode.ERROR
    no_secret_in([span])


def test_without_tracing_no_span_and_no_traceparent_is_sent(server: Recording) -> None:
    server.script(Reply())
    with closing_transport() as http:  # the global provider, which no test configures
        assert not http.tracing.enabled
        http.request("GET", server.base_url + "/v1/models", stream=False)
    assert "traceparent" not in server.headers[0]


def test_without_tracing_an_incoming_trace_goes_on_out(server: Recording) -> None:
    from opentelemetry import context as otel_context

    server.script(Reply())
    incoming = context_of(PARENT)
    assert incoming is not None
    token = otel_context.attach(incoming)
    try:
        with closing_transport() as http:
            http.request("GET", server.base_url + "/v1/models", stream=False)
    finally:
        otel_context.detach(token)
    assert server.headers[0]["traceparent"] == PARENT


def test_a_platform_given_the_bridges_tracing_traces_its_requests() -> None:
    scenario = {"rules": [{"name": "hi", "match": "hello", "answer": "hi there"}]}
    provider, exporter = recorded()
    tracing = Tracing(provider)
    with Emulator(scenario=scenario, faults="status=503,retry_after=0,times=1") as emulator:
        platform = AppBuilderPlatform(
            app_id=emulator.app_id,
            token=emulator.token,
            base_url=emulator.base_url,
            retry_policy=RetryPolicy(max_retries=2, backoff_base=0.0, jitter=0.0),
        )
        with platform:
            use_tracing(platform, tracing)
            with tracing.span("invoke_agent test"):
                conversation_id = platform.create_conversation()
                events = list(platform.start(conversation_id, "hello", tools=[], stream=True))
    assert isinstance(events[-1], RunFinished)
    spans = by_name(exporter.get_finished_spans(), "POST")
    # create, then the run: refused once with 503, then answered
    assert [attributes(s)["http.response.status_code"] for s in spans] == [200, 503, 200]
    assert [attributes(s).get("http.request.resend_count") for s in spans] == [None, None, 1]
    [agent] = by_name(exporter.get_finished_spans(), "invoke_agent")
    assert all(s.parent is not None and s.parent.span_id == agent.context.span_id for s in spans)
    assert all(attributes(s)["toolbridge.platform.request_id"] for s in spans)
    assert attributes(spans[1])["error.type"] == "503"
    assert all(attributes(s)["url.full"].startswith(emulator.base_url) for s in spans)
    no_secret_in(list(exporter.get_finished_spans()))
    assert emulator.token not in repr([attributes(s) for s in exporter.get_finished_spans()])


class closing_transport:  # noqa: N801 - used as a context manager, like contextlib.closing
    def __init__(self, tracing: Tracing | None = None) -> None:
        self.transport = transport(tracing)

    def __enter__(self) -> Transport:
        return self.transport

    def __exit__(self, *exc: Any) -> None:
        self.transport.close()


@pytest.mark.parametrize("name", ["appbuilder", "coze", "responses", "openai"])
def test_every_http_adapter_takes_the_bridges_tracing(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    provider, exporter = recorded()
    tracing = Tracing(provider)
    scenario = {"rules": [{"name": "hi", "match": "hello", "answer": "hi there"}]}
    with Emulator(protocol=name, scenario=scenario, faults="") as emulator:
        for key, value in emulator.env().items():
            monkeypatch.setenv(key, value)
        with create_platform(name) as platform:
            use_tracing(platform, tracing)
            with tracing.span("invoke_agent test") as parent:
                platform.check()
    spans = [s for s in exporter.get_finished_spans() if s.kind is SpanKind.CLIENT]
    assert spans, f"{name}: no client span"
    for span in spans:
        assert span.parent is not None
        assert span.parent.span_id == parent.get_span_context().span_id
        assert attributes(span)["server.port"] == emulator.port
        assert attributes(span)["http.response.status_code"] == 200
    no_secret_in(list(exporter.get_finished_spans()))
    assert emulator.token not in repr([attributes(s) for s in exporter.get_finished_spans()])


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (
            f"https://user:{SECRET_KEY}@api.example.com/v2/app/conversation?key={QUERY_SECRET}#x",
            {
                "url.full": "https://api.example.com/v2/app/conversation",
                "server.address": "api.example.com",
                "server.port": 443,
            },
        ),
        (
            "http://[::1]:8080/v1/chat/completions",
            {
                "url.full": "http://[::1]:8080/v1/chat/completions",
                "server.address": "::1",
                "server.port": 8080,
            },
        ),
        (
            f"http://u:{SECRET_KEY}@host:notaport/p?{QUERY_SECRET}",
            {"url.full": "http://host:notaport/p", "server.address": "host", "server.port": 80},
        ),
    ],
)
def test_url_attributes_leave_out_userinfo_query_and_fragment(
    url: str, expected: dict[str, Any]
) -> None:
    from bridge.platforms._transport import _url_attributes

    assert _url_attributes(url) == expected


def test_the_trace_context_does_not_fill_the_checked_headers_table(server: Recording) -> None:
    provider, _ = recorded()
    server.script(Reply(), Reply(), Reply())
    with closing_transport(Tracing(provider)) as http:
        for _ in range(3):
            http.request("GET", server.base_url + "/v1/models", stream=False)
        checked = http._session._checked_headers  # type: ignore[attr-defined]
    assert len({headers["traceparent"] for headers in server.headers}) == 3
    assert ("authorization", f"Bearer {SECRET_KEY}") in {(k.lower(), v) for k, v in checked}
    assert not [name for name, _ in checked if name in ("traceparent", "tracestate")]
