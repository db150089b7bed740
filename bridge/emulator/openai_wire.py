"""What OpenAI's two emulated APIs (Responses, Chat Completions) share on the wire.

The error body ``{"error": {"message", "type", "param", "code"}}`` with its HTTP status
(`RequestError`, `error_response`), ``x-request-id`` on every answer, the bearer key check,
request bodies read as JSON objects (`OpenAIRequest`: the fields and refusals both APIs
share), content given as a string or a list of text parts, the strict-mode rules for function
schemas, the answer to a fault that refuses a request with an HTTP status, a body or stream
with a fault's delay, drop and garbling (`body_block`, `sse_response`), and the environment
the clients read (`client_env`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from starlette.requests import Request
from starlette.responses import Response
from typing_extensions import Self

from bridge.emulator.faults import FaultSpec
from bridge.emulator.planner import CompletedCall
from bridge.emulator.transport import JSON, SSE, BlockResponse, admit, fault_block

__all__ = [
    "JSON",
    "REQUEST_ID",
    "SSE",
    "OpenAIRequest",
    "RequestError",
    "begin",
    "body_block",
    "client_env",
    "completed_call",
    "encode",
    "error_body",
    "error_response",
    "json_object",
    "json_response",
    "sse_response",
    "status_rejection",
    "strict_problem",
    "text_of",
]

REQUEST_ID = "x-request-id"


class RequestError(Exception):
    """A request the real API refuses: HTTP status, message, and the OpenAI error fields."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        kind: str = "invalid_request_error",
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.kind = kind


class OpenAIRequest(BaseModel):
    """What both APIs' request bodies share: ``model`` (first, as the real APIs check it), any
    other field accepted, a ``tool_choice`` mode checked, and refusals worded as OpenAI's."""

    model_config = ConfigDict(extra="allow")

    model: str = Field(min_length=1)

    @field_validator("tool_choice", check_fields=False)
    @classmethod
    def _known_choice(cls, value: str | dict[str, Any] | None) -> str | dict[str, Any] | None:
        if isinstance(value, str) and value not in ("auto", "none", "required"):
            raise ValueError(f"expected 'auto', 'none', 'required' or an object, got {value!r}")
        return value

    @classmethod
    def validated(cls, data: Mapping[str, Any]) -> Self:
        """Validate a request body, or raise `RequestError` naming the first bad field."""
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            err = exc.errors(include_url=False)[0]
            loc = ".".join(str(part) for part in err.get("loc", ()))
            if err.get("type") == "missing":
                message = f"Missing required parameter: '{loc}'."
            else:
                message = f"Invalid value for '{loc}': {err.get('msg', 'invalid')}."
            raise RequestError(400, message, param=loc or None) from None


def text_of(content: Any) -> str:
    """The text of a message's or an output's content: a string or a list of text parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(part.get("text", ""))
            for part in content
            if isinstance(part, Mapping) and isinstance(part.get("text"), str)
        )
    return ""


def completed_call(
    call_id: str, name: str, raw_arguments: str, output: str, output_name: str | None
) -> CompletedCall:
    """A call the client answered: its arguments read from their JSON (``{}`` when they are
    not an object), its output named as the emulator issued it (`output_name`, when it issued
    a call of that name) or by the tool's name."""
    try:
        arguments = json.loads(raw_arguments) if raw_arguments else {}
    except ValueError:
        arguments = {}
    if not isinstance(arguments, dict):
        arguments = {}
    return CompletedCall(
        call_id, name, name if output_name is None else output_name, arguments, output
    )


def strict_problem(schema: Any, context: str) -> str | None:
    """The first place where `schema` breaks the strict-mode rules, or None."""
    if not isinstance(schema, dict):
        return None
    where = f"context=({context})"
    if schema.get("type") == "object" or "properties" in schema:
        if schema.get("additionalProperties") is not False:
            return f"In {where}, 'additionalProperties' is required to be supplied and to be false."
        props = schema.get("properties") or {}
        required = set(schema.get("required") or ())
        missing = [name for name in props if name not in required]
        if missing:
            return (
                f"In {where}, 'required' is required to be supplied and to be an array "
                f"including every key in properties. Missing '{missing[0]}'."
            )
        for name, sub in props.items():
            problem = strict_problem(sub, f"{context}, 'properties', '{name}'".lstrip(", "))
            if problem is not None:
                return problem
    parts: list[tuple[str, Any]] = []
    if isinstance(schema.get("items"), dict):
        parts.append(("items", schema["items"]))
    for key in ("anyOf", "$defs", "definitions"):
        sub = schema.get(key)
        values = sub.values() if isinstance(sub, dict) else sub if isinstance(sub, list) else ()
        parts.extend((key, part) for part in values)
    for key, part in parts:
        problem = strict_problem(part, f"{context}, '{key}'".lstrip(", "))
        if problem is not None:
            return problem
    return None


