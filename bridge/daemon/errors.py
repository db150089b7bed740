"""Every error the API returns is `{"error": {"code", "message", "request_id"}}`.

`ApiError` is what routes raise; the handlers below turn it, FastAPI's own 404/405/422 and any
unexpected exception (a 500 that logs the traceback, never shows it) into that shape.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from bridge.daemon.logs import request_id_var
from bridge.daemon.models import ErrorBody, text_problem
from bridge.daemon.outbound import PublicJSONResponse
from bridge.errors import redact
from bridge.journal.records import JournalUnavailableError

__all__ = [
    "ERROR_RESPONSES",
    "GATE_RESPONSES",
    "ApiError",
    "error_response",
    "install_error_handlers",
]

logger = logging.getLogger(__name__)

_STATUS_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    409: "conflict",
    413: "body_too_large",
    415: "unsupported_media_type",
    421: "host_not_allowed",
    422: "invalid_request",
    429: "too_many_requests",
    500: "internal_error",
    502: "platform_error",
    503: "unavailable",
}

GATE_RESPONSES: dict[int | str, dict[str, Any]] = {
    403: {"model": ErrorBody, "description": "cross-origin browser request (cross_origin)"},
    421: {"model": ErrorBody, "description": "a Host the daemon does not answer to"},
}
"""Errors of the Host/Origin gate in front of every route (`bridge._hosts`)."""

ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    **{
        status: {"model": ErrorBody, "description": code.replace("_", " ")}
        for status, code in _STATUS_CODES.items()
        if status in (401, 413, 422, 500)
    },
    **GATE_RESPONSES,
    403: {
        "model": ErrorBody,
        "description": "the caller lacks the permission the route needs (forbidden), or a "
        "cross-origin browser request (cross_origin)",
    },
    429: {
        "model": ErrorBody,
        "description": "over one of the caller's rate limits (rate_limited); Retry-After says "
        "when to try again",
    },
}
"""Errors any /v1 route may return, for the OpenAPI document."""


class ApiError(Exception):
    """An error response: HTTP status, stable code, and a message for the client."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        platform_request_id: str | None = None,
        headers: dict[str, str] | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = redact(message)
        self.platform_request_id = platform_request_id
        self.headers = headers
        self.details = details


def _request_id(request: Request | None) -> str:
    value = getattr(request.state, "request_id", None) if request is not None else None
    return str(value or request_id_var.get() or "-")


def error_response(
    request: Request | None,
    status: int,
    code: str,
    message: str,
    *,
    platform_request_id: str | None = None,
    headers: dict[str, str] | None = None,
    details: dict[str, Any] | None = None,
) -> JSONResponse:
    """The JSON error response."""
    error: dict[str, Any] = {
        "code": code,
        "message": redact(message),
        "request_id": _request_id(request),
    }
    if platform_request_id:
        error["platform_request_id"] = platform_request_id
    if details:
        error["details"] = details
    return PublicJSONResponse({"error": error}, status_code=status, headers=headers)


def _validation_message(exc: RequestValidationError) -> str:
    problems = []
    for error in exc.errors()[:10]:
        loc = [str(part) for part in error.get("loc", ()) if part != "body"]
        where = ".".join(loc) or "body"
        message = str(error.get("msg", "invalid"))
        value = error.get("input")
        if error.get("type") == "string_unicode" and isinstance(value, str):
            # The same words for a typed field (`query`) as for the tool arguments' strings.
            message = text_problem(value) or message
        elif error.get("type") == "value_error":
            message = message.removeprefix("Value error, ")
        problems.append(f"{where}: {message}")
    return "invalid request: " + "; ".join(problems)


def install_error_handlers(app: FastAPI) -> None:
    """Make every error, FastAPI's own included, a JSON `ErrorBody`."""

    async def on_api_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, ApiError)
        return error_response(
            request,
            exc.status,
            exc.code,
            exc.message,
            platform_request_id=exc.platform_request_id,
            headers=exc.headers,
            details=exc.details,
        )

    async def on_http_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        code = _STATUS_CODES.get(exc.status_code, f"http_{exc.status_code}")
        message = str(exc.detail)
        if exc.status_code == 404:
            message = f"no such endpoint: {request.method} {request.url.path}"
        elif exc.status_code == 405:
            message = f"{request.method} is not allowed on {request.url.path}"
        headers = dict(exc.headers) if exc.headers else None
        return error_response(request, exc.status_code, code, message, headers=headers)

    async def on_validation_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        return error_response(request, 422, "invalid_request", _validation_message(exc))

    async def on_journal_down(request: Request, exc: Exception) -> JSONResponse:
        # An outage, not a bug: one line saying what, no traceback; clients may retry.
        logger.warning("%s %s: %s", request.method, request.url.path, exc)
        return error_response(
            request,
            503,
            "journal_unavailable",
            f"{exc}; nothing was changed: retry when the database is back",
            headers={"Retry-After": "5"},
        )

    async def on_unexpected(request: Request, exc: Exception) -> JSONResponse:
        logger.error("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
        return error_response(
            request, 500, "internal_error", "internal error; the daemon's log has the details"
        )

    app.add_exception_handler(ApiError, on_api_error)
    app.add_exception_handler(StarletteHTTPException, on_http_error)
    app.add_exception_handler(RequestValidationError, on_validation_error)
    app.add_exception_handler(JournalUnavailableError, on_journal_down)
    app.add_exception_handler(Exception, on_unexpected)
