"""Responses API wire shapes: stream events assembled into one response, output items read.

Pure state and functions, no I/O. The adapter (`openai_responses.py`) feeds
`StreamAssembler` the decoded events of a stream, or hands `turn_from_body` the body of a
non-streamed answer, and gets back a `ResponseTurn`: status, output items, text, calls, usage,
error. On the way out, `tool_fields` shapes the tools (strict when every tool fits) and the
tool choice.

Events are checked against their ``sequence_number``: each must be the previous one plus one
(a gap is a lost event, a smaller one a reordered stream), since a lost
``response.function_call_arguments.delta`` would silently corrupt a call's arguments. A
server that numbers no event is not checked. Function calls are assembled by ``output_index``
(deltas also name their ``item_id``); ``response.output_item.done`` and the final
``response.completed`` replace the assembled items with whole ones when they carry them.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from bridge.errors import ProtocolError, UsageError
from bridge.platforms._limits import RunBudget, StreamLimits
from bridge.platforms.base import parse_tool_choice
from bridge.tools import to_dialect
from bridge.types import Event, Other, TextDelta, ToolCall, ToolChoice

__all__ = [
    "ResponseTurn",
    "StreamAssembler",
    "choice_name",
    "function_calls",
    "output_text",
    "tool_fields",
    "turn_from_body",
]

logger = logging.getLogger(__name__)

_TERMINAL = {
    "response.completed": "completed",
    "response.failed": "failed",
    "response.incomplete": "incomplete",
}
_REASONING_DELTAS = ("response.reasoning_summary_text.delta", "response.reasoning_text.delta")


@dataclass
class ResponseTurn:
    """What one response said, from its stream or its body."""

    response_id: str | None = None
    status: str | None = None
    """``completed``, ``failed``, ``incomplete``, ``error`` (an error event), or None while
    the stream has not ended."""
    output: list[dict[str, Any]] = field(default_factory=list)
    text: list[str] = field(default_factory=list)
    usage: dict[str, Any] | None = None
    error: tuple[str, str] | None = None
    incomplete_reason: str | None = None
    raw: dict[str, Any] = field(default_factory=dict)

    def answer(self) -> str:
        """The assistant's text: from the output messages, else the streamed deltas."""
        return output_text(self.output) or "".join(self.text)

    def take(self, response: Mapping[str, Any]) -> None:
        """Fold a whole Response object in (a body, or a terminal event's ``response``)."""
        if isinstance(response.get("id"), str):
            self.response_id = response["id"]
        if isinstance(response.get("status"), str):
            self.status = response["status"]
        output = response.get("output")
        if isinstance(output, list) and output:
            self.output = [dict(item) for item in output if isinstance(item, Mapping)]
        if isinstance(response.get("usage"), dict):
            self.usage = response["usage"]
        error = response.get("error")
        if isinstance(error, Mapping):
            self.error = (str(error.get("code") or "failed"), str(error.get("message") or error))
        details = response.get("incomplete_details")
        if isinstance(details, Mapping):
            self.incomplete_reason = str(details.get("reason") or "unknown")
        for key in ("id", "model", "status", "usage", "previous_response_id"):
            if response.get(key) is not None:
                self.raw[key] = response[key]


