"""Turn a planner step into the chunks the platform would send (docs/wire/appbuilder.md).

A tool round is ``status/preparing`` then one ``interrupt`` event (``event_type`` Interrupt,
``content_type`` contexts, ``tool_calls`` with object arguments, the thought and ``used_tool``
in ``outputs.text``), and the stream ends there. An answer is ``status/preparing``,
``text/running`` deltas, ``text/done`` with the usage totals, ``status/success`` and a last chunk
with empty ``content``; a scenario's follow-up questions come as a ``FollowUpQuery`` event
(``content_type`` json) after ``text/done``, and its ``multiple_dialog_event`` (event_type
chatflow) right after ``status/preparing``. A failed step is ``status/preparing``, an
``error`` event with a non-zero ``event_code``, and the empty last chunk. Each chunk carries one
event, so the official SDK's handler (which looks at the last event of each chunk) sees every
status.

A question (``ask`` step) is what an AppBuilder workflow's information-collection node sends:
``status/preparing``, the question as a ``publish_message`` event (``event_type`` chatflow,
``outputs`` ``{message, message_id}``, the chunk's ``answer`` left empty, as the official
cookbook reads workflow messages from this event), a ``chatflow_interrupt`` event
(``event_type`` chatflow, ``outputs`` ``{interrupt_event_id, interrupt_event_type: "chat"}``),
``status/success`` and the empty last chunk. The interrupt event's ``event_status`` is
``done``, not ``interrupt``: the official SDK's event handler treats ``interrupt`` as "tool
outputs needed" (its default `interrupt()` then fails an assertion), and it only stops reading
a stream at ``success``; the official chatflow samples (streaming) use that handler unchanged
against the real service, which therefore does not send ``interrupt`` there
(docs/wire/appbuilder.md, "What the official SDK does differently"; checked against the SDK in
tests/emulator/test_emulator_chatflow.py).
"""

from __future__ import annotations

import json
import math
import uuid
from dataclasses import dataclass
from typing import Any

from bridge.emulator import wire
from bridge.emulator.planner import AnswerStep, AskStep, CallStep, FailStep, RunContext, Step
from bridge.emulator.state import Conversation, PendingCall, PendingInput

__all__ = ["Rendered", "estimate_tokens", "merge_chunks", "render_step"]

AGENT = "ChatAgent"
CHATFLOW = "chatflow"
"""The `event_type` of workflow events (observed in the official chatflow tests)."""
INTERRUPT_STATUS = "done"
"""The `event_status` of a `chatflow_interrupt` event (see the module docstring)."""


@dataclass(frozen=True)
class Rendered:
    """The chunks of one response and what is now pending: tool calls or a question."""

    chunks: list[dict[str, Any]]
    pending: list[PendingCall]
    answer: str
    """What the agent said: the answer text, or the question of an ask step."""
    status: str
    """`interrupt`, `human_input`, `success` or `error`."""
    question: PendingInput | None = None
    """The question now waiting for the person's reply (an ask step)."""


def estimate_tokens(text: str) -> int:
    """A deterministic token estimate: one per CJK character, one per four other characters."""
    cjk = sum(1 for ch in text if "\u3400" <= ch <= "\u9fff")
    return cjk + math.ceil((len(text) - cjk) / 4)


