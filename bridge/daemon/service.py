"""The daemon's core, without HTTP: toolboxes, live conversations, runs, drain.

    Service
      tools                 the loaded tools: toolbox + dispatcher + Bridge (a reload makes a new
                            one, numbered; running conversations finish on the one they started
                            with)
      start_message()       one run per conversation (409 otherwise), queued on the `RunPool`
      _execute()            worker thread: Conversation.stream -> events -> RunHandle
      drain()               SIGTERM: refuse new work, wait `grace` for running runs
      approvals             the `ApprovalDesk` confirm calls wait at (`bridge.daemon.approvals`)

Replicas: the app runs `bridge.daemon.recovery.keep_leases` beside the service on a shared
journal (renew this replica's leases, take over the messages of replicas that died). A run
holds its conversation's lease (`bridge.journal` leases) from before its message is written
until its last write, so another daemon on the same PostgreSQL journal answers 409 for that
conversation meanwhile, takes the message over if this one dies, and a run whose lease was
taken over can write nothing more (fencing).

Conversations stay in memory between messages, with their `ToolContext` state and resources,
until they have been idle for `idle_timeout` seconds; then their resources are released.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import importlib
import logging
import sys
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from bridge.access import (
    AuditEvent,
    CallFacts,
    Decides,
    ForbiddenError,
    Permission,
    Principal,
    Records,
    ToolPatterns,
    decide_or_refuse,
)
from bridge.bridge import Bridge
from bridge.conversation import Conversation
from bridge.daemon.approvals import ApprovalDesk
from bridge.daemon.errors import ApiError
from bridge.daemon.hub import EventHub
from bridge.daemon.metrics import Metrics
from bridge.daemon.pool import RunPool
from bridge.daemon.runs import (
    RunFailure,
    RunHandle,
    RunOutcome,
    RunTally,
    StreamedText,
    event_payload,
)
from bridge.daemon.webhook import ApprovalWebhook
from bridge.errors import BridgeError, PlatformError, UsageError, redact_data
from bridge.journal.leases import LeaseJournal
from bridge.journal.records import (
    ConversationRecord,
    Lease,
    LeaseHeldError,
    LeaseLostError,
    PendingBatch,
    now,
)
from bridge.loading import load_tools
from bridge.tools.dispatch import Dispatcher
from bridge.tools.spec import ToolSpec
from bridge.tools.toolbox import Toolbox
from bridge.tracing import Tracing
from bridge.types import (
    Event,
    ToolCall,
    ToolCallFinished,
    ToolCallsRequested,
    ToolChoice,
    ToolChoiceMode,
    ToolRun,
)

if TYPE_CHECKING:
    from bridge.daemon.settings import DaemonSettings
    from bridge.platforms.base import Platform

__all__ = ["LoadedTools", "Service", "may_read", "may_send"]

logger = logging.getLogger(__name__)

KNOWN_CONVERSATIONS = 100_000
"""Conversations `Service` remembers as existing (about 100 bytes each)."""


@dataclass(eq=False)
class LoadedTools:
    """One loaded toolbox and the `Bridge` that runs it.

    `number` goes up by one with every reload (the HTTP API calls it the tools' `generation`;
    not to be confused with a lease's generation).
    """

    number: int
    toolbox: Toolbox
    dispatcher: Dispatcher
    bridge: Bridge
    loaded_at: datetime
    specs: tuple[str, ...]
    runs: int = 0
    """Runs using these tools right now."""
    retired: bool = False
    """A reload replaced it: it is closed when its last run ends."""

    def visible(self, principal: Principal | None) -> list[ToolSpec]:
        """The tools `principal` may see and run (every one for None)."""
        return [
            spec
            for spec in self.toolbox
            if principal is None or principal.may_run(spec.name, spec.source)
        ]

    def close(self) -> None:
        """Stop the dispatcher's threads and the toolbox's sources (MCP server processes)."""
        self.dispatcher.close()
        self.toolbox.close()


@dataclass
class _Job:
    query: str = ""
    tool_choice: ToolChoice | ToolChoiceMode | None = None
    end_user_id: str | None = None
    recover: tuple[int, PendingBatch] | None = None
    sent_by: str | None = None
    lease: Lease | None = None
    principal: Principal | None = None
    """Whose tools the run offers and runs (None: every tool, a daemon without callers)."""


@dataclass
class _Live:
    conversation: Conversation
    last_used: float = field(default_factory=time.monotonic)
    running: bool = False
    generation: int | None = None
    """The lease generation of its last run here: if the next lease is not the one after it,
    another replica ran the conversation meanwhile and this in-memory state is stale."""


class Service:
    """Owns the platform, the journal, the toolbox and every run.

    Args:
        settings: the daemon's settings.
        platform: the agent platform (closed by `close`).
        journal: where everything is written down (closed by `close` unless runs are left).
        policy: decides each tool call (None: every call allowed).
        audit: the audit record (None: none kept).
        tracing: where its spans go (default: the global tracer provider).

    Raises:
        UsageError: the tool specs cannot be loaded.
    """

    def __init__(
        self,
        settings: DaemonSettings,
        platform: Platform,
        journal: LeaseJournal,
        *,
        policy: Decides | None = None,
        audit: Records | None = None,
        tracing: Tracing | None = None,
    ) -> None:
        self.settings = settings
        self.tracing = tracing if tracing is not None else Tracing()
        """Where the daemon's spans go: its requests', its runs', its recoveries'."""
        self.platform = platform
        self.journal = journal
        self.replica_id = settings.replica()
        journal.bind_replica(self.replica_id)
        self.hub = EventHub()
        self.started_at = now()
        self.public_url = ""
        """The daemon's URL once it listens (set by the server), for links it sends out."""
        webhook = settings.approval_webhook
        self.approvals = ApprovalDesk(
            journal,
            timeout=settings.approval_timeout,
            publish_run=self._publish_run,
            hub=self.hub,
            count=lambda outcome: self.metrics.approvals.inc(outcome),
            webhook=ApprovalWebhook(webhook) if webhook else None,
            base_url=lambda: self.public_url,
        )
        self.policy = policy
        """The policy deciding each tool call (`--policy`): the loop's, and direct calls'."""
        self.audit = audit
        """The audit record (None: none kept)."""
        self.principal_named: Callable[[str], Principal | None] = lambda name: None
        """The caller named so now (the app's door), for the runs that resume a message."""
        self.tools = self._load(1)
        self.last_reload_error: str | None = None
        self.draining = False
        self.recovering = 0
        self._drain_deadline = 0.0
        self._active: dict[str, RunHandle] = {}
        self._live: dict[str, _Live] = {}
        self._live_lock = threading.Lock()
        self._known: OrderedDict[str, tuple[str | None, str | None]] = OrderedDict()
        """Conversations known to exist -> their end_user_id and owner (neither ever changes:
        the journal never deletes a conversation), so a message needs no journal read."""
        self.pool: RunPool | None = None
        self.metrics = Metrics(
            in_flight=lambda: self.in_flight,
            queued=lambda: self.pool.waiting if self.pool else 0,
            tools_loaded=lambda: len(self.tools.toolbox),
            approvals_pending=self.approvals.pending,
            replica=self.replica_id,
        )
        self._loop: asyncio.AbstractEventLoop | None = None
        self._reload_lock: asyncio.Lock | None = None
        self._janitor: asyncio.Task[None] | None = None

    # --- lifecycle -------------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the workers and the idle-conversation janitor (on the serving loop)."""
        self._loop = asyncio.get_running_loop()
        self.hub.bind(self._loop)
        self._reload_lock = asyncio.Lock()
        self.pool = RunPool(self.settings.workers)
        self._janitor = asyncio.create_task(self._sweep_idle())

    def begin_drain(self) -> None:
        """Refuse new work from now on; runs in progress get `grace` seconds."""
        if not self.draining:
            self.draining = True
            self._drain_deadline = time.monotonic() + self.settings.grace
            # Console pages follow the hub forever: end their streams so the server can stop.
            self.hub.close("the daemon is shutting down")
            logger.info(
                "stopping: %d run(s) in progress get up to %g s to finish",
                len(self._active),
                self.settings.grace,
            )

    async def drain(self) -> int:
        """Wait until every run ended or the grace period is over; returns how many are left."""
        self.begin_drain()
        handles = list(self._active.values())
        remaining = self._drain_deadline - time.monotonic()
        if handles and remaining > 0:
            await asyncio.wait(
                [asyncio.ensure_future(h.wait()) for h in handles], timeout=remaining
            )
        left = [h for h in handles if not h.done]
        for handle in left:
            logger.warning(
                "the run of conversation %s did not end within the grace period; it stays in "
                "the journal and is recovered on the next start",
                handle.conversation_id,
                extra={"conversation_id": handle.conversation_id},
            )
        return len(left)

    async def close(self, runs_left: int) -> None:
        """Release everything; with runs left, keep what they still use (they are abandoned)."""
        if self._janitor is not None:
            self._janitor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._janitor
        if self.pool is not None:
            self.pool.close()
        with self._live_lock:
            idle = [live for live in self._live.values() if not live.running]
            self._live.clear()
        for live in idle:
            await asyncio.to_thread(live.conversation.close)
        if self.approvals.webhook is not None:
            await asyncio.to_thread(self.approvals.webhook.close)
        if runs_left == 0:
            self.tools.close()
            self.platform.close()
            self.journal.close()

    # --- toolbox ---------------------------------------------------------------------------------

    def _load(self, number: int) -> LoadedTools:
        specs = tuple(self.settings.tools)
        _refresh_modules(specs)
        toolbox = load_tools(list(specs), allow_hosts=self.settings.allow_hosts)
        provider = self.tracing.provider  # None: the global one
        dispatcher = Dispatcher(
            toolbox, default_timeout=self.settings.tool_timeout, tracer_provider=provider
        )
        bridge = Bridge(
            self.platform,
            dispatcher=dispatcher,
            journal=self.journal,
            max_rounds=self.settings.max_rounds,
            stream=True,
            approve=self.approvals,
            policy=self.policy,
            audit=self.audit,
            tracer_provider=provider,
        )
        return LoadedTools(number, toolbox, dispatcher, bridge, now(), specs)

    def record(self, event: AuditEvent) -> None:
        """Append `event` to the audit record, when the daemon keeps one."""
        if self.audit is not None:
            self.audit.record(event)

    async def reload(self) -> LoadedTools:
        """Load the tool specs again; on any error keep the current toolbox and raise 422."""
        assert self._reload_lock is not None
        async with self._reload_lock:
            old = self.tools
            try:
                new = await asyncio.to_thread(self._load, old.number + 1)
            except Exception as exc:
                reason = (
                    str(exc) if isinstance(exc, BridgeError) else f"{type(exc).__name__}: {exc}"
                )
                self.last_reload_error = reason
                self.metrics.reloads.inc("failed")
                self.hub.publish("tools_reload_failed", {"generation": old.number, "error": reason})
                logger.warning("tool reload failed, keeping generation %d: %s", old.number, reason)
                raise ApiError(
                    422,
                    "reload_failed",
                    f"the tool specs could not be loaded, so the previous toolbox "
                    f"({len(old.toolbox)} tools) is kept: {reason}",
                ) from None
            with self._live_lock:
                self.tools = new
                old.retired = True
                idle = old.runs == 0
            if idle:
                await asyncio.to_thread(old.close)
            self.last_reload_error = None
            self.metrics.reloads.inc("ok")
            logger.info("tools reloaded: generation %d, %d tool(s)", new.number, len(new.toolbox))
            self.hub.publish(
                "tools_reloaded", {"generation": new.number, "tools": new.toolbox.names()}
            )
            return new

    # --- conversations ---------------------------------------------------------------------------

    def _check_accepting(self) -> None:
        if self.draining:
            raise ApiError(
                503, "shutting_down", "the daemon is shutting down; retry against the next one"
            )

    async def create_conversation(
        self, end_user_id: str | None, created_by: str | None = None
    ) -> ConversationRecord:
        """Open a conversation on the platform and record it (`created_by`: its owner)."""
        self._check_accepting()
        try:
            record = await asyncio.to_thread(self._create_conversation, end_user_id, created_by)
        except PlatformError as exc:
            raise ApiError(
                502,
                "platform_error",
                f"the platform could not open a conversation: {exc}",
                platform_request_id=exc.request_id,
            ) from None
        self._remember(record.conversation_id, record.end_user_id, record.created_by)
        self.hub.publish("conversation_created", record.model_dump(mode="json"))
        return record

    def _remember(
        self, conversation_id: str, end_user_id: str | None, created_by: str | None
    ) -> None:
        """Note that a conversation exists (on the loop; the oldest are forgotten)."""
        self._known[conversation_id] = (end_user_id, created_by)
        self._known.move_to_end(conversation_id)
        if len(self._known) > KNOWN_CONVERSATIONS:
            self._known.popitem(last=False)

    async def owner_of(self, conversation_id: str) -> tuple[bool, str | None]:
        """Whether a conversation exists, and who opened it (None: nobody)."""
        known = self._known.get(conversation_id)
        if known is not None:
            return True, known[1]
        record = await asyncio.to_thread(self.journal.get_conversation, conversation_id)
        if record is None:
            return False, None
        self._remember(conversation_id, record.end_user_id, record.created_by)
        return True, record.created_by

    def _create_conversation(
        self, end_user_id: str | None, created_by: str | None
    ) -> ConversationRecord:
        conversation_id = self.platform.create_conversation(end_user_id=end_user_id)
        self.journal.add_conversation(
            conversation_id, end_user_id=end_user_id, created_by=created_by
        )
        record = self.journal.get_conversation(conversation_id)
        assert record is not None
        return record

    @property
    def in_flight(self) -> int:
        """Runs in progress or queued."""
        return len(self._active)

    def running(self) -> list[str]:
        """The conversations with a run here (in progress or queued)."""
        return list(self._active)

    def active(self, conversation_id: str) -> RunHandle | None:
        """The run in progress in a conversation, if any."""
        return self._active.get(conversation_id)

    async def call_tool(
        self,
        name: str,
        arguments: dict[str, Any],
        *,
        confirm: bool,
        caller: str | None,
        principal: Principal | None = None,
    ) -> ToolRun:
        """Run one tool outside any conversation (the console's "try it").

        The confirm rule holds here too: a ``confirm=True`` tool runs only with `confirm`, the
        caller's explicit decision (409 ``confirmation_required`` otherwise). The call is
        journaled as a direct call: "started" before the tool runs (who called, the tool and
        its arguments, who approved a confirm tool's call: the caller), then its outcome; a
        journal that cannot take the first write means the tool does not run.

        `principal` (the caller): a tool outside its list is "no such tool" (404, as if it
        did not exist); the policy's decision is taken (refused: 403 ``policy_refused``; one
        needing a person's approval: 409 ``approval_required``, a direct call cannot wait).
        """
        self._check_accepting()
        spec = self._visible_tool(self.tools, name, principal)
        if self.policy is not None and spec is not None and (confirm or not spec.options.confirm):
            # The decision (and its audit entry) before the tool is pinned: it may write.
            refusal = await asyncio.to_thread(self._decide, principal, name, spec, arguments)
            if refusal is not None:
                raise refusal
        with self._live_lock:
            loaded = self.tools
            spec = self._visible_tool(loaded, name, principal)
            if spec is not None and (confirm or not spec.options.confirm):
                loaded.runs += 1
        if spec is None:
            names = ", ".join(s.name for s in loaded.visible(principal)) or "(none)"
            raise ApiError(404, "tool_not_found", f"no tool {name!r}; the tools are: {names}")
        if spec.options.confirm and not confirm:
            raise ApiError(
                409,
                "confirmation_required",
                f"{name} is a confirm=True tool: a person must decide each call; send "
                '"confirm": true to say you do',
            )
        call = ToolCall(call_id=f"try-{uuid.uuid4().hex[:12]}", name=name, arguments=arguments)
        who = caller or "anonymous"
        try:
            await asyncio.to_thread(
                self.journal.begin_direct_call,
                call,
                called_by=who,
                approved_by=who if spec.options.confirm else None,
            )
            runs = await asyncio.to_thread(loaded.dispatcher.run, [call])
        finally:
            with self._live_lock:
                loaded.runs -= 1
                last_of_retired = loaded.retired and loaded.runs == 0
            if last_of_retired:
                await asyncio.to_thread(loaded.close)
        run = runs[0]
        await asyncio.to_thread(self.journal.finish_direct_call, run)
        if self.audit is not None:
            event = AuditEvent(
                kind="direct_call",
                outcome="error" if run.error else "ok",
                caller=who,
                via=principal.via if principal is not None else None,
                call_id=call.call_id,
                tool=name,
                arguments=arguments,
                detail={"error": run.error} if run.error else {},
            )
            try:
                await asyncio.to_thread(self.record, event)
            except Exception:  # the tool ran: its output still goes back
                logger.exception("the audit record refused the outcome of %s", call.call_id)
        self.metrics.tool_calls.inc(name, run.error or "ok")
        self.metrics.tool_seconds.observe(run.duration_ms / 1000, name)
        logger.info(
            "tool %s called directly by %s%s: %s in %.1f ms",
            name,
            caller or "anonymous",
            " (confirmed)" if spec.options.confirm else "",
            run.error or "ok",
            run.duration_ms,
        )
        return run

    @staticmethod
    def _visible_tool(
        loaded: LoadedTools, name: str, principal: Principal | None
    ) -> ToolSpec | None:
        """The tool `name` if `principal` may see it (None: no such tool, for it)."""
        spec = loaded.toolbox.get(name)
        if spec is None or (principal is not None and not principal.may_run(name, spec.source)):
            return None
        return spec

    def _decide(
        self,
        principal: Principal | None,
        name: str,
        spec: ToolSpec | None,
        arguments: dict[str, Any],
    ) -> Exception | None:
        """The policy's refusal of a direct call, as the error to answer (None: it may run)."""
        if self.policy is None or spec is None or principal is None:
            return None
        decision = decide_or_refuse(self.policy, principal, CallFacts.of(name, spec, arguments))
        detail = {"policies": list(decision.policies), "reason": decision.reason}
        try:
            self.record(
                AuditEvent(
                    kind="policy",
                    outcome=decision.effect,
                    caller=principal.name,
                    via=principal.via,
                    tool=name,
                    arguments=arguments,
                    detail={**detail, "direct": True},
                )
            )
            if decision.refused:
                self.record(
                    AuditEvent(
                        kind="direct_call",
                        outcome="refused",
                        caller=principal.name,
                        via=principal.via,
                        tool=name,
                        arguments=arguments,
                        detail=detail,
                    )
                )
        except Exception as exc:
            logger.exception("the audit record refused the decision on a direct call of %s", name)
            return ApiError(
                503,
                "audit_unavailable",
                f"the audit record could not be written ({type(exc).__name__}), so {name} "
                "did not run; retry when it can",
            )
        if decision.refused:
            return ApiError(403, "policy_refused", decision.refusal(), details=detail)
        if decision.needs_approval:
            return ApiError(
                409,
                "approval_required",
                f"the policy ({', '.join(decision.policies) or 'unnamed'}) sends calls of "
                f"{name} like this one to a person's approval, and a direct call cannot wait "
                "for one: ask for it in a conversation",
                details=detail,
            )
        return None

    async def start_message(
        self,
        conversation_id: str,
        query: str,
        tool_choice: ToolChoice | ToolChoiceMode | None,
        request_id: str,
        sent_by: str | None = None,
        principal: Principal | None = None,
    ) -> RunHandle:
        """Queue a run for a user message (404 unknown, 409 busy, 503 full or stopping).

        `principal`: the caller sending it; it must be the conversation's owner (or hold
        ``admin``): 404 for a conversation it may not read, 403 for one it may only read.
        The run offers and runs only its tools."""
        self._check_accepting()
        if conversation_id in self._known:
            end_user_id, owner = self._known[conversation_id]
        else:
            record = await asyncio.to_thread(self.journal.get_conversation, conversation_id)
            if record is None:
                raise ApiError(
                    404,
                    "conversation_not_found",
                    f"no conversation {conversation_id!r}; create one with POST /v1/conversations",
                )
            end_user_id, owner = record.end_user_id, record.created_by
            self._remember(conversation_id, end_user_id, owner)
        if principal is not None and not may_send(principal, owner):
            if may_read(principal, owner):
                raise ForbiddenError(
                    f"the caller {principal.name!r} may read conversation {conversation_id} "
                    "but not send to it: only the caller who opened it does"
                )
            raise ApiError(
                404,
                "conversation_not_found",
                f"no conversation {conversation_id!r}; create one with POST /v1/conversations",
            )
        forced = tool_choice.name if isinstance(tool_choice, ToolChoice) else None
        visible = self.tools.visible(principal)
        if forced is not None and forced not in {spec.name for spec in visible}:
            names = ", ".join(spec.name for spec in visible) or "(none)"
            raise ApiError(
                422, "unknown_tool", f"tool_choice {forced!r} is not a loaded tool: {names}"
            )
        self._check_accepting()  # the await above may have let a SIGTERM in
        job = _Job(
            query=query,
            tool_choice=tool_choice,
            end_user_id=end_user_id,
            sent_by=sent_by,
            principal=principal,
        )
        handle = RunHandle(conversation_id, request_id)
        self._reserve(handle)
        try:
            lease_args = (conversation_id, self.replica_id, self.settings.lease_seconds)
            if self.journal.shared:
                job.lease = await asyncio.to_thread(self.journal.acquire_lease, *lease_args)
            else:  # a local lease is a counter: no thread hop for it
                job.lease = self.journal.acquire_lease(*lease_args)
            self._check_accepting()  # so may the await for the lease
        except BaseException as exc:
            error = exc
            if isinstance(exc, LeaseHeldError):
                error = ApiError(409, "conversation_busy", f"{exc}; {_when_done(conversation_id)}")
            self._abandon(handle, job, error)
            raise error from None
        return self._launch(handle, job)

    def start_recovery(
        self, message_id: int, conversation_id: str, pending: PendingBatch, lease: Lease
    ) -> RunHandle:
        """Queue the run that finishes a message a crash interrupted (its lease held)."""
        record = self.journal.get_conversation(conversation_id)
        end_user_id = record.end_user_id if record else None
        owner = record.created_by if record else None
        principal: Principal | None = None
        if owner is not None:
            # The owner as the door knows it now; a caller no longer known runs no tool.
            principal = self.principal_named(owner) or Principal(owner, tools=ToolPatterns(()))
        job = _Job(
            end_user_id=end_user_id,
            recover=(message_id, pending),
            lease=lease,
            principal=principal,
        )
        handle = RunHandle(conversation_id, f"recovery-{message_id}", recovered=True)
        handle.message_id = message_id
        self._reserve(handle)
        self.recovering += 1
        return self._launch(handle, job)

    def _abandon(self, handle: RunHandle, job: _Job, error: BaseException) -> None:
        """A reserved run that never started: end its handle (a drain waits for none), free
        its place and its lease."""
        failure = (
            RunFailure(error.status, error.code, error.message, None)
            if isinstance(error, ApiError)
            else RunFailure.from_exception(error)
        )
        handle.finish(RunOutcome("failed", failure=failure))
        if self._active.get(handle.conversation_id) is handle:
            del self._active[handle.conversation_id]
        if job.lease is not None:
            self._release(job.lease, handle.conversation_id)

    def _reserve(self, handle: RunHandle) -> None:
        """Count the run in (409 when the conversation runs here, 503 when full)."""
        busy = self._active.get(handle.conversation_id)
        if busy is not None:
            waits = self.approvals.waiting_in(handle.conversation_id)
            approvals = (
                f"; it waits for a person's decision (approval {', '.join(waits)}: "
                "GET /v1/approvals)"
                if waits
                else ""
            )
            raise ApiError(
                409,
                "conversation_busy",
                f"conversation {handle.conversation_id} is still answering message "
                f"{busy.message_id or '(starting)'} (for {time.monotonic() - busy.began:.1f} s)"
                f"{approvals}; {_when_done(handle.conversation_id)}",
            )
        limit = self.settings.workers + self.settings.queue_limit
        if len(self._active) >= limit:
            raise ApiError(
                503,
                "overloaded",
                f"{len(self._active)} conversations are running or queued (the limit is "
                f"workers + queue_limit = {limit}); retry shortly",
                headers={"Retry-After": "1"},
            )
        self._active[handle.conversation_id] = handle

    def _launch(self, handle: RunHandle, job: _Job) -> RunHandle:
        assert self.pool is not None, "Service.start() was not called"
        self.hub.publish(
            "run_started",
            {
                "conversation_id": handle.conversation_id,
                "message_id": handle.message_id,
                "query": job.query or None,
                "sent_by": job.sent_by,
                "request_id": handle.request_id,
                "recovered": handle.recovered,
                "replica": self.replica_id,
            },
        )
        context = contextvars.copy_context()
        self.pool.submit(lambda: context.run(self._execute, handle, job))
        return handle

    # --- one run (worker thread) -----------------------------------------------------------------

    def _execute(self, handle: RunHandle, job: _Job) -> None:
        cid = handle.conversation_id
        live = self._checkout(cid, job.end_user_id, job.lease)
        conversation = live.conversation
        tally = RunTally()
        text = StreamedText()
        with self._live_lock:
            loaded = self.tools
            loaded.runs += 1
        try:
            conversation.bridge = loaded.bridge
            # The loop offers the caller only its tools, refuses others, and takes the
            # policy's decision for it on each call.
            caller = job.principal
            if job.recover is not None:
                message_id, pending = job.recover
                events = conversation.stream_recovered(
                    message_id, pending.batch, submitting=pending.submitting, caller=caller
                )
            elif conversation.pending_input is not None:
                events = conversation.stream_resume(job.query, sent_by=job.sent_by, caller=caller)
            else:
                events = conversation.stream(
                    job.query, tool_choice=job.tool_choice, sent_by=job.sent_by, caller=caller
                )
            handle.message_id = conversation.message_id
            for event in events:
                tally.see(event)
                self._observe(event, cid)
                payload = event_payload(event)
                if payload is None:
                    continue
                name, data = payload
                if name == "text_delta":
                    data = {**data, "text": text.feed(data["text"])}
                    if not data["text"]:
                        continue
                else:
                    self._publish_text(handle, cid, conversation.message_id, text.flush())
                masked = handle.publish(name, data)
                self._tell_hub(cid, conversation.message_id, name, masked)
            self._publish_text(handle, cid, conversation.message_id, text.flush())
            outcome = tally.outcome(cid, conversation.message_id, conversation.last_rounds)
        except Exception as exc:
            if isinstance(exc, LeaseLostError):
                logger.warning(
                    "run stopped: %s",
                    exc,
                    extra={"conversation_id": cid, "message_id": conversation.message_id},
                )
            elif not isinstance(exc, BridgeError):
                logger.exception("run of conversation %s crashed", cid)
            failure = RunFailure.from_exception(exc)
            self._publish_text(handle, cid, conversation.message_id, text.flush())
            masked = handle.publish("failed", failure.to_json())
            self._tell_hub(cid, conversation.message_id, "failed", masked)
            outcome = RunOutcome("failed", failure=failure)
        finally:
            self._release(job.lease, cid)
            with self._live_lock:
                live.running = False
                live.last_used = time.monotonic()
                loaded.runs -= 1
                last_of_retired = loaded.retired and loaded.runs == 0
            if last_of_retired:
                loaded.close()
        logger.info(
            "run %s",
            outcome.status,
            extra={
                "conversation_id": cid,
                "message_id": conversation.message_id,
                "platform_request_id": ",".join(tally.request_ids) or None,
                "outcome": outcome.status,
            },
        )
        self._call_soon(self._finish, handle, outcome)

    def _release(self, lease: Lease | None, conversation_id: str) -> None:
        if lease is None:
            return
        try:
            self.journal.release_lease(lease)
        except Exception as exc:  # it expires on its own: only the next message waits longer
            logger.warning(
                "could not release the lease of conversation %s (%s); it expires in %g s",
                conversation_id,
                exc,
                self.settings.lease_seconds,
                extra={"conversation_id": conversation_id},
            )

    def _checkout(
        self, conversation_id: str, end_user_id: str | None, lease: Lease | None
    ) -> _Live:
        stale: _Live | None = None
        with self._live_lock:
            live = self._live.get(conversation_id)
            if (
                live is not None
                and lease is not None
                and live.generation is not None
                and lease.generation != live.generation + 1
            ):
                # Another replica ran it since: its paused question, platform state and
                # history are in the journal, not in this object.
                stale, live = self._live.pop(conversation_id), None
            if live is None:
                conversation = self.tools.bridge.conversation(
                    conversation_id, end_user_id=end_user_id
                )
                live = self._live[conversation_id] = _Live(conversation)
            live.running = True
            if lease is not None:
                live.generation = lease.generation
        if stale is not None:
            logger.debug("conversation %s ran elsewhere since; reloading it", conversation_id)
            stale.conversation.close()
        return live

    def _observe(self, event: Event, conversation_id: str) -> None:
        if isinstance(event, ToolCallFinished):
            run = event.run
            tool = run.name if run.name in self.tools.toolbox else "(unknown)"
            self.metrics.tool_calls.inc(tool, run.error or "ok")
            self.metrics.tool_seconds.observe(run.duration_ms / 1000, tool)
        elif isinstance(event, ToolCallsRequested):
            logger.info(
                "the agent asked for %d tool call(s): %s",
                len(event.batch.calls),
                ", ".join(c.name for c in event.batch.calls),
                extra={
                    "conversation_id": conversation_id,
                    "platform_request_id": event.batch.resume.get("request_id"),
                },
            )

    def _publish_text(
        self, handle: RunHandle, conversation_id: str, message_id: int | None, text: str
    ) -> None:
        """Send answer text kept back by `StreamedText` (nothing when there is none)."""
        if text:
            masked = handle.publish("text_delta", {"text": text})
            self._tell_hub(conversation_id, message_id, "text_delta", masked)

    def _tell_hub(
        self, conversation_id: str, message_id: int | None, name: str, masked: dict[str, Any]
    ) -> None:
        """Pass a run event to the daemon-wide hub, saying whose it is (worker thread).

        `masked`: the event's data as its run's handle published it, secrets already masked
        (`RunHandle.publish`); only the conversation's id is new to it.
        """
        body = {**masked, "conversation_id": redact_data(conversation_id), "message_id": message_id}
        self.hub.publish(name, body, replay=name != "text_delta", masked=True)

    def _publish_run(self, conversation_id: str, name: str, data: dict[str, Any]) -> None:
        """Send an event to the conversation's run in progress, if any (from any thread)."""
        handle = self._active.get(conversation_id)
        if handle is not None:
            handle.publish(name, data)

    def _call_soon(self, fn: object, *args: object) -> None:
        # After a shutdown that left runs behind the loop is gone: nobody is listening.
        assert self._loop is not None
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(fn, *args)  # type: ignore[arg-type]

    def _finish(self, handle: RunHandle, outcome: RunOutcome) -> None:
        handle.finish(outcome)
        if self._active.get(handle.conversation_id) is handle:
            del self._active[handle.conversation_id]
        if handle.recovered:
            self.recovering -= 1
        self.metrics.runs.inc(outcome.status)
        seconds = time.monotonic() - handle.began
        self.metrics.run_seconds.observe(seconds, outcome.status)
        ended: dict[str, Any] = {
            "conversation_id": handle.conversation_id,
            "message_id": handle.message_id,
            "status": outcome.status,
            "request_id": handle.request_id,
            "duration_ms": round(seconds * 1000, 1),
            "answer": outcome.result.answer if outcome.result else None,
            "error": outcome.failure.to_json() if outcome.failure else None,
        }
        self.hub.publish("run_ended", ended)

    async def _sweep_idle(self) -> None:
        """Release the tool resources of conversations idle for `idle_timeout` seconds."""
        period = min(30.0, max(0.05, self.settings.idle_timeout / 4))
        while True:
            await asyncio.sleep(period)
            cutoff = time.monotonic() - self.settings.idle_timeout
            with self._live_lock:
                idle = [k for k, v in self._live.items() if not v.running and v.last_used < cutoff]
                released = [self._live.pop(k) for k in idle]
            for live in released:
                logger.debug("releasing idle conversation %s", live.conversation.id)
                await asyncio.to_thread(live.conversation.close)


def may_read(principal: Principal, owner: str | None) -> bool:
    """Whether `principal` may read a conversation `owner` opened (None: nobody's, opened
    before callers or without one): its own, or any with ``read_all``."""
    return principal.can(Permission.READ_ALL) or (owner is not None and owner == principal.name)


def may_send(principal: Principal, owner: str | None) -> bool:
    """Whether `principal` may send messages to a conversation `owner` opened: its own, or any
    with ``admin``."""
    return principal.can(Permission.ADMIN) or (owner is not None and owner == principal.name)


def _when_done(conversation_id: str) -> str:
    """What a 409 ``conversation_busy`` tells the client to do, wherever the run is."""
    return (
        f"send the next message when it is done: follow it at GET "
        f"/v1/conversations/{conversation_id}/events or poll until busy is false"
    )


def _refresh_modules(specs: tuple[str, ...]) -> None:
    """Re-import module SPECs already imported, so a reload sees their new code."""
    for spec in specs:
        module = sys.modules.get(spec)
        if module is not None and not spec.endswith(".py"):
            try:
                importlib.reload(module)
            except Exception as exc:
                raise UsageError(f"cannot re-import {spec}: {type(exc).__name__}: {exc}") from None
