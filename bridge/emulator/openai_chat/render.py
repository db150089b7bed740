"""A planner step as Chat Completions says it: a ``chat.completion`` and its stream chunks.

A tool round is one assistant message with ``tool_calls`` (``finish_reason: "tool_calls"``);
an answer is one assistant message with ``content`` (``finish_reason: "stop"``). When the
request carries no native tools but its system prompt describes them in the text tool format
(`bridge.emulator.openai_chat.messages`), a round is written as text instead: one
```` ```json {"tool": ..., "arguments": ...} ```` block per call, ``finish_reason: "stop"``,
as a model without native tool calls answers.

The stream is what the official SDK and toolbridge's adapter assemble: a first chunk with
``role: "assistant"``; for each call a chunk opening it (``index``, ``id``, ``type``, the
``name`` and empty ``arguments``) and chunks with more of its ``arguments`` keyed by the same
``index``; text as ``content`` pieces; a last chunk with an empty delta and the
``finish_reason``; with ``stream_options.include_usage`` every chunk has ``usage: null`` and
one more chunk with no choices carries the usage. ``data: [DONE]`` ends the stream.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from typing import Any

from bridge.emulator.openai_chat.messages import ChatRequest, IssuedCall
from bridge.emulator.planner import AnswerStep, AskStep, CallStep, FailStep, PlannedCall, Step
from bridge.emulator.render import estimate_tokens

__all__ = ["FINGERPRINT", "Rendered", "render_completion", "stream_chunks", "text_calls"]

FINGERPRINT = "fp_emulator"


@dataclass(frozen=True)
class Rendered:
    """One completion: its body, the calls it made, its answer or its error."""

    body: dict[str, Any]
    issued: dict[str, IssuedCall]
    """Native calls by call id."""
    text_calls: tuple[PlannedCall, ...]
    """Calls written as text (the text tool protocol), in order."""
    answer: str | None
    """The answer text, or None when the completion asks for tool calls or failed."""
    error: dict[str, Any] | None = None
    """An OpenAI error object when the step failed (a scenario that cannot be followed)."""


def text_calls(calls: tuple[PlannedCall, ...]) -> str:
    """Calls written as the text tool protocol asks a model to write them."""
    return "\n".join(
        "```json\n"
        + json.dumps({"tool": c.name, "arguments": c.arguments}, ensure_ascii=False)
        + "\n```"
        for c in calls
    )


def render_completion(
    step: Step, request: ChatRequest, *, prompt_text: str, as_text: bool
) -> Rendered:
    """The whole completion for `step` (what a plain POST carries)."""
    message: dict[str, Any] = {
        "role": "assistant",
        "content": None,
        "refusal": None,
        "annotations": [],
    }
    issued: dict[str, IssuedCall] = {}
    written: tuple[PlannedCall, ...] = ()
    answer: str | None = None
    error: dict[str, Any] | None = None
    finish = "stop"
    if isinstance(step, CallStep) and as_text:
        written = step.calls
        message["content"] = text_calls(step.calls)
    elif isinstance(step, CallStep):
        finish = "tool_calls"
        message["tool_calls"] = []
        for call in step.calls:
            call_id = f"call_{uuid.uuid4().hex[:24]}"
            message["tool_calls"].append(
                {
                    "id": call_id,
                    "type": "function",
                    "function": {
                        "name": call.name,
                        "arguments": json.dumps(call.arguments, ensure_ascii=False),
                    },
                }
            )
            issued[call_id] = IssuedCall(call.name, call.output_name, dict(call.arguments))
    elif isinstance(step, AnswerStep | AskStep):
        answer = step.text if isinstance(step, AnswerStep) else step.question
        message["content"] = answer
    elif isinstance(step, FailStep):
        error = {
            "message": f"{step.code}: {step.message}",
            "type": "server_error",
            "param": None,
            "code": "server_error",
        }
    out = json.dumps(message, ensure_ascii=False) if error is None else ""
    prompt_tokens = estimate_tokens(prompt_text)
    completion_tokens = estimate_tokens(out) if out else 0
    body: dict[str, Any] = {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": request.model,
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0},
        },
        "service_tier": "default",
        "system_fingerprint": FINGERPRINT,
    }
    return Rendered(body=body, issued=issued, text_calls=written, answer=answer, error=error)


def stream_chunks(rendered: Rendered, chunk_chars: int, *, include_usage: bool) -> list[Any]:
    """The stream of `rendered`: chunk objects in order (a failed step ends with its error)."""
    body = rendered.body
    choice = body["choices"][0]
    message = choice["message"]
    base = {
        "id": body["id"],
        "object": "chat.completion.chunk",
        "created": body["created"],
        "model": body["model"],
        "service_tier": body["service_tier"],
        "system_fingerprint": body["system_fingerprint"],
    }

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        made: dict[str, Any] = {
            **base,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }
        if include_usage:
            made["usage"] = None
        return made

    chunks: list[Any] = []
    tool_calls = message.get("tool_calls") or []
    if tool_calls:
        chunks.append(chunk({"role": "assistant", "content": None, "refusal": None}))
        for index, call in enumerate(tool_calls):
            function = call["function"]
            opening = {
                "index": index,
                "id": call["id"],
                "type": "function",
                "function": {"name": function["name"], "arguments": ""},
            }
            chunks.append(chunk({"tool_calls": [opening]}))
            for piece in _pieces(function["arguments"], chunk_chars):
                chunks.append(
                    chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
                )
    else:
        chunks.append(chunk({"role": "assistant", "content": "", "refusal": None}))
        for piece in _pieces(message.get("content") or "", chunk_chars):
            if piece:
                chunks.append(chunk({"content": piece}))
    if rendered.error is not None:
        return [*chunks, {"error": rendered.error}]
    chunks.append(chunk({}, choice["finish_reason"]))
    if include_usage:
        chunks.append({**base, "choices": [], "usage": body["usage"]})
    return chunks


def _pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]
