"""A policy remembers its decisions, and a remembered decision is always the one Cedar would
take again: the key holds every input the policies can read."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from bridge.access import CallFacts, Principal
from bridge.access.policy import Policy

READS_CONVERSATION = Policy.from_text(
    """
@id("quarantine")
@reason("this conversation is quarantined")
forbid (principal, action, resource) when { context.conversation == "c-bad" };

@id("all")
permit (principal, action, resource);
""",
    source="quarantine.cedar",
)

READS_WHOLE_CONTEXT = Policy.from_text(
    """
@id("exact")
permit (principal, action, resource)
when { context == {"arguments": {}, "platform": "", "conversation": "c1", "end_user": ""} };
""",
    source="whole.cedar",
)

ROLES = Policy.from_text(
    """
@id("big")
@reason("too big")
forbid (principal, action, resource) when { context.arguments has n && context.arguments.n > 5 };

@id("staff")
permit (principal in Role::"staff", action, resource);
""",
    source="roles.cedar",
)


def test_a_field_the_policy_reads_is_part_of_the_key() -> None:
    alice = Principal("alice")
    for _ in range(2):
        bad = READS_CONVERSATION.decide(alice, CallFacts(tool="t", conversation="c-bad"))
        good = READS_CONVERSATION.decide(alice, CallFacts(tool="t", conversation="c-ok"))
        assert (bad.effect, bad.policies) == ("refuse", ("quarantine",))
        assert good.effect == "allow"


def test_a_policy_reading_the_whole_context_keys_on_all_of_it() -> None:
    alice = Principal("alice")
    for _ in range(2):
        assert READS_WHOLE_CONTEXT.decide(alice, CallFacts(tool="t", conversation="c1")).effect == (
            "allow"
        )
        assert READS_WHOLE_CONTEXT.decide(alice, CallFacts(tool="t", conversation="c2")).effect == (
            "refuse"
        )


@settings(max_examples=200, deadline=None)
@given(
    calls=st.lists(
        st.tuples(
            st.sampled_from(["alice", "bob"]),
            st.frozensets(st.sampled_from(["staff", "guest"])),
            st.sampled_from(["a", "b"]),
            st.one_of(st.none(), st.integers(-10, 10)),
            st.sampled_from(["c1", "c2"]),
        ),
        min_size=1,
        max_size=30,
    )
)
def test_remembered_decisions_are_the_ones_a_fresh_policy_takes(
    calls: list[tuple[str, frozenset[str], str, int | None, str]],
) -> None:
    for name, roles, tool, n, conversation in calls:
        principal = Principal(name, roles=roles)
        facts = CallFacts(
            tool=tool,
            arguments={} if n is None else {"n": n, "unread": n * 1e300},
            conversation=conversation,
        )
        fresh = Policy.from_text(ROLES.text, source="roles.cedar")
        assert ROLES.decide(principal, facts) == fresh.decide(principal, facts)
