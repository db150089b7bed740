"""The loop's spans end to end: Bridge + AppBuilder adapter + emulator over loopback HTTP, with
a tracer provider of the test's own (`tests.support.tracing.recorded`).

A run is one ``invoke_agent`` span; each tool call an ``execute_tool`` span, its child in the
same trace, current while the tool's function runs (worker thread or event loop); refused and
rejected calls still get one, with why; a wait for a person is recorded on the call's span.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ParentBased
from opentelemetry.trace import SpanKind, StatusCode

from bridge import Bridge, ToolCall, manifest
from bridge.access import Principal
from bridge.access.policy import Policy
from bridge.emulator import Emulator
from bridge.errors import MaxRoundsError, RunFailedError, register_secret
from bridge.journal import MemoryJournal
from bridge.platforms.appbuilder import AppBuilderPlatform
from bridge.platforms.openai_chat import OpenAIChatPlatform
from bridge.platforms.openai_responses import OpenAIResponsesPlatform
from bridge.tools.approval import ApprovalRequest, Verdict
from bridge.tracing import CAPTURE_CONTENT_VARIABLE, Tracing
from tests.support.tracing import attributes, by_name, recorded

SEEN: dict[str, tuple[int, int] | None] = {}
"""Tool name -> (trace id, span id) of the span current inside its function (None: none)."""
_lock = threading.Lock()


def _seen(name: str) -> None:
    ctx = trace.get_current_span().get_span_context()
    with _lock:
        SEEN[name] = (ctx.trace_id, ctx.span_id) if ctx.is_valid else None


@manifest(description="Look an order up.", read_only=True)
def lookup(order_id: str) -> str:
    """Lookup.

    Args:
        order_id: The order.
    """
    _seen("lookup")
    return f"order {order_id}: shipped"


@manifest(description="Look an order up, asynchronously.", read_only=True)
async def alookup(order_id: str) -> str:
    """Async lookup.

    Args:
        order_id: The order.
    """
    await asyncio.sleep(0)
    _seen("alookup")
    return f"order {order_id}: on its way"


@manifest(description="Always fails.")
def explode(order_id: str) -> str:
    """Fails.

    Args:
        order_id: The order.
    """
    raise RuntimeError(f"the warehouse of {order_id} is on fire")


@manifest(description="Refund an order.")
def refund(order_id: str, amount: int) -> str:
    """Refund.

    Args:
        order_id: The order.
        amount: How much.
    """
    _seen("refund")
    return f"refunded {amount} on {order_id}"


POLICY = Policy.from_text(
    """
@id("no-big-refunds")
@reason("refunds over 1000 need a manager")
forbid (principal, action, resource == Tool::"refund")
when { context.arguments has amount && context.arguments.amount > 1000 };

@id("mid-refunds")
@approval("required")
permit (principal, action, resource == Tool::"refund")
when { context.arguments has amount && context.arguments.amount > 100 };

@id("the-rest")
permit (principal, action, resource)
unless { resource == Tool::"refund" && context.arguments has amount
         && context.arguments.amount > 100 };
