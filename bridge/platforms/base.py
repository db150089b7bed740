# The feature protocols are passed to `implements` as values (mypy calls them abstract types).
# mypy: disable-error-code="type-abstract"
"""The seam between the loop and a platform adapter.

A platform turns one of its conversations into a sequence of neutral events (`bridge.types`).
Adding a platform means adding one package under `bridge/platforms/` whose adapter satisfies
`Platform`, usually by subclassing `PlatformBase` (or `InMemoryPlatform` when it keeps its
conversations in this process).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import (
    TYPE_CHECKING,
    Any,
    ClassVar,
    Generic,
    Protocol,
    TypeGuard,
    TypeVar,
    cast,
    get_args,
    runtime_checkable,
)

from pydantic import BaseModel
from typing_extensions import Self

from bridge.errors import ConversationLostError, UsageError
from bridge.types import Event, ToolBatch, ToolChoice, ToolChoiceMode, ToolResult

if TYPE_CHECKING:
    from bridge.tracing import Tracing

__all__ = [
    "NO_LIMITS",
    "TOOL_CHOICE_MODES",
    "ChecksChat",
    "ConversationStore",
    "DeclaresLimits",
    "DeclaresTools",
    "DescribesItself",
    "ExportsStateJson",
    "HasPlatformTools",
    "HoldsSubmittedOutputs",
    "InMemoryPlatform",
    "KeepsState",
    "KnowsConversations",
    "LimitViolation",
    "ListsRemoteTools",
    "OpensOnFirstMessage",
    "Platform",
    "PlatformBase",
    "PlatformDescription",
    "PlatformLimits",
    "PlatformState",
    "ToolChoiceLike",
    "declare_tools_to",
    "export_state_json",
    "export_state_of",
    "exports_state",
    "holds_submitted_outputs",
    "import_state_into",
    "knows_conversation",
    "limits_of",
    "opens_on_first_message",
    "parse_tool_choice",
    "platform_tool_types_of",
    "platform_tools_for",
    "results_by_call",
    "state_field",
    "use_tracing",
]

ToolChoiceLike = ToolChoice | str | Mapping[str, Any]
"""What callers may pass as a tool choice: a `ToolChoice`, a tool name or mode, or a dict."""

TOOL_CHOICE_MODES: tuple[str, ...] = get_args(ToolChoiceMode)

_CHOICE_EXPECTED = (
    "a tool name, one of auto, none, required, a ToolChoice(name=..., input=...), "
    "or a dict {'name': ..., 'input': {...}}"
)


@dataclass(frozen=True)
class LimitViolation:
    """An input the platform would refuse: which field, the limit, the actual length."""

    field: str
    limit: str
    """The rule, e.g. "at most 2000 characters"."""
    actual: int
    """The input's length in characters."""


@dataclass(frozen=True)
class PlatformLimits:
    """Inputs a platform refuses, declared so that a caller can refuse them first and clearly.

    Lengths are in characters (code points). None means no limit.
    """

    max_query_chars: int | None = None
    end_user_id_min_chars: int | None = None
    end_user_id_max_chars: int | None = None

    def check(
        self, *, query: str | None = None, end_user_id: str | None = None
    ) -> list[LimitViolation]:
        """Every limit the given inputs break (empty when they are acceptable)."""
        found = []
        high_query = self.max_query_chars
        if query is not None and high_query is not None and len(query) > high_query:
            found.append(_violation("query", len(query), None, high_query))
        if end_user_id is not None:
            low, high = self.end_user_id_min_chars, self.end_user_id_max_chars
            size = len(end_user_id)
            if (low is not None and size < low) or (high is not None and size > high):
                found.append(_violation("end_user_id", size, low, high))
        return found


def _violation(name: str, actual: int, low: int | None, high: int | None) -> LimitViolation:
    if low is not None and high is not None:
        limit = f"{low} to {high} characters"
    elif high is not None:
        limit = f"at most {high} characters"
    else:
        limit = f"at least {low} characters"
    return LimitViolation(name, limit, actual)


_P = TypeVar("_P")
_IMPLEMENTS: dict[tuple[type, type], bool] = {}


