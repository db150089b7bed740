"""Responses API wire shapes: one response's output items read.

Pure state and functions, no I/O. The client feeds `stream.StreamAssembler` the decoded events
of a stream, or hands `turn_from_body` the body of a non-streamed answer, and gets back a
`ResponseTurn`: status, output items, text, calls, usage, error.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from bridge.errors import ProtocolError
from bridge.types import ToolBatch, ToolCall

__all__ = [
    "ResponseTurn",
    "ResponsesConversation",
    "function_calls",
    "output_text",
    "turn_from_body",
]


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


@dataclass
class ResponsesConversation:
    """What the adapter holds of one conversation: its chain, or its items, and the turn."""

    previous_response_id: str | None = None
    items: list[dict[str, Any]] = field(default_factory=list)
    """store=False: every item sent and received so far, resent with each request."""
    pending: ToolBatch | None = None
    turn_tools: dict[str, Any] = field(default_factory=dict)
    """The `tools`/`tool_choice` fields of the current turn, sent again with its outputs."""
    turn_usage: dict[str, Any] | None = None
    call_ids: list[str] = field(default_factory=list)
    """Every call id the loop was given in this conversation (it runs an id at most once)."""
    wire_ids: dict[str, str] = field(default_factory=dict)
    """Call ids given in place of one the server had already used: given -> the server's."""