""",
    source="test.cedar",
)

ALICE = Principal("alice", roles=frozenset({"support"}), via="key")

SCENARIO: dict[str, Any] = {
    "rules": [
        {
            "name": "two-rounds",
            "match": r"look (?P<a>\w+) up, then (?P<b>\w+)",
            "steps": [
                {"tool": "lookup", "arguments": {"order_id": "{a}"}},
                {"tool": "lookup", "as": "second", "arguments": {"order_id": "{b}"}},
            ],
            "answer": "{outputs.second}",
        },
        {
            "name": "both",
            "match": r"look (?P<order>\w+) up twice",
            "steps": [
                {
                    "calls": [
                        {"tool": "lookup", "arguments": {"order_id": "{order}"}},
                        {"tool": "alookup", "arguments": {"order_id": "{order}"}},
                    ]
                }
            ],
            "answer": "{outputs.lookup} / {outputs.alookup}",
        },
        {
            "name": "lookup",
            "match": r"look (?P<order>\S+) up",
            "steps": [{"tool": "lookup", "arguments": {"order_id": "{order}"}}],
            "answer": "{outputs.lookup}",
        },
        {
            "name": "explode",
            "match": r"explode (?P<order>\w+)",
            "steps": [{"tool": "explode", "arguments": {"order_id": "{order}"}}],
            "answer": "model read: {outputs.explode}",
        },
        {
            "name": "ask-first",
            "match": r"which order\?",
            "steps": [
                {"ask": "Which order?", "as": "order"},
                {"tool": "lookup", "arguments": {"order_id": "{answers.order}"}},
            ],
            "answer": "{outputs.lookup}",
        },
        {
            "name": "failing-run",
            "match": r"the workflow fails",
            "steps": [{"tool": "lookup", "arguments": {"order_id": "F1"}}],
            "answer": "never",
            "faults": "inband=WorkflowError,message=code node failed,round=1",
        },
        {
            "name": "refund",
            "match": r"refund (?P<order>\w+) (?P<amount>\d+)",
            "steps": [
                {"tool": "refund", "arguments": {"order_id": "{order}", "amount": "{amount}"}}
            ],
            "answer": "model read: {outputs.refund}",
        },
    ]
}


@pytest.fixture(scope="module")
def emulator() -> Iterator[Emulator]:
    with Emulator(scenario=SCENARIO) as emu:
        yield emu


@pytest.fixture(autouse=True)
def _reset() -> None:
    SEEN.clear()


def make_bridge(emu: Emulator, **options: Any) -> Bridge:
    platform = AppBuilderPlatform(
        app_id=emu.app_id, token=emu.token, base_url=emu.base_url, max_retries=1
    )
    return Bridge(platform, [lookup, alookup, explode, refund], **options)


def _one(spans: list[ReadableSpan], prefix: str) -> ReadableSpan:
    [span] = by_name(spans, prefix)
    return span


def _ids(span: ReadableSpan) -> tuple[int, int]:
    ctx = span.get_span_context()
    assert ctx is not None
    return ctx.trace_id, ctx.span_id


def _traceparent(span: ReadableSpan) -> str:
    ctx = span.get_span_context()
    assert ctx is not None
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"


def test_a_run_is_an_invoke_agent_span_and_its_call_an_execute_tool_child(
    emulator: Emulator,
) -> None:
    provider, exporter = recorded()
    with (
        make_bridge(emulator, tracer_provider=provider, caller=ALICE) as bridge,
        bridge.conversation() as conv,
    ):
        result = conv.ask("look A1 up")
    assert result.answer == "order A1: shipped"
    spans = list(exporter.get_finished_spans())
    run = _one(spans, "invoke_agent")
    tool = _one(spans, "execute_tool")

    assert run.name == f"invoke_agent {emulator.app_id}"
    assert run.kind is SpanKind.CLIENT  # AppBuilder runs the agent on its side
    got = attributes(run)
    assert got["gen_ai.operation.name"] == "invoke_agent"
    assert got["gen_ai.provider.name"] == "appbuilder"
    assert got["gen_ai.agent.id"] == emulator.app_id
    assert got["gen_ai.conversation.id"] == conv.id
    assert got["toolbridge.message.id"] == conv.message_id
    assert got["toolbridge.caller"] == "alice"
    assert got["toolbridge.rounds"] == 1
    assert result.usage is not None
    assert got["gen_ai.usage.input_tokens"] == result.usage["prompt_tokens"] > 0
    assert got["gen_ai.usage.output_tokens"] == result.usage["completion_tokens"] > 0
    assert "error.type" not in got and run.status.status_code is StatusCode.UNSET

    assert tool.name == "execute_tool lookup"
    assert tool.kind is SpanKind.INTERNAL
    [call] = result.tool_runs
    assert attributes(tool) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "lookup",
        "gen_ai.tool.call.id": call.call_id,
        "gen_ai.tool.type": "function",
        "gen_ai.conversation.id": conv.id,
        "toolbridge.caller": "alice",
        "toolbridge.caller.via": "key",
    }
    # Nesting: the tool's span is the run's child, in its trace, and current in the tool.
    assert tool.parent is not None and tool.parent.span_id == _ids(run)[1]
    assert _ids(tool)[0] == _ids(run)[0]
    assert SEEN["lookup"] == _ids(tool)
    # The journal keeps both trace contexts, for a resumed run.
    [message] = bridge.journal.messages(conv.id)
    assert message.traceparent == _traceparent(run)
    record = bridge.journal.get_call(conv.id, call.call_id)
    assert record is not None
    assert record.traceparent == _traceparent(tool)


@pytest.mark.parametrize("protocol", ["openai", "responses"])
def test_an_openai_compatible_run_is_an_internal_agent_of_the_openai_provider(
    protocol: str,
) -> None:
    """With a model API the agent is toolbridge's loop: an INTERNAL span, with the model."""
    provider, exporter = recorded()
    with Emulator(protocol=protocol, scenario=SCENARIO, faults="") as emu:
        env = emu.env()
        kind = OpenAIChatPlatform if protocol == "openai" else OpenAIResponsesPlatform
        platform = kind(env["OPENAI_BASE_URL"], env["OPENAI_MODEL"], env["OPENAI_API_KEY"])
        with Bridge(platform, [lookup], tracer_provider=provider) as bridge:
            result = bridge.ask("look A1 up")
    assert result.answer == "order A1: shipped"
    spans = list(exporter.get_finished_spans())
    run = _one(spans, "invoke_agent")
    assert run.kind is SpanKind.INTERNAL
    got = attributes(run)
    assert got["gen_ai.provider.name"] == "openai"
    assert got["gen_ai.request.model"] == env["OPENAI_MODEL"]
    assert "gen_ai.agent.id" not in got
    assert result.usage is not None
    assert got["gen_ai.usage.input_tokens"] == result.usage.get(
        "input_tokens", result.usage.get("prompt_tokens")
    )
    tool = _one(spans, "execute_tool lookup")
    assert tool.parent is not None and tool.parent.span_id == _ids(run)[1]