def implements(platform: object, protocol: type[_P]) -> TypeGuard[_P]:
    """``isinstance(platform, protocol)`` for the feature protocols below, remembered per
    adapter class: a runtime-checkable protocol's check looks up every member each time
    (several microseconds), and the loop asks a few times per round. Only for features an
    adapter class has or lacks as a whole: `DeclaresTools`, which `open_platform` sets on one
    emulated instance, is checked with `isinstance` itself."""
    key = (type(platform), protocol)
    found = _IMPLEMENTS.get(key)
    if found is None:
        found = _IMPLEMENTS[key] = isinstance(platform, protocol)
    return found


NO_LIMITS = PlatformLimits()


def limits_of(platform: object) -> PlatformLimits:
    """The platform's `limits` attribute, or `NO_LIMITS` for an adapter that declares none."""
    if implements(platform, DeclaresLimits) and isinstance(platform.limits, PlatformLimits):
        return platform.limits
    return NO_LIMITS


def knows_conversation(platform: object, conversation_id: str) -> bool:
    """Whether the platform can still continue `conversation_id`.

    A platform that keeps its conversations' state in this process (the OpenAI-compatible one
    keeps chat histories in memory) says so with a `knows(conversation_id)` method; after a
    restart the answer is False until the journaled state is imported (`import_state_into`),
    and if none could be, recovery must not run tools whose outputs could never be delivered.
    A platform without the method keeps its state server-side: True. (Not part of the
    `Platform` protocol, which is runtime-checkable: adapters without it stay platforms.)
    """
    if implements(platform, KnowsConversations):
        return bool(platform.knows(conversation_id))
    return True


def declare_tools_to(platform: object, tools: Sequence[Mapping[str, Any]]) -> None:
    """Tell a platform whose agent's tools are configured server-side which tools the bridge
    has (Chat Completions function tools), if it can be told: `open_platform("coze",
    emulator=True)` gives its adapter a `declare_tools(tools)` that makes them the emulated
    bot's plugins. A real platform has no such method: its agent is configured on the platform.
    (Not part of the `Platform` protocol, as `knows_conversation`.)
    """
    if isinstance(platform, DeclaresTools) and callable(platform.declare_tools):
        platform.declare_tools(list(tools))


PlatformState = dict[str, Any]
"""What an adapter needs, besides the conversation id, to continue a conversation in another
process: JSON values only (it is journaled), never a secret (it is stored as written)."""

_MISSING: Any = object()


def exports_state(platform: object) -> bool:
    """Whether the adapter implements both `export_state` and `import_state`.

    The two are optional adapter methods (not `Platform` members, which is runtime-checkable):

    - `export_state(conversation_id) -> dict | None`: JSON-serialisable state needed to continue
      the conversation after this process dies (Chat Completions' messages, Responses'
      previous_response_id, Coze's chat id...). None: the id alone is enough. Called after
      each platform round (once the last event of a start/submit/resume was produced).
    - `import_state(conversation_id, state)`: take such state over, replacing whatever the
      adapter holds for that id; afterwards `knows(conversation_id)` (if the adapter has it)
      answers True. Called before the conversation is used in a process that does not know it.
      A state it cannot use is refused with `UsageError` (see `state_field`).

    An adapter may also write the state as JSON text itself (`ExportsStateJson`: the text of
    ``json.dumps(export_state(...))``, without building a copy first); the loop then journals
    that text.
    """
    return implements(platform, KeepsState)


def holds_submitted_outputs(platform: object) -> bool:
    """True when the adapter's state changes on submit (`HoldsSubmittedOutputs`)."""
    return implements(platform, HoldsSubmittedOutputs) and platform.outputs_in_state is True


def opens_on_first_message(platform: object) -> TypeGuard[OpensOnFirstMessage]:
    """Whether the adapter's first message creates its conversation (`OpensOnFirstMessage`)."""
    return implements(platform, OpensOnFirstMessage)


def use_tracing(platform: object, tracing: Tracing) -> None:
    """Send the client spans of `platform`'s HTTP requests to `tracing` (the bridge's tracer
    provider) rather than to the global provider; a platform without HTTP, or one that does
    not trace, is left as it is."""
    hook = getattr(platform, "use_tracing", None)
    if callable(hook):
        hook(tracing)


