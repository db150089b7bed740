"""A run resumed after a crash stays in its trace: Bridge + AppBuilder adapter + emulator over
loopback HTTP, on a SQLite journal a traced process left behind.

The resumed run's ``invoke_agent`` span is in the interrupted run's trace (its child), linked to
it and marked `toolbridge.resumed`; the idempotent call that was cut short runs again in a new
``execute_tool`` span linked to the interrupted execution's; the call that had finished is not
run again, so it gets no new span (only an event on the run's span).
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan

from bridge import Bridge
from bridge.emulator import Emulator
from bridge.journal import SQLiteJournal
from bridge.platforms.appbuilder import AppBuilderPlatform
from bridge.tools.toolbox import Toolbox
from bridge.tracing import RESUMED, Tracing, traceparent_of
from bridge.types import ToolCallsRequested, ToolRun
from tests.journal.test_journal import RUNS, SCENARIO, pay, price
from tests.support.tracing import attributes, by_name, recorded


def _ids(span: ReadableSpan) -> tuple[int, int]:
    ctx = span.get_span_context()
    assert ctx is not None
    return ctx.trace_id, ctx.span_id


def test_a_recovered_run_continues_the_trace_of_the_run_a_crash_interrupted(
    tmp_path: Path,
) -> None:
    RUNS.clear()
    path = tmp_path / "traced.db"
    provider, exporter = recorded()
    tracing = Tracing(provider)
    with Emulator(scenario=SCENARIO) as emu:
        # What a traced process had written when it died: its run's span context with the
        # message; pay finished (its output journaled), price started and never finished,
        # each with the context of its execution's span.
        original = tracing.start("invoke_agent before the crash")
        inside = trace.set_span_in_context(original)
        paid = tracing.start("execute_tool pay", parent=inside)
        cut = tracing.start("execute_tool price", parent=inside)
        platform = AppBuilderPlatform(app_id=emu.app_id, token=emu.token, base_url=emu.base_url)
        crashed = SQLiteJournal(path)
        cid = platform.create_conversation()
        message_id = crashed.begin_message(
            cid, "pay X1 and price tea", traceparent=traceparent_of(original)
        )
        tools = Toolbox([pay, price]).manifests("appbuilder")
        events = platform.start(cid, "pay X1 and price tea", tools=tools)
        [batch] = [e.batch for e in events if isinstance(e, ToolCallsRequested)]
        pay_call, price_call = batch.calls
        assert (pay_call.name, price_call.name) == ("pay", "price")
        crashed.receive(cid, batch, message_id=message_id)
        crashed.start(
            cid,
            [pay_call.call_id, price_call.call_id],
            traceparents={
                pay_call.call_id: traceparent_of(paid) or "",
                price_call.call_id: traceparent_of(cut) or "",
            },
        )
        crashed.finish(
            cid,
            ToolRun(
                call_id=pay_call.call_id,
                name="pay",
                arguments=pay_call.arguments,
                output="paid X1",
                started_at=datetime.now(timezone.utc),
                duration_ms=1.0,
            ),
        )
        crashed.close()
        platform.close()
        for span in (paid, cut, original):
            span.end()
        exporter.clear()

        platform = AppBuilderPlatform(app_id=emu.app_id, token=emu.token, base_url=emu.base_url)
        journal = SQLiteJournal(path)
        try:
            [interrupted] = journal.unfinished_messages()
            pending = journal.pending_batch(interrupted.message_id)
            assert pending == batch
            with (
                Bridge(platform, [pay, price], journal=journal, tracer_provider=provider) as bridge,
                tracing.span("recovery") as recovery,  # e.g. a daemon's, in a trace of its own
            ):
                conv = bridge.conversation(interrupted.conversation_id)
                events = list(conv.stream_recovered(interrupted.message_id, pending))
            answer = "".join(e.text for e in events if e.kind == "text_delta")
            rerun = journal.get_call(cid, price_call.call_id)
        finally:
            journal.close()

    assert answer == "paid X1 / tea: 3 EUR"
    assert RUNS == {"price tea": 1}, "only the interrupted idempotent call ran again"
    spans = list(exporter.get_finished_spans())
    [run] = by_name(spans, "invoke_agent")
    assert by_name(spans, "recovery")
    [tool] = by_name(spans, "execute_tool")

    # The resumed run: same trace, child of the interrupted run, linked to it.
    original_ids = (original.get_span_context().trace_id, original.get_span_context().span_id)
    assert _ids(run)[0] == original_ids[0]
    assert run.parent is not None and run.parent.span_id == original_ids[1]
    link, by = run.links
    assert (link.context.trace_id, link.context.span_id) == original_ids
    assert dict(link.attributes or {}) == {RESUMED: True}
    assert by.context.span_id == recovery.get_span_context().span_id
    assert attributes(run)[RESUMED] is True
    assert attributes(run)["toolbridge.message.id"] == interrupted.message_id
    # The finished call was not run again: an event on the run's span, no execute_tool span.
    recorded_calls = [
        dict(e.attributes or {}) for e in run.events if e.name == "toolbridge.tool.call.recorded"
    ]
    assert [a["gen_ai.tool.call.id"] for a in recorded_calls] == [pay_call.call_id]

    # The re-run call: a new span under the resumed run, linked to the cut-short execution.
    assert tool.name == "execute_tool price"
    assert tool.parent is not None and tool.parent.span_id == _ids(run)[1]
    assert _ids(tool)[0] == original_ids[0]
    [tool_link] = tool.links
    assert tool_link.context.span_id == cut.get_span_context().span_id
    assert attributes(tool)[RESUMED] is True
    assert attributes(tool)["gen_ai.tool.call.id"] == price_call.call_id
    # The journal now holds the new execution's context.
    assert rerun is not None
    assert rerun.traceparent is not None
    assert rerun.traceparent.split("-")[2] == f"{_ids(tool)[1]:016x}"