def encode(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False).encode("utf-8")


def error_body(exc: RequestError) -> dict[str, Any]:
    return {
        "error": {"message": exc.message, "type": exc.kind, "param": exc.param, "code": exc.code}
    }


def error_response(rid: str, exc: RequestError) -> Response:
    return Response(
        encode(error_body(exc)),
        status_code=exc.status,
        media_type=JSON,
        headers={REQUEST_ID: rid},
    )


def json_response(rid: str, body: Mapping[str, Any]) -> Response:
    return Response(encode(body), media_type=JSON, headers={REQUEST_ID: rid})


def status_rejection(rid: str, fault: FaultSpec) -> Response:
    """A fault's HTTP status with OpenAI's error body (and ``Retry-After``, 1 s for a 429)."""
    assert fault.status is not None
    kind = "server_error" if fault.status >= 500 else "invalid_request_error"
    if fault.status == 429:
        kind = "rate_limit_exceeded"
    message = fault.message or f"emulated fault: HTTP {fault.status}"
    body = encode(error_body(RequestError(fault.status, message, kind=kind)))
    return fault_block(fault, body, {REQUEST_ID: rid})


async def begin(request: Request, token: str) -> FaultSpec | None:
    """Read the body, check the bearer key (401 as OpenAI words it) and return the request's
    ``X-Emulator-Fault`` (400 when it cannot be parsed)."""
    return await admit(
        request, token, unauthorized=_unauthorized, bad_request=lambda m: RequestError(400, m)
    )


def _unauthorized(problem: str) -> RequestError:
    if problem == "missing":
        return RequestError(
            401,
            "You didn't provide an API key. You need to provide your API key in an "
            "Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).",
            kind="invalid_request_error",
        )
    return RequestError(
        401,
        "Incorrect API key provided; this emulator expects its own token as "
        "'Authorization: Bearer <token>'.",
        code="invalid_api_key",
    )


async def json_object(request: Request) -> dict[str, Any]:
    """The request body as a JSON object, or a 400 saying what it is instead."""
    raw = await request.body()
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise RequestError(
            400,
            f"We could not parse the JSON body of your request ({exc}); expected a JSON object.",
        ) from None
    if not isinstance(data, dict):
        raise RequestError(
            400, f"The request body must be a JSON object, not {type(data).__name__}."
        )
    return data


def body_block(rid: str, body: Mapping[str, Any], fault: FaultSpec) -> Response:
    """`body` as JSON with the fault's delay and drop, garbled when it says ``malformed``."""
    payload = encode(body)
    if fault.malformed is not None:
        payload = payload[:-1] + b", not JSON"
    return BlockResponse(
        [payload],
        media_type=JSON,
        headers={REQUEST_ID: rid},
        delay=fault.delay,
        drop_after=fault.drop_after,
    )


def sse_response(rid: str, blocks: list[bytes], fault: FaultSpec | None = None) -> Response:
    """An SSE stream of `blocks`, with the fault's delay and drop when there is one."""
    if fault is None:
        return BlockResponse(blocks, media_type=SSE, headers={REQUEST_ID: rid}, length=False)
    return BlockResponse(
        blocks,
        media_type=SSE,
        headers={REQUEST_ID: rid},
        length=False,
        delay=fault.delay,
        drop_after=fault.drop_after,
    )


def client_env(base_url: str, token: str, app_id: str) -> dict[str, str]:
    """The environment variables the openai package and toolbridge's adapter read."""
    return {
        "OPENAI_API_KEY": token,
        "OPENAI_BASE_URL": base_url + "/v1",
        "OPENAI_MODEL": app_id,
    }
