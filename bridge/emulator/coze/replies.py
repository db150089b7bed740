"""HTTP answers of the Coze emulator: envelopes, errors, fault rejections, chat streams."""

from __future__ import annotations

import asyncio
import json
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import Response

from bridge.emulator.coze import wire
from bridge.emulator.coze.chats import ChatRecord, ReplyError
from bridge.emulator.faults import FaultSpec
from bridge.emulator.transport import JSON, SSE, BlockResponse, fault_block
from bridge.emulator.wire import encode_json, format_validation_error

__all__ = [
    "JSON",
    "SSE",
    "chat_response",
    "error_response",
    "inband_error",
    "json_object",
    "json_response",
    "rejection",
    "validate",
]

_M = TypeVar("_M", bound=BaseModel)


async def json_object(request: Request) -> dict[str, Any]:
    raw = await request.body()
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise ReplyError(
            wire.CODE_BAD_REQUEST, f"the request body is not valid JSON: {exc}"
        ) from None
    if not isinstance(data, dict):
        raise ReplyError(
            wire.CODE_BAD_REQUEST,
            f"the request body must be a JSON object, not {type(data).__name__}",
        )
    return data


def validate(model: type[_M], data: dict[str, Any]) -> _M:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ReplyError(
            wire.CODE_BAD_REQUEST, f"invalid request body: {format_validation_error(exc)}"
        ) from None


def json_response(body: Any, status: int = 200) -> Response:
    return Response(encode_json(body), status_code=status, media_type=JSON)


def error_response(logid: str, reply: ReplyError) -> Response:
    return json_response(wire.error_envelope(reply.code, reply.msg, logid), reply.status)


def rejection(logid: str, fault: FaultSpec, *, stream: bool) -> Response:
    """A fault that refuses the request before it is processed (a stream's too: as JSON)."""
    if fault.status is not None:
        msg = fault.message or f"emulated fault: HTTP {fault.status}"
        body = encode_json(wire.error_envelope(wire.code_for_status(fault.status), msg, logid))
        return fault_block(fault, body, seconds=lambda seconds: f"{seconds:g}")
    body = encode_json(inband_error(logid, fault))
    return BlockResponse([body], media_type=JSON)


def inband_error(logid: str, fault: FaultSpec) -> dict[str, Any]:
    code = fault.inband or ""
    number = int(code) if code.lstrip("-").isdigit() else wire.CODE_SERVER
    return wire.error_envelope(number, fault.message or "emulated in-band error", logid)


async def chat_response(
    logid: str, chat: ChatRecord, frames: list[bytes], stream: bool, fault: FaultSpec | None
) -> Response:
    if fault is not None and fault.stall:
        await asyncio.sleep(fault.stall)
    if not stream:
        # The chat is answered as it was when the request arrived; retrieve shows the rest.
        body = encode_json(wire.envelope(chat.to_wire("in_progress")))
        if fault is None:
            return Response(body, media_type=JSON)
        if fault.inband is not None:
            body = encode_json(inband_error(logid, fault))
        elif fault.malformed is not None:
            body = body[:-1] + b", not JSON"
        return BlockResponse(
            [body], media_type=JSON, delay=fault.delay, drop_after=fault.drop_after
        )
    if fault is None:
        return BlockResponse(frames, media_type=SSE, length=False)
    if fault.duplicate_interrupt:
        frames = [
            f
            for frame in frames
            for f in (
                [frame, frame] if frame.startswith(b"event:conversation.chat.requires") else [frame]
            )
        ]
    if fault.malformed is not None:
        at = min(fault.malformed, len(frames))
        frames.insert(at, b"event:conversation.message.delta\ndata:{this is not JSON\n\n")
    if fault.inband is not None:
        error = inband_error(logid, fault)
        frames = [
            *frames[: fault.inband_after],
            wire.sse_frame("error", {"code": error["code"], "msg": error["msg"]}),
            wire.sse_frame("done", wire.DONE_DATA),
        ]
    return BlockResponse(
        frames, media_type=SSE, length=False, delay=fault.delay, drop_after=fault.drop_after
    )
