"""A policy's decision on one tool call, the facts it is taken on, and the two small
interfaces the entry points use: `Decides` (a policy) and `Records` (the audit record).

The loop, the daemon, `toolbridge call` and `mcp-serve` take the decision the same way:
build `CallFacts` for the call, ask `Decides.decide(principal, facts)`, then refuse, send to
approval or run, and `Records.record` each step.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from bridge.access.principal import Principal
from bridge.tools.spec import ToolSpec

__all__ = [
    "ALLOW",
    "AuditEvent",
    "CallFacts",
    "Decides",
    "Effect",
    "PolicyDecision",
    "Records",
    "decide_or_refuse",
    "source_of",
]

logger = logging.getLogger(__name__)

Effect = Literal["allow", "refuse", "approval"]


@dataclass(frozen=True)
class PolicyDecision:
    """What a policy says of one call.

    Attributes:
        effect: ``allow`` (run it), ``refuse`` (a ``forbid`` matched, or nothing permits it),
            ``approval`` (a ``permit`` annotated ``@approval("required")`` matched: a person
            decides).
        policies: The ids (``@id`` or Cedar's ``policyN``) of the policies that decided.
        reason: The deciding ``forbid``'s ``@reason``, for the model and the audit record.
    """

    effect: Effect
    policies: tuple[str, ...] = ()
    reason: str = ""

    @property
    def refused(self) -> bool:
        return self.effect == "refuse"

    @property
    def needs_approval(self) -> bool:
        return self.effect == "approval"

    def refusal(self) -> str:
        """The output the model reads for a refused call (names the policy and its reason)."""
        if not self.policies:
            text = "refused by policy: no policy permits this call"
            return f"{text} ({self.reason})" if self.reason else text
        text = f"refused by policy {', '.join(self.policies)}"
        return f"{text}: {self.reason}" if self.reason else text


ALLOW = PolicyDecision("allow")
"""The decision when no policy is loaded."""


def source_of(spec: ToolSpec | None) -> str:
    """The source name of a tool (empty for a Python function registered directly)."""
    return spec.source if spec is not None else ""


@dataclass(frozen=True)
class CallFacts:
    """What a policy sees of a call: the tool (its source and flags) and the context.

    Attributes:
        tool: The tool's name as the model called it.
        source: Its source (`source_of`), "" for none.
        read_only, confirm, idempotent: The tool's flags (False for an unknown tool).
        arguments: The call's arguments (a JSON object; {} when they were not one).
        platform: The platform's name (``appbuilder``, ``coze``...), "" outside a conversation.
        conversation: The conversation id, "" outside one.
        end_user: The end user the platform was told of, "" for none.
        parameters: The tool's JSON Schema for its arguments (None for an unknown tool): the
            policy types each argument from it (an ``integer`` is a Cedar Long, a ``number``
            a decimal), so one argument always reaches it as one Cedar type.
    """

    tool: str
    arguments: Mapping[str, Any] = field(default_factory=dict)
    source: str = ""
    read_only: bool = False
    confirm: bool = False
    idempotent: bool = False
    platform: str = ""
    conversation: str = ""
    end_user: str = ""
    parameters: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)

    @classmethod
    def of(
        cls,
        name: str,
        spec: ToolSpec | None,
        arguments: Mapping[str, Any] | str | None,
        *,
        platform: str = "",
        conversation: str = "",
        end_user: str | None = None,
    ) -> CallFacts:
        """The facts of a call to `name` (`spec` None when no such tool is registered)."""
        options = spec.options if spec is not None else None
        return cls(
            tool=name,
            arguments=dict(arguments) if isinstance(arguments, Mapping) else {},
            source=source_of(spec),
            read_only=bool(options and options.read_only),
            confirm=bool(options and options.confirm),
            idempotent=bool(options and options.idempotent),
            platform=platform,
            conversation=conversation,
            end_user=end_user or "",
            parameters=spec.parameters if spec is not None else None,
        )


@runtime_checkable
class Decides(Protocol):
    """A policy (`bridge.access.policy.Policy`)."""

    def decide(self, principal: Principal, call: CallFacts) -> PolicyDecision:
        """The decision on `call` made by `principal`."""
        ...


def decide_or_refuse(policy: Decides, principal: Principal, call: CallFacts) -> PolicyDecision:
    """`policy`'s decision on `call`; a policy that fails is a refusal (logged), never a yes.
    Every entry point decides through this (the loop, the daemon's direct calls, mcp-serve)."""
    try:
        return policy.decide(principal, call)
    except Exception as exc:
        logger.exception("the policy failed on a call of %s; the call is refused", call.tool)
        return PolicyDecision("refuse", (), f"the policy failed ({type(exc).__name__})")


AuditKind = Literal["identity", "policy", "approval", "direct_call", "tool", "message"]


@dataclass(frozen=True)
class AuditEvent:
    """One entry to append to the audit record (before its chain fields are added).

    Attributes:
        kind: ``identity`` (a refused credential or permission: 401/403/429), ``message`` (a
            caller sent a message), ``policy`` (a policy decision on a call), ``approval`` (a
            person decided a call), ``direct_call`` (a tool called directly, outside a
            conversation), ``tool`` (a call's outcome).
        outcome: What happened, one word: ``allow``/``refuse``/``approval`` for ``policy``,
            ``approved``/``rejected`` for ``approval``, ``ok``/``error``/``refused`` for ``tool``
            and ``direct_call``, ``sent`` for ``message``, ``unauthorized``/``forbidden``/
            ``rate_limited`` for ``identity``.
        caller: The principal's name (None when nobody could be named).
        via: How the caller was identified (``key``, ``oidc``, ``anonymous``, ``local``).
        conversation_id, call_id, tool: What it concerns, when it concerns a call.
        arguments: The call's arguments; stored redacted, with their SHA-256 always.
        detail: Anything else worth keeping (policy ids, reason, route, note, error kind).
    """

    kind: AuditKind
    outcome: str
    caller: str | None = None
    via: str | None = None
    conversation_id: str | None = None
    call_id: str | None = None
    tool: str | None = None
    arguments: Mapping[str, Any] | str | None = None
    detail: Mapping[str, Any] = field(default_factory=dict)


@runtime_checkable
class Records(Protocol):
    """The audit record (`bridge.access.audit.AuditLog`)."""

    def record(self, event: AuditEvent) -> None:
        """Append `event` to the chain (durably, before returning)."""
        ...

    def stage(self, event: AuditEvent) -> None:
        """Append `event` with its conversation's next journal write (the step it records
        comes with it: the call started or finished), or now when there is none to wait for."""
        ...
