"""HTTP and OpenAPI tools as OpenTelemetry CLIENT spans that carry the trace to the intranet
service: each request (each redirect hop) is a span under the current one (the tool call's),
with the stable HTTP attributes and no query string, userinfo or credential on it, and the
service receives a ``traceparent`` naming that span, so its own spans join the trace. The
outbound gate's rules are unchanged: the credentials still stay with the first origin.

The service is the echo app on loopback (it answers with the headers it received); every
provider comes from `recorded()`.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
import yaml
from opentelemetry import context as otel_context
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode

from bridge._serve import ServerHandle
from bridge.sources import HttpToolSource
from bridge.sources.http_tools import load_http_manifest
from bridge.sources.openapi import open_openapi
from bridge.tools.spec import ToolError
from bridge.tracing import Tracing, context_of
from tests.support.tracing import attributes, by_name, recorded

TOKEN = "tb-trace-token-5e2d71"
QUERY_KEY = "tb-trace-query-key-0c93aa"
PARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@pytest.fixture(autouse=True)
def _secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TB_TRACE_TOKEN", TOKEN)
    monkeypatch.setenv("TB_TRACE_QUERY_KEY", QUERY_KEY)


def source_for(
    tmp_path: Path, base_url: str, *, tracing: Tracing | None, allow: list[str] | None = None
) -> HttpToolSource:
    data: dict[str, Any] = {
        "base_url": base_url,
        "auth": {"type": "bearer", "token": "${TB_TRACE_TOKEN}"},
        "query": {"key": "${TB_TRACE_QUERY_KEY}"},
        "tools": [
            {
                "name": "echo",
                "method": "GET",
                "url": "/echo/{item}",
                "parameters": {
                    "type": "object",
                    "properties": {"item": {"type": "string"}, "q": {"type": "string"}},
                    "required": ["item"],
                },
            },
            {
                "name": "go",
                "url": "/redirect",
                "parameters": {
                    "type": "object",
                    "properties": {"to": {"type": "string"}, "code": {"type": "integer"}},
                    "required": ["to"],
                },
            },
            {"name": "missing", "url": "/status/404", "parameters": {"type": "object"}},
        ],
    }
    if allow is not None:
        data["allow_hosts"] = allow
    path = tmp_path / "tools.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return HttpToolSource(load_http_manifest(path), origin=str(path), tracing=tracing)


@pytest.fixture
def traced(tmp_path: Path, echo_server: ServerHandle) -> Iterator[tuple[HttpToolSource, Any]]:
    provider, exporter = recorded()
    source = source_for(tmp_path, echo_server.base_url, tracing=Tracing(provider))
    try:
        yield source, exporter
    finally:
        source.close()


def call(source: HttpToolSource, name: str, **arguments: Any) -> Any:
    [spec] = [s for s in source.specs() if s.name == name]
    return json.loads(spec.function(**arguments))


def ids(span: ReadableSpan) -> tuple[str, str]:
    assert span.context is not None
    return f"{span.context.trace_id:032x}", f"{span.context.span_id:016x}"


def received_ids(headers: dict[str, str]) -> tuple[str, str]:
    version, trace_id, span_id, flags = headers["traceparent"].split("-")
    assert version == "00" and len(flags) == 2
    return trace_id, span_id


def no_secret_in(spans: tuple[ReadableSpan, ...] | list[ReadableSpan]) -> None:
    for span in spans:
        for value in [*attributes(span).values(), span.status.description or ""]:
            text = str(value)
            assert TOKEN not in text and QUERY_KEY not in text, (span.name, text)
            assert "key=" not in text and "Bearer" not in text, (span.name, text)


def test_the_request_is_a_client_span_and_the_service_gets_its_traceparent(
    traced: tuple[HttpToolSource, Any], echo_server: ServerHandle
) -> None:
    source, exporter = traced
    tracing = source._outbound.tracing
    with tracing.span("execute_tool echo"):
        seen = call(source, "echo", item="a b", q="visible-only-on-the-wire")
    assert ["key", "[secure]"] in seen["query"], "the query reached the service (redacted)"
    [client] = by_name(exporter.get_finished_spans(), "GET")
    [tool] = by_name(exporter.get_finished_spans(), "execute_tool")
    assert client.kind is SpanKind.CLIENT
    assert client.parent is not None and client.parent.span_id == tool.context.span_id
    assert received_ids(seen["headers"]) == ids(client), "the service can continue the trace"
    assert attributes(client) == {
        "http.request.method": "GET",
        "url.full": f"{echo_server.base_url}/echo/a%20b",
        "server.address": "127.0.0.1",
        "server.port": echo_server.port,
        "http.response.status_code": 200,
    }
    assert client.status.status_code is StatusCode.UNSET
    no_secret_in(exporter.get_finished_spans())


def test_each_redirect_hop_is_a_span_and_sends_its_own_traceparent(
    tmp_path: Path, echo_server: ServerHandle
) -> None:
    provider, exporter = recorded()
    port = echo_server.port
    source = source_for(
        tmp_path,
        echo_server.base_url,
        tracing=Tracing(provider),
        allow=[f"127.0.0.1:{port}", f"localhost:{port}"],
    )
    with closing(source):
        with Tracing(provider).span("execute_tool go"):
            same = call(source, "go", to="/echo/after?x=1", code=307)
        first, second = by_name(exporter.get_finished_spans(), "GET")
        assert attributes(first)["http.response.status_code"] == 307
        assert "http.request.resend_count" not in attributes(first)
        assert attributes(second)["http.request.resend_count"] == 1
        assert attributes(second)["url.full"] == f"{echo_server.base_url}/echo/after"
        assert received_ids(same["headers"]) == ids(second)
        assert "authorization" in same["headers"]

        exporter.clear()
        # To another host: the trace context goes along, the credentials do not.
        crossed = call(source, "go", to=f"http://localhost:{port}/echo/elsewhere?key=x")
        first, second = by_name(exporter.get_finished_spans(), "")
        assert first.parent is None and second.parent is None  # no span was current
        assert received_ids(crossed["headers"]) == ids(second)
        assert "authorization" not in crossed["headers"], "auth dropped cross-host"
        assert attributes(second)["server.address"] == "localhost"
        assert attributes(second)["url.full"] == f"http://localhost:{port}/echo/elsewhere"
    no_secret_in(exporter.get_finished_spans())


def test_an_error_status_and_an_unreachable_host_are_failed_spans(
    traced: tuple[HttpToolSource, Any], tmp_path: Path
) -> None:
    source, exporter = traced
    with pytest.raises(ToolError, match="HTTP 404"):
        call(source, "missing")
    [span] = exporter.get_finished_spans()
    assert attributes(span)["error.type"] == "404"
    assert attributes(span)["http.response.status_code"] == 404
    assert span.status.status_code is StatusCode.ERROR

    provider, exporter = recorded()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, never listening: refused
        with (
            closing(
                source_for(tmp_path, f"http://127.0.0.1:{port}", tracing=Tracing(provider))
            ) as down,
            pytest.raises(ToolError, match="cannot connect"),
        ):
            call(down, "echo", item="x")
    [span] = exporter.get_finished_spans()
    assert attributes(span)["error.type"] == "ConnectionError"
    assert span.status.description == "Connection refused"
    assert "http.response.status_code" not in attributes(span)
    no_secret_in(exporter.get_finished_spans())


def test_without_tracing_nothing_is_sent_unless_a_trace_came_in(
    tmp_path: Path, echo_server: ServerHandle
) -> None:
    with closing(source_for(tmp_path, echo_server.base_url, tracing=None)) as source:
        assert not source._outbound.tracing.enabled  # the global provider: none configured
        seen = call(source, "echo", item="x")
        assert "traceparent" not in seen["headers"]
        incoming = context_of(PARENT)
        assert incoming is not None
        token = otel_context.attach(incoming)
        try:
            seen = call(source, "echo", item="x")
        finally:
            otel_context.detach(token)
        assert seen["headers"]["traceparent"] == PARENT


def test_an_openapi_tool_is_traced_the_same_way(
    tmp_path: Path, echo_server: ServerHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BEARER_AUTH_TOKEN", TOKEN)
    document = {
        "openapi": "3.0.3",
        "info": {"title": "echo", "version": "1"},
        "servers": [{"url": echo_server.base_url}],
        "components": {"securitySchemes": {"bearerAuth": {"type": "http", "scheme": "bearer"}}},
        "security": [{"bearerAuth": []}],
        "paths": {
            "/echo/{item}": {
                "get": {
                    "operationId": "echo_item",
                    "parameters": [
                        {
                            "name": "item",
                            "in": "path",
                            "required": True,
                            "schema": {"type": "string"},
                        },
                        {"name": "q", "in": "query", "schema": {"type": "string"}},
                    ],
                    "responses": {"200": {"description": "the request"}},
                }
            }
        },
    }
    path = tmp_path / "echo.json"
    path.write_text(json.dumps(document), encoding="utf-8")
    provider, exporter = recorded()
    tracing = Tracing(provider)
    with closing(open_openapi(str(path))) as source:
        source.use_tracing(tracing)
        with tracing.span("execute_tool echo_item"):
            seen = call(source, "echo_item", item="y", q=QUERY_KEY)
    assert seen["headers"]["authorization"] == "Bearer [secure]"  # sent, redacted in the output
    [client] = by_name(exporter.get_finished_spans(), "GET")
    assert received_ids(seen["headers"]) == ids(client)
    assert attributes(client)["url.full"] == f"{echo_server.base_url}/echo/y"
    no_secret_in(exporter.get_finished_spans())
