"""The Responses emulator's answers: JSON bodies, SSE streams, OpenAI error bodies, faults.

Every answer carries ``x-request-id``. A fault that refuses a request answers with its status
(and ``Retry-After``) or, for ``inband``, an ``error`` event (stream) or a 500; a fault on an
accepted request delays, cuts, garbles or ends the answer with an ``error`` event.
"""

from __future__ import annotations

from typing import Any

from starlette.responses import Response

from bridge.emulator.faults import FaultSpec
from bridge.emulator.openai_wire import (
    JSON,
    REQUEST_ID,
    RequestError,
    body_block,
    encode,
    error_body,
    json_response,
    sse_response,
    status_rejection,
)
from bridge.emulator.responses.render import Rendered, frame, stream_events
from bridge.emulator.transport import BlockResponse

__all__ = [
    "INCOMPLETE",
    "body_response",
    "inband_event",
    "rejection",
    "stream_response",
]

INCOMPLETE = frozenset({"max_output_tokens", "content_filter"})
"""``inband`` codes that end the response ``incomplete`` with that reason instead of failing."""


def rejection(rid: str, fault: FaultSpec, *, stream: bool) -> Response:
    if fault.status is not None:
        return status_rejection(rid, fault)
    headers = {REQUEST_ID: rid}
    event = inband_event(fault, 0)
    if stream:
        return sse_response(rid, [frame(event)])
    return BlockResponse(
        [encode(error_body(RequestError(500, event["message"], kind="server_error")))],
        status_code=500,
        media_type=JSON,
        headers=headers,
    )


def inband_event(fault: FaultSpec, sequence_number: int) -> dict[str, Any]:
    return {
        "type": "error",
        "code": fault.inband or "server_error",
        "message": fault.message or "emulated in-band error",
        "param": None,
        "sequence_number": sequence_number,
    }


def body_response(rid: str, body: dict[str, Any], fault: FaultSpec | None) -> Response:
    if fault is None:
        return json_response(rid, body)
    if fault.inband in INCOMPLETE:
        body = _incomplete(body, fault.inband)
    elif fault.inband is not None:
        body = {
            **body,
            "status": "failed",
            "error": {"code": fault.inband, "message": fault.message or "emulated in-band error"},
        }
    return body_block(rid, body, fault)


def stream_response(
    rid: str, rendered: Rendered, chunk_chars: int, fault: FaultSpec | None
) -> Response:
    events = stream_events(rendered, chunk_chars)
    blocks = [frame(event) for event in events]
    if fault is None:
        return sse_response(rid, blocks)
    if fault.malformed is not None:
        at = min(fault.malformed, len(blocks))
        blocks.insert(at, b"event: response.output_text.delta\ndata: {this is not JSON\n\n")
    if fault.inband in INCOMPLETE:
        last = events[-1]
        ended = {**last, "type": "response.incomplete"}
        ended["response"] = _incomplete(last["response"], fault.inband)
        blocks[-1] = frame(ended)
    elif fault.inband is not None:
        kept = blocks[: fault.inband_after]
        blocks = [*kept, frame(inband_event(fault, len(kept)))]
    return sse_response(rid, blocks, fault)


def _incomplete(body: dict[str, Any], reason: str) -> dict[str, Any]:
    return {**body, "status": "incomplete", "incomplete_details": {"reason": reason}}
