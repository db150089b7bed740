"""The conversation loop: the whole life of one conversation, in one place.

    Conversation.stream(query)
      start(query, manifests) --> events --> TextDelta ...          (yielded as they come)
                                         --> ToolCallsRequested(batch)
      policy and approvals (`bridge.approval_flow`)
      dispatch the batch (concurrently, each call id at most once)
      submit(batch, outputs)  --> events --> ... until RunFinished / RunFailed / max_rounds

Everything platform-specific sits behind `bridge.platforms.base.Platform`; everything about
running tools sits behind `bridge.tools.Dispatcher`; what ran is written down in a
`bridge.journal.Journal` at each step (received, started, finished, submitting, submitted), so
a restarted process never runs a call twice and delivers every finished output exactly once
(`Conversation.stream_recovered`). A platform conversation that a crash left waiting for calls
the bridge never saw is replaced on the next message (`Conversation._on_platform`). This module
only keeps the rounds going, remembers what ran, and reports.

Beside it: `bridge.options` (how conversations run), `bridge.platform_state` (a platform's
state of a conversation, kept in the journal), `bridge.approval_flow` (which calls of a batch
run, are rejected, or wait for a person). `bridge.bridge.Bridge` makes the conversations.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Generator, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import INVALID_SPAN, Link, Span, Status, StatusCode
from pydantic import BaseModel, ConfigDict, Field

from bridge.access.decision import AuditEvent
from bridge.access.principal import Principal
from bridge.approval_flow import (
    CallScope,
    record_outcome,
    run_with_approvals,
    split_for_approval,
)
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
    redact,
    valid_text,
)
from bridge.journal.base import Journal
from bridge.journal.ledger import Ledger, MessageTrail
from bridge.journal.records import INTERRUPTED_MESSAGE, MessageRecord, StateSnapshot
from bridge.options import BridgeOptions
from bridge.platform_state import restore_state, snapshot
from bridge.platforms.base import (
    DescribesItself,
    OpensOnFirstMessage,
    Platform,
    ToolChoiceLike,
    holds_submitted_outputs,
    knows_conversation,
    opens_on_first_message,
)
from bridge.tools._spans import CallSpans
from bridge.tools.context import ConversationScope
from bridge.tools.dispatch import Dispatcher
from bridge.tools.toolbox import Toolbox
from bridge.tracing import (
    RESUMED,
    SpanKind,
    Tracing,
    context_of,
    link_to,
    record_error,
    traceparent_of,
)
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

__all__ = ["BridgeParts", "Conversation", "Result"]

logger = logging.getLogger(__name__)

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


class BridgeParts(Protocol):
    """What a conversation runs on, seen from the loop: its `Bridge` (`bridge.bridge`)."""

    @property
    def platform(self) -> Platform: ...
    @property
    def journal(self) -> Journal: ...
    @property
    def dispatcher(self) -> Dispatcher: ...
    @property
    def toolbox(self) -> Toolbox: ...
    @property
    def options(self) -> BridgeOptions: ...
    @property
    def state_writer(self) -> str:
        """Signs the platform states the bridge journals (`bridge.platform_state`)."""
        ...

    @property
    def tracing(self) -> Tracing:
        """Where the spans of its runs and tool calls go (`bridge.tracing`)."""
        ...

    def checked_tool_choice(self, value: object) -> ToolChoice | ToolChoiceMode | None:
        """`value` as a neutral tool choice naming a loaded tool, or a `UsageError`."""
        ...

    def manifests(self, caller: Principal | None = None) -> list[dict[str, Any]]:
        """What goes out as `tools`: the local tools' manifests (those `caller` may run),
        then the platform's own."""
        ...


