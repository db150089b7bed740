"""The Chat Completions emulator's answers: JSON bodies, SSE streams, error bodies, faults.

Every answer carries ``x-request-id``; errors use OpenAI's body
``{"error": {"message", "type", "param", "code"}}`` (`bridge.emulator.openai_wire`, the same
envelope as the Responses emulator's). A stream is ``data: {chunk}`` messages ending with
``data: [DONE]``, as OpenAI frames it (no ``event:`` lines). A fault that refuses a request
answers with its status (and ``Retry-After``) or, for ``inband``, a stream whose one message is
``data: {"error": ...}`` (non-stream: a 500); a fault on an accepted request delays, cuts,
garbles or ends the answer with an error message, or, for ``inband=length`` or
``inband=content_filter``, cuts it short with that ``finish_reason``.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.responses import Response

from bridge.emulator.faults import FaultSpec
from bridge.emulator.openai_chat.render import Rendered, stream_chunks
from bridge.emulator.openai_wire import (
    JSON,
    REQUEST_ID,
    RequestError,
    body_block,
    encode,
    error_body,
    error_response,
    json_response,
    sse_response,
    status_rejection,
)
from bridge.emulator.transport import BlockResponse, sse_block

__all__ = [
    "CUT_SHORT",
    "body_response",
    "rejection",
    "stream_response",
]

DONE = b"data: [DONE]\n\n"
CUT_SHORT = {"length": "length", "max_output_tokens": "length", "content_filter": "content_filter"}
"""``inband`` codes that end the completion with a ``finish_reason`` instead of an error."""


def frame(chunk: Any) -> bytes:
    """One SSE message: ``data: {json}`` and a blank line."""
    return sse_block(json.dumps(chunk, ensure_ascii=False, separators=(",", ":")).encode())


def _inband(fault: FaultSpec) -> dict[str, Any]:
    message = fault.message or "emulated in-band error"
    return error_body(RequestError(500, message, code=fault.inband, kind="server_error"))


def rejection(rid: str, fault: FaultSpec, *, stream: bool) -> Response:
    """A fault that refuses the request before anything happens."""
    if fault.status is not None:
        return status_rejection(rid, fault)
    if not stream:
        return BlockResponse(
            [encode(_inband(fault))], status_code=500, media_type=JSON, headers={REQUEST_ID: rid}
        )
    return sse_response(rid, [frame(_inband(fault))])


def body_response(rid: str, rendered: Rendered, fault: FaultSpec | None) -> Response:
    """The ``chat.completion`` body of an accepted request, faults applied."""
    if rendered.error is not None:
        exc = RequestError(500, rendered.error["message"], kind="server_error", code="server_error")
        return error_response(rid, exc)
    body = rendered.body
    if fault is None:
        return json_response(rid, body)
    if fault.inband in CUT_SHORT:
        body = _cut_short(body, CUT_SHORT[fault.inband])
    elif fault.inband is not None:
        return BlockResponse(
            [encode(_inband(fault))],
            status_code=500,
            media_type=JSON,
            headers={REQUEST_ID: rid},
            delay=fault.delay,
        )
    return body_block(rid, body, fault)


def stream_response(
    rid: str,
    rendered: Rendered,
    chunk_chars: int,
    fault: FaultSpec | None,
    *,
    include_usage: bool,
) -> Response:
    """The stream of an accepted request, faults applied."""
    chunks = stream_chunks(rendered, chunk_chars, include_usage=include_usage)
    if fault is not None and fault.inband in CUT_SHORT:
        at = next(
            i for i, c in enumerate(chunks) if c.get("choices") and c["choices"][0]["finish_reason"]
        )
        reason = CUT_SHORT[fault.inband]
        last = chunks[at]
        chunks[at] = {**last, "choices": [{**last["choices"][0], "finish_reason": reason}]}
    blocks = [frame(chunk) for chunk in chunks]
    if rendered.error is None:
        blocks.append(DONE)
    if fault is None:
        return sse_response(rid, blocks)
    if fault.malformed is not None:
        at = min(fault.malformed, len(blocks))
        blocks.insert(at, b"data: {this is not JSON\n\n")
    if fault.inband is not None and fault.inband not in CUT_SHORT:
        blocks = [*blocks[: fault.inband_after], frame(_inband(fault))]
    return sse_response(rid, blocks, fault)


def _cut_short(body: dict[str, Any], reason: str) -> dict[str, Any]:
    choice = {**body["choices"][0], "finish_reason": reason}
    return {**body, "choices": [choice]}