class StreamAssembler:
    """Folds the events of one Responses stream into a `ResponseTurn`, checking their order."""

    def __init__(self, where: str, budget: RunBudget | None = None) -> None:
        self.where = where
        self.budget = budget if budget is not None else StreamLimits().budget(where)
        """Counts text, reasoning, calls and argument characters against the stream's bounds."""
        self.turn = ResponseTurn()
        self._items: dict[int, dict[str, Any]] = {}
        self._index_of: dict[str, int] = {}
        self._last_sequence: int | None = None
        self._numbered: bool | None = None
        self.events = 0
        """Events fed so far."""

    @property
    def finished(self) -> bool:
        """True once a terminal event (completed, failed, incomplete, error) arrived."""
        return self.turn.status is not None

    def feed(self, event: Mapping[str, Any]) -> list[Event]:
        """Fold one event in; return the neutral events to pass on (text deltas).

        Raises:
            ProtocolError: a sequence gap or reordering, or an event that refers to an item
                that was never announced.
        """
        self.events += 1
        kind = event.get("type")
        if not isinstance(kind, str):
            raise ProtocolError(f"{self.where}: a stream event has no type: {dict(event)!r:.200}")
        self._check_sequence(kind, event.get("sequence_number"))
        if kind in _TERMINAL:
            response = event.get("response")
            if isinstance(response, Mapping):
                self.turn.take(response)
            self.turn.status = _TERMINAL[kind]
            if not self.turn.output:
                self.turn.output = [self._items[i] for i in sorted(self._items)]
            return []
        if kind == "error":
            code = str(event.get("code") or "error")
            self.turn.error = (code, str(event.get("message") or "error event without a message"))
            self.turn.status = "error"
            self.turn.raw = dict(event)
            return []
        if kind == "response.created" and isinstance(event.get("response"), Mapping):
            self.turn.take(event["response"])
            self.turn.status = None
            return []
        if kind == "response.output_item.added":
            self._add(event)
        elif kind == "response.output_item.done":
            self._done(event)
        elif kind == "response.function_call_arguments.delta":
            item = self._item(event, kind)
            piece = str(event.get("delta") or "")
            self.budget.arguments(piece)
            item["arguments"] = str(item.get("arguments") or "") + piece
        elif kind == "response.function_call_arguments.done":
            item = self._item(event, kind)
            if isinstance(event.get("arguments"), str):
                item["arguments"] = event["arguments"]
        elif kind == "response.output_text.delta":
            delta = event.get("delta")
            if isinstance(delta, str) and delta:
                self.budget.text(delta)
                self.turn.text.append(delta)
                return [TextDelta(text=delta)]
        elif kind in _REASONING_DELTAS:
            delta = event.get("delta")
            if isinstance(delta, str) and delta:
                self.budget.text(delta)
                return [Other(raw={"reasoning": delta})]
        return []

    def _check_sequence(self, kind: str, number: Any) -> None:
        numbered = isinstance(number, int) and not isinstance(number, bool)
        if self._numbered is None:
            self._numbered = numbered
        if not self._numbered:
            return
        if not numbered:
            raise ProtocolError(
                f"{self.where}: the stream event {kind} has no sequence_number, though the "
                "events before it had one"
            )
        last = self._last_sequence
        if last is not None and number != last + 1:
            if number > last + 1:
                lost = number - last - 1
                what = (
                    f"{lost} event(s) before it are missing or out of order (expected {last + 1})"
                )
            else:
                what = "it arrived out of order or twice"
            raise ProtocolError(
                f"{self.where}: the stream event {kind} has sequence_number {number} after "
                f"{last}: {what}; the response cannot be trusted (a function call's "
                "arguments may be incomplete)"
            )
        self._last_sequence = number

    def _add(self, event: Mapping[str, Any]) -> None:
        item = event.get("item")
        index = event.get("output_index")
        if not isinstance(item, Mapping) or not isinstance(index, int):
            raise ProtocolError(
                f"{self.where}: response.output_item.added without an item and an output_index: "
                f"{dict(event)!r:.200}"
            )
        held = self._items.get(index)
        if held is not None and held.get("id") != item.get("id"):
            # Deltas find their item by id through its index: a second item at the same index
            # would take the first one's argument deltas, and a call would run with a mix.
            raise ProtocolError(
                f"{self.where}: response.output_item.added announces item {item.get('id')!r} "
                f"at output_index {index}, where item {held.get('id')!r} already is; expected "
                "a distinct output_index for each item, so the calls cannot be told apart"
            )
        if held is None and item.get("type") == "function_call":
            self.budget.tool_call()
        self._items[index] = dict(item)
        if isinstance(item.get("id"), str):
            self._index_of[item["id"]] = index

    def _done(self, event: Mapping[str, Any]) -> None:
        item = event.get("item")
        index = event.get("output_index")
        if not isinstance(item, Mapping) or not isinstance(index, int):
            raise ProtocolError(
                f"{self.where}: response.output_item.done without an item and an output_index: "
                f"{dict(event)!r:.200}"
            )
        assembled = self._items.get(index, {})
        whole = {**assembled, **item}
        if not whole.get("arguments") and assembled.get("arguments"):
            whole["arguments"] = assembled["arguments"]  # a done item that left them out
        self._items[index] = whole
        if isinstance(whole.get("id"), str):
            self._index_of[whole["id"]] = index

    def _item(self, event: Mapping[str, Any], kind: str) -> dict[str, Any]:
        item_id = event.get("item_id")
        index = self._index_of.get(item_id) if isinstance(item_id, str) else None
        if index is None and isinstance(event.get("output_index"), int):
            index = event["output_index"]
        if index is None or index not in self._items:
            raise ProtocolError(
                f"{self.where}: {kind} for item {item_id!r} (output_index "
                f"{event.get('output_index')!r}) before its response.output_item.added"
            )
        return self._items[index]