def test_sync_and_async_tools_run_inside_their_own_spans(emulator: Emulator) -> None:
    provider, exporter = recorded()
    with make_bridge(emulator, tracer_provider=provider) as bridge:
        result = bridge.ask("look A2 up twice")
    assert result.answer == "order A2: shipped / order A2: on its way"
    spans = list(exporter.get_finished_spans())
    run = _one(spans, "invoke_agent")
    sync, coroutine = _one(spans, "execute_tool lookup"), _one(spans, "execute_tool alookup")
    for span in (sync, coroutine):
        assert span.parent is not None and span.parent.span_id == _ids(run)[1]
    # A worker thread and the dispatcher's event loop thread each saw their call's span.
    assert {"lookup": _ids(sync), "alookup": _ids(coroutine)} == SEEN


def test_a_failing_tool_marks_its_span_not_the_run(emulator: Emulator) -> None:
    provider, exporter = recorded()
    with make_bridge(emulator, tracer_provider=provider) as bridge:
        result = bridge.ask("explode B7")
    assert "RuntimeError: the warehouse of B7 is on fire" in result.answer
    spans = list(exporter.get_finished_spans())
    tool = _one(spans, "execute_tool explode")
    assert attributes(tool)["error.type"] == "tool_error"
    assert tool.status.status_code is StatusCode.ERROR
    assert "error.type" not in attributes(_one(spans, "invoke_agent"))


def test_a_call_the_policy_refuses_still_has_a_span_saying_why(emulator: Emulator) -> None:
    provider, exporter = recorded()
    with make_bridge(emulator, tracer_provider=provider, policy=POLICY, caller=ALICE) as bridge:
        result = bridge.ask("refund A1 5000")
    assert [run.error for run in result.tool_runs] == ["rejected"]
    assert "refund" not in SEEN
    spans = list(exporter.get_finished_spans())
    tool = _one(spans, "execute_tool refund")
    got = attributes(tool)
    assert got["error.type"] == "rejected"
    assert got["toolbridge.policy.decision"] == "refuse"
    assert got["toolbridge.policy.ids"] == ("no-big-refunds",)
    assert got["toolbridge.policy.reason"] == "refunds over 1000 need a manager"
    assert got["toolbridge.caller"] == "alice"
    assert tool.status.status_code is StatusCode.ERROR
    assert tool.parent is not None and tool.parent.span_id == _ids(_one(spans, "invoke_agent"))[1]


