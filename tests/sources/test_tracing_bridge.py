"""A bridge made with its own tracer provider keeps one trace in it, end to end: the run, the
platform's requests, the tool call and the HTTP tool's request to the intranet service (which
receives the traceparent of that request's span), also through a source wrapped in a prefix."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind

from bridge import Bridge, Toolbox
from bridge._serve import ServerHandle
from bridge.emulator import Emulator
from bridge.platforms.appbuilder import AppBuilderPlatform
from bridge.tools.toolsets import PrefixedToolset
from tests.sources.test_tracing_http_tools import QUERY_KEY, TOKEN, source_for
from tests.support.tracing import by_name, recorded

SCENARIO = {
    "rules": [
        {
            "name": "echo",
            "match": r"echo (?P<item>\w+)",
            "steps": [{"tool": "intranet_echo", "arguments": {"item": "{item}"}}],
            "answer": "done",
        }
    ],
}


@pytest.fixture(scope="module")
def emulator() -> Iterator[Emulator]:
    with Emulator(scenario=SCENARIO) as emu:
        yield emu


@pytest.fixture(autouse=True)
def _secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TB_TRACE_TOKEN", TOKEN)
    monkeypatch.setenv("TB_TRACE_QUERY_KEY", QUERY_KEY)


def _span_id(span: ReadableSpan) -> int:
    assert span.context is not None
    return span.context.span_id


def test_the_bridges_provider_gets_the_platforms_and_the_sources_client_spans(
    emulator: Emulator, echo_server: ServerHandle, tmp_path: Path
) -> None:
    provider, exporter = recorded()
    # The source is made tracing nowhere in particular: the bridge hands it its provider.
    source = source_for(tmp_path, echo_server.base_url, tracing=None)
    toolbox = Toolbox()
    toolbox.add_source(PrefixedToolset(source, "intranet"))
    platform = AppBuilderPlatform(
        app_id=emulator.app_id, token=emulator.token, base_url=emulator.base_url, max_retries=1
    )
    try:
        with Bridge(platform, toolbox, tracer_provider=provider) as bridge:
            assert bridge.ask("echo a1").answer == "done"
    finally:
        toolbox.close()
    spans = list(exporter.get_finished_spans())
    [run] = by_name(spans, "invoke_agent")
    [tool] = by_name(spans, "execute_tool intranet_echo")
    [intranet] = by_name(spans, "GET")
    posts = by_name(spans, "POST")
    assert posts, "the platform's requests are client spans of the bridge's provider"
    assert all(p.kind is SpanKind.CLIENT for p in [*posts, intranet])
    assert {s.context.trace_id for s in spans if s.context} == {run.context.trace_id}
    assert any(p.parent is not None and p.parent.span_id == _span_id(run) for p in posts)
    assert intranet.parent is not None and intranet.parent.span_id == _span_id(tool)
    assert tool.parent is not None and tool.parent.span_id == _span_id(run)
