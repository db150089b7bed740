"""The AppBuilder emulator's answers: error bodies, JSON and run responses (streamed or
not), with the faults that change them, and the reading of request bodies into models."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import Response

from bridge.emulator.appbuilder import wire
from bridge.emulator.appbuilder.render import merge_chunks
from bridge.emulator.faults import FaultSpec
from bridge.emulator.transport import JSON, SSE, BlockResponse, fault_block, sse_block
from bridge.emulator.wire import encode_json, format_validation_error

__all__ = [
    "JSON",
    "SSE",
    "ReplyError",
    "error",
    "inband_body",
    "json_object",
    "json_reply",
    "rejection",
    "run_response",
    "validate",
]


_M = TypeVar("_M", bound=BaseModel)


class ReplyError(Exception):
    """Raised inside a handler to answer with an error body at once."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


async def json_object(request: Request) -> dict[str, Any]:
    """The request's body as a JSON object, or a 400."""
    raw = await request.body()
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise ReplyError(400, f"the request body is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ReplyError(400, f"the request body must be a JSON object, not {type(data).__name__}")
    return data


def validate(model: type[_M], data: dict[str, Any]) -> _M:
    """`data` read as `model`, or a 400 naming each field that is wrong."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ReplyError(400, f"invalid request body: {format_validation_error(exc)}") from None


def rejection(rid: str, fault: FaultSpec, *, stream: bool) -> Response:
    """The response of a fault that refuses the request before it is processed."""
    if fault.status is not None:
        message = fault.message or f"emulated fault: HTTP {fault.status}"
        return fault_block(fault, encode_json(wire.error_body(rid, fault.status, message)))
    inband = inband_body(rid, fault)
    if stream and fault.json_error_on_stream:
        inband["content"] = None  # what AppBuilder sends when a workflow node fails
    payload = encode_json(inband)
    if stream and not fault.json_error_on_stream:
        return BlockResponse([sse_block(payload)], media_type=SSE, length=False)
    return BlockResponse([payload], media_type=JSON)


def inband_body(rid: str, fault: FaultSpec) -> dict[str, Any]:
    """The body of an in-band error (HTTP 200) that a fault asks for."""
    code: Any = fault.inband or "ServiceError"
    if isinstance(code, str) and code.lstrip("-").isdigit():
        code = int(code)
    message = fault.message or "emulated in-band error"
    return {"request_id": rid, "code": code, "message": message, "content": []}


def error(rid: str, status: int, message: str) -> Response:
    """An error answer with the platform's body."""
    body = encode_json(wire.error_body(rid, status, message))
    return Response(body, status_code=status, media_type=JSON)


def json_reply(rid: str, body: Mapping[str, Any], fault: FaultSpec | None) -> Response:
    """A JSON answer, changed by `fault` (malformed, in-band error, delay, drop) if any."""
    payload = encode_json(body)
    if fault is None:
        return Response(payload, media_type=JSON)
    if fault.malformed is not None:
        payload = payload[:-1] + b", not JSON"
    if fault.inband is not None:
        payload = encode_json(inband_body(rid, fault))
    return BlockResponse([payload], media_type=JSON, delay=fault.delay, drop_after=fault.drop_after)


def run_response(
    rid: str, chunks: list[dict[str, Any]], stream: bool, fault: FaultSpec | None
) -> Response:
    """A run's chunks as an SSE stream or one merged JSON body, changed by `fault` if any."""
    if fault is not None and fault.duplicate_interrupt:
        chunks = _duplicate_interrupts(chunks)
    if not stream:
        body = merge_chunks(chunks)
        if fault is None:
            return Response(encode_json(body), media_type=JSON)
        payload = encode_json(body)
        if fault.inband is not None:
            payload = encode_json(inband_body(rid, fault))
        elif fault.malformed is not None:
            payload = payload[:-1] + b", not JSON"
        delay = fault.delay * len(body["content"])
        return BlockResponse([payload], media_type=JSON, delay=delay, drop_after=fault.drop_after)
    blocks = [sse_block(encode_json(c)) for c in chunks]
    if fault is None:
        return BlockResponse(blocks, media_type=SSE, length=False)
    if fault.malformed is not None:
        at = min(fault.malformed, len(blocks))
        blocks.insert(at, sse_block(b'{"request_id": "' + rid.encode() + b'", this is not JSON'))
    if fault.inband is not None:
        blocks = [
            *blocks[: fault.inband_after],
            sse_block(encode_json(inband_body(rid, fault))),
        ]
    return BlockResponse(
        blocks, media_type=SSE, length=False, delay=fault.delay, drop_after=fault.drop_after
    )


def _duplicate_interrupts(chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for c in chunks:
        out.append(c)
        if any(
            e.get("event_status") == "interrupt" or e.get("content_type") == "chatflow_interrupt"
            for e in c["content"]
        ):
            out.append(c)
    return out