def test_an_allowed_call_carries_the_policy_decision(emulator: Emulator) -> None:
    provider, exporter = recorded()
    with make_bridge(emulator, tracer_provider=provider, policy=POLICY, caller=ALICE) as bridge:
        bridge.ask("refund A1 50")
    got = attributes(_one(list(exporter.get_finished_spans()), "execute_tool refund"))
    assert (got["toolbridge.policy.decision"], got["toolbridge.policy.ids"]) == (
        "allow",
        ("the-rest",),
    )
    assert "error.type" not in got


def test_the_wait_for_a_person_is_on_the_calls_span(emulator: Emulator) -> None:
    """A deferred approver (the daemon's kind) that journals the request and its decision:
    the span has when it was asked, who decided and how long it waited."""
    journal = MemoryJournal()
    decided = threading.Event()

    class Manager:
        def ask(self, request: ApprovalRequest) -> Verdict:
            record = journal.request_approval(
                request.conversation_id,
                request.call,
                message_id=request.message_id,
                arguments_digest=request.arguments_digest,
                requested_by="alice",
                deadline=datetime.now(timezone.utc) + timedelta(minutes=1),
            )
            # A person answers on another thread; the call waits for the decision.
            threading.Thread(target=decide, args=(record.approval_id,)).start()
            assert decided.wait(10)
            return Verdict(run=True)

    def decide(approval_id: str) -> None:
        journal.decide_approval(approval_id, status="approved", decided_by="carol")
        decided.set()

    provider, exporter = recorded()
    with make_bridge(
        emulator,
        tracer_provider=provider,
        policy=POLICY,
        caller=ALICE,
        approve=Manager(),
        journal=journal,
    ) as bridge:
        result = bridge.ask("refund A1 500")
    assert result.answer == "model read: refunded 500 on A1"
    spans = list(exporter.get_finished_spans())
    tool = _one(spans, "execute_tool refund")
    requested, approved = tool.events
    assert requested.name == "toolbridge.approval.requested"
    assert dict(requested.attributes or {}) == {"toolbridge.approval.asked": "approver"}
    assert approved.name == "toolbridge.approval.decided"
    assert approved.attributes is not None
    assert approved.attributes["toolbridge.approval.outcome"] == "approved"
    assert approved.attributes["toolbridge.approval.decided_by"] == "carol"
    waited = approved.attributes["toolbridge.approval.waited_ms"]
    assert isinstance(waited, float) and waited >= 0
    assert approved.timestamp >= requested.timestamp
    assert attributes(tool)["toolbridge.policy.decision"] == "approval"
    # The call ran inside the span that waited.
    assert SEEN["refund"] == _ids(tool)
    assert tool.parent is not None and tool.parent.span_id == _ids(_one(spans, "invoke_agent"))[1]


def test_a_call_rejected_by_the_approve_hook_has_a_span_with_the_answer(
    emulator: Emulator,
) -> None:
    def approve(call: ToolCall) -> bool:
        return False

    provider, exporter = recorded()
    with make_bridge(
        emulator, tracer_provider=provider, policy=POLICY, caller=ALICE, approve=approve
    ) as bridge:
        result = bridge.ask("refund B2 500")
    assert result.answer == "model read: The tool call was not run: rejected by the user"
    tool = _one(list(exporter.get_finished_spans()), "execute_tool refund")
    assert attributes(tool)["error.type"] == "rejected"
    names = [event.name for event in tool.events]
    assert names == ["toolbridge.approval.requested", "toolbridge.approval.decided"]
    assert tool.events[1].attributes is not None
    assert tool.events[1].attributes["toolbridge.approval.outcome"] == "rejected"
    assert "refund" not in SEEN