def render_step(
    step: Step,
    *,
    conv: Conversation,
    run: RunContext,
    message_id: str,
    request_id: str,
    model: str,
    chunk_chars: int,
    before: list[dict[str, Any]] | None = None,
) -> Rendered:
    """The chunks for `step`, with fresh event ids from `conv`.

    `before` are events the platform sent ahead of the agent's own (a component it ran),
    one chunk each.
    """

    def make(answer: str, content: list[dict[str, Any]], done: bool = False) -> dict[str, Any]:
        return wire.chunk(
            request_id=request_id,
            conversation_id=conv.conversation_id,
            message_id=message_id,
            answer=answer,
            content=content,
            is_completion=done,
        )

    preparing = wire.event(
        event_id=conv.next_event_id(),
        event_type=AGENT,
        status="preparing",
        content_type="status",
        outputs={},
    )
    chunks = [make("", [e]) for e in before or []]
    chunks.append(make("", [preparing]))
    prompt = _prompt_tokens(run)
    if isinstance(step, CallStep):
        pending = [
            PendingCall(str(uuid.uuid4()), call.name, call.arguments, call.output_name)
            for call in step.calls
        ]
        chunks.append(make("", [_interrupt(conv, run, step, pending, prompt, model)]))
        return Rendered(chunks, pending, "", "interrupt")
    if isinstance(step, AskStep):
        question = PendingInput(str(uuid.uuid4()), step.question, step.name)
        chunks += [make("", [e]) for e in _ask_events(conv, question)]
        chunks.append(make("", [], done=True))
        return Rendered(chunks, [], step.question, "human_input", question)
    if isinstance(step, FailStep):
        error = wire.event(
            event_id=conv.next_event_id(),
            event_type=AGENT,
            status="error",
            content_type="status",
            outputs={},
            code=500,
            message=f"{step.code}: {step.message}",
        )
        chunks += [make("", [error]), make("", [], done=True)]
        return Rendered(chunks, [], "", "error")
    assert isinstance(step, AnswerStep)
    if step.dialog_event is not None:
        dialog = wire.event(
            event_id=conv.next_event_id(),
            event_type=CHATFLOW,
            status="done",
            content_type="multiple_dialog_event",
            outputs=dict(step.dialog_event),
        )
        chunks.append(make("", [dialog]))
    text = step.text
    completion = 0
    for start in range(0, len(text), chunk_chars):
        delta = text[start : start + chunk_chars]
        completion += estimate_tokens(delta)
        running = wire.event(
            event_id=conv.next_event_id(),
            event_type=AGENT,
            status="running",
            content_type="text",
            outputs={"text": delta},
            usage=wire.usage(prompt, completion, model),
        )
        chunks.append(make(delta, [running]))
    done = wire.event(
        event_id=conv.next_event_id(),
        event_type=AGENT,
        status="done",
        content_type="text",
        outputs={"text": ""},
        usage=wire.usage(prompt, estimate_tokens(text), model),
    )
    chunks.append(make("", [done]))
    if step.follow_up:
        follow_up = wire.event(
            event_id=conv.next_event_id(),
            event_type="FollowUpQuery",
            status="done",
            content_type="json",
            outputs={"json": {"follow_up_querys": list(step.follow_up)}},
        )
        chunks.append(make("", [follow_up]))
    success = wire.event(
        event_id=conv.next_event_id(),
        event_type=AGENT,
        status="success",
        content_type="status",
        outputs={},
    )
    chunks += [make("", [success]), make("", [], done=True)]
    return Rendered(chunks, [], text, "success")


def _interrupt(
    conv: Conversation,
    run: RunContext,
    step: CallStep,
    pending: list[PendingCall],
    prompt: int,
    model: str,
) -> dict[str, Any]:
    first = pending[0]
    plan_tokens = estimate_tokens(step.thought) + sum(
        estimate_tokens(json.dumps(p.arguments, ensure_ascii=False)) for p in pending
    )
    function_call = {
        "thought": step.thought,
        "name": first.name,
        "arguments": first.arguments,
        "usage": {**wire.usage(prompt, plan_tokens, model), "type": "plan"},
        "tool_call_id": first.call_id,
    }
    used_tool = [
        {
            "tool_call_id": c.call_id,
            "name": c.name,
            "arguments": c.arguments,
            "function_resp": c.output,
        }
        for round_ in run.rounds
        for c in round_
    ]
    tool_calls = [
        {
            "id": p.call_id,
            "type": "function",
            "function": {"name": p.name, "arguments": p.arguments},
        }
        for p in pending
    ]
    return wire.event(
        event_id=conv.next_event_id(),
        event_type="Interrupt",
        status="interrupt",
        content_type="contexts",
        outputs={"text": {"function_call": function_call, "used_tool": used_tool}},
        usage=None,
        tool_calls=tool_calls,
    )


def _ask_events(conv: Conversation, question: PendingInput) -> list[dict[str, Any]]:
    """The workflow events of a question: the message, the interrupt, the end of the run."""
    message = wire.event(
        event_id=conv.next_event_id(),
        event_type=CHATFLOW,
        status="done",
        content_type="publish_message",
        outputs={"message": question.question, "message_id": str(uuid.uuid4())},
    )
    interrupt = wire.event(
        event_id=conv.next_event_id(),
        event_type=CHATFLOW,
        status=INTERRUPT_STATUS,
        content_type="chatflow_interrupt",
        outputs={"interrupt_event_id": question.interrupt_id, "interrupt_event_type": "chat"},
    )
    success = wire.event(
        event_id=conv.next_event_id(),
        event_type=CHATFLOW,
        status="success",
        content_type="status",
        outputs={},
    )
    return [message, interrupt, success]


def _prompt_tokens(run: RunContext) -> int:
    text = run.query + "".join(t.name + t.description for t in run.tools)
    text += "".join(c.output for round_ in run.rounds for c in round_)
    text += "".join(a.question + a.answer for a in run.answers)
    return max(1, estimate_tokens(text))


def merge_chunks(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    """The non-stream body: every event in order and the whole answer."""
    body = dict(chunks[0])
    body["answer"] = "".join(c["answer"] for c in chunks)
    body["content"] = [e for c in chunks for e in c["content"]]
    body["is_completion"] = chunks[-1]["is_completion"]
    return body
