"""Replay before enforcing: a candidate policy evaluated against every call in the journal,
counting the decisions that would change.

Each journaled call is replayed as the caller who caused it (the sender of the message whose
run asked for it; the caller of a direct call), with the tool's source and flags when the
tools are loaded, and its arguments as journaled (registered secrets masked). Its decision
then is what the audit record says the policy decided at the time; a call with no policy
decision on record ran, so it counts as allowed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from bridge.access.audit import export_audit
from bridge.access.decision import CallFacts, Decides, Effect, PolicyDecision
from bridge.access.principal import Principal
from bridge.journal.audit_store import AuditStore
from bridge.journal.base import Journal
from bridge.tools.spec import ToolSpec

__all__ = [
    "ReplayChange",
    "ReplayReport",
    "ReplayedCall",
    "decisions_on_record",
    "journaled_calls",
    "replay",
]

_PAGE = 200


@dataclass(frozen=True)
class ReplayedCall:
    """One journaled call, as a policy sees it, and what was decided at the time."""

    caller: str
    facts: CallFacts
    call_id: str
    before: Effect
    direct: bool = False


@dataclass(frozen=True)
class ReplayChange:
    """A call whose decision the candidate policy would change."""

    call: ReplayedCall
    after: PolicyDecision

    def to_json(self) -> dict[str, Any]:
        return {
            "conversation_id": self.call.facts.conversation or None,
            "call_id": self.call.call_id,
            "direct": self.call.direct,
            "tool": self.call.facts.tool,
            "caller": self.call.caller,
            "before": self.call.before,
            "after": self.after.effect,
            "policies": list(self.after.policies),
            "reason": self.after.reason,
        }


@dataclass
class ReplayReport:
    """How many calls were replayed, and the decisions that would change."""

    calls: int = 0
    decisions: Counter[str] = field(default_factory=Counter)
    """The candidate's decisions by effect."""
    changed: Counter[tuple[str, str]] = field(default_factory=Counter)
    """(before, after) -> count, for the decisions that differ."""
    examples: dict[tuple[str, str], list[ReplayChange]] = field(default_factory=dict)
    """The first examples of each change."""

    @property
    def total_changed(self) -> int:
        return sum(self.changed.values())

    def to_json(self) -> dict[str, Any]:
        return {
            "calls": self.calls,
            "decisions": {effect: self.decisions.get(effect, 0) for effect in _EFFECTS},
            "changed": self.total_changed,
            "changes": [
                {
                    "before": before,
                    "after": after,
                    "count": count,
                    "examples": [c.to_json() for c in self.examples.get((before, after), [])],
                }
                for (before, after), count in sorted(self.changed.items())
            ],
        }


_EFFECTS: tuple[Effect, ...] = ("allow", "approval", "refuse")


def journaled_calls(
    journal: Journal,
    *,
    specs: Mapping[str, ToolSpec] | None = None,
    platform: str = "",
    before: Mapping[tuple[str, str], Effect] | None = None,
) -> Iterator[ReplayedCall]:
    """Every call the journal holds: conversations' calls, then direct calls.

    Args:
        specs: The loaded tools by name, for each tool's source and flags (unknown tools then
            have none).
        platform: The platform the conversations ran on, for ``context.platform``.
        before: The decision on record per (conversation id or "", call id) (from the audit
            record); a call not in it counts as allowed.
    """
    specs = specs or {}
    before = before or {}
    offset = 0
    while True:
        page, total = journal.list_conversations(limit=_PAGE, offset=offset)
        for conversation in page:
            cid = conversation.conversation_id
            senders = {m.message_id: m.sent_by for m in journal.messages(cid)}
            owner = conversation.created_by or "anonymous"
            for call in journal.calls(cid):
                caller = senders.get(call.message_id or -1) or owner
                yield ReplayedCall(
                    caller=caller,
                    facts=CallFacts.of(
                        call.name,
                        specs.get(call.name),
                        call.arguments,
                        platform=platform,
                        conversation=cid,
                        end_user=conversation.end_user_id,
                    ),
                    call_id=call.call_id,
                    before=before.get((cid, call.call_id), "allow"),
                )
        offset += len(page)
        if not page or offset >= total:
            break
    offset = 0
    while True:
        direct, total = journal.direct_calls(limit=_PAGE, offset=offset)
        for record in direct:
            yield ReplayedCall(
                caller=record.called_by or "anonymous",
                facts=CallFacts.of(record.tool, specs.get(record.tool), record.arguments),
                call_id=record.call_id,
                before=before.get(("", record.call_id), "allow"),
                direct=True,
            )
        offset += len(direct)
        if not direct or offset >= total:
            break


def replay(
    policy: Decides,
    calls: Iterator[ReplayedCall],
    *,
    principal: Callable[[str], Principal],
    examples: int = 5,
) -> ReplayReport:
    """Evaluate `policy` on every call of `calls`, as the caller `principal(name)` names.

    Args:
        principal: The caller of a name (its roles from the caller file; a name the file does
            not know is a caller with no roles).
        examples: How many examples of each kind of change to keep.
    """
    report = ReplayReport()
    for call in calls:
        decision = policy.decide(principal(call.caller), call.facts)
        report.calls += 1
        report.decisions[decision.effect] += 1
        if decision.effect != call.before:
            key = (call.before, decision.effect)
            report.changed[key] += 1
            kept = report.examples.setdefault(key, [])
            if len(kept) < examples:
                kept.append(ReplayChange(call, decision))
    return report


def decisions_on_record(store: AuditStore) -> dict[tuple[str, str], Effect]:
    """The policy decision the audit record holds for each call, by (conversation id or "" for
    a direct call, call id); the latest one when a call was decided more than once."""
    found: dict[tuple[str, str], Effect] = {}
    for entry in export_audit(store):
        if entry.get("kind") != "policy" or not entry.get("call_id"):
            continue
        outcome = entry.get("outcome")
        if outcome in _EFFECTS:
            key = (str(entry.get("conversation_id") or ""), str(entry["call_id"]))
            found[key] = cast("Effect", outcome)
    return found