class Conversation:
    """One conversation with the agent: ask any number of questions, one at a time."""

    def __init__(self, bridge: BridgeParts, id: str | None, *, end_user_id: str | None) -> None:
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
        self._caller: Principal | None = None
        """Who asked the question being answered (None: the bridge's `caller`)."""
        self._recovering = False
        """The run being answered continues one a crash interrupted (`stream_recovered`)."""
        if id is not None:
            self.pending_input = _journaled_pause(self._journal, id)

    @property
    def bridge(self) -> BridgeParts:
        """The bridge it runs on; the daemon sets another between runs (a new toolbox)."""
        return self._bridge

    @bridge.setter
    def bridge(self, bridge: BridgeParts) -> None:
        # What the loop reads on every round, taken once per bridge rather than per use.
        self._bridge = bridge
        self._platform: Platform = bridge.platform
        self._journal: Journal = bridge.journal
        self._dispatcher: Dispatcher = bridge.dispatcher
        self._toolbox: Toolbox = bridge.toolbox
        self._options: BridgeOptions = bridge.options
        tracing = getattr(bridge, "tracing", None)
        self._tracing: Tracing = tracing if isinstance(tracing, Tracing) else _GLOBAL_TRACING
        self._agent: dict[str, Any] | None = None
        """The run spans' description of the agent, made at the first traced run."""
        self._collecting = False
        """`_collect` drains the run about to start (see `_traced`)."""
        self._collect_tally: EventTally | None = None
        """`_collect`'s tally while it drains a run, until the run's `MessageTrail` takes it
        (both see the same events: one tally for the two)."""
        options = bridge.options
        self._listens = bool(options.on_event or options.on_tool_call or options.on_tool_result)

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
        (created on first use), or a local handle on a platform whose first message creates
        the conversation (`OpensOnFirstMessage`; the platform's id is journaled once known)."""
        if self._id is None:
            platform = self._platform
            if opens_on_first_message(platform):
                self._id = platform.conversation_handle(end_user_id=self.end_user_id)
            else:
                self._id = platform.create_conversation(end_user_id=self.end_user_id)
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
        caller: Principal | None = None,
    ) -> Iterator[Event]:
        """Send `query` and yield every event until the run ends (tools run in between).

        `tool_choice` overrides the bridge's for this question (see `Bridge`).
        `sent_by`: who sent it (journaled with the message, e.g. the daemon's API key name).
        `caller`: who asks (the policy decides for it; it sees and runs only its tools);
        default: the bridge's `caller`.
        """
        self._caller = caller
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
                tools=self.bridge.manifests(self._principal),
                tool_choice=choice,
                end_user_id=self.end_user_id,
                file_ids=ids or None,
                stream=use_stream,
            )

        def accepted() -> None:
            self.pending_input = None  # a new question abandons an unanswered pause

        span = self._open_run()
        message_id = self._begin(query, sent_by, span)
        return self._run(
            message_id,
            lambda: self._on_platform(start),
            stream=use_stream,
            accepted=accepted,
            span=span,
        )

    def stream_resume(
        self,
        answer: str,
        *,
        interrupt_id: str | None = None,
        stream: bool | None = None,
        sent_by: str | None = None,
        caller: Principal | None = None,
    ) -> Iterator[Event]:
        """Like `resume`, yielding events (`caller`: see `stream`).

        `interrupt_id` answers a pause this object did not see (one reported by an earlier
        process, e.g. `toolbridge run --resume ID`); by default the last run's pause.
        """
        if interrupt_id is None:
            if self.pending_input is None:
                raise UsageError("nothing to resume: the last run did not ask for human input")
            interrupt_id = self.pending_input.interrupt_id
        use_stream = self._options.stream if stream is None else stream
        self._caller = caller

        def send() -> Iterator[Event]:
            return self._platform.resume(
                self.platform_conversation_id,
                interrupt_id,
                answer,
                tools=self.bridge.manifests(self._principal),
                end_user_id=self.end_user_id,
                stream=use_stream,
            )

        def accepted() -> None:
            self.pending_input = None  # only now: a refused resume leaves the pause answerable

        # Linked to the run that paused for this answer (it ended when it paused).
        links = self._paused_link(interrupt_id) if self._tracing.enabled else ()
        span = self._open_run(links=links)
        message_id = self._begin(answer, sent_by, span)
        return self._run(message_id, send, stream=use_stream, accepted=accepted, span=span)

    def stream_recovered(
        self,
        message_id: int,
        batch: ToolBatch,
        *,
        submitting: bool = False,
        stream: bool | None = None,
        caller: Principal | None = None,
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
        self._caller = caller

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
        span: Span = INVALID_SPAN
        if self._tracing.enabled:
            # The same trace as the interrupted run (journaled with its message), linked to it.
            original = self._journaled_traceparent(message_id)
            links = link_to(original, **{RESUMED: True})
            current = trace.get_current_span().get_span_context()
            if current.is_valid and links:  # what resumes it (a daemon's recovery, a takeover)
                links.append(Link(current))
            span = self._open_run(parent=context_of(original), links=links)
            if span.is_recording():
                span.set_attribute(RESUMED, True)
                span.set_attribute("toolbridge.message.id", message_id)
                span.set_attribute("gen_ai.conversation.id", self.id)
        self._recovering = True
        return self._run(message_id, pending, stream=use_stream, posted=posted, span=span)

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

    def _begin(self, query: str, sent_by: str | None, span: Span = INVALID_SPAN) -> int:
        """Write the query down as a running message of this conversation (with the trace
        context of its run's `span`, when it records)."""
        self._recovering = False
        try:
            return self._begin_message(query, sent_by, span)
        except BaseException as exc:
            if _live(span):
                record_error(span, exc)
                span.end()
            raise

    def _begin_message(self, query: str, sent_by: str | None, span: Span) -> int:
        if _live(span):
            conversation_id = self._id
            if conversation_id is None:
                # The platform's conversation is made here: its request belongs to the run.
                token = otel_context.attach(trace.set_span_in_context(span))
                try:
                    conversation_id = self.id
                finally:
                    otel_context.detach(token)
            span.set_attribute("gen_ai.conversation.id", conversation_id)
        self._journal.add_conversation(self.id, end_user_id=self.end_user_id)
        audit = self._options.audit
        if audit is not None:  # written in the same transaction as the message
            caller = self._principal
            audit.stage(
                AuditEvent(
                    kind="message",
                    outcome="sent",
                    caller=sent_by if sent_by is not None else caller.name,
                    via=caller.via,
                    conversation_id=self.id,
                )
            )
        traceparent = traceparent_of(span) if _live(span) else None
        if traceparent is None:
            self._message = self._journal.begin_message(self.id, query, sent_by=sent_by)
        else:  # written with the message: a run resumed after a crash continues its trace
            self._message = self._journal.begin_message(
                self.id, query, sent_by=sent_by, traceparent=traceparent
            )
            span.set_attribute("toolbridge.message.id", self._message)
        return self._message

    def _run(
        self,
        message_id: int,
        send: Callable[[], Iterator[Event]],
        *,
        stream: bool,
        posted: ToolBatch | None = None,
        accepted: Callable[[], None] | None = None,
        span: Span = INVALID_SPAN,
    ) -> Iterator[Event]:
        """The one run path of `stream`, `stream_resume` and `stream_recovered`: bring the
        platform's state up to date, `send` (the first response's events), then the rounds,
        journaled; a failure before the first event still ends the message in the journal.

        `accepted` runs once the platform took the request; `posted`: see `_rounds`;
        `span`: the run's ``invoke_agent`` span (current while the run works, ended with it).
        """
        # Current also when the sampler dropped it, so that its children are dropped too.
        context = trace.set_span_in_context(span) if _live(span) else None
        token = otel_context.attach(context) if context is not None else None
        try:
            self._restore_state()
            first = send()
        except BaseException as exc:
            MessageTrail(self._journal, message_id).close(exc, rounds=0)
            if context is not None:
                record_error(span, exc)
                span.end()
            raise
        finally:
            if token is not None:
                otel_context.detach(token)
        if accepted is not None:
            accepted()
        events = self._journaled(self._rounds(first, stream=stream, posted=posted), message_id)
        if context is None:
            return events
        return self._traced(events, span, context)

    def _traced(
        self, events: Iterator[Event], span: Span, context: otel_context.Context
    ) -> Iterator[Event]:
        """Pass a run's events through with its span current while the run works (not while
        the consumer holds an event); end the span however the run ends."""
        end: Event | None = None
        usage: dict[str, Any] | None = None
        error: BaseException | None = None
        # Drained by `_collect` (ask, resume), no code but the loop's own runs between the
        # events: the span stays current for the whole run, attached once rather than around
        # each event (the same spans, parents and sampling either way).
        held = otel_context.attach(context) if self._collecting else None
        self._collecting = False  # taken: a run started by a hook meanwhile is not drained
        try:
            while True:
                if held is not None:
                    try:
                        event = next(events)
                    except StopIteration:
                        break
                else:
                    token = otel_context.attach(context)
                    try:
                        event = next(events)
                    except StopIteration:
                        break
                    finally:
                        otel_context.detach(token)
                if isinstance(event, RunFinished | RunFailed | HumanInputRequested):
                    end = event
                    if isinstance(event, RunFinished) and event.usage:
                        usage = event.usage
                yield event
        except BaseException as exc:
            error = exc
            raise
        finally:
            close = getattr(events, "close", None)
            try:
                if close is not None:  # the consumer stopped early: the run ends with it
                    closing = otel_context.attach(context) if held is None else None
                    try:
                        close()
                    finally:
                        if closing is not None:
                            otel_context.detach(closing)
                _end_run_span(span, end, usage, error, self.last_rounds)
            finally:
                if held is not None:
                    otel_context.detach(held)

    def _journaled(self, events: Iterator[Event], message_id: int) -> Iterator[Event]:
        """Pass a run's events through; write how its message ended."""
        tally, self._collect_tally = self._collect_tally, None
        if tally is None:
            tally = EventTally()
        trail = MessageTrail(self._journal, message_id, tally)
        see = tally.see  # what `trail.see` does, one call fewer per event
        try:
            for event in events:
                see(event)
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
                    _note_recorded(runs)
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
        # With the platform's state when it holds the outputs from now on (a client-side
        # history): after a crash here the conversation goes on from them.
        state = self._snapshot() if holds_submitted_outputs(self._platform) else None
        ledger.submit(batch, state)
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
            events = send(old)
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
        else:
            if old == self._id and opens_on_first_message(self._platform):
                self._map_opened(self._platform, old, events)
            return events
        new = self._platform.create_conversation(end_user_id=self.end_user_id)
        self._journal.replace_platform_conversation(self.id, new, reason=reason)
        self._platform_id = new
        logger.warning(
            "conversation %s continues in a new platform conversation %s: %s", self.id, new, reason
        )
        return send(new)

    def _map_opened(
        self, platform: OpensOnFirstMessage, handle: str, events: Iterator[Event]
    ) -> None:
        """Journal the platform conversation that the first message of `handle` opened,
        before any event of the run is read (a batch, a state, a submit need it). A crash
        before this write leaves `handle` unmapped: no tool ran, and its next message opens
        another platform conversation."""
        opened = platform.opened_conversation(handle)
        if opened is None or opened == handle:
            return
        try:  # no reason: the first platform conversation, in place of the handle
            self._journal.replace_platform_conversation(handle, opened, reason="")
        except BaseException:
            close = getattr(events, "close", None)
            if close is not None:  # the run ends here: its chat is cancelled
                close()
            raise
        self._platform_id = opened

    def _restore_state(self) -> None:
        """Give the platform its journaled state of the platform conversation, unless this
        bridge wrote it and the platform still holds it."""
        if self._id is None:
            return
        # Read again: another process on the journal may have moved the conversation on.
        self._platform_id = None
        restore_state(
            self._platform,
            self._journal,
            self._id,
            lambda: self.platform_conversation_id,
            writer=self._bridge.state_writer,
        )

    def _snapshot(self) -> StateSnapshot | None:
        """The platform's state of the platform conversation now, to journal (None: none)."""
        return snapshot(
            self._platform, self.platform_conversation_id, writer=self._bridge.state_writer
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
        options = self._options
        for event in events:
            if options.on_event is not None:  # the hook sees each platform event first
                options.on_event(event)
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
        spans = self._call_spans(batch, fresh, interrupted) if self._tracing.enabled else None
        allowed, rejected, waiting = split_for_approval(
            fresh, self._toolbox, self._options, self._dispatcher, self._call_scope(), spans=spans
        )
        audit = self._options.audit is not None
        for run in (*interrupted, *rejected):
            if audit:
                record_outcome(self._options, self._call_scope(), run, self._toolbox)
            ledger.finish(run)
            yield self._emit(ToolCallFinished(run=run))
        if spans is not None:
            for run in rejected:  # refused or rejected: never ran, still a call on the trace
                spans.close(run)
        for update in self._dispatch(allowed, waiting, spans):
            if isinstance(update, ToolCallFinished):
                if audit:  # staged: written in the same transaction as the call's finish
                    record_outcome(self._options, self._call_scope(), update.run, self._toolbox)
                ledger.finish(update.run)
            yield self._emit(update)
        return [ledger[call.call_id] for call in batch.calls]

    def _dispatch(
        self, allowed: list[ToolCall], waiting: list[ToolCall], spans: CallSpans | None = None
    ) -> Iterator[ToolCallStarted | ToolCallFinished]:
        """Run the allowed calls now, and each waiting call once a person approved it (or
        report its rejection); the waits do not hold up the rest of the batch."""
        ledger = self.ledger
        scope = self._conversation_scope()

        def started(call: ToolCall) -> None:
            # With the trace context of this execution, in the same write.
            ledger.start((call,), spans.traceparents((call,)) if spans is not None else None)

        def run(calls: list[ToolCall]) -> Iterator[ToolCallStarted | ToolCallFinished]:
            # Each call is journaled "started" by the dispatcher's hook, right before its
            # function may run: a crash before that leaves it "received" (it never ran).
            if spans is None:
                return self._dispatcher.iter_run(
                    calls, scope=scope, before_run=lambda call: ledger.start((call,))
                )
            return self._dispatcher.iter_run(calls, scope=scope, before_run=started, spans=spans)

        return run_with_approvals(
            allowed,
            waiting,
            run,
            options=self._options,
            dispatcher=self._dispatcher,
            conversation_id=self.id,
            message_id=self._message,
            spans=spans,
            journal=self._journal,
        )

    # --- spans ----------------------------------------------------------------------------------

    def _open_run(
        self, *, parent: otel_context.Context | None = None, links: Sequence[Any] = ()
    ) -> Span:
        """The ``invoke_agent`` span of a run (`INVALID_SPAN`, no work, when tracing is off)."""
        tracing = self._tracing
        if not tracing.enabled:
            return INVALID_SPAN
        agent = self._agent
        if agent is None:
            agent = self._agent = _describe_agent(self._platform)
        caller = self._principal
        attributes = dict(agent)
        attributes["toolbridge.caller"] = caller.name
        attributes["toolbridge.caller.via"] = caller.via
        label = (
            agent.get("gen_ai.agent.name") or agent.get("gen_ai.agent.id") or self._platform.name
        )
        kind = (
            SpanKind.CLIENT
            if agent["gen_ai.provider.name"] in _REMOTE_AGENTS
            else SpanKind.INTERNAL
        )
        return tracing.start(
            f"invoke_agent {label}", kind=kind, attributes=attributes, links=links, parent=parent
        )

    def _paused_link(self, interrupt_id: str) -> list[Any]:
        """A link to the span of the run that paused on `interrupt_id`, if it was traced."""
        if self._id is None:
            return []
        for message in reversed(self._journal.messages(self._id)):
            if message.interrupt_id == interrupt_id:
                return link_to(message.traceparent)
        return []

    def _journaled_traceparent(self, message_id: int) -> str | None:
        for message in self._journal.messages(self.id):
            if message.message_id == message_id:
                return message.traceparent
        return None

    def _call_spans(
        self, batch: ToolBatch, fresh: list[ToolCall], interrupted: list[ToolRun]
    ) -> CallSpans:
        """The ``execute_tool`` spans of a batch (children of the run's span, current now).

        Calls that ran before a crash are not executed again, so they get no span: only an
        event on the run's span. An idempotent call that a crash interrupted runs again in a
        new span linked to the interrupted execution's."""
        caller = self._principal
        spans = CallSpans(
            self._tracing,
            attributes={
                "gen_ai.conversation.id": self.id,
                "toolbridge.caller": caller.name,
                "toolbridge.caller.via": caller.via,
            },
            tool_type=self._dispatcher.tool_type,
        )
        run_span = trace.get_current_span()
        again = {call.call_id for call in fresh}
        skipped = {run.call_id for run in interrupted}
        for call in batch.calls:
            if call.call_id in again:
                if self._recovering:
                    record = self._journal.get_call(self.id, call.call_id)
                    if record is not None and record.state == "started":
                        spans.resumed(call.call_id, record.traceparent)
            elif run_span.is_recording():
                name = "interrupted" if call.call_id in skipped else "recorded"
                run_span.add_event(
                    f"toolbridge.tool.call.{name}",
                    {"gen_ai.tool.name": call.name, "gen_ai.tool.call.id": call.call_id},
                )
        return spans

    @property
    def _principal(self) -> Principal:
        return self._caller if self._caller is not None else self._options.principal

    def _call_scope(self) -> CallScope:
        """Who asks and where, for the policy and the audit record."""
        return CallScope(self._principal, self._platform.name, self.id, self.end_user_id or "")

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

    def _collect(self, events: Iterator[Event]) -> Result:
        """Drain a run's events into a `Result`; raise if the run failed."""
        tally = EventTally()
        kept: list[Any] | None = [] if self._options.keep_events else None
        self._collecting = True  # taken by the run's first event (`_traced`)
        # Taken by the run's trail (`_journaled`, which starts with the first event and sees
        # each event before it comes here); known by the first event, before any hook ran.
        self._collect_tally = tally
        noted: bool | None = None
        try:
            for event in events:
                if noted is None:
                    noted = self._collect_tally is not tally
                if kept is not None:
                    kept.append(event)
                if not noted:
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
            self._collecting = False
            self._collect_tally = None
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


def _live(span: Span) -> bool:
    """A run's span that exists (recorded, or dropped by the sampler): not `INVALID_SPAN`."""
    return span.get_span_context().is_valid


_GLOBAL_TRACING = Tracing()
"""For a bridge without its own `Tracing`: the global provider."""

_PROVIDERS = {"openai": "openai", "responses": "openai", "openai_chat": "openai"}
_PROVIDERS["openai_responses"] = "openai"
"""Adapter names whose `gen_ai.provider.name` is another (the API's owner)."""

_REMOTE_AGENTS = frozenset({"appbuilder", "coze"})
"""Providers whose agent runs on their side (a CLIENT span calls it); with the others the
agent is this loop around a model (an INTERNAL span)."""


def _describe_agent(platform: Platform) -> dict[str, Any]:
    """The run spans' attributes describing the agent a platform adapter talks to."""
    name = getattr(platform, "name", "") or type(platform).__name__
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.provider.name": _PROVIDERS.get(name, name),
    }
    if isinstance(platform, DescribesItself):
        try:
            described = platform.describe()
        except Exception:  # a status description must never fail a run
            logger.debug("describing the platform for the run's span failed", exc_info=True)
        else:
            if described.app_id:
                attributes["gen_ai.agent.id"] = described.app_id
            if described.model:
                attributes["gen_ai.request.model"] = described.model
    agent_name = getattr(platform, "agent_name", None)
    if isinstance(agent_name, str) and agent_name:
        attributes["gen_ai.agent.name"] = agent_name
    return attributes


def _end_run_span(
    span: Span,
    end: Event | None,
    usage: dict[str, Any] | None,
    error: BaseException | None,
    rounds: int,
) -> None:
    """End a run's span with what it did: rounds, usage, and how it failed if it did."""
    if not span.is_recording():  # dropped by the sampler: nothing to write on it
        span.end()
        return
    attributes: dict[str, Any] = {"toolbridge.rounds": rounds}
    if usage:
        tokens_in = usage.get("input_tokens", usage.get("prompt_tokens"))
        tokens_out = usage.get("output_tokens", usage.get("completion_tokens"))
        if isinstance(tokens_in, int):
            attributes["gen_ai.usage.input_tokens"] = tokens_in
        if isinstance(tokens_out, int):
            attributes["gen_ai.usage.output_tokens"] = tokens_out
    if isinstance(end, RunFinished) and end.message_id:
        attributes["gen_ai.response.id"] = end.message_id
    span.set_attributes(attributes)  # one lock taken, not one per attribute
    if isinstance(error, GeneratorExit) and end is None:
        # The consumer stopped reading before the run ended.
        span.set_attribute("error.type", "abandoned")
        span.set_status(Status(StatusCode.ERROR, "the caller stopped reading the run"))
    elif error is not None and not isinstance(error, GeneratorExit):
        record_error(span, error)
    elif isinstance(end, RunFailed):  # closed after its last event, or read to the end
        span.set_attribute("error.type", end.code or "RunFailed")
        span.set_status(Status(StatusCode.ERROR, redact(valid_text(end.message))[:500]))
    span.end()


def _note_recorded(runs: Sequence[ToolRun]) -> None:
    """Calls whose outputs are sent again after a crash: they did not run again, so no
    ``execute_tool`` span, only an event on the run's span."""
    span = trace.get_current_span()
    if not span.is_recording():
        return
    for run in runs:
        span.add_event(
            "toolbridge.tool.call.recorded",
            {"gen_ai.tool.name": run.name, "gen_ai.tool.call.id": run.call_id},
        )


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
