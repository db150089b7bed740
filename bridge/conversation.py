"""The conversation loop: the whole life of one conversation, in one place.

    Conversation.stream(query)
      start(query, manifests) --> events --> TextDelta ...          (yielded as they come)
                                         --> ToolCallsRequested(batch)
      dispatch the batch (concurrently, each call id at most once)
      submit(batch, outputs)  --> events --> ... until RunFinished / RunFailed / max_rounds

Everything platform-specific sits behind `bridge.platforms.base.Platform`; everything about
running tools sits behind `bridge.tools.Dispatcher`; what ran is written down in a
`bridge.journal.Journal` at each step (received, started, finished, submitting, submitted), so
a restarted process never runs a call twice and delivers every finished output exactly once
(`Conversation.stream_recovered`). A platform conversation that a crash left waiting for calls
the bridge never saw is replaced on the next message (`Conversation._on_platform`). This module
only keeps the rounds going, remembers what ran, and reports.

Platform state (contract b in `bridge.platforms.base`): an adapter that keeps a conversation's
state in this process (Chat Completions' messages) exports it after each platform round, and
the journal keeps the latest: with the batch it has pending (one transaction with "received"),
and when a run ends or pauses for a person. Before a conversation is used, a journaled state
that this bridge did not write (a restart, another process on the same journal) is imported.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import threading
import uuid
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, cast

from pydantic import BaseModel, ConfigDict, Field
from typing_extensions import TypedDict, Unpack

from bridge._interleave import interleave
from bridge.errors import (
    BadRequestError,
    BridgeError,
    ConflictError,
    ConversationLostError,
    MaxRoundsError,
    NotFoundError,
    PreconditionError,
    RunFailedError,
    RunInterruptedError,
    UsageError,
)
from bridge.journal.base import Journal
from bridge.journal.ledger import Ledger, MessageTrail
from bridge.journal.records import INTERRUPTED_MESSAGE, MessageRecord, StateSnapshot
from bridge.platforms.base import (
    Platform,
    ToolChoiceLike,
    declare_tools_to,
    export_state_of,
    exports_state,
    import_state_into,
    knows_conversation,
    parse_tool_choice,
    platform_tools_for,
)
from bridge.tools.approval import (
    ApprovalRequest,
    DeferredApprover,
    arguments_digest,
    ask_deferred,
    decide,
    needs_approval,
)
from bridge.tools.context import ConversationScope
from bridge.tools.dispatch import Dispatcher, ErrorsMode
from bridge.tools.toolbox import Toolbox
from bridge.types import (
    Event,
    EventTally,
    HumanInputRequested,
    RunFailed,
    RunFinished,
    ToolBatch,
    ToolCall,
    ToolCallFinished,
    ToolCallsRequested,
    ToolCallStarted,
    ToolChoice,
    ToolChoiceMode,
    ToolRun,
)

__all__ = ["Bridge", "BridgeOptions", "BridgeSettings", "Conversation", "Result"]

logger = logging.getLogger(__name__)

ApproveHook = Callable[[ToolCall], bool]

_REFUSALS = (BadRequestError, ConflictError, PreconditionError)
"""How a platform refuses a request for the state its conversation is in: outputs for calls
that are no longer pending, or a query while it still waits for outputs."""


class Result(BaseModel):
    """What one `ask` (or `resume`) produced."""

    model_config = ConfigDict(frozen=True)

    answer: str
    conversation_id: str
    rounds: int
    """How many tool batches were answered before the run ended."""
    tool_runs: list[ToolRun] = Field(default_factory=list)
    usage: dict[str, Any] | None = None
    request_ids: list[str] = Field(default_factory=list)
    message_id: str | None = None
    human_input: HumanInputRequested | None = None
    """Set when the run paused for a person's answer; continue with `Conversation.resume`."""
    events: list[Any] | None = None
    """Every event of the run, when the bridge was created with `keep_events=True`."""