def test_content_is_captured_only_when_asked_and_then_redacted(
    emulator: Emulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = f"sk-order-{uuid.uuid4().hex}"
    register_secret(secret)
    provider, exporter = recorded()
    with make_bridge(emulator, tracer_provider=provider) as bridge:
        bridge.ask(f"look {secret} up")
        [plain] = by_name(list(exporter.get_finished_spans()), "execute_tool")
        assert not {"gen_ai.tool.call.arguments", "gen_ai.tool.call.result"} & set(
            attributes(plain)
        )
        exporter.clear()
        monkeypatch.setenv(CAPTURE_CONTENT_VARIABLE, "true")
        bridge.ask(f"look {secret} up")
    spans = list(exporter.get_finished_spans())
    got = attributes(_one(spans, "execute_tool"))
    assert "order_id" in got["gen_ai.tool.call.arguments"]
    assert got["gen_ai.tool.call.result"].endswith(": shipped")
    for span in spans:
        for value in attributes(span).values():
            assert secret not in str(value)
        for event in span.events:
            assert secret not in str(dict(event.attributes or {}))


def test_a_failed_run_and_a_run_over_its_rounds_carry_error_type(emulator: Emulator) -> None:
    provider, exporter = recorded()
    with make_bridge(emulator, tracer_provider=provider) as bridge:
        with pytest.raises(RunFailedError):
            bridge.ask("the workflow fails")
        [failed] = by_name(list(exporter.get_finished_spans()), "invoke_agent")
        exporter.clear()
    assert attributes(failed)["error.type"] == "WorkflowError"
    assert failed.status.status_code is StatusCode.ERROR
    assert "code node failed" in (failed.status.description or "")
    assert attributes(failed)["toolbridge.rounds"] == 1
    with (
        make_bridge(emulator, tracer_provider=provider, max_rounds=1) as bridge,
        pytest.raises(MaxRoundsError),
    ):
        bridge.ask("look R1 up, then R2")
    run = _one(list(exporter.get_finished_spans()), "invoke_agent")
    assert attributes(run)["error.type"] == "MaxRoundsError"
    assert attributes(run)["toolbridge.rounds"] == 1


def test_an_answer_to_a_pause_is_a_new_run_linked_to_the_paused_one(emulator: Emulator) -> None:
    provider, exporter = recorded()
    with make_bridge(emulator, tracer_provider=provider) as bridge, bridge.conversation() as conv:
        paused = conv.ask("which order?")
        assert paused.human_input is not None
        done = conv.resume("Z9")
    assert done.answer == "order Z9: shipped"
    first, second = by_name(list(exporter.get_finished_spans()), "invoke_agent")
    assert "error.type" not in attributes(first)
    assert second.parent is None  # a new message: its own trace, linked to the paused run
    [link] = second.links
    assert (link.context.trace_id, link.context.span_id) == _ids(first)
    tool = _one(list(exporter.get_finished_spans()), "execute_tool")
    assert tool.parent is not None and tool.parent.span_id == _ids(second)[1]


def test_a_consumer_that_stops_early_still_ends_the_run_span(emulator: Emulator) -> None:
    provider, exporter = recorded()
    with make_bridge(emulator, tracer_provider=provider) as bridge, bridge.conversation() as conv:
        events = conv.stream("look C3 up")
        next(iter(events))
        events.close()  # type: ignore[attr-defined]
        [message] = bridge.journal.messages(conv.id)
    run = _one(list(exporter.get_finished_spans()), "invoke_agent")
    assert attributes(run)["error.type"] == "abandoned"
    assert message.error_code == "abandoned"


def test_a_run_the_sampler_drops_takes_its_calls_with_it(emulator: Emulator) -> None:
    """Not recorded, but current: the tools' spans (and the platform's) follow its decision."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=ParentBased(ALWAYS_OFF))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with make_bridge(emulator, tracer_provider=provider) as bridge, bridge.conversation() as conv:
        conv.ask("look D4 up")
        [message] = bridge.journal.messages(conv.id)
    assert exporter.get_finished_spans() == ()
    assert message.traceparent is not None
    assert int(message.traceparent.split("-")[3], 16) & 1 == 0, "kept, with its decision"
    seen = SEEN["lookup"]
    assert seen is not None, "the call's (unsampled) span is current in the tool"
    assert f"{seen[0]:032x}" == message.traceparent.split("-")[1], "in the run's trace"


def test_without_a_configured_provider_nothing_is_traced(emulator: Emulator) -> None:
    with make_bridge(emulator) as bridge:
        assert not bridge.tracing.enabled
        with bridge.conversation() as conv:
            result = conv.ask("look A2 up twice")
        [message] = bridge.journal.messages(conv.id)
        records = bridge.journal.calls(conv.id)
    assert result.answer == "order A2: shipped / order A2: on its way"
    assert SEEN == {"lookup": None, "alookup": None}, "no span is current in the tools"
    assert message.traceparent is None
    assert [r.traceparent for r in records] == [None, None]
    assert not Tracing(None).enabled
