"""How a `Bridge` runs its conversations: `BridgeOptions` (one frozen, checked value) and
`BridgeSettings`, the keyword arguments `Bridge(platform, tools, ...)` takes besides it."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from opentelemetry.trace import TracerProvider
from typing_extensions import TypedDict

from bridge.access.decision import Decides, Records
from bridge.access.principal import LOCAL, Principal
from bridge.errors import UsageError
from bridge.platforms.base import ToolChoiceLike, parse_tool_choice
from bridge.tools.approval import DeferredApprover
from bridge.tools.dispatch import ErrorsMode
from bridge.types import Event, ToolCall, ToolChoice, ToolChoiceMode, ToolRun

__all__ = [
    "DISPATCHER_FIELDS",
    "OPTION_FIELDS",
    "ApproveHook",
    "BridgeOptions",
    "BridgeSettings",
]

ApproveHook = Callable[[ToolCall], bool]

DISPATCHER_FIELDS = ("max_concurrency", "default_timeout", "errors", "max_output_chars")
"""The keyword arguments of `Bridge` that go to the `Dispatcher` it builds."""


@dataclass(frozen=True, slots=True)
class BridgeOptions:
    """How a `Bridge` runs its conversations: one frozen value, checked when it is made.

    Args:
        max_rounds: most tool batches one question may trigger before `MaxRoundsError`.
        stream: ask the platform for streamed answers.
        end_user_id: default end user sent with every run.
        tool_choice: default tool the agent is forced to call: a tool name, a
            `ToolChoice(name=..., input={...})` or its dict `{"name": ..., "input": {...}}`
            (AppBuilder then calls it with exactly that input), or a mode the platform
            knows (`auto`; OpenAI-compatible ones also `none`, `required`). Kept parsed; the
            `Bridge` checks that it names a loaded tool.
        platform_tools: the platform's own tools, sent with the local ones on every question:
            type names such as AppBuilder's `"code_interpreter"` and `"file_retrieval"` (or
            dicts with a `type`); a platform without such tools refuses them.
        approve: asked before every call of a `confirm=True` tool: a function
            `approve(call) -> bool` (False rejects the call), asked before the batch runs; or
            a `bridge.tools.approval.DeferredApprover` (the daemon's approvals), asked on a
            thread per call while the rest of the batch runs.
        on_event: called with every event of every run.
        on_tool_call: called with each call before it runs.
        on_tool_result: called with each finished `ToolRun`.
        keep_events: record every event in `Result.events`.
        policy: decides every call before it runs (`bridge.access.policy.Policy`, Cedar): a
            refused call is not run and the model reads why; a call it sends to approval is
            asked about like a `confirm=True` tool's. None: every call is allowed (and
            `confirm=True` tools still need approval).
        caller: who asks (`bridge.access.Principal`): the policy decides for it, and it is
            offered and may run only its tools. None: `LOCAL` (everything). A question may
            name another (`Conversation.stream(..., caller=...)`, `Bridge.ask`).
        audit: where policy decisions and tool outcomes are recorded
            (`bridge.access.audit.AuditLog`, anything with `record(AuditEvent)`).
        tracer_provider: where the OpenTelemetry spans of the runs (``invoke_agent``) and
            of the tool calls (``execute_tool``) go; None: the global provider (no span at
            all while no SDK is configured).

    Raises:
        UsageError: a value is out of range or of the wrong kind; the message says what fits.
    """

    max_rounds: int = 10
    stream: bool = True
    end_user_id: str | None = None
    tool_choice: ToolChoice | ToolChoiceMode | None = None
    platform_tools: tuple[str | Mapping[str, Any], ...] = ()
    approve: ApproveHook | DeferredApprover | None = None
    on_event: Callable[[Event], None] | None = None
    on_tool_call: Callable[[ToolCall], None] | None = None
    on_tool_result: Callable[[ToolRun], None] | None = None
    keep_events: bool = False
    policy: Decides | None = None
    caller: Principal | None = None
    audit: Records | None = None
    tracer_provider: TracerProvider | None = None
    _deferred: DeferredApprover | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if isinstance(self.max_rounds, bool) or not isinstance(self.max_rounds, int):
            raise UsageError(f"max_rounds must be an integer >= 1, got {self.max_rounds!r}")
        if self.max_rounds < 1:
            raise UsageError(f"max_rounds must be at least 1, got {self.max_rounds}")
        for name in ("stream", "keep_events"):
            if not isinstance(getattr(self, name), bool):
                raise UsageError(f"{name} must be True or False, got {getattr(self, name)!r}")
        if self.end_user_id is not None and not isinstance(self.end_user_id, str):
            raise UsageError(f"end_user_id must be a string or None, got {self.end_user_id!r}")
        # Normalised here, so two equal options compare equal and nothing mutable is shared.
        object.__setattr__(self, "tool_choice", parse_tool_choice(self.tool_choice))
        tools = self.platform_tools
        if isinstance(tools, str | Mapping):
            tools = (tools,)  # one tool given bare: not a list of its characters or keys
        elif not isinstance(tools, Iterable):
            raise UsageError(
                "platform_tools must be a list of tool types (e.g. ['code_interpreter']) or "
                f"dicts with a 'type', got {tools!r}"
            )
        object.__setattr__(
            self,
            "platform_tools",
            tuple(MappingProxyType(dict(t)) if isinstance(t, Mapping) else t for t in tools),
        )
        for name in ("on_event", "on_tool_call", "on_tool_result"):
            hook = getattr(self, name)
            if hook is not None and not callable(hook):
                raise UsageError(f"{name} must be a function or None, got {hook!r}")
        if self.approve is not None and not (
            callable(self.approve) or isinstance(self.approve, DeferredApprover)
        ):
            raise UsageError(
                "approve must be a function approve(call) -> bool, a DeferredApprover or "
                f"None, got {self.approve!r}"
            )
        if self.policy is not None and not callable(getattr(self.policy, "decide", None)):
            raise UsageError(
                "policy must have decide(principal, call), e.g. "
                f"bridge.access.policy.Policy.from_file(...), got {self.policy!r}"
            )
        if self.caller is not None and not isinstance(self.caller, Principal):
            raise UsageError(f"caller must be a bridge.access.Principal, got {self.caller!r}")
        if self.audit is not None and not callable(getattr(self.audit, "record", None)):
            raise UsageError(f"audit must have record(event), got {self.audit!r}")
        if self.tracer_provider is not None and not callable(
            getattr(self.tracer_provider, "get_tracer", None)
        ):
            raise UsageError(
                "tracer_provider must be an OpenTelemetry TracerProvider (with get_tracer), "
                f"got {self.tracer_provider!r}"
            )
        # A runtime-checkable protocol's isinstance walks its members: asked once, not per batch.
        deferred = self.approve if isinstance(self.approve, DeferredApprover) else None
        object.__setattr__(self, "_deferred", deferred)

    @property
    def principal(self) -> Principal:
        """`caller`, or `LOCAL` when none is set."""
        return self.caller if self.caller is not None else LOCAL

    @property
    def deferred_approver(self) -> DeferredApprover | None:
        """`approve` when it is a `DeferredApprover` (the daemon's), else None."""
        return self._deferred

    def replace(self, **changes: Any) -> BridgeOptions:
        """A copy with `changes` (checked like a new value)."""
        return dataclasses.replace(self, **changes)


OPTION_FIELDS = tuple(f.name for f in dataclasses.fields(BridgeOptions) if f.init)
"""The keyword arguments of `Bridge` that make its `BridgeOptions`."""


class BridgeSettings(TypedDict, total=False):
    """The keyword arguments `Bridge` takes besides `options`: `BridgeOptions`' fields and
    the options of the `Dispatcher` it builds."""

    max_rounds: int
    stream: bool
    end_user_id: str | None
    tool_choice: ToolChoiceLike | None
    platform_tools: Iterable[str | Mapping[str, Any]]
    approve: ApproveHook | DeferredApprover | None
    on_event: Callable[[Event], None] | None
    on_tool_call: Callable[[ToolCall], None] | None
    on_tool_result: Callable[[ToolRun], None] | None
    keep_events: bool
    policy: Decides | None
    caller: Principal | None
    audit: Records | None
    tracer_provider: TracerProvider | None
    max_concurrency: int
    default_timeout: float
    errors: ErrorsMode
    max_output_chars: int | None
