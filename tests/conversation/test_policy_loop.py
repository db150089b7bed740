"""The loop's policy step end to end: Bridge + AppBuilder adapter + emulator over loopback HTTP,
with a Cedar policy, callers and an audit record."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from bridge import Bridge, ToolCall, manifest
from bridge.access import AuditEvent, Principal, Records, ToolPatterns
from bridge.access.policy import Policy
from bridge.approval_flow import CallScope, record_outcome, split_for_approval
from bridge.emulator import Emulator
from bridge.platforms.appbuilder import AppBuilderPlatform
from bridge.tools.approval import ApprovalRequest, Verdict

CALLS: Counter[str] = Counter()
_lock = threading.Lock()


@manifest(description="Refund an order.")
def refund(order_id: str, amount: int) -> str:
    """Refund.

    Args:
        order_id: The order.
        amount: How much.
    """
    with _lock:
        CALLS["refund"] += 1
    return f"refunded {amount} on {order_id}"


@manifest(description="Look an order up.", read_only=True)
def lookup(order_id: str) -> str:
    """Lookup.

    Args:
        order_id: The order.
    """
    with _lock:
        CALLS["lookup"] += 1
    return f"order {order_id}: shipped"


POLICY = Policy.from_text(
    """
@id("no-big-refunds")
@reason("refunds over 1000 need a manager")
forbid (principal, action, resource == Tool::"refund")
when { context.arguments has amount && context.arguments.amount > 1000 };

@id("mid-refunds")
@approval("required")
permit (principal in Role::"support", action, resource == Tool::"refund")
when { context.arguments has amount && context.arguments.amount > 100 };

@id("small-refunds")
permit (principal in Role::"support", action, resource == Tool::"refund")
unless { context.arguments has amount && context.arguments.amount > 100 };

