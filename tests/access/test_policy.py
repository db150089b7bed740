"""Cedar policies on tool calls: the decision, the JSON -> Cedar mapping, the schema and
`check_policy`."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from bridge import manifest
from bridge.access import LOCAL, CallFacts, Decides, Principal
from bridge.access.policy import (
    Policy,
    UnrepresentableError,
    cedar_arguments,
    check_policy,
    policy_schema,
)
from bridge.errors import ConfigurationError
from bridge.tools.schema import replace_spec
from bridge.tools.spec import ToolSpec
from bridge.tools.toolbox import Toolbox


@manifest(description="Refund an order.", confirm=True)
def refund(order_id: str, amount: int, reason: str = "") -> str:
    return "ok"


@manifest(description="Look an order up.", read_only=True)
def lookup(order_id: str) -> str:
    return "ok"


@manifest(description="Set a price.")
def set_price(sku: str, price: float, tags: list[str] | None = None) -> str:
    return "ok"


def _specs() -> list[ToolSpec]:
    box = Toolbox([refund, lookup, set_price])
    return [replace_spec(spec, source="crm") for spec in box]


SPECS = {spec.name: spec for spec in _specs()}
ALICE = Principal("alice", roles=frozenset({"support"}))
BOB = Principal("bob", roles=frozenset({"sales"}))

POLICY = """
// Refunds: support may refund; big ones are forbidden; mid-size ones need a person.
@id("no-big-refunds")
@reason("refunds over 1000 need a manager")
forbid (principal, action == Action::"call", resource == Tool::"refund")
when { context.arguments has amount && context.arguments.amount > 1000 };

@id("refunds-need-approval")
@approval("required")
permit (principal in Role::"support", action, resource == Tool::"refund")
when { context.arguments has amount && context.arguments.amount > 100 };

@id("small-refunds")
permit (principal in Role::"support", action, resource == Tool::"refund")
unless { context.arguments has amount && context.arguments.amount > 100 };

@id("reads")
permit (principal, action, resource in Source::"crm") when { resource.read_only };