def turn_from_body(body: Mapping[str, Any]) -> ResponseTurn:
    """The turn of a non-streamed answer (one Response object)."""
    turn = ResponseTurn()
    turn.take(body)
    return turn


def output_text(output: Sequence[Mapping[str, Any]]) -> str:
    """The text of the assistant messages among `output` items."""
    parts = []
    for item in output:
        if item.get("type") != "message":
            continue
        content = item.get("content")
        for part in content if isinstance(content, list) else ():
            if isinstance(part, Mapping) and part.get("type") == "output_text":
                parts.append(str(part.get("text") or ""))
    return "".join(parts)


def function_calls(output: Sequence[Mapping[str, Any]], where: str) -> tuple[ToolCall, ...]:
    """The function calls among `output` items, in order, with ``call_id`` as the call id.

    Raises:
        ProtocolError: a function call without a ``call_id`` or a ``name``.
    """
    calls = []
    for item in output:
        if item.get("type") != "function_call":
            continue
        call_id, name = item.get("call_id"), item.get("name")
        if not isinstance(call_id, str) or not call_id or not isinstance(name, str) or not name:
            raise ProtocolError(
                f"{where}: a function_call item lacks its call_id or name (the output must be "
                f"answered by call_id): {json.dumps(dict(item), ensure_ascii=False)[:200]}"
            )
        arguments = item.get("arguments")
        text = arguments if isinstance(arguments, str) else json.dumps(arguments or {})
        calls.append(ToolCall(call_id=call_id, name=name, arguments=text, raw_arguments=text))
    return tuple(calls)


# --- requests ---------------------------------------------------------------------------------


def choice_name(choice: ToolChoice | str | None) -> str | None:
    """The tool name or mode to send; a forced input is refused rather than dropped."""
    parsed = parse_tool_choice(choice)
    if not isinstance(parsed, ToolChoice):
        return parsed
    if parsed.input:
        raise UsageError(
            f"tool_choice input {parsed.input!r} for {parsed.name!r} cannot be sent: the "
            "Responses API can force a tool but not its arguments; pass the tool name only "
            f"(tool_choice={parsed.name!r})"
        )
    return parsed.name


def tool_fields(tools: Sequence[dict[str, Any]], choice: str | None) -> dict[str, Any]:
    """``tools`` as Responses function tools (strict when every one fits) and ``tool_choice``."""
    plain = [_flat(position, tool) for position, tool in enumerate(tools)]
    strict: list[dict[str, Any]] = []
    for tool in plain:
        try:
            shaped = to_dialect(tool, "openai-strict")["function"]
        except UsageError as exc:
            logger.debug("tools sent without strict mode: %s", exc)
            strict = []
            break
        strict.append({"type": "function", **shaped})
    fields: dict[str, Any] = {}
    if plain:
        fields["tools"] = strict or [{"type": "function", **t, "strict": False} for t in plain]
    if choice is None:
        return fields
    names = [t["name"] for t in plain]
    if not names:
        raise UsageError(f"tool_choice {choice!r} was given but no tools were sent")
    if choice in ("auto", "none", "required"):
        fields["tool_choice"] = choice
    elif choice in names:
        fields["tool_choice"] = {"type": "function", "name": choice}
    else:
        raise UsageError(
            f"tool_choice {choice!r} names no tool of this request; expected one of "
            f"{', '.join(sorted(names))} (or auto, none, required)"
        )
    return fields


def _flat(position: int, tool: Mapping[str, Any]) -> dict[str, Any]:
    """name, description and parameters of a Chat Completions function tool (or of one that
    is already in the Responses shape)."""
    function = tool.get("function") if isinstance(tool, Mapping) else None
    source = function if isinstance(function, Mapping) else tool
    name = source.get("name") if isinstance(source, Mapping) else None
    if not isinstance(tool, Mapping) or tool.get("type") != "function" or not name:
        raise UsageError(
            f"tools[{position}] is not a function tool: expected "
            '{"type": "function", "function": {"name": ..., "parameters": ...}} '
            '(build manifests with dialect="openai")'
        )
    parameters = source.get("parameters")
    return {
        "name": str(name),
        "description": str(source.get("description") or ""),
        "parameters": dict(parameters) if isinstance(parameters, Mapping) else {"type": "object"},
    }
