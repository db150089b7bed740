"""Chat Completions wire shapes: whole calls from streamed fragments, tool fields, history.

Pure functions and small state objects, no I/O: `stream` feeds them the decoded chunks of a
stream, or the single body of a non-streamed answer; the adapter keeps one `ChatConversation`
per conversation.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from bridge.errors import ProtocolError, UsageError
from bridge.platforms._limits import RunBudget
from bridge.platforms._openai import function_tool_name
from bridge.types import Event, Other, TextDelta, ToolBatch, ToolCall

__all__ = [
    "TOOL_CHOICE_MODES",
    "ChatConversation",
    "Completion",
    "PartialCall",
    "ToolCallAssembler",
    "completion_batch",
    "delivering",
    "tool_fields",
]

TOOL_CHOICE_MODES = frozenset({"auto", "none", "required"})


@dataclass
class PartialCall:
    """A tool call whose fragments are still arriving."""

    call_id: str | None
    name: str = ""
    arguments: str = ""


class ToolCallAssembler:
    """Joins streamed tool-call fragments into whole calls.

    Fragments are keyed by `index`; the id and name may come only in the first one. A fragment
    whose id differs from the call already at its index starts a new call (servers that number
    every call 0). Without `index` (Ollama), a fragment with a new id, or with a name while the
    current call has one, starts a new call; any other fragment continues the last call.
    """

    def __init__(self, budget: RunBudget | None = None) -> None:
        self._calls: list[PartialCall] = []
        self._by_index: dict[int, PartialCall] = {}
        self.budget = budget
        """Counts the calls and their argument characters, when given (a stream's bounds)."""

    def __bool__(self) -> bool:
        return bool(self._calls)

    def add(self, fragment: object, *, index: int | None = None) -> None:
        """Fold one fragment in; `index` overrides the fragment's (whole calls, non-stream)."""
        if not isinstance(fragment, Mapping):
            raise ProtocolError(f"a tool_calls entry is not an object: {fragment!r:.200}")
        if index is None:
            raw_index = fragment.get("index")
            index = (
                raw_index
                if isinstance(raw_index, int) and not isinstance(raw_index, bool)
                else None
            )
        raw_id = fragment.get("id")
        call_id = str(raw_id) if raw_id not in (None, "") else None
        function = fragment.get("function")
        function = function if isinstance(function, Mapping) else {}
        name = function.get("name")
        name = str(name) if name else ""
        current = self._by_index.get(index) if index is not None else self._last()
        if current is None or _starts_new_call(current, call_id, name, indexed=index is not None):
            current = self._new(call_id, index)
        elif call_id and not current.call_id:
            current.call_id = call_id
        if name and not current.name:
            current.name = name
        arguments = function.get("arguments")
        if isinstance(arguments, Mapping):
            # Some gateways send the arguments as an object (Ollama's native shape).
            arguments = json.dumps(arguments, ensure_ascii=False)
            current.arguments = ""
        if isinstance(arguments, str):
            if self.budget is not None:
                self.budget.arguments(arguments)
            current.arguments += arguments

    def finish(self) -> tuple[ToolCall, ...]:
        """The assembled calls, in the order they started; missing ids are made up."""
        calls = []
        for partial in self._calls:
            if partial.call_id is None:
                partial.call_id = f"call_{uuid.uuid4().hex[:24]}"
            calls.append(
                ToolCall(
                    call_id=partial.call_id,
                    name=partial.name,
                    arguments=partial.arguments,
                    raw_arguments=partial.arguments,
                )
            )
        return tuple(calls)

    def _last(self) -> PartialCall | None:
        return self._calls[-1] if self._calls else None

    def _new(self, call_id: str | None, index: int | None) -> PartialCall:
        if self.budget is not None:
            self.budget.tool_call()
        partial = PartialCall(call_id)
        self._calls.append(partial)
        if index is not None:
            self._by_index[index] = partial
        return partial


def _starts_new_call(
    current: PartialCall, call_id: str | None, name: str, *, indexed: bool
) -> bool:
    """Whether a fragment begins another call rather than continuing `current`."""
    if call_id and current.call_id and call_id != current.call_id:
        return True
    # Without index or id, a name can only open a call: it comes in the first fragment.
    return not indexed and not call_id and bool(name) and bool(current.name)


@dataclass
class Completion:
    """What one completion said, gathered from its chunks or its single body.

    With a `budget`, its text (reasoning included), calls and arguments are counted as they
    arrive, and a `StreamLimitError` stops a completion that grows past a bound.
    """

    budget: RunBudget | None = None
    text: list[str] = field(default_factory=list)
    calls: ToolCallAssembler = field(default_factory=ToolCallAssembler)
    completion_id: str | None = None
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None
    error: tuple[str, str] | None = None
    raw: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.calls.budget = self.budget

    def absorb(self, payload: dict[str, Any], *, key: str) -> list[Event]:
        """Fold a chunk (`key="delta"`) or a whole response (`key="message"`) in."""
        budget = self.budget
        if self.completion_id is None and isinstance(payload.get("id"), str):
            self.completion_id = payload["id"]
        for name in ("id", "model", "system_fingerprint"):
            if payload.get(name) is not None:
                self.raw[name] = payload[name]
        if isinstance(payload.get("usage"), dict):
            self.usage = payload["usage"]
            self.raw["usage"] = self.usage
        choices = payload.get("choices") or []
        if not isinstance(choices, list):
            raise ProtocolError(f"choices is not a list: {choices!r:.200}")
        events: list[Event] = []
        # Only the first choice is followed: the bridge never asks for n > 1.
        for choice in choices:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            part = choice.get(key)
            part = part if isinstance(part, dict) else {}
            content = part.get("content")
            if isinstance(content, str) and content:
                if budget is not None:
                    budget.text(content)
                self.text.append(content)
                events.append(TextDelta(text=content))
            reasoning = part.get("reasoning_content") or part.get("reasoning")
            if isinstance(reasoning, str) and reasoning:
                if budget is not None:
                    budget.text(reasoning)
                events.append(Other(raw={"reasoning": reasoning}))
            fragments = part.get("tool_calls") or []
            if not isinstance(fragments, list):
                raise ProtocolError(f"tool_calls is not a list: {fragments!r:.200}")
            for position, fragment in enumerate(fragments):
                self.calls.add(fragment, index=position if key == "message" else None)
            if choice.get("finish_reason"):
                self.finish_reason = str(choice["finish_reason"])
                self.raw["finish_reason"] = self.finish_reason
        return events


@dataclass
class ChatConversation:
    """What the adapter holds of one conversation: its history and the current turn."""

    messages: list[dict[str, Any]]
    pending: ToolBatch | None = None
    turn_tools: dict[str, Any] = field(default_factory=dict)
    """The `tools`/`tool_choice` fields of the current turn, sent again with its tool results."""
    turn_usage: dict[str, Any] | None = None
    """Token usage summed over every completion of the current turn."""
    text_turn: Any = None
    """The text tool protocol's state of the current turn (`tool_protocol="text"` only)."""


def delivering(
    state: ChatConversation,
    messages: list[dict[str, Any]],
    lock: AbstractContextManager[Any],
    events: Iterator[Event],
) -> Iterator[Event]:
    """Write a batch's outputs into the history now (`messages`: the history with them), and
    yield `events`, the request that sends them; undone if that request fails.

    With a client-side history, delivering outputs is writing them into it. The loop journals
    the state as it is when it marks the outputs "submitted" (before the request is read), so
    a conversation whose answer stream dies with the process goes on from the outputs instead
    of waiting for a batch it already answered. A request that fails in this process leaves
    the batch pending again, so it can be sent again.
    """
    with lock:
        previous = (state.messages, state.pending)
        state.messages, state.pending = messages, None
    return _undone_on_failure(state, messages, lock, previous, events)


def _undone_on_failure(
    state: ChatConversation,
    messages: list[dict[str, Any]],
    lock: AbstractContextManager[Any],
    previous: tuple[list[dict[str, Any]], ToolBatch | None],
    events: Iterator[Event],
) -> Iterator[Event]:
    try:
        yield from events
    except BaseException:
        with lock:
            if state.messages is messages:  # no answer was committed after the outputs
                state.messages, state.pending = previous
        raise


def completion_batch(
    completion_id: str, calls: tuple[ToolCall, ...], request_id: str | None
) -> ToolBatch:
    """The batch of the calls one completion asks for (its id is the completion's)."""
    return ToolBatch(
        batch_id=completion_id,
        calls=calls,
        resume={"request_id": request_id, "completion_id": completion_id},
    )


def tool_fields(tools: Sequence[dict[str, Any]], tool_choice: str | None) -> dict[str, Any]:
    """The `tools` and `tool_choice` fields of a request, checked.

    Raises:
        UsageError: a tool is not a function tool, or the choice names no tool sent.
    """
    names = [function_tool_name(position, tool) for position, tool in enumerate(tools)]
    fields: dict[str, Any] = {"tools": list(tools)} if tools else {}
    if tool_choice is None:
        return fields
    if not names:
        raise UsageError(f"tool_choice {tool_choice!r} was given but no tools were sent")
    if tool_choice in TOOL_CHOICE_MODES:
        fields["tool_choice"] = tool_choice
    elif tool_choice in names:
        fields["tool_choice"] = {"type": "function", "function": {"name": tool_choice}}
    else:
        raise UsageError(
            f"tool_choice {tool_choice!r} names no tool of this request; expected one of "
            f"{', '.join(sorted(names))} (or auto, none, required)"
        )
    return fields
