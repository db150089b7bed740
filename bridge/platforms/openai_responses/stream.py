"""Reading a Responses stream: its events folded, in order, into one `ResponseTurn`.

Pure state, no I/O: the client feeds `StreamAssembler` the decoded events as they arrive.
Events are checked against their ``sequence_number``: each must be the previous one plus one
(a gap is a lost event, a smaller one a reordered stream), since a lost
``response.function_call_arguments.delta`` would silently corrupt a call's arguments. A
server that numbers no event is not checked. Function calls are assembled by ``output_index``
(deltas also name their ``item_id``); ``response.output_item.done`` and the final
``response.completed`` replace the assembled items with whole ones when they carry them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bridge.errors import ProtocolError
from bridge.platforms._limits import RunBudget, StreamLimits
from bridge.platforms.openai_responses.models import ResponseTurn
from bridge.types import Event, Other, TextDelta

__all__ = ["StreamAssembler"]

_TERMINAL = {
    "response.completed": "completed",
    "response.failed": "failed",
    "response.incomplete": "incomplete",
}
_REASONING_DELTAS = ("response.reasoning_summary_text.delta", "response.reasoning_text.delta")


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

    def _placed(self, event: Mapping[str, Any], kind: str) -> tuple[Mapping[str, Any], int]:
        """The item of an output item event and its output_index, both required."""
        item = event.get("item")
        index = event.get("output_index")
        if not isinstance(item, Mapping) or not isinstance(index, int):
            raise ProtocolError(
                f"{self.where}: {kind} without an item and an output_index: {dict(event)!r:.200}"
            )
        return item, index

    def _add(self, event: Mapping[str, Any]) -> None:
        item, index = self._placed(event, "response.output_item.added")
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
        item, index = self._placed(event, "response.output_item.done")
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
