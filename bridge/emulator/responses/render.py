"""A planner step as the Responses API says it: a Response object and its stream events.

A tool round is a ``reasoning`` item (the planner's thought as its summary) and one
``function_call`` item per call; an answer is one assistant ``message`` with an
``output_text`` part; a failed step is a response with status ``failed`` and an ``error``.

The stream is what the official SDK's accumulator needs: ``response.created``,
``response.in_progress``, then per output item ``response.output_item.added`` (a function
call with empty ``arguments``, a message with no content), its content events
(``response.function_call_arguments.delta``/``.done``; ``response.content_part.added``,
``response.output_text.delta``/``.done``, ``response.content_part.done``),
``response.output_item.done``, and last ``response.completed`` (or ``response.failed``).
Every event has ``type`` and an increasing ``sequence_number`` and is framed as
``event: TYPE`` plus ``data: {json}``, as OpenAI frames it.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from typing import Any

from bridge.emulator.planner import AnswerStep, AskStep, CallStep, FailStep, Step
from bridge.emulator.render import estimate_tokens
from bridge.emulator.responses.items import IssuedCall, ResponsesRequest, encrypt_reasoning

__all__ = ["Rendered", "frame", "render_response", "stream_events"]


@dataclass(frozen=True)
class Rendered:
    """One response: its final object, the output items, and the calls it made."""

    body: dict[str, Any]
    output: list[dict[str, Any]]
    issued: dict[str, IssuedCall]
    answer: str | None
    """The answer text, or None when the response asks for function calls or failed."""


def _id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def render_response(
    step: Step,
    request: ResponsesRequest,
    *,
    prompt_text: str,
    tools: list[dict[str, Any]],
) -> Rendered:
    """The whole response for `step` (what ``response.completed`` and a plain POST carry)."""
    output: list[dict[str, Any]] = []
    issued: dict[str, IssuedCall] = {}
    answer: str | None = None
    error: dict[str, Any] | None = None
    if isinstance(step, CallStep):
        reasoning_id = _id("rs")
        reasoning: dict[str, Any] = {
            "type": "reasoning",
            "id": reasoning_id,
            "summary": [{"type": "summary_text", "text": step.thought}],
        }
        if "reasoning.encrypted_content" in (request.include or ()):
            reasoning["encrypted_content"] = encrypt_reasoning(reasoning_id, step.thought)
        output.append(reasoning)
        for call in step.calls:
            item_id, call_id = _id("fc"), f"call_{uuid.uuid4().hex[:24]}"
            output.append(
                {
                    "type": "function_call",
                    "id": item_id,
                    "call_id": call_id,
                    "name": call.name,
                    "arguments": json.dumps(call.arguments, ensure_ascii=False),
                    "status": "completed",
                }
            )
            issued[call_id] = IssuedCall(
                call.name, call.output_name, dict(call.arguments), item_id, reasoning_id
            )
    elif isinstance(step, AnswerStep | AskStep):
        answer = step.text if isinstance(step, AnswerStep) else step.question
        output.append(_message(answer))
    elif isinstance(step, FailStep):
        error = {"code": "server_error", "message": f"{step.code}: {step.message}"}
    out_text = json.dumps(output, ensure_ascii=False) if output else ""
    input_tokens = estimate_tokens(prompt_text)
    output_tokens = estimate_tokens(out_text) if out_text else 0
    body: dict[str, Any] = {
        "id": _id("resp"),
        "object": "response",
        "created_at": int(time.time()),
        "status": "failed" if error else "completed",
        "background": False,
        "error": error,
        "incomplete_details": None,
        "instructions": request.instructions,
        "max_output_tokens": None,
        "model": request.model,
        "output": output,
        "parallel_tool_calls": request.parallel_tool_calls is not False,
        "previous_response_id": request.previous_response_id,
        "reasoning": {"effort": None, "summary": None},
        "store": request.stored,
        "temperature": 1.0,
        "text": {"format": {"type": "text"}},
        "tool_choice": request.tool_choice or "auto",
        "tools": tools,
        "top_p": 1.0,
        "truncation": "disabled",
        "usage": {
            "input_tokens": input_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": input_tokens + output_tokens,
        },
        "user": None,
        "metadata": {},
    }
    return Rendered(body=body, output=output, issued=issued, answer=answer)


def _message(text: str) -> dict[str, Any]:
    return {
        "type": "message",
        "id": _id("msg"),
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}],
    }


def stream_events(rendered: Rendered, chunk_chars: int) -> list[dict[str, Any]]:
    """The stream of `rendered`, in order, with sequence numbers from 0."""
    final = rendered.body
    start = {**final, "status": "in_progress", "output": [], "usage": None, "error": None}
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": start},
        {"type": "response.in_progress", "response": start},
    ]
    for index, item in enumerate(rendered.output):
        events += _item_events(index, item, chunk_chars)
    kind = "response.failed" if final["status"] == "failed" else "response.completed"
    events.append({"type": kind, "response": final})
    return [{**event, "sequence_number": n} for n, event in enumerate(events)]


def _item_events(index: int, item: dict[str, Any], chunk_chars: int) -> list[dict[str, Any]]:
    where = {"output_index": index, "item_id": item["id"]}
    if item["type"] == "function_call":
        added = {**item, "arguments": "", "status": "in_progress"}
        arguments = item["arguments"]
        return [
            {"type": "response.output_item.added", "output_index": index, "item": added},
            *(
                {"type": "response.function_call_arguments.delta", **where, "delta": piece}
                for piece in _pieces(arguments, chunk_chars)
            ),
            {
                "type": "response.function_call_arguments.done",
                **where,
                "name": item["name"],
                "arguments": arguments,
            },
            {"type": "response.output_item.done", "output_index": index, "item": item},
        ]
    if item["type"] == "message":
        text = item["content"][0]["text"]
        part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        at = {**where, "content_index": 0}
        return [
            {
                "type": "response.output_item.added",
                "output_index": index,
                "item": {**item, "status": "in_progress", "content": []},
            },
            {"type": "response.content_part.added", **at, "part": part},
            *(
                {"type": "response.output_text.delta", **at, "delta": piece, "logprobs": []}
                for piece in _pieces(text, chunk_chars)
            ),
            {"type": "response.output_text.done", **at, "text": text, "logprobs": []},
            {"type": "response.content_part.done", **at, "part": {**part, "text": text}},
            {"type": "response.output_item.done", "output_index": index, "item": item},
        ]
    added = {**item, "summary": []}
    added.pop("encrypted_content", None)
    return [
        {"type": "response.output_item.added", "output_index": index, "item": added},
        {"type": "response.output_item.done", "output_index": index, "item": item},
    ]


def _pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def frame(event: dict[str, Any]) -> bytes:
    """One SSE message: ``event: TYPE``, ``data: {json}`` and a blank line."""
    data = json.dumps(event, ensure_ascii=False, separators=(",", ":"))
    return f"event: {event['type']}\ndata: {data}\n\n".encode()
