"""One approval rule for `confirm=True` tools, at every entry point.

A call of a `confirm=True` tool runs only after a person approved that very call; with nobody to
ask, it is refused with an output the model can read. Each entry point brings its own way of
asking (the loop's `approve` hook, a terminal prompt in `toolbridge call`, an MCP host's
elicitation form in `toolbridge mcp-serve`); this module decides, so the rule and the words the
model reads are written once:

    verdict = decide(toolbox.get(call.name), call, approve)
    if not verdict.run:
        run = dispatcher.reject(call, verdict.reason)

An asker that cannot be a plain function (an MCP host answers asynchronously, possibly over
several requests) gets the person's answer itself and turns it into a verdict with
`verdict_for`. `question` is the text every asker shows; `arguments_digest` is what binds an
answer to the exact arguments it was given for.

A person who is not at hand (the daemon's operators, answering through its API or console) is
a `DeferredApprover`: the loop asks it on a thread of its own for each call, and the rest of the
batch runs meanwhile (`ask_deferred`). Its answer is a decision with who took it and a note
(`verdict_for_decision`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from bridge.tools.spec import ToolSpec
from bridge.types import ToolCall

__all__ = [
    "Answer",
    "ApprovalRequest",
    "Approver",
    "DeferredApprover",
    "Verdict",
    "arguments_digest",
    "ask_deferred",
    "decide",
    "describe_seconds",
    "needs_approval",
    "pretty_arguments",
    "question",
    "verdict_for",
    "verdict_for_decision",
]

logger = logging.getLogger(__name__)

Approver = Callable[[ToolCall], bool]
"""Asks a person about one call; True (and only a true value) lets it run."""

Answer = Literal["approved", "declined", "dismissed", "failed"]
"""What came back from asking: a yes, a no, a question closed without a choice, or an error."""

NO_APPROVER = "rejected: this tool needs approval and no approver is configured"
DECLINED = "rejected by the user"
DISMISSED = "rejected: the person closed the question without approving"
FAILED = "rejected: asking for approval failed"


@dataclass(frozen=True)
class Verdict:
    """Whether a call may run, and if not, the reason the model reads."""

    run: bool
    reason: str = ""


RUN = Verdict(run=True)


def needs_approval(spec: ToolSpec | None) -> bool:
    """True for a call a person must approve: a registered tool with `confirm=True`.

    An unknown tool needs no approval: it never runs, and the dispatcher's output lists the
    tools that exist.
    """
    return spec is not None and spec.options.confirm


def verdict_for(answer: Answer | None, *, detail: str | None = None) -> Verdict:
    """The verdict for a person's answer; None means nobody could be asked.

    Args:
        answer: What the asker got back, or None when there was nobody to ask.
        detail: Why nobody could be asked (or why asking failed), appended in parentheses so
            the model, and the person it reports to, learn what to change.
    """
    if answer == "approved":
        return RUN
    reason = {
        None: NO_APPROVER,
        "declined": DECLINED,
        "dismissed": DISMISSED,
        "failed": FAILED,
    }[answer]
    return Verdict(run=False, reason=f"{reason} ({detail})" if detail else reason)


def decide(
    spec: ToolSpec | None,
    call: ToolCall,
    approve: Approver | None,
    *,
    nobody: str | None = None,
    required: bool = False,
) -> Verdict:
    """Run or refuse one call: asks `approve` only for a call that needs approval.

    Args:
        spec: The tool the call names (None when unknown).
        call: The call, with the exact arguments the person is asked about.
        approve: Asks a person; None when there is nobody to ask.
        nobody: Why there is nobody to ask, for the refusal's reason.
        required: A person must approve this call whatever the tool (a policy said so).

    An approver that raises refuses the call (logged): a failure to ask is never a yes.
    """
    if not (required or needs_approval(spec)):
        return RUN
    if approve is None:
        return verdict_for(None, detail=nobody)
    try:
        approved = approve(call)
    except Exception as exc:
        logger.exception(
            "the approver of %s (call %s) failed; the call is refused", call.name, call.call_id
        )
        return verdict_for("failed", detail=type(exc).__name__)
    return verdict_for("approved" if approved else "declined")


def pretty_arguments(arguments: Mapping[str, Any] | str) -> str:
    """The arguments as indented JSON (a non-JSON argument string as it came)."""
    if isinstance(arguments, str):
        return arguments
    return json.dumps(arguments, indent=2, ensure_ascii=False, sort_keys=True, default=str)


def question(name: str, arguments: Mapping[str, Any] | str) -> str:
    """What a person is shown: the tool and its exact arguments."""
    shown = pretty_arguments(arguments)
    return f"The agent wants to run the tool {name!r} with these arguments:\n{shown}"


def arguments_digest(name: str, arguments: Mapping[str, Any] | str) -> str:
    """A hash of the tool name and its exact arguments: an answer given for one call never
    approves the same tool with other arguments."""
    text = (
        arguments
        if isinstance(arguments, str)
        else json.dumps(
            arguments, ensure_ascii=False, sort_keys=True, separators=(",", ":"), default=str
        )
    )
    return hashlib.sha256(json.dumps([name, text]).encode("utf-8")).hexdigest()


# --- a person who answers later -------------------------------------------------------------------


@dataclass(frozen=True)
class ApprovalRequest:
    """One call waiting for a person, with where it comes from."""

    conversation_id: str
    message_id: int | None
    call: ToolCall
    arguments_digest: str
    cancelled: threading.Event = field(default_factory=threading.Event, compare=False)
    """Set when the run stopped waiting (it failed or was abandoned): give up at once."""


@runtime_checkable
class DeferredApprover(Protocol):
    """Asks a person who answers later (minutes, possibly after a restart of the process).

    `ask` blocks until the call is decided and returns the verdict; the loop calls it on a
    thread of its own per call, so the rest of the batch runs meanwhile.
    """

    def ask(self, request: ApprovalRequest) -> Verdict:
        """Wait for the decision about `request.call` (bounded by the approver's deadline)."""
        ...  # pragma: no cover - a protocol


def ask_deferred(approver: DeferredApprover, request: ApprovalRequest) -> Verdict:
    """`approver.ask(request)`, where a failure to ask refuses the call (logged)."""
    try:
        return approver.ask(request)
    except Exception as exc:
        call = request.call
        logger.exception(
            "the approver of %s (call %s) failed; the call is refused", call.name, call.call_id
        )
        return verdict_for("failed", detail=type(exc).__name__)


def describe_seconds(seconds: float) -> str:
    """A duration in words: "10 minutes", "90 seconds", "1 second"."""
    if seconds >= 60 and seconds % 60 == 0:
        minutes = int(seconds // 60)
        return f"{minutes} minute{'s' if minutes != 1 else ''}"
    return f"{seconds:g} second{'s' if seconds != 1 else ''}"


def verdict_for_decision(
    status: Literal["pending", "approved", "rejected", "expired"],
    *,
    decided_by: str | None = None,
    note: str = "",
) -> Verdict:
    """The verdict for a journaled decision: who rejected it and their note reach the model."""
    if status == "approved":
        return RUN
    if status == "rejected":
        reason = f"rejected by {decided_by}" if decided_by else DECLINED
    elif status == "expired":
        return Verdict(run=False, reason=f"rejected: {note or 'the approval expired'}")
    else:
        reason = FAILED + " (no decision)"
    return Verdict(run=False, reason=f"{reason}: {note}" if note else reason)