@id("reads")
permit (principal, action, resource) when { resource.read_only };
""",
    source="test.cedar",
)

ALICE = Principal("alice", roles=frozenset({"support"}))
BOB = Principal("bob", roles=frozenset({"sales"}))

SCENARIO: dict[str, Any] = {
    "rules": [
        {
            "name": "refund",
            "match": r"refund (?P<order>\w+) (?P<amount>\d+)",
            "steps": [
                {"tool": "refund", "arguments": {"order_id": "{order}", "amount": "{amount}"}}
            ],
            "answer": "model read: {outputs.refund}",
        },
        {
            "name": "both",
            "match": r"look (?P<order>\w+) up and refund (?P<amount>\d+)",
            "steps": [
                {
                    "calls": [
                        {"tool": "lookup", "arguments": {"order_id": "{order}"}},
                        {
                            "tool": "refund",
                            "arguments": {"order_id": "{order}", "amount": "{amount}"},
                        },
                    ]
                }
            ],
            "answer": "{outputs.lookup} / {outputs.refund}",
        },
    ]
}


@pytest.fixture(scope="module")
def emulator() -> Iterator[Emulator]:
    with Emulator(scenario=SCENARIO) as emu:
        yield emu


@pytest.fixture(autouse=True)
def _reset() -> None:
    CALLS.clear()


class _NullPlatform:
    name = "null"
    dialect = "openai"

    def close(self) -> None:
        pass


class Recorded:
    """An audit record in memory."""

    def __init__(self) -> None:
        self.events: list[AuditEvent] = []

    def record(self, event: AuditEvent) -> None:
        self.events.append(event)

    def stage(self, event: AuditEvent) -> None:
        self.record(event)


def make_bridge(emu: Emulator, **options: Any) -> Bridge:
    platform = AppBuilderPlatform(
        app_id=emu.app_id, token=emu.token, base_url=emu.base_url, max_retries=1
    )
    options.setdefault("policy", POLICY)
    return Bridge(platform, [refund, lookup], **options)


def test_a_forbid_is_read_by_the_model_and_the_conversation_goes_on(emulator: Emulator) -> None:
    with make_bridge(emulator, caller=ALICE) as bridge, bridge.conversation() as conv:
        result = conv.ask("refund A1 5000")
        assert result.answer == (
            "model read: The tool call was not run: refused by policy no-big-refunds: "
            "refunds over 1000 need a manager"
        )
        assert [run.error for run in result.tool_runs] == ["rejected"]
        again = conv.ask("refund A1 50")
    assert again.answer == "model read: refunded 50 on A1"
    assert CALLS["refund"] == 1


def test_an_approval_permit_asks_the_approve_hook(emulator: Emulator) -> None:
    asked: list[ToolCall] = []

    def approve(call: ToolCall) -> bool:
        asked.append(call)
        return call.arguments["order_id"] == "A1"  # type: ignore[index]

    with make_bridge(emulator, caller=ALICE, approve=approve) as bridge:
        yes = bridge.ask("refund A1 500")
        no = bridge.ask("refund B2 500")
    assert [call.arguments for call in asked] == [
        {"order_id": "A1", "amount": 500},
        {"order_id": "B2", "amount": 500},
    ]
    assert yes.answer == "model read: refunded 500 on A1"
    assert no.answer == "model read: The tool call was not run: rejected by the user"
    assert CALLS["refund"] == 1


def test_an_approval_with_nobody_to_ask_is_refused(emulator: Emulator) -> None:
    with make_bridge(emulator, caller=ALICE) as bridge:
        result = bridge.ask("refund A1 500")
    assert "no approver is configured" in result.answer
    assert CALLS["refund"] == 0


def test_an_allowed_call_runs_without_asking(emulator: Emulator) -> None:
    def approve(call: ToolCall) -> bool:
        raise AssertionError("an allowed call of a tool without confirm is not asked about")

    with make_bridge(emulator, caller=ALICE, approve=approve) as bridge:
        result = bridge.ask("refund A1 50")
    assert result.answer == "model read: refunded 50 on A1"


def test_roles_decide_and_a_question_may_name_its_caller(emulator: Emulator) -> None:
    with make_bridge(emulator, caller=ALICE) as bridge:
        as_bob = bridge.ask("look A1 up and refund 50", caller=BOB)
        as_alice = bridge.ask("look A1 up and refund 50")
    assert as_bob.answer == (
        "order A1: shipped / The tool call was not run: refused by policy: "
        "no policy permits this call"
    )
    assert as_alice.answer == "order A1: shipped / refunded 50 on A1"
    assert Counter({"lookup": 2, "refund": 1}) == CALLS


def test_a_deferred_approver_gets_the_calls_a_policy_sends_to_approval(
    emulator: Emulator,
) -> None:
    class Later:
        def __init__(self) -> None:
            self.asked: list[str] = []

        def ask(self, request: ApprovalRequest) -> Verdict:
            self.asked.append(request.call.name)
            return Verdict(run=True)

    later = Later()
    with make_bridge(emulator, caller=ALICE, approve=later) as bridge:
        small = bridge.ask("look A1 up and refund 50")
        mid = bridge.ask("look A1 up and refund 500")
    assert later.asked == ["refund"], "only the call the policy sent to approval"
    assert small.answer == "order A1: shipped / refunded 50 on A1"
    assert mid.answer == "order A1: shipped / refunded 500 on A1"


def test_a_caller_is_offered_only_its_tools(emulator: Emulator) -> None:
    reader = Principal("reader", roles=frozenset({"support"}), tools=ToolPatterns(("lookup",)))
    with make_bridge(emulator, caller=reader) as bridge:
        offered = [m["function"]["name"] for m in bridge.manifests(reader)]
        result = bridge.ask("refund A1 50")
        everything = [m["function"]["name"] for m in bridge.manifests()]
    assert offered == ["lookup"]
    assert everything == ["refund", "lookup"]
    # The agent was not offered refund, so it never asked for it.
    assert result.answer.startswith("(emulated answer) No tool matched")
    assert CALLS["refund"] == 0


def test_a_call_of_a_tool_the_caller_may_not_run_answers_as_unknown() -> None:
    """A platform that takes its tools at creation time may still ask for a hidden tool."""
    reader = Principal("reader", roles=frozenset({"support"}), tools=ToolPatterns(("lookup",)))
    audit = Recorded()
    bridge = Bridge(_NullPlatform(), [refund, lookup], caller=reader, audit=audit)
    scope = CallScope(reader, "null", "c1")
    call = ToolCall(call_id="1", name="refund", arguments={"order_id": "A1", "amount": 5})
    allowed, rejected, waiting = split_for_approval(
        [call], bridge.toolbox, bridge.options, bridge.dispatcher, scope
    )
    assert allowed == waiting == []
    [run] = rejected
    assert run.error == "unknown_tool"
    assert run.output == "Unknown tool 'refund'. Available tools: lookup."
    record_outcome(bridge.options, scope, run, bridge.toolbox)
    assert [(e.kind, e.outcome) for e in audit.events] == [("tool", "refused")]
    bridge.close()


def test_the_audit_record_gets_each_decision_and_outcome(emulator: Emulator) -> None:
    audit = Recorded()
    assert isinstance(audit, Records)
    with make_bridge(emulator, caller=ALICE, audit=audit) as bridge:
        result = bridge.ask("look A1 up and refund 5000")
    seen = [(e.kind, e.tool, e.outcome) for e in audit.events]
    assert sorted(seen) == sorted(
        [
            ("message", None, "sent"),
            ("policy", "lookup", "allow"),
            ("policy", "refund", "refuse"),
            ("tool", "refund", "refused"),
            ("tool", "lookup", "ok"),
        ]
    )
    refused = next(e for e in audit.events if e.kind == "policy" and e.tool == "refund")
    assert refused.caller == "alice"
    assert refused.conversation_id == result.conversation_id
    assert refused.arguments == {"order_id": "A1", "amount": 5000}
    assert refused.detail == {
        "policies": ["no-big-refunds"],
        "reason": "refunds over 1000 need a manager",
    }


def test_without_a_policy_nothing_changes(emulator: Emulator) -> None:
    audit = Recorded()
    with make_bridge(emulator, policy=None, audit=audit) as bridge:
        result = bridge.ask("refund A1 5000")
    assert result.answer == "model read: refunded 5000 on A1"
    assert [(e.kind, e.outcome) for e in audit.events] == [("message", "sent"), ("tool", "ok")]


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("policy", "allow everything", "policy must have decide"),
        ("caller", "alice", "caller must be a bridge.access.Principal"),
        ("audit", [], "audit must have record"),
    ],
)
def test_options_say_what_fits(option: str, value: object, message: str) -> None:
    from bridge import UsageError
    from bridge.options import BridgeOptions

    with pytest.raises(UsageError, match=message):
        BridgeOptions(**{option: value})
    assert BridgeOptions().principal.name == "local"
    assert BridgeOptions(caller=ALICE).principal is ALICE
