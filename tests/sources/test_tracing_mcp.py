"""MCP tool calls carry the trace: a call made under a span reaches the server with that
span's ``traceparent`` in the request's ``_meta`` (the MCP SDK writes it from the current
context; toolbridge runs the call on its own loop thread under the caller's context), the
server runs the tool inside that trace, and `toolbridge mcp-serve` continues it for its own
tools. Real servers: a stdio MCP server that answers with the `_meta` it got, and
`mcp_http_app` on uvicorn. The SDK's own spans go to the global provider, so the test that
reads them runs in a subprocess; the others use `recorded()` and no global provider.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bridge._serve import serve_in_thread
from bridge.sources.mcp import McpSource
from bridge.sources.mcp_server import mcp_http_app
from bridge.tools import Dispatcher, Toolbox, manifest
from bridge.tracing import Tracing, current_traceparent, traceparent_of
from bridge.types import ToolCall
from tests.support.tracing import recorded

ROOT = Path(__file__).resolve().parents[2]
META_SERVER = ROOT / "tests" / "data" / "mcp_meta_server.py"


@pytest.fixture(scope="module")
def meta_source() -> Iterator[McpSource]:
    source = McpSource.stdio([sys.executable, str(META_SERVER)])
    try:
        yield source
    finally:
        source.close()


def seen(source: McpSource) -> dict[str, Any]:
    """Call the server's `seen` tool as an async tool is called: awaited on a loop."""
    [spec] = [s for s in source.specs() if s.name == "seen"]
    answer: dict[str, Any] = json.loads(asyncio.run(spec.function()))
    return answer


def test_the_server_gets_the_callers_traceparent_in_meta(meta_source: McpSource) -> None:
    provider, _ = recorded()
    with Tracing(provider).span("execute_tool seen") as span:
        answer = seen(meta_source)
    sent = traceparent_of(span)
    assert sent is not None
    assert answer["meta"]["traceparent"] == sent
    # The server ran the tool inside the caller's trace (the SDK extracted the _meta).
    assert [answer["trace_id"], answer["span_id"]] == sent.split("-")[1:3]


def test_through_the_dispatcher_the_trace_reaches_the_server(meta_source: McpSource) -> None:
    provider, _ = recorded()
    box = Toolbox()
    box.add_source(meta_source)
    with Tracing(provider).span("invoke_agent test") as span, Dispatcher(box) as dispatcher:
        [run] = dispatcher.run([ToolCall(call_id="c1", name="seen", arguments={})])
    assert run.error is None, run.output
    answer = json.loads(run.output)
    trace_id = (traceparent_of(span) or "").split("-")[1]
    # The dispatcher's loop thread, then the source's: the context went along both hops.
    assert answer["meta"]["traceparent"].split("-")[1] == trace_id
    assert answer["trace_id"] == trace_id


def test_without_a_current_span_no_traceparent_is_sent(meta_source: McpSource) -> None:
    answer = seen(meta_source)
    assert "traceparent" not in answer["meta"]
    assert answer["trace_id"] is None


@manifest
async def where() -> str:
    """Say which trace this call runs in."""
    return current_traceparent() or "none"


def test_mcp_serve_runs_the_tool_in_the_callers_trace() -> None:
    provider, _ = recorded()
    app = mcp_http_app(Toolbox([where]))
    with serve_in_thread(app) as handle:
        source = McpSource.http(handle.base_url + "/mcp")
        try:
            [spec] = source.specs()
            outside = asyncio.run(spec.function())
            with Tracing(provider).span("execute_tool where") as span:
                inside = asyncio.run(spec.function())
        finally:
            source.close()
    assert outside == "none"
    assert inside == traceparent_of(span), "the served tool continued the caller's span"


@manifest
def where_sync() -> str:
    """Say which trace this call runs in, from a worker thread."""
    return current_traceparent() or "none"


@pytest.mark.parametrize("name", ["where", "where_sync"])
def test_mcp_serve_nests_its_execute_tool_span_under_the_callers_span(name: str) -> None:
    client_provider, _ = recorded()
    server_provider, server_spans = recorded()
    box = Toolbox([where, where_sync])
    with Dispatcher(box, tracer_provider=server_provider) as dispatcher:
        app = mcp_http_app(box, dispatcher=dispatcher)
        with serve_in_thread(app) as handle:
            source = McpSource.http(handle.base_url + "/mcp")
            try:
                [spec] = [s for s in source.specs() if s.name == name]
                with Tracing(client_provider).span(f"execute_tool {name}") as span:
                    inside = asyncio.run(spec.function())
            finally:
                source.close()
    [served] = [s for s in server_spans.get_finished_spans() if s.name.startswith("execute_tool")]
    caller = span.get_span_context()
    assert served.context is not None and served.parent is not None
    assert served.context.trace_id == caller.trace_id, "the served call is in the caller's trace"
    assert served.parent.span_id == caller.span_id and served.parent.is_remote
    # The tool itself ran under the served execute_tool span.
    assert inside.split("-")[1:3] == [
        f"{served.context.trace_id:032x}",
        f"{served.context.span_id:016x}",
    ]


SCRIPT = textwrap.dedent(
    """
    import asyncio, json, sys
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from bridge.sources.mcp import McpSource

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    source = McpSource.stdio([sys.executable, sys.argv[1]])
    try:
        [spec] = source.specs()
        with trace.get_tracer("test").start_as_current_span("execute_tool seen"):
            answer = json.loads(asyncio.run(spec.function()))
    finally:
        source.close()
    spans = [
        {
            "name": s.name,
            "kind": s.kind.name,
            "trace_id": f"{s.context.trace_id:032x}",
            "span_id": f"{s.context.span_id:016x}",
            "parent": f"{s.parent.span_id:016x}" if s.parent else None,
        }
        for s in exporter.get_finished_spans()
    ]
    print(json.dumps({"answer": answer, "spans": spans}))
    """
)


def test_with_a_global_sdk_the_mcp_client_span_is_a_child_of_the_tool_span() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(META_SERVER)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path])},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    spans = {s["name"]: s for s in report["spans"]}
    tool = spans["execute_tool seen"]
    call = spans["MCP send tools/call seen"]
    assert call["kind"] == "CLIENT" and call["parent"] == tool["span_id"]
    assert call["trace_id"] == tool["trace_id"]
    # The server got the SDK client span's context, and ran the tool under it.
    assert report["answer"]["meta"]["traceparent"].split("-")[1:3] == [
        call["trace_id"],
        call["span_id"],
    ]
    assert report["answer"]["span_id"] == call["span_id"]