_DISPATCHER_FIELDS = ("max_concurrency", "default_timeout", "errors", "max_output_chars")
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
        # A runtime-checkable protocol's isinstance walks its members: asked once, not per batch.
        deferred = self.approve if isinstance(self.approve, DeferredApprover) else None
        object.__setattr__(self, "_deferred", deferred)

    @property
    def deferred_approver(self) -> DeferredApprover | None:
        """`approve` when it is a `DeferredApprover` (the daemon's), else None."""
        return self._deferred

    def replace(self, **changes: Any) -> BridgeOptions:
        """A copy with `changes` (checked like a new value)."""
        return dataclasses.replace(self, **changes)


_OPTION_FIELDS = tuple(f.name for f in dataclasses.fields(BridgeOptions) if f.init)
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
    max_concurrency: int
    default_timeout: float
    errors: ErrorsMode
    max_output_chars: int | None


class Bridge:
    """Connects a platform to a toolbox and keeps conversations going until they finish.

    A bridge is a platform, a `Dispatcher` (which holds the toolbox), a journal and one frozen
    `BridgeOptions`. `Bridge(platform, tools, max_rounds=3, ...)` is the short form: the
    keyword arguments are `BridgeOptions`' fields and the options of the `Dispatcher` built
    for `tools` (`max_concurrency`, `default_timeout`, `errors`, `max_output_chars`).

    Args:
        platform: the agent platform adapter (e.g. `AppBuilderPlatform`).
        tools: a `Toolbox`, a list of what `Toolbox.add` accepts (functions, modules, paths,
            toolkits...), or one such object. Not with `dispatcher`.
        options: how conversations run (`BridgeOptions`); not together with its fields as
            keyword arguments.
        dispatcher: a ready `Dispatcher` (its toolbox is used); otherwise one is built.
        journal: where conversations, messages and tool-call states are written before each
            step; None keeps them in memory (`MemoryJournal`). Pass a `SQLiteJournal` to
            survive crashes.
        **settings: `BridgeOptions` fields, and `Dispatcher` options (see `BridgeSettings`).

    Raises:
        UsageError: an option is out of range, `tool_choice` names no loaded tool, the platform
            does not offer a platform tool, or an option is given twice.
    """

    def __init__(
        self,
        platform: Platform,
        tools: Toolbox | Iterable[Any] | Any = None,
        *,
        options: BridgeOptions | None = None,
        dispatcher: Dispatcher | None = None,
        journal: Journal | None = None,
        **settings: Unpack[BridgeSettings],
    ) -> None:
        unknown = sorted(set(settings) - {*_OPTION_FIELDS, *_DISPATCHER_FIELDS})
        if unknown:
            raise TypeError(f"Bridge() got unexpected keyword arguments: {', '.join(unknown)}")
        given: dict[str, Any] = {k: v for k, v in settings.items() if k in _OPTION_FIELDS}
        if options is None:
            options = BridgeOptions(**given)
        elif given:
            raise UsageError(
                f"pass either options= or its fields ({', '.join(sorted(given))}) as keyword "
                "arguments, not both"
            )
        elif not isinstance(options, BridgeOptions):
            raise UsageError(f"options must be a BridgeOptions, got {type(options).__name__}")
        self.platform = platform
        self._owned: list[Callable[[], None]] = []
        """What `close` releases: only what this bridge made (a given toolbox is the caller's)."""
        if dispatcher is not None:
            self.toolbox = dispatcher.toolbox
            self.dispatcher = dispatcher
        else:
            self.toolbox = _as_toolbox(tools)
            if self.toolbox is not tools:
                self._owned.append(self.toolbox.close)  # e.g. MCP server processes
            built: dict[str, Any] = {k: v for k, v in settings.items() if k in _DISPATCHER_FIELDS}
            try:
                self.dispatcher = Dispatcher(self.toolbox, **built)
            except BaseException:
                self._release()
                raise
            self._owned.append(self.dispatcher.close)
        try:
            self.platform_tools = platform_tools_for(platform, options.platform_tools)
            options = options.replace(tool_choice=self.checked_tool_choice(options.tool_choice))
            # An emulated agent whose tools are configured server-side learns them here.
            declare_tools_to(platform, self.toolbox.manifests("openai"))
        except BaseException:
            # What it made (a toolbox's MCP servers) must not leak; the platform is the caller's.
            self._release()
            raise
        self.options = options
        if journal is None:
            from bridge.journal.memory import MemoryJournal

            journal = MemoryJournal()
        self.journal: Journal = journal
        self.state_writer = uuid.uuid4().hex
        """Signs the platform states this bridge journals: a state signed by another (a
        process before a restart, a second daemon) is imported before the conversation goes on."""

    # Read-only views of `options`, as before it existed (another value: a new Bridge).

    @property
    def max_rounds(self) -> int:
        return self.options.max_rounds

    @property
    def stream(self) -> bool:
        return self.options.stream

    @property
    def end_user_id(self) -> str | None:
        return self.options.end_user_id

    @property
    def tool_choice(self) -> ToolChoice | ToolChoiceMode | None:
        return self.options.tool_choice

    @property
    def approve(self) -> ApproveHook | DeferredApprover | None:
        return self.options.approve

    @property
    def on_event(self) -> Callable[[Event], None] | None:
        return self.options.on_event

    @property
    def on_tool_call(self) -> Callable[[ToolCall], None] | None:
        return self.options.on_tool_call

    @property
    def on_tool_result(self) -> Callable[[ToolRun], None] | None:
        return self.options.on_tool_result

    @property
    def keep_events(self) -> bool:
        return self.options.keep_events

    def checked_tool_choice(self, value: object) -> ToolChoice | ToolChoiceMode | None:
        """`value` as a neutral tool choice naming a loaded tool, or a `UsageError`."""
        choice = parse_tool_choice(value)
        if isinstance(choice, ToolChoice) and self.toolbox.get(choice.name) is None:
            loaded = ", ".join(self.toolbox.names()) or "(none)"
            raise UsageError(
                f"tool_choice {choice.name!r} is not a loaded tool; loaded tools: {loaded}"
            )
        return choice

    def manifests(self) -> list[dict[str, Any]]:
        """What goes out as `tools`: the local tools' manifests, then the platform's own."""
        return [*self.toolbox.manifests(self.platform.dialect), *self.platform_tools]

    def conversation(
        self, id: str | None = None, *, end_user_id: str | None = None
    ) -> Conversation:
        """A conversation to ask several questions in; `id` continues an existing one."""
        return Conversation(self, id, end_user_id=end_user_id or self.options.end_user_id)

    def ask(self, query: str, **options: Any) -> Result:
        """Ask one question in a new conversation and return its finished result."""
        with self.conversation(end_user_id=options.pop("end_user_id", None)) as conv:
            return conv.ask(query, **options)

    def close(self) -> None:
        """Release the platform's connections, and the dispatcher and toolbox it made."""
        self.platform.close()
        self._release()

    def _release(self) -> None:
        owned, self._owned = self._owned, []
        for release in reversed(owned):
            release()

    def __enter__(self) -> Bridge:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Conversation:
    """One conversation with the agent: ask any number of questions, one at a time."""

    def __init__(self, bridge: Bridge, id: str | None, *, end_user_id: str | None) -> None:
        self.bridge = bridge
        self._id = id
        self.end_user_id = end_user_id
        self.pending_input: HumanInputRequested | None = None
        self.last_rounds = 0
        """How many tool batches the last question took."""
        self._scope: ConversationScope | None = None
        self._message: int | None = None
        """The journal's id of the message being answered."""
        self._platform_id: str | None = None
        if id is not None:
            self.pending_input = _journaled_pause(self._journal, id)

    @property
    def bridge(self) -> Bridge:
        """The bridge it runs on; the daemon sets another between runs (a new toolbox)."""
        return self._bridge

    @bridge.setter
    def bridge(self, bridge: Bridge) -> None:
        # What the loop reads on every round, taken once per bridge rather than per use.
        self._bridge = bridge
        self._platform: Platform = bridge.platform
        self._journal: Journal = bridge.journal
        self._dispatcher: Dispatcher = bridge.dispatcher
        self._toolbox: Toolbox = bridge.toolbox
        self._options: BridgeOptions = bridge.options
        self._listens = bool(
            bridge.options.on_event or bridge.options.on_tool_call or bridge.options.on_tool_result
        )

    @property
    def message_id(self) -> int | None:
        """The journal's id of the message being (or last) answered."""
        return self._message

    @property
    def ledger(self) -> Ledger:
        """Every call id this conversation has run, with its record: never run twice."""
        return Ledger(self._journal, self._id or "")

    @property
    def id(self) -> str:
        """The conversation's id: the platform's id of its first platform conversation
        (created on first use)."""
        if self._id is None:
            self._id = self._platform.create_conversation(end_user_id=self.end_user_id)
        return self._id

    @property
    def platform_conversation_id(self) -> str:
        """The platform conversation it continues in: `id`, unless a stuck one was replaced."""
        if self._platform_id is None:
            record = self._journal.get_conversation(self.id)
            self._platform_id = record.platform_id if record is not None else self.id
        return self._platform_id

    # --- public API ---------------------------------------------------------------------------

    def ask(self, query: str, **options: Any) -> Result:
        """Send `query`, run every tool the agent asks for, return the final result."""
        return self._collect(self.stream(query, **options))

    def resume(self, answer: str, **options: Any) -> Result:
        """Answer the human-input interrupt the last run paused on (or `interrupt_id=`)."""
        return self._collect(self.stream_resume(answer, **options))

    def stream(
        self,
        query: str,
        *,
        tool_choice: ToolChoiceLike | None = None,
        file_ids: Sequence[str] | None = None,
        files: Sequence[str | Path] = (),
        stream: bool | None = None,
        sent_by: str | None = None,
    ) -> Iterator[Event]:
        """Send `query` and yield every event until the run ends (tools run in between).

        `tool_choice` overrides the bridge's for this question (see `Bridge`).
        `sent_by`: who sent it (journaled with the message, e.g. the daemon's API key name).
        """
        options = self._options
        choice = (
            options.tool_choice
            if tool_choice is None
            else self.bridge.checked_tool_choice(tool_choice)
        )
        use_stream = options.stream if stream is None else stream
        platform = self._platform

        def start(platform_id: str) -> Iterator[Event]:
            uploaded = [platform.upload_file(platform_id, f) for f in files]
            ids = list(file_ids or []) + uploaded
            return platform.start(
                platform_id,
                query,
                tools=self.bridge.manifests(),
                tool_choice=choice,
                end_user_id=self.end_user_id,
                file_ids=ids or None,
                stream=use_stream,
            )

        def accepted() -> None:
            self.pending_input = None  # a new question abandons an unanswered pause

        message_id = self._begin(query, sent_by)
        return self._run(
            message_id, lambda: self._on_platform(start), stream=use_stream, accepted=accepted
        )

    def stream_resume(
        self,
        answer: str,
        *,
        interrupt_id: str | None = None,
        stream: bool | None = None,
        sent_by: str | None = None,
    ) -> Iterator[Event]:
        """Like `resume`, yielding events.

        `interrupt_id` answers a pause this object did not see (one reported by an earlier
        process, e.g. `toolbridge run --resume ID`); by default the last run's pause.
        """
        if interrupt_id is None:
            if self.pending_input is None:
                raise UsageError("nothing to resume: the last run did not ask for human input")
            interrupt_id = self.pending_input.interrupt_id
        use_stream = self._options.stream if stream is None else stream

        def send() -> Iterator[Event]:
            return self._platform.resume(
                self.platform_conversation_id,
                interrupt_id,
                answer,
                tools=self.bridge.manifests(),
                end_user_id=self.end_user_id,
                stream=use_stream,
            )

        def accepted() -> None:
            self.pending_input = None  # only now: a refused resume leaves the pause answerable

        message_id = self._begin(answer, sent_by)
        return self._run(message_id, send, stream=use_stream, accepted=accepted)

    def stream_recovered(
        self,
        message_id: int,
        batch: ToolBatch,
        *,
        submitting: bool = False,
        stream: bool | None = None,
    ) -> Iterator[Event]:
        """Finish a run that a crash interrupted: answer its journaled `batch`, read on.

        Calls the journal shows finished are not run again (their outputs are sent); calls
        that started and never finished run again only if their tool is idempotent.

        With `submitting` (the crash came while the outputs were being posted) the recorded
        outputs are posted again; if the platform answers that those calls are no longer
        pending, the first post had arrived: the outputs count as delivered, and since the
        answer they led to was lost with the crash, the run fails with `RunInterruptedError`.
        """
        self._message = message_id

        def pending() -> Iterator[Event]:
            platform = self._platform
            if not knows_conversation(platform, self.platform_conversation_id):
                # Its state died with the process (a history kept in memory): outputs could
                # never be delivered, so running the calls would only repeat their effects on
                # "ask again".
                ran = sum(call.call_id in self.ledger for call in batch.calls)
                raise ConversationLostError(
                    f"the {platform.name} platform no longer knows conversation "
                    f"{self.platform_conversation_id} (its state did not survive the restart): "
                    f"the outputs of {ran} finished call(s) could not be delivered and "
                    f"{len(batch.calls) - ran} pending call(s) were not run; ask again"
                )
            return iter([ToolCallsRequested(batch=batch)])

        use_stream = self._options.stream if stream is None else stream
        posted = batch if submitting else None
        return self._run(message_id, pending, stream=use_stream, posted=posted)

    def close(self) -> None:
        """Release the conversation's tool resources (pooled connections, sessions)."""
        if self._scope is not None:
            self._scope.close()
            self._scope = None

    def __enter__(self) -> Conversation:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- the loop -----------------------------------------------------------------------------

    def _begin(self, query: str, sent_by: str | None) -> int:
        """Write the query down as a running message of this conversation."""
        self._journal.add_conversation(self.id, end_user_id=self.end_user_id)
        self._message = self._journal.begin_message(self.id, query, sent_by=sent_by)
        return self._message

    def _run(
        self,
        message_id: int,
        send: Callable[[], Iterator[Event]],
        *,
        stream: bool,
        posted: ToolBatch | None = None,
        accepted: Callable[[], None] | None = None,
    ) -> Iterator[Event]:
        """The one run path of `stream`, `stream_resume` and `stream_recovered`: bring the
        platform's state up to date, `send` (the first response's events), then the rounds,
        journaled; a failure before the first event still ends the message in the journal.

        `accepted` runs once the platform took the request; `posted`: see `_rounds`.
        """
        try:
            self._restore_state()
            first = send()
        except BaseException as exc:
            MessageTrail(self._journal, message_id).close(exc, rounds=0)
            raise
        if accepted is not None:
            accepted()
        return self._journaled(self._rounds(first, stream=stream, posted=posted), message_id)

    def _journaled(self, events: Iterator[Event], message_id: int) -> Iterator[Event]:
        """Pass a run's events through; write how its message ended."""
        trail = MessageTrail(self._journal, message_id)
        try:
            for event in events:
                trail.see(event)
                yield event
        except BaseException as exc:
            trail.close(exc, rounds=self.last_rounds)
            raise
        trail.close(None, rounds=self.last_rounds)

    def _rounds(
        self, events: Iterator[Event], *, stream: bool, posted: ToolBatch | None = None
    ) -> Iterator[Event]:
        """Read a run's events; answer each tool batch; stop at the end of the run.

        `posted`: a batch whose outputs a crash may have delivered already (recovery).
        """
        self.last_rounds = 0
        runs_this_ask: list[ToolRun] = []
        try:
            while True:
                batch = yield from self._read_until_pause(events)
                if batch is None:
                    return
                if batch is posted:
                    self.last_rounds += 1
                    runs = [self.ledger[call.call_id] for call in batch.calls]
                    runs_this_ask.extend(runs)
                    events = self._deliver(batch, runs, stream=stream, may_have_arrived=True)
                    continue
                if self.last_rounds >= self._options.max_rounds:
                    raise MaxRoundsError(
                        f"the agent asked for tools in more than {self._options.max_rounds} "
                        "rounds; raise max_rounds if this is expected",
                        conversation_id=self._id,
                        request_id=batch.resume.get("request_id"),
                        tool_runs=runs_this_ask,
                    )
                self.last_rounds += 1
                runs = yield from self._run_batch(batch)
                runs_this_ask.extend(r for r in runs if r not in runs_this_ask)
                events = self._deliver(batch, runs, stream=stream)
        except BridgeError as exc:
            # Nothing computed is lost: the caller finds the finished runs on the error.
            if not exc.tool_runs:
                exc.tool_runs = runs_this_ask
            raise

    def _deliver(
        self,
        batch: ToolBatch,
        runs: Sequence[ToolRun],
        *,
        stream: bool,
        may_have_arrived: bool = False,
    ) -> Iterator[Event]:
        """Post a batch's outputs: "submitting" before, "submitted" once the platform took them.

        The platform answers the post before its stream is read, so "submitted" means accepted.
        """
        ledger = self.ledger
        if not may_have_arrived:
            ledger.submitting(batch)
        try:
            events = self._platform.submit(
                self.platform_conversation_id,
                batch,
                [run.to_result() for run in runs],
                end_user_id=self.end_user_id,
                stream=stream,
            )
        except NotFoundError as exc:
            # The platform conversation no longer exists (it expired, was deleted, or an
            # emulator restarted without its state; typically met by a recovery after a
            # restart): the outputs have nowhere to go. The next message continues in a new
            # platform conversation (`_on_platform`).
            raise NotFoundError(
                f"the {self._platform.name} platform no longer knows conversation "
                f"{self.platform_conversation_id}, so the outputs of the {len(runs)} call(s) "
                f"that ran could not be delivered ({exc.message}); ask again: the next message "
                "continues in a new platform conversation",
                request_id=exc.request_id,
                status_code=exc.status_code,
                code=exc.code,
            ) from None
        except _REFUSALS as exc:
            if not may_have_arrived:
                raise
            # The platform validates call ids, so it refuses outputs it already has (or for
            # calls it stopped waiting for): the post before the crash arrived.
            logger.warning(
                "the outputs of batch %s had reached the platform before the restart (%s); "
                "they are not sent twice, and the answer they led to is lost",
                batch.batch_id,
                exc,
            )
            ledger.submit(batch)
            raise RunInterruptedError(
                INTERRUPTED_MESSAGE, conversation_id=self._id, request_id=exc.request_id
            ) from None
        ledger.submit(batch)
        return events

    def _on_platform(self, send: Callable[[str], Iterator[Event]]) -> Iterator[Event]:
        """`send` a new query to the platform conversation; once more to a fresh one if the
        platform refuses it because an interrupted run left it waiting (for tool outputs of
        calls the bridge never saw, typically), or because it lost the conversation (a platform
        that keeps histories in memory, after the bridge restarted; a conversation that expired
        or was deleted on the platform, or an emulator that restarted without its state).

        If the new platform conversation cannot be made either (a wrong app id answers "not
        found" to that too), that error is raised: nothing is papered over."""
        old = self.platform_conversation_id
        try:
            return send(old)
        except (ConversationLostError, NotFoundError) as exc:
            # A conversation of this journal that the platform no longer knows: its history
            # is gone, but the conversation must still take its next message.
            if not self._earlier_messages():
                raise
            reason = f"the platform no longer knows {old}: {exc}"
        except _REFUSALS as exc:
            if not self._platform_may_be_stuck():
                raise
            reason = f"{old} refused a new query after an interrupted run: {exc}"
        new = self._platform.create_conversation(end_user_id=self.end_user_id)
        self._journal.replace_platform_conversation(self.id, new, reason=reason)
        self._platform_id = new
        logger.warning(
            "conversation %s continues in a new platform conversation %s: %s", self.id, new, reason
        )
        return send(new)

    def _restore_state(self) -> None:
        """Give the platform its journaled state of the platform conversation, unless this
        bridge wrote it and the platform still holds it."""
        if self._id is None:
            return
        # Read again: another process on the journal may have moved the conversation on.
        self._platform_id = None
        platform = self._platform
        if not exports_state(platform):
            return
        platform_id = self.platform_conversation_id
        record = self._journal.platform_state(self._id, platform_id)
        if record is None:
            return
        if record.writer == self._bridge.state_writer and knows_conversation(platform, platform_id):
            return
        if record.platform != platform.name:
            logger.warning(
                "conversation %s: the journaled state of %s is for the %s platform, not %s; "
                "it is not used",
                self._id,
                platform_id,
                record.platform,
                platform.name,
            )
            return
        try:
            import_state_into(platform, platform_id, record.state)
        except UsageError as exc:
            # As if the state were lost: the conversation goes on in a new platform
            # conversation (`_on_platform`), the journal keeps the history.
            logger.warning(
                "conversation %s: the %s platform refused the journaled state of %s: %s",
                self._id,
                platform.name,
                platform_id,
                exc,
            )
            return
        logger.info(
            "conversation %s: platform state of %s restored from the journal (written %s)",
            self._id,
            platform_id,
            record.updated_at.isoformat(),
        )

    def _snapshot(self) -> StateSnapshot | None:
        """The platform's state of the platform conversation now, to journal (None: none)."""
        platform_id = self.platform_conversation_id
        state = export_state_of(self._platform, platform_id)
        if state is None:
            return None
        return StateSnapshot(
            platform_conversation_id=platform_id,
            platform=self._platform.name,
            state=state,
            writer=self._bridge.state_writer,
        )

    def _save_state(self) -> None:
        snapshot = self._snapshot()
        if snapshot is not None:
            self._journal.save_platform_state(self.id, snapshot)

    def _earlier_messages(self) -> list[MessageRecord]:
        """The journal's messages of this conversation before the one being sent."""
        return [m for m in self._journal.messages(self.id) if m.message_id != self._message]

    def _platform_may_be_stuck(self) -> bool:
        """True when the message before this one ended without an answer or a question."""
        earlier = self._earlier_messages()
        return bool(earlier) and not earlier[-1].platform_settled

    def _read_until_pause(
        self, events: Iterator[Event]
    ) -> Generator[Event, None, ToolBatch | None]:
        """Yield one response's events; return the tool batch it ends on, if any.

        The whole response is read, so a duplicated interrupt event merges into one batch.
        """
        batch: ToolBatch | None = None
        for event in events:
            self._notify(event)
            if isinstance(event, ToolCallsRequested):
                batch = event.batch if batch is None else _merge(batch, event.batch)
            elif isinstance(event, HumanInputRequested | RunFinished | RunFailed):
                # Before the event goes out: a consumer may stop reading at it. (A pause for
                # tools is journaled with its batch, in `_run_batch`.)
                self._save_state()
                if isinstance(event, HumanInputRequested):
                    self.pending_input = event
            yield event
        return batch

    def _run_batch(self, batch: ToolBatch) -> Generator[Event, None, list[ToolRun]]:
        """Run the calls of a batch that never ran; yield their start/finish events."""
        ledger = self.ledger
        ledger.receive(batch, self._message, self._snapshot())
        fresh, interrupted = ledger.plan(batch, self._toolbox.is_idempotent)
        allowed, rejected, waiting = self._approve(fresh)
        for run in (*interrupted, *rejected):
            ledger.finish(run)
            yield self._emit(ToolCallFinished(run=run))
        for update in self._dispatch(allowed, waiting):
            if isinstance(update, ToolCallFinished):
                ledger.finish(update.run)
            yield self._emit(update)
        return [ledger[call.call_id] for call in batch.calls]

    def _approve(
        self, calls: list[ToolCall]
    ) -> tuple[list[ToolCall], list[ToolRun], list[ToolCall]]:
        """Split calls into those allowed to run, rejection records, and calls that wait for
        a person who answers later (a `DeferredApprover`)."""
        toolbox = self._toolbox
        if self._options.deferred_approver is not None:
            waiting = [call for call in calls if needs_approval(toolbox.get(call.name))]
            asked = {call.call_id for call in waiting}
            return [call for call in calls if call.call_id not in asked], [], waiting
        approve = cast("ApproveHook | None", self._options.approve)
        allowed: list[ToolCall] = []
        rejected: list[ToolRun] = []
        for call in calls:
            verdict = decide(toolbox.get(call.name), call, approve)  # the one shared rule
            if verdict.run:
                allowed.append(call)
            else:
                rejected.append(self._dispatcher.reject(call, verdict.reason))
        return allowed, rejected, []

    def _dispatch(
        self, allowed: list[ToolCall], waiting: list[ToolCall]
    ) -> Iterator[ToolCallStarted | ToolCallFinished]:
        """Run the allowed calls now, and each waiting call once a person approved it (or
        report its rejection); the waits do not hold up the rest of the batch."""
        ledger = self.ledger
        scope = self._conversation_scope()

        def run(calls: list[ToolCall]) -> Iterator[ToolCallStarted | ToolCallFinished]:
            # Each call is journaled "started" by the dispatcher's hook, right before its
            # function may run: a crash before that leaves it "received" (it never ran).
            return self._dispatcher.iter_run(
                calls, scope=scope, before_run=lambda call: ledger.start((call,))
            )

        if not waiting:
            return run(allowed) if allowed else iter(())
        approver = self._options.deferred_approver
        assert approver is not None
        stop = threading.Event()

        def once_decided(call: ToolCall) -> Iterator[ToolCallStarted | ToolCallFinished]:
            digest = arguments_digest(call.name, call.arguments)
            request = ApprovalRequest(self.id, self._message, call, digest, stop)
            verdict = ask_deferred(approver, request)
            if verdict.run:
                yield from run([call])
            else:
                yield ToolCallFinished(run=self._dispatcher.reject(call, verdict.reason))

        sources = [functools.partial(once_decided, call) for call in waiting]
        if allowed:
            sources.insert(0, functools.partial(run, allowed))
        return interleave(sources, stop=stop, name="toolbridge-approval")

    def _conversation_scope(self) -> ConversationScope:
        if self._scope is None:
            self._scope = ConversationScope(self.id, end_user_id=self.end_user_id)
        return self._scope

    def _emit(self, event: Event) -> Event:
        """Tell the hooks about a loop event before it is yielded."""
        if self._listens:
            options = self._options
            if isinstance(event, ToolCallStarted) and options.on_tool_call:
                options.on_tool_call(event.call)
            if isinstance(event, ToolCallFinished) and options.on_tool_result:
                options.on_tool_result(event.run)
            if options.on_event is not None:
                options.on_event(event)
        return event

    def _notify(self, event: Event) -> None:
        on_event = self._options.on_event
        if on_event is not None:
            on_event(event)

    def _collect(self, events: Iterator[Event]) -> Result:
        """Drain a run's events into a `Result`; raise if the run failed."""
        tally = EventTally()
        kept: list[Any] | None = [] if self._options.keep_events else None
        try:
            for event in events:
                if kept is not None:
                    kept.append(event)
                tally.see(event)
                if isinstance(event, RunFailed):
                    raise RunFailedError(
                        f"the agent run failed: {event.message}",
                        conversation_id=self._id,
                        request_id=event.request_id,
                        code=event.code,
                        tool_runs=tally.runs,
                    )
        finally:
            # A failed run leaves the generator suspended: end it now so the journal records
            # how the message ended at once, not whenever it is garbage-collected.
            close = getattr(events, "close", None)
            if close is not None:
                close()
        finished = tally.end if isinstance(tally.end, RunFinished) else None
        return Result(
            answer=tally.answer,
            conversation_id=self.id,
            rounds=self.last_rounds,
            tool_runs=tally.runs,
            usage=finished.usage if finished else None,
            request_ids=tally.request_ids,
            message_id=finished.message_id if finished else None,
            human_input=self.pending_input,
            events=kept,
        )


def _as_toolbox(tools: Toolbox | Iterable[Any] | Any) -> Toolbox:
    """A toolbox from a toolbox, a list of tool objects, or one tool object (e.g. a module)."""
    if isinstance(tools, Toolbox):
        return tools
    if tools is None:
        return Toolbox()
    if isinstance(tools, list | tuple | set | frozenset):
        return Toolbox(tools)
    return Toolbox([tools])


def _journaled_pause(journal: Journal, conversation_id: str) -> HumanInputRequested | None:
    """The question a conversation's last message is waiting on, as the journal has it."""
    messages = journal.messages(conversation_id)
    last = messages[-1] if messages else None
    if last is None or last.status != "waiting_input" or not last.interrupt_id:
        return None
    return HumanInputRequested(interrupt_id=last.interrupt_id, prompt=last.answer)


def _merge(first: ToolBatch, second: ToolBatch) -> ToolBatch:
    """One batch holding every distinct call of two (a duplicated interrupt adds nothing)."""
    seen = {c.call_id for c in first.calls}
    extra = tuple(c for c in second.calls if c.call_id not in seen)
    if not extra:
        return first
    return first.model_copy(update={"calls": first.calls + extra})
