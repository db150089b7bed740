"""The dispatcher's ``execute_tool`` spans on their own (`Dispatcher(tracer_provider=...)`):
each call's span is current wherever its function runs, also in work the tool hands to a
thread of its own through `ToolContext.trace_context`; timeouts, ``errors="raise"`` and tool
sources are reported as the conventions say."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode

from bridge import Toolbox, ToolCall, ToolContext, manifest
from bridge.loading import load_tools
from bridge.tools.dispatch import Dispatcher
from bridge.tools.toolsets import StaticToolset
from tests.support.tracing import attributes, by_name, recorded

SEEN: dict[str, int | None] = {}


@pytest.fixture(autouse=True)
def _reset() -> None:
    SEEN.clear()


def _span_id() -> int | None:
    ctx = trace.get_current_span().get_span_context()
    return ctx.span_id if ctx.is_valid else None


@manifest(description="Hands its work to a thread of its own.")
def delegate(ctx: ToolContext) -> str:
    def work() -> None:
        token = otel_context.attach(ctx.trace_context) if ctx.trace_context else None
        try:
            SEEN["thread"] = _span_id()
        finally:
            if token is not None:
                otel_context.detach(token)

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    SEEN["function"] = _span_id()
    return "done"


@manifest(description="Waits until it is abandoned.", timeout=0.2)
def hang(ctx: ToolContext) -> str:
    ctx.cancelled.wait(10)
    return "late"


@manifest(description="Fails.")
def fail() -> str:
    raise RuntimeError("no")


@manifest(description="Async.")
async def later() -> str:
    await asyncio.sleep(0)
    SEEN["later"] = _span_id()
    return "ok"


def _span_of(spans: list[ReadableSpan], name: str) -> ReadableSpan:
    [span] = by_name(spans, f"execute_tool {name}")
    return span


def test_the_span_reaches_the_tools_own_threads_through_its_context() -> None:
    provider, exporter = recorded()
    with Dispatcher(Toolbox([delegate]), tracer_provider=provider) as dispatcher:
        [run] = dispatcher.run([ToolCall(call_id="d1", name="delegate", arguments={})])
    assert run.output == "done"
    span = _span_of(list(exporter.get_finished_spans()), "delegate")
    assert span.parent is None  # no run around it: a trace of its own
    assert SEEN["function"] == SEEN["thread"] == span.get_span_context().span_id


def test_a_timed_out_call_ends_its_span_as_a_timeout() -> None:
    provider, exporter = recorded()
    with Dispatcher(Toolbox([hang]), tracer_provider=provider) as dispatcher:
        [run] = dispatcher.run([ToolCall(call_id="h1", name="hang", arguments={})])
    assert run.error == "timeout"
    span = _span_of(list(exporter.get_finished_spans()), "hang")
    assert attributes(span)["error.type"] == "timeout"
    assert span.status.status_code is StatusCode.ERROR


def test_errors_raise_still_ends_every_span_of_the_batch() -> None:
    provider, exporter = recorded()
    calls = [
        ToolCall(call_id="f1", name="fail", arguments={}),
        ToolCall(call_id="h2", name="hang", arguments={}),
    ]
    with (
        Dispatcher(Toolbox([fail, hang]), tracer_provider=provider, errors="raise") as dispatcher,
        pytest.raises(RuntimeError, match="no"),
    ):
        dispatcher.run(calls)
    spans = list(exporter.get_finished_spans())
    assert attributes(_span_of(spans, "fail"))["error.type"] == "RuntimeError"
    assert attributes(_span_of(spans, "hang"))["error.type"] == "RuntimeError"


def test_arun_and_async_tools_run_in_their_spans() -> None:
    provider, exporter = recorded()

    async def main() -> None:
        with Dispatcher(Toolbox([later, delegate]), tracer_provider=provider) as dispatcher:
            await dispatcher.arun(
                [
                    ToolCall(call_id="a1", name="later", arguments={}),
                    ToolCall(call_id="a2", name="delegate", arguments={}),
                ]
            )

    asyncio.run(main())
    spans = list(exporter.get_finished_spans())
    assert SEEN["later"] == _span_of(spans, "later").get_span_context().span_id
    assert SEEN["function"] == _span_of(spans, "delegate").get_span_context().span_id


def test_a_tool_from_a_source_is_an_extension() -> None:
    provider, exporter = recorded()
    toolbox = Toolbox([fail])
    toolbox.add_source(StaticToolset(list(Toolbox([later]))))
    with Dispatcher(toolbox, tracer_provider=provider) as dispatcher:
        dispatcher.run(
            [
                ToolCall(call_id="s1", name="later", arguments={}),
                ToolCall(call_id="s2", name="fail", arguments={}),
            ]
        )
    spans = list(exporter.get_finished_spans())
    assert attributes(_span_of(spans, "later"))["gen_ai.tool.type"] == "extension"
    assert attributes(_span_of(spans, "fail"))["gen_ai.tool.type"] == "function"


def test_loaded_tools_keep_their_type_python_files_and_sources_alike() -> None:
    """`load_tools` wraps every SPEC as a source of the toolbox: a Python file's tools are
    still functions, an OpenAPI document's operations extensions."""
    data = Path(__file__).parent.parent / "data"
    with load_tools([str(data / "serve_tools.py"), f"openapi:{data / 'petstore.yaml'}"]) as box:
        types = {name: box.tool_type(name) for name in box.names()}
    assert types["listPets"] == "extension"
    python = [name for name, kind in types.items() if kind == "function"]
    assert python and "listPets" not in python


def test_a_dispatcher_without_a_provider_opens_no_span() -> None:
    with Dispatcher(Toolbox([delegate])) as dispatcher:
        assert not dispatcher.tracing.enabled
        dispatcher.run([ToolCall(call_id="n1", name="delegate", arguments={})])
    assert SEEN == {"thread": None, "function": None}
