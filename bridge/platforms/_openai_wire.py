"""Chat Completions wire shapes: whole calls from streamed fragments, errors, usage.

Pure functions and small state objects, no I/O: the adapter (`openai_chat.py`) feeds them the
decoded chunks of a stream, or the single body of a non-streamed answer.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from bridge.errors import ConfigurationError, ProtocolError
from bridge.platforms._limits import RunBudget
from bridge.platforms._transport import trim
from bridge.types import Event, Other, TextDelta, ToolCall

__all__ = [
    "Completion",
    "PartialCall",
    "ToolCallAssembler",
    "add_usage",
    "decode_object",
    "error_details",
    "model_verdict",
    "trim",
]


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


def decode_object(data: str | bytes, request_id: str | None, *, what: str) -> dict[str, Any]:
    """Parse `data` as a JSON object, or raise `ProtocolError` naming `what` it was."""
    try:
        payload = json.loads(data)
    except (ValueError, RecursionError) as exc:
        # RecursionError: JSON nested deeper than Python's parser can follow (a hostile server).
        problem = (
            "is JSON nested too deeply to be read (expected a shallow object)"
            if isinstance(exc, RecursionError)
            else f"is not valid JSON ({exc})"
        )
        text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
        raise ProtocolError(
            f"{what} {problem}: {text[:200]!r}",
            request_id=request_id,
            body=trim(text),
        ) from exc
    if not isinstance(payload, dict):
        raise ProtocolError(
            f"{what} is a JSON {type(payload).__name__}, expected an object",
            request_id=request_id,
        )
    return payload


def error_details(payload: object) -> tuple[str, str] | None:
    """`(code, message)` when `payload` is an error object in any of the usual shapes."""
    if not isinstance(payload, dict):
        return None
    error = payload.get("error")
    if error is None and payload.get("object") == "error":
        error = payload  # vLLM's older flat shape: {"object": "error", "message": ...}
    if isinstance(error, str):
        return "error", error
    if not isinstance(error, dict):
        return None
    message = error.get("message") or json.dumps(error, ensure_ascii=False)[:300]
    code = error.get("code") or error.get("type") or "error"
    return str(code), str(message)


def add_usage(total: dict[str, Any] | None, usage: dict[str, Any] | None) -> dict[str, Any] | None:
    """Sum numeric usage fields over the completions of one turn."""
    if usage is None:
        return total
    if total is None:
        return dict(usage)
    summed = dict(total)
    for key, value in usage.items():
        if isinstance(value, int) and isinstance(summed.get(key), int):
            summed[key] += value
        else:
            summed[key] = value
    return summed


def model_verdict(base_url: str, model: str, served: list[str]) -> str:
    """What a ``GET /models`` listing `served` proves about `model`, in one sentence.

    Raises:
        ConfigurationError: the server lists its models and `model` is not among them.
    """
    if served and model not in served:
        raise ConfigurationError(
            f"model {model!r} is not served by {base_url}; "
            f"it serves: {', '.join(served)} (set --model or OPENAI_MODEL)"
        )
    if not served:
        return f"{base_url} answered (it lists no models to confirm {model!r})"
    return f"{base_url} answered and serves model {model!r}"
