"""The AppBuilder emulator's runs: what a conversation's state lets the next run do.

A new query when nothing is pending (the tools it sends checked, its forced tool named), the
outputs of exactly the pending tool calls (`pending_run`, `take_outputs`), or the reply to a
pending question (`paused_run`, `ActiveRun.take_answer`); anything else is a `ReplyError` (400)
that names what is pending and the id expected.
"""

from __future__ import annotations

import json
import logging

from bridge.emulator.appbuilder import wire
from bridge.emulator.appbuilder.replies import ReplyError
from bridge.emulator.matching import ToolInfo
from bridge.emulator.planner import CompletedCall, ForcedTool
from bridge.emulator.scenario import App
from bridge.emulator.state import ActiveRun, Conversation, PendingInput
from bridge.emulator.wire import output_problems, schema_problems

__all__ = [
    "asking",
    "check_files",
    "check_tools",
    "forced_tool",
    "paused_run",
    "pending_run",
    "take_outputs",
]

logger = logging.getLogger(__name__)


def check_tools(req: wire.RunRequest) -> None:
    """400 for tool manifests that break AppBuilder's schema rules."""
    problems = []
    for i, tool in enumerate(req.tools or []):
        if tool.function is not None:
            problems += schema_problems(tool.function.parameters, f"tools[{i}].function.parameters")
    if problems:
        raise ReplyError(400, "invalid tool manifest: " + "; ".join(problems))


def check_files(conv: Conversation, file_ids: list[str]) -> None:
    """400 for file ids not uploaded to the conversation."""
    unknown = [f for f in file_ids if f not in conv.files]
    if unknown:
        raise ReplyError(
            400,
            f"file_ids {unknown} were not uploaded to conversation {conv.conversation_id!r}; "
            f"upload them with POST {wire.PREFIX}/file/upload first",
        )


def forced_tool(
    choice: wire.WireToolChoice | None, tools: tuple[ToolInfo, ...], app: App
) -> ForcedTool | None:
    """The tool a ``tool_choice`` forces; 400 when it names neither a tool nor a component."""
    if choice is None or choice.type != "function" or choice.function is None:
        return None
    name = choice.function.name
    if name not in {t.name for t in tools}:
        sent = ", ".join(t.name for t in tools) or "none"
        own = (
            ", ".join(c.code for c in app.components)
            or "none (declare them in the scenario's app.components)"
        )
        raise ReplyError(
            400,
            f"tool_choice names {name!r}, which is neither a tool of this run (tools: {sent}) "
            f"nor a component of the app (components: {own})",
        )
    return ForcedTool(name=name, input=dict(choice.function.input))


def pending_run(conv: Conversation, outputs: list[wire.ToolOutputItem]) -> ActiveRun:
    """The run whose pending tool calls `outputs` answer; 400 unless they answer exactly those."""
    run = conv.active
    if run is not None and run.pending_input is not None:
        raise ReplyError(
            400,
            f"conversation {conv.conversation_id!r} is waiting for the person's reply to "
            f"{_waiting_for(run.pending_input)}, not for tool outputs",
        )
    if run is None or not run.pending:
        raise ReplyError(
            400,
            f"conversation {conv.conversation_id!r} has no pending tool calls, so tool_outputs "
            "were not expected; send a query instead",
        )
    expected = [p.call_id for p in run.pending]
    problems = output_problems(expected, [o.tool_call_id for o in outputs])
    if problems:
        raise ReplyError(
            400,
            "tool_outputs must answer exactly the pending tool calls "
            f"({', '.join(expected)}): " + "; ".join(problems),
        )
    return run


def asking(conv: Conversation) -> bool:
    """Whether a question of the conversation waits for the person's reply."""
    return conv.active is not None and conv.active.pending_input is not None


def paused_run(conv: Conversation, action: wire.Action | None) -> ActiveRun:
    """The run whose question `action` resumes; 400 unless it names the pending interrupt.

    A query without `action` while a question waits is its reply: the SDK's event handler reads
    only the last event of a non-stream response (``status/success``), so it never sees the
    ``chatflow_interrupt`` and sends the reply as a plain query, and the platform goes on.
    """
    run = conv.active
    if action is None:
        assert run is not None and run.pending_input is not None
        logger.debug(
            "conversation %s: a query without action answers the pending question %s",
            conv.conversation_id,
            run.pending_input.interrupt_id,
        )
        return run
    given = action.parameters.interrupt_event.id
    if run is None or run.pending_input is None:
        if run is not None and run.pending:
            ids = ", ".join(p.call_id for p in run.pending)
            raise ReplyError(
                400,
                f"conversation {conv.conversation_id!r} is waiting for tool outputs for "
                f"tool_call_id(s) {ids}, not for a reply; action resume (interrupt_event_id "
                f"{given!r}) was not expected, submit tool_outputs instead",
            )
        raise ReplyError(
            400,
            f"conversation {conv.conversation_id!r} has no pending question, so action resume "
            f"(interrupt_event_id {given!r}) was not expected; send the query without action",
        )
    expected = run.pending_input.interrupt_id
    if given != expected:
        raise ReplyError(
            400,
            f"action.parameters.interrupt_event.id {given!r} is not the pending interrupt of "
            f"conversation {conv.conversation_id!r}; expected {expected!r} (the "
            "interrupt_event_id of its last chatflow_interrupt event)",
        )
    return run


def take_outputs(run: ActiveRun, outputs: list[wire.ToolOutputItem]) -> None:
    """Record the outputs as the run's completed round; nothing is pending any more."""
    by_id = {o.tool_call_id: o.output for o in outputs}
    run.context.rounds.append(
        [
            CompletedCall(p.call_id, p.name, p.output_name, p.arguments, by_id[p.call_id])
            for p in run.pending
        ]
    )
    run.pending = []


def _waiting_for(question: PendingInput) -> str:
    """How 400 messages describe a pending question and the resume it needs."""
    action = json.dumps(
        {
            "action_type": "resume",
            "parameters": {"interrupt_event": {"id": question.interrupt_id, "type": "chat"}},
        }
    )
    return (
        f"the question {question.question!r} (interrupt_event_id {question.interrupt_id}); "
        f"send the reply as query with action {action}"
    )