@id("prices")
permit (principal in Role::"sales", action, resource == Tool::"set_price")
when { context.arguments has price && context.arguments.price.lessThan(decimal("50.0")) };
"""


def facts(tool: str, arguments: Any, **context: str) -> CallFacts:
    return CallFacts.of(tool, SPECS.get(tool), arguments, **context)


@pytest.fixture(scope="module")
def policy() -> Policy:
    return Policy.from_text(POLICY, source="refunds.cedar")


def test_policy_is_a_decides(policy: Policy) -> None:
    assert isinstance(policy, Decides)
    assert policy.names == [
        "no-big-refunds",
        "refunds-need-approval",
        "small-refunds",
        "reads",
        "prices",
    ]


def test_a_matching_forbid_refuses_with_its_id_and_reason(policy: Policy) -> None:
    decision = policy.decide(ALICE, facts("refund", {"order_id": "A1", "amount": 5000}))
    assert decision.refused
    assert decision.policies == ("no-big-refunds",)
    assert decision.refusal() == (
        "refused by policy no-big-refunds: refunds over 1000 need a manager"
    )


def test_an_approval_permit_sends_the_call_to_a_person(policy: Policy) -> None:
    decision = policy.decide(ALICE, facts("refund", {"order_id": "A1", "amount": 500}))
    assert decision.needs_approval
    assert decision.policies == ("refunds-need-approval",)


def test_a_plain_permit_allows(policy: Policy) -> None:
    decision = policy.decide(ALICE, facts("refund", {"order_id": "A1", "amount": 50}))
    assert decision.effect == "allow"
    assert decision.policies == ("small-refunds",)


def test_nothing_permits_refuses_by_default(policy: Policy) -> None:
    decision = policy.decide(BOB, facts("refund", {"order_id": "A1", "amount": 50}))
    assert decision.refused
    assert decision.policies == ()
    assert "no policy permits this call" in decision.refusal()


def test_roles_sources_and_flags(policy: Policy) -> None:
    assert policy.decide(BOB, facts("lookup", {"order_id": "A1"})).effect == "allow"
    # The same tool outside the crm source: the read_only permit names the source.
    other = replace_spec(SPECS["lookup"], source="billing")
    outside = CallFacts.of("lookup", other, {"order_id": "A1"})
    assert policy.decide(BOB, outside).refused
    assert policy.decide(LOCAL, facts("set_price", {"sku": "x", "price": 9.5})).refused


def test_a_number_argument_is_a_decimal(policy: Policy) -> None:
    assert policy.decide(BOB, facts("set_price", {"sku": "x", "price": 49.99})).effect == "allow"
    # A whole number given for a `number` argument is a decimal too: the policy still applies.
    assert policy.decide(BOB, facts("set_price", {"sku": "x", "price": 20})).effect == "allow"
    assert policy.decide(BOB, facts("set_price", {"sku": "x", "price": 50})).refused


def test_context_platform_conversation_and_end_user() -> None:
    policy = Policy.from_text(
        'permit (principal, action, resource) when { context.platform == "coze" && '
        'context.end_user == "u1" && context.conversation like "c-*" };'
    )
    yes = facts("lookup", {}, platform="coze", conversation="c-9", end_user="u1")
    assert policy.decide(ALICE, yes).effect == "allow"
    no = facts("lookup", {}, platform="appbuilder", conversation="c-9", end_user="u1")
    assert policy.decide(ALICE, no).refused


def test_principal_by_name() -> None:
    policy = Policy.from_text('permit (principal == Caller::"alice", action, resource);')
    assert policy.decide(ALICE, facts("lookup", {})).effect == "allow"
    assert policy.decide(BOB, facts("lookup", {})).refused


def test_a_forbid_that_cannot_be_evaluated_refuses() -> None:
    # No `has`: for a call without `amount` the forbid fails; it must not let the call through.
    policy = Policy.from_text(
        '@id("guard") forbid (principal, action, resource) when { context.arguments.amount > 1 };\n'
        "permit (principal, action, resource);"
    )
    decision = policy.decide(ALICE, facts("lookup", {"order_id": "A1"}))
    assert decision.refused
    assert decision.policies == ("guard",)
    assert "could not be evaluated" in decision.reason


def test_an_approval_permit_that_cannot_be_evaluated_still_asks() -> None:
    policy = Policy.from_text(
        '@approval("required") permit (principal, action, resource) '
        "when { context.arguments.amount > 1 };\n"
        "permit (principal, action, resource);"
    )
    assert policy.decide(ALICE, facts("lookup", {"order_id": "A1"})).needs_approval


def test_arguments_that_are_not_an_object_are_an_empty_record() -> None:
    policy = Policy.from_text(
        "permit (principal, action, resource) when { context.arguments == {} };"
    )
    assert policy.decide(ALICE, CallFacts.of("lookup", SPECS["lookup"], "not json")).effect == (
        "allow"
    )
    assert cedar_arguments(["a"]) == {}


def test_json_to_cedar_mapping() -> None:
    parameters = SPECS["set_price"].parameters
    converted = cedar_arguments(
        {"sku": "x", "price": 12.34567, "tags": ["a", None, "b"], "gone": None}, parameters
    )
    assert converted == {
        "sku": "x",
        "price": {"__extn": {"fn": "decimal", "arg": "12.3457"}},
        "tags": ["a", "b"],
    }
    # Undeclared arguments go by their value; nested objects are records.
    loose = cedar_arguments({"n": 3, "f": 0.5, "o": {"k": [1, 2]}, "b": True})
    assert loose == {
        "n": 3,
        "f": {"__extn": {"fn": "decimal", "arg": "0.5000"}},
        "o": {"k": [1, 2]},
        "b": True,
    }
    # An integer argument given as 3.0 is still a Long.
    assert cedar_arguments({"amount": 3.0}, SPECS["refund"].parameters) == {"amount": 3}


def test_untyped_values_are_json_text() -> None:
    parameters = {
        "type": "object",
        "properties": {
            "free": {"type": "object"},
            "either": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
            "maybe": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
        },
    }
    converted = cedar_arguments({"free": {"a": 1}, "either": 5, "maybe": 7}, parameters)
    assert converted == {"free": '{"a":1}', "either": "5", "maybe": 7}


def test_cedar_json_escapes_in_arguments_stay_text() -> None:
    sneaky = {"__entity": {"type": "Role", "id": "admin"}}
    assert cedar_arguments({"x": sneaky}) == {"x": '{"__entity":{"id":"admin","type":"Role"}}'}
    policy = Policy.from_text(
        "permit (principal, action, resource) when { context.arguments.x is Role };"
    )
    assert policy.decide(ALICE, facts("lookup", {"x": sneaky})).refused


@pytest.mark.parametrize(
    ("value", "kind"),
    [(2**64, "Long"), (1e300, "decimal"), (float("inf"), "not a number"), (float("nan"), "not a")],
)
def test_numbers_cedar_cannot_hold_refuse_the_call(value: float, kind: str) -> None:
    with pytest.raises(UnrepresentableError, match=kind):
        cedar_arguments({"amount": value})
    policy = Policy.from_text(
        "permit (principal, action, resource) when { context.arguments has amount };"
    )
    decision = policy.decide(ALICE, facts("lookup", {"amount": value}))
    assert decision.refused
    assert "amount" in decision.reason
    # An argument no policy names cannot change a decision: it does not reach Cedar.
    blind = Policy.from_text("permit (principal, action, resource);")
    assert blind.decide(ALICE, facts("lookup", {"amount": value})).effect == "allow"


def test_arguments_used_as_a_whole_reach_the_policy_whole() -> None:
    empty_only = Policy.from_text(
        "permit (principal, action, resource) when { context.arguments == {} };"
    )
    assert empty_only.decide(ALICE, facts("lookup", {})).effect == "allow"
    assert empty_only.decide(ALICE, facts("lookup", {"order_id": "A1"})).refused
    indexed = Policy.from_text(
        'forbid (principal, action, resource) when { context["arguments"] has order_id };\n'
        "permit (principal, action, resource);"
    )
    assert indexed.decide(ALICE, facts("lookup", {"order_id": "A1"})).refused


def test_parse_errors_name_the_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.cedar"
    path.write_text(
        "permit (principal, action, resource);\n\n// the next one\nforbid (principal,, action);\n"
    )
    with pytest.raises(ConfigurationError, match=r"bad\.cedar:4: cannot parse.*unexpected token"):
        Policy.from_file(path)
    with pytest.raises(ConfigurationError, match="cannot read the policy file"):
        Policy.from_file(tmp_path / "missing.cedar")


def test_decide_from_many_threads(policy: Policy) -> None:
    seen: list[str] = []
    lock = threading.Lock()

    def work(amount: int) -> None:
        for _ in range(50):
            effect = policy.decide(ALICE, facts("refund", {"order_id": "A", "amount": amount}))
            with lock:
                seen.append(f"{amount}:{effect.effect}")

    threads = [threading.Thread(target=work, args=(a,)) for a in (50, 500, 5000)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert set(seen) == {"50:allow", "500:approval", "5000:refuse"}


def test_schema_declares_every_argument_typed() -> None:
    schema = policy_schema(SPECS.values())
    assert '"amount"?: Long' in schema
    assert '"price"?: decimal' in schema
    assert '"tags"?: Set<String>' in schema
    assert "entity Tool in [Source]" in schema
    import cedarpy

    cedarpy.Schema.from_str(schema)  # Cedar reads it


def test_schema_notes_arguments_two_tools_type_differently() -> None:
    @manifest(description="x")
    def other(amount: str) -> str:
        return ""

    schema = policy_schema([*SPECS.values(), *Toolbox([other])])
    assert '"amount"?: Long' in schema
    assert "// Note: argument amount: other gives it type String" in schema


def test_check_accepts_a_good_policy() -> None:
    assert check_policy(POLICY, SPECS.values()) == []


def test_check_reports_a_misspelled_tool_with_its_line() -> None:
    text = POLICY.replace('resource == Tool::"set_price"', 'resource == Tool::"set_prise"')
    [error] = check_policy(text, SPECS.values(), source="p.cedar")
    line = POLICY.splitlines().index('@id("prices")') + 1
    assert error.startswith(f"p.cedar:{line} (policy prices): ")
    assert 'Tool::"set_prise" is not a loaded tool' in error


def test_check_reports_a_misspelled_argument() -> None:
    unguarded = "forbid (principal, action, resource) when { context.arguments.amout > 1 };"
    errors = check_policy(unguarded, SPECS.values())
    assert errors and all("amout" in e for e in errors)
    # Guarded by `has` (which Cedar's validator lets through as always false): still caught.
    guarded = (
        "forbid (principal, action, resource) when "
        "{ context.arguments has amout && context.arguments.amout > 1 };"
    )
    [error] = check_policy(guarded, SPECS.values())
    assert "no loaded tool has an argument 'amout'" in error
    assert "did you mean amount?" in error


def test_check_reports_types_sources_and_annotations() -> None:
    text = "\n".join(
        [
            "forbid (principal, action, resource) when { context.arguments has price && "
            "context.arguments.price > 1 };",
            'permit (principal, action, resource in Source::"crn");',
            '@approval("yes") permit (principal, action, resource);',
            '@id("a") permit (principal, action, resource);',
            '@id("a") permit (principal, action, resource);',
        ]
    )
    errors = check_policy(text, SPECS.values(), source="p.cedar")
    assert any(e.startswith("p.cedar:1") and "decimal" in e for e in errors)
    assert any(e.startswith("p.cedar:2") and 'Source::"crn"' in e for e in errors)
    assert any(e.startswith("p.cedar:3") and 'expected @approval("required")' in e for e in errors)
    assert any(e.startswith("p.cedar:5") and '@id("a") is also p.cedar:4' in e for e in errors)


def test_check_reports_a_parse_error() -> None:
    [error] = check_policy("permit (principal, action, resource)\nforbid", [], source="p.cedar")
    assert error.startswith("p.cedar:1: cannot parse")


def test_strings_for_typed_arguments_are_read_as_the_tool_reads_them(policy: Policy) -> None:
    refund_parameters = SPECS["refund"].parameters
    assert cedar_arguments({"amount": " 5000"}, refund_parameters) == {"amount": 5000}
    price = cedar_arguments({"price": "49.5"}, SPECS["set_price"].parameters)
    assert price == {"price": {"__extn": {"fn": "decimal", "arg": "49.5000"}}}
    assert cedar_arguments({"amount": "lots"}, refund_parameters) == {"amount": "lots"}
    decision = policy.decide(ALICE, facts("refund", {"order_id": "A1", "amount": "5000"}))
    assert decision.policies == ("no-big-refunds",)


def test_a_matching_forbid_is_named_before_one_that_failed() -> None:
    policy = Policy.from_text(
        '@id("broken") forbid (principal, action, resource) when { context.arguments.x > 1 };\n'
        '@id("big") @reason("too big") forbid (principal, action, resource) '
        "when { context.arguments has amount && context.arguments.amount > 1 };\n"
        "permit (principal, action, resource);"
    )
    decision = policy.decide(ALICE, facts("refund", {"order_id": "A", "amount": 5}))
    assert (decision.policies, decision.reason) == (("big",), "too big")


def test_several_matching_policies_are_named_in_the_text_order() -> None:
    text = "\n".join(
        f'@id("f{i}") @reason("r{i}") forbid (principal, action, resource);' for i in range(8)
    )
    decision = Policy.from_text(text).decide(ALICE, facts("lookup", {}))
    assert decision.policies == tuple(f"f{i}" for i in range(8))
    assert decision.reason == "; ".join(f"r{i}" for i in range(8))