def export_state_of(platform: object, conversation_id: str) -> PlatformState | None:
    """The adapter's state for a conversation, as a detached JSON-round-tripped copy.

    None when the adapter keeps no state (no `export_state`, or it returned None).

    Raises:
        UsageError: the adapter returned something other than a dict of JSON values or None.
    """
    text = export_state_json(platform, conversation_id)
    if text is None:
        return None
    copied: PlatformState = json.loads(text)
    return copied


def export_state_json(platform: object, conversation_id: str) -> str | None:
    """The adapter's state for a conversation as JSON text (`json.dumps` with
    ``ensure_ascii=False, allow_nan=False``), what `export_state_of` reads its copy from.

    Raises:
        UsageError: as `export_state_of`.
    """
    if not implements(platform, KeepsState):
        return None
    if implements(platform, ExportsStateJson):
        try:
            return platform.export_state_json(conversation_id)
        except (TypeError, ValueError) as exc:
            raise UsageError(
                f"the {_name_of(platform)} platform's export_state({conversation_id!r}) is not "
                f"JSON-serialisable ({exc}); expected a dict of JSON values (str, numbers, "
                "bools, None, lists, dicts)"
            ) from None
    state = platform.export_state(conversation_id)
    if state is None:
        return None
    if not isinstance(state, Mapping):
        raise UsageError(
            f"the {_name_of(platform)} platform's export_state({conversation_id!r}) returned "
            f"{type(state).__name__}; expected a dict of JSON values or None"
        )
    try:
        return json.dumps(state, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise UsageError(
            f"the {_name_of(platform)} platform's export_state({conversation_id!r}) is not "
            "JSON-serialisable "
            f"({exc}); expected a dict of JSON values (str, numbers, bools, None, lists, dicts)"
        ) from None


def import_state_into(platform: object, conversation_id: str, state: Mapping[str, Any]) -> bool:
    """Give the adapter a conversation's exported state; False if it takes none.

    Raises:
        UsageError: the state is not a dict, or the adapter refused it.
    """
    if not implements(platform, KeepsState):
        return False
    if not isinstance(state, Mapping):
        raise UsageError(
            f"the state to import for conversation {conversation_id!r} is "
            f"{type(state).__name__}; expected the dict export_state returned"
        )
    platform.import_state(conversation_id, state)
    return True


def state_field(
    state: Mapping[str, Any],
    key: str,
    kind: type | tuple[type, ...],
    *,
    platform: str,
    default: Any = _MISSING,
) -> Any:
    """One field of an imported state, type-checked, for adapters' `import_state`.

    Args:
        state: what `import_state` received.
        key: the field.
        kind: the type(s) its value must have (``bool`` is not accepted for ``int``).
        platform: the adapter's name, for the error.
        default: returned when the field is absent (or None); without it the field is required.

    Raises:
        UsageError: the field is missing, or its value has another type.
    """
    value = state.get(key) if isinstance(state, Mapping) else None
    if value is None:
        if default is not _MISSING:
            return default
        present = ", ".join(sorted(map(str, state))) if isinstance(state, Mapping) else ""
        raise UsageError(
            f"the {platform} platform's saved state has no {key!r} (it has: "
            f"{present or 'nothing'}); expected the dict its export_state returned"
        )
    kinds = kind if isinstance(kind, tuple) else (kind,)
    # A bool is an int to isinstance, never to a state written as JSON.
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        expected = " or ".join(k.__name__ for k in kinds)
        raise UsageError(
            f"the {platform} platform's saved state has {key!r} of type "
            f"{type(value).__name__}; expected {expected}"
        )
    return value


def parse_tool_choice(
    value: object, *, what: str = "tool_choice"
) -> ToolChoice | ToolChoiceMode | None:
    """The neutral tool choice for what a caller passed, or a `UsageError` saying what fits.

    A string is a mode (`auto`, `none`, `required`) or a tool name; a dict is `{"name",
    "input"}`, or AppBuilder's own `{"type": "function", "function": {"name", "input"}}` so
    that code written for its SDK keeps working, as does any pydantic model of those shapes
    (the SDK's `ToolChoice(type=..., function=ToolChoiceFunction(...))`). `what` names the
    argument in errors (e.g. `--tool-choice`). Whether the name is a loaded tool is the
    caller's check.
    """
    if value is None or isinstance(value, ToolChoice):
        return value
    if isinstance(value, BaseModel):
        value = value.model_dump()
    if isinstance(value, str):
        if not value.strip():
            raise UsageError(f"{what} is an empty string; expected {_CHOICE_EXPECTED}")
        if value in TOOL_CHOICE_MODES:
            return cast(ToolChoiceMode, value)
        return ToolChoice(name=value)
    if isinstance(value, Mapping):
        if "type" in value or "function" in value:
            return _appbuilder_choice(value, what)
        return _choice_from_dict(value, what)
    raise UsageError(f"{what} must be {_CHOICE_EXPECTED}; got {type(value).__name__}")


def _choice_from_dict(value: Mapping[Any, Any], what: str) -> ToolChoice:
    unknown = sorted(str(key) for key in value if key not in ("name", "input"))
    if unknown:
        raise UsageError(
            f"{what} has unknown key(s) {', '.join(unknown)}; expected {{'name': ..., "
            "'input': {...}} (input optional)"
        )
    name = value.get("name")
    if not isinstance(name, str) or not name.strip():
        raise UsageError(f"{what}['name'] must be a non-empty tool name; got {name!r}")
    arguments = value.get("input")
    if arguments is None:
        return ToolChoice(name=name)
    if not isinstance(arguments, Mapping):
        raise UsageError(
            f"{what}['input'] must be a dict of the tool's arguments, e.g. {{'city': 'Beijing'}}; "
            f"got {type(arguments).__name__}"
        )
    keys = [key for key in arguments if not isinstance(key, str)]
    if keys:
        raise UsageError(f"{what}['input'] keys must be argument names (strings); got {keys!r}")
    return ToolChoice(name=name, input=dict(arguments))


def _appbuilder_choice(value: Mapping[Any, Any], what: str) -> ToolChoice | ToolChoiceMode:
    kind = value.get("type")
    function = value.get("function")
    unknown = sorted(str(key) for key in value if key not in ("type", "function"))
    if unknown or kind not in ("auto", "function"):
        raise UsageError(
            f"{what} in AppBuilder's form must be {{'type': 'function', 'function': "
            f"{{'name': ..., 'input': {{...}}}}}} or {{'type': 'auto'}}; got {dict(value)!r}"
        )
    if kind == "auto":
        return "auto"
    if not isinstance(function, Mapping):
        raise UsageError(
            f"{what}['function'] must be {{'name': ..., 'input': {{...}}}}; got {function!r}"
        )
    return _choice_from_dict(function, f"{what}['function']")


def platform_tool_types_of(platform: object) -> frozenset[str]:
    """The platform's own tool types it can run for the agent (`platform_tool_types`), e.g.
    AppBuilder's `code_interpreter`; empty for an adapter that declares none."""
    if implements(platform, HasPlatformTools) and isinstance(
        platform.platform_tool_types, frozenset
    ):
        return platform.platform_tool_types
    return frozenset()


def platform_tools_for(
    platform: object, tools: Iterable[str | Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """The platform's own tools, as sent next to the local tools' manifests.

    Each is a type name (`"code_interpreter"`) or a dict with a `type`; anything the platform
    does not offer is a `UsageError` that lists what it does.
    """
    if isinstance(tools, str | Mapping):
        tools = [tools]  # one tool given bare: not a list of its characters or keys
    known = platform_tool_types_of(platform)
    name = _name_of(platform)
    result: list[dict[str, Any]] = []
    for position, tool in enumerate(tools):
        spec = {"type": tool} if isinstance(tool, str) else tool
        kind = spec.get("type") if isinstance(spec, Mapping) else None
        if not isinstance(kind, str):
            raise UsageError(
                f"platform_tools[{position}] must be a tool type name such as "
                f"'code_interpreter' or a dict with a 'type'; got {tool!r}"
            )
        if not known:
            raise UsageError(
                f"the {name} platform has no platform tools of its own (got {kind!r}); "
                "pass local tools with tools=..."
            )
        if kind not in known:
            hint = " (local tools go in tools=...)" if kind == "function" else ""
            raise UsageError(
                f"platform_tools[{position}]: {kind!r} is not a tool type of the {name} "
                f"platform; expected one of {', '.join(sorted(known))}{hint}"
            )
        result.append(dict(spec))
    return result


def results_by_call(batch: ToolBatch, results: Sequence[ToolResult]) -> dict[str, ToolResult]:
    """`results` by call id, checked to answer every call of `batch` exactly once.

    For adapters whose platform takes every output of a pause in one request.

    Raises:
        UsageError: a call has no result or two, or a result names no call of the batch.
    """
    expected = [call.call_id for call in batch.calls]
    by_id: dict[str, ToolResult] = {}
    problems = []
    for result in results:
        if result.call_id in by_id:
            problems.append(f"two results for call {result.call_id}")
        elif result.call_id not in expected:
            problems.append(f"result for unknown call {result.call_id}")
        by_id[result.call_id] = result
    missing = [call_id for call_id in expected if call_id not in by_id]
    if missing:
        problems.append(f"no result for call(s) {', '.join(missing)}")
    if problems:
        raise UsageError(
            f"results do not match batch {batch.batch_id}: {'; '.join(problems)} "
            f"(expected exactly one result for each of {', '.join(expected)})"
        )
    return by_id


def _name_of(platform: object) -> str:
    """The platform's `name`, or its class name for an object that is no `Platform`."""
    name = platform.name if isinstance(platform, _Named) else None
    return name if isinstance(name, str) else type(platform).__name__


# --- optional features, each a small protocol ------------------------------------------------
#
# Not members of `Platform` (which is runtime-checkable), so adapters written before them
# stay platforms; the loop, recovery and the daemon test for them with isinstance.


@runtime_checkable
class _Named(Protocol):
    name: str


@runtime_checkable
class DeclaresLimits(Protocol):
    """An adapter that declares the inputs its platform refuses (read with `limits_of`)."""

    limits: PlatformLimits


@runtime_checkable
class KnowsConversations(Protocol):
    """An adapter that keeps its conversations' state in this process and can say which ones
    it can continue (see `knows_conversation`)."""

    def knows(self, conversation_id: str) -> bool:
        """Whether this process can continue the conversation."""
        ...


@runtime_checkable
class KeepsState(Protocol):
    """An adapter whose conversations continue across restarts through exported state (see
    `exports_state`)."""

    def export_state(self, conversation_id: str) -> PlatformState | None:
        """JSON state needed to continue the conversation elsewhere, or None."""
        ...

    def import_state(self, conversation_id: str, state: Mapping[str, Any]) -> None:
        """Take over a conversation's exported state."""
        ...


@runtime_checkable
class ExportsStateJson(Protocol):
    """A `KeepsState` adapter that also writes its exported state as JSON text itself:
    ``export_state_json(conversation_id)`` returns exactly ``json.dumps(export_state(
    conversation_id), ensure_ascii=False, allow_nan=False)`` (or None when `export_state` does),
    without building the detached copy `export_state` gives out first."""

    def export_state_json(self, conversation_id: str) -> str | None:
        """The exported state as JSON text, or None."""
        ...


@runtime_checkable
class HoldsSubmittedOutputs(Protocol):
    """An adapter whose exported state holds a batch's outputs from the moment they are
    submitted (a client-side history): the loop journals that state together with the
    "submitted" step, so a conversation goes on from the outputs after a crash there. Other
    adapters' state does not change on submit, and is not exported again then."""

    outputs_in_state: bool


@runtime_checkable
class DeclaresTools(Protocol):
    """An adapter whose agent's tools are configured server-side and can be told the bridge's
    tools (an emulated Coze bot, see `declare_tools_to`)."""

    declare_tools: Any
    """A callable taking a list of Chat Completions function tools."""


@runtime_checkable
class HasPlatformTools(Protocol):
    """An adapter whose platform runs tools of its own for the agent (see
    `platform_tools_for`)."""

    platform_tool_types: frozenset[str]


@runtime_checkable
class ListsRemoteTools(Protocol):
    """An adapter whose agent's tools are configured on the platform and can be listed, for
    comparison with the local tools (`toolbridge doctor`)."""

    def remote_tool_names(self) -> list[str] | None:
        """The tool names the agent has configured; None when the platform cannot tell."""
        ...


@runtime_checkable
class ChecksChat(Protocol):
    """An adapter that can prove its chat endpoint answers when the server lists no models
    (`toolbridge doctor` against servers without `/models`)."""

    def check_chat(self) -> str:
        """What a one-token completion proved, as one line."""
        ...


@runtime_checkable
class OpensOnFirstMessage(Protocol):
    """An adapter whose platform creates a conversation with its first message (Coze's chat
    without a conversation id), saving the request of `create_conversation`.

    A new conversation is named by a local handle (no request); `start` with that handle opens
    the platform's conversation, and once `start` has returned, `opened_conversation` gives the
    platform's id, which the loop journals (`Journal.replace_platform_conversation`) before it
    reads any event of the run: every later request goes to that id. A handle never mapped (a
    crash before the mapping was journaled; no tool had run) opens a new one at its next
    message."""

    def conversation_handle(self, *, end_user_id: str | None = None) -> str:
        """A new conversation's local handle, made without any request."""
        ...

    def opened_conversation(self, handle: str) -> str | None:
        """The platform's id of the conversation that `start` with `handle` opened in this
        process; None when it opened none (`handle` is a platform id, or the chat failed
        before the platform named its conversation)."""
        ...


@dataclass(frozen=True)
class PlatformDescription:
    """Who an adapter talks to, for status pages: never a credential."""

    base_url: str | None = None
    app_id: str | None = None
    """The agent's id: AppBuilder's app, Coze's bot."""
    model: str | None = None
    """The model, for platforms that name one instead of an agent."""


@runtime_checkable
class DescribesItself(Protocol):
    """An adapter that says where it points (`/v1/info`)."""

    def describe(self) -> PlatformDescription:
        """The server, agent and model this adapter talks to."""
        ...


@runtime_checkable
class Platform(Protocol):
    """What the conversation loop needs from an agent platform.

    Every method that talks to the platform yields neutral events and ends after a terminal
    event (`RunFinished`, `RunFailed`) or a pause (`ToolCallsRequested`, `HumanInputRequested`).
    Request ids are reported on the events that carry them: `RunFinished.request_id`,
    `RunFailed.request_id` and `ToolBatch.resume["request_id"]`.
    Errors are raised as `bridge.errors.PlatformError` subclasses, never transport exceptions.
    """

    name: str
    """Short platform name, e.g. "appbuilder"."""

    dialect: str
    """The manifest dialect this platform expects (see `bridge.tools.schema`)."""

    # Optional features are protocols of their own (`DeclaresLimits`, `KnowsConversations`,
    # `KeepsState`, `DeclaresTools`, `HasPlatformTools`, `DescribesItself`), not members of
    # this one, so that adapters written before them still satisfy `Platform`.

    def create_conversation(self, *, end_user_id: str | None = None) -> str:
        """Open a new conversation and return its id."""
        ...

    def upload_file(self, conversation_id: str, path: str | Path) -> str:
        """Attach a local file to the conversation and return the platform's file id."""
        ...

    def start(
        self,
        conversation_id: str,
        query: str,
        *,
        tools: Sequence[dict[str, Any]],
        tool_choice: ToolChoice | str | None = None,
        end_user_id: str | None = None,
        file_ids: Sequence[str] | None = None,
        stream: bool = True,
    ) -> Iterator[Event]:
        """Send a user query with the tool manifests; yield the run's events.

        `tools` may end with the platform's own tools (`platform_tools_for`); `tool_choice`
        is a `ToolChoice`, a mode (`auto`, `none`, `required`) or a tool name, and an adapter
        refuses with `UsageError` what its platform cannot do (e.g. a forced input).
        """
        ...

    def submit(
        self,
        conversation_id: str,
        batch: ToolBatch,
        results: Sequence[ToolResult],
        *,
        end_user_id: str | None = None,
        stream: bool = True,
    ) -> Iterator[Event]:
        """Send every output of a batch in one request; yield the continued run's events."""
        ...

    def resume(
        self,
        conversation_id: str,
        interrupt_id: str,
        answer: str,
        *,
        tools: Sequence[dict[str, Any]] = (),
        end_user_id: str | None = None,
        stream: bool = True,
    ) -> Iterator[Event]:
        """Answer a human-input interrupt (`HumanInputRequested`); yield the run's events."""
        ...

    def check(self) -> str:
        """One cheap request that proves configuration, credentials and reachability.

        Returns a one-sentence description of what was verified; raises `PlatformError`
        (or `ConfigurationError`) saying what is wrong.
        """
        ...

    def close(self) -> None:
        """Release connections."""
        ...


# --- what adapters share ----------------------------------------------------------------------


class _Closes(Protocol):
    def close(self) -> None: ...


class PlatformBase:
    """What every adapter repeats: a context manager that closes its `client`, the refusals
    worded from its `name`, and the check of a query.

    A subclass sets `name`, `dialect` (and `limits` if it has any), assigns `client` (the HTTP
    client that `close` closes) and implements the `Platform` methods it supports; `resume`
    and `upload_file` are refused here for platforms that have no such thing.
    """

    name: str
    dialect: str = "openai"
    limits: PlatformLimits = NO_LIMITS
    never_pauses: ClassVar[str] = "it never pauses for human input"
    """Why `resume` is refused, after "resume is not supported on the NAME platform: "."""
    client: _Closes

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the HTTP session if this platform created it."""
        self.client.close()

    def use_tracing(self, tracing: Tracing) -> None:
        """Trace the HTTP requests of `client` with `tracing` (see `use_tracing`), when the
        client has transports to trace."""
        hook = getattr(getattr(self, "client", None), "use_tracing", None)
        if callable(hook):
            hook(tracing)

    def upload_file(self, conversation_id: str, path: str | Path) -> str:
        """Not supported unless the adapter overrides it: the platform keeps no files."""
        raise UsageError(
            f"cannot attach {str(path)!r}: the {self.name} platform does not upload files; "
            "put the text in the query or give the agent a tool that reads the file"
        )

    def resume(
        self,
        conversation_id: str,
        interrupt_id: str,
        answer: str,
        *,
        tools: Sequence[dict[str, Any]] = (),
        end_user_id: str | None = None,
        stream: bool = True,
    ) -> Iterator[Event]:
        """Not supported unless the adapter overrides it: human-input interrupts are an
        AppBuilder chatflow and Coze feature."""
        raise UsageError(
            f"resume is not supported on the {self.name} platform: {self.never_pauses}; "
            "send the answer as a new query with start() instead"
        )

    def check_query(self, query: object, file_ids: Sequence[str] | None = None) -> None:
        """Refuse an empty query, and file ids on a platform that takes none (`file_ids` is
        given only by such platforms).

        Raises:
            UsageError: `query` is not a non-empty string, or `file_ids` are given.
        """
        if not isinstance(query, str) or not query.strip():
            raise UsageError(f"query must be a non-empty string, got {query!r}")
        if file_ids:
            raise UsageError(
                f"file_ids are not supported on the {self.name} platform; put the text in the "
                "query instead"
            )


S = TypeVar("S")


class ConversationStore(Generic[S]):
    """Conversations' state held in this process, guarded by one lock (`lock`, which the
    adapter also takes to change a conversation's state in place)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self._states: dict[str, S] = {}

    def put(self, conversation_id: str, state: S) -> None:
        """Hold `state` for the conversation (replacing what was held)."""
        with self.lock:
            self._states[conversation_id] = state

    def get(self, conversation_id: str) -> S | None:
        """The conversation's state, or None."""
        with self.lock:
            return self._states.get(conversation_id)

    def __contains__(self, conversation_id: object) -> bool:
        with self.lock:
            return conversation_id in self._states

    def pop(self, conversation_id: str) -> None:
        """Drop the conversation's state, if held."""
        with self.lock:
            self._states.pop(conversation_id, None)


class InMemoryPlatform(PlatformBase, Generic[S]):
    """A `PlatformBase` that keeps its conversations' state in this process (a
    `ConversationStore`), so it knows which ones it can continue (`KnowsConversations`)."""

    lost_hint: ClassVar[str] = "call create_conversation() first"
    """What to do about an unknown conversation id, in its error."""

    def __init__(self) -> None:
        self._conversations: ConversationStore[S] = ConversationStore()
        self._lock = self._conversations.lock

    def knows(self, conversation_id: str) -> bool:
        """Whether this process holds the conversation's state (not after a restart, until
        its exported state is imported)."""
        return conversation_id in self._conversations

    def forget(self, conversation_id: str) -> None:
        """Drop a conversation's state (held in memory until forgotten)."""
        self._conversations.pop(conversation_id)

    def _state(self, conversation_id: str) -> S:
        state = self._conversations.get(conversation_id)
        if state is None:
            raise ConversationLostError(
                f"unknown conversation id {conversation_id!r}: {self.lost_hint}"
            )
        return state
