"""The one place where transport, SSE and JSON failures become `bridge.errors` exceptions.

`map_errors` wraps every piece of client code that touches `requests`, the SSE parser or a JSON
decoder; `status_error` and `in_band_error` build the errors for answers that arrived but say
"failed". Nothing from `requests`, `urllib3`, sseclient, `json` or pydantic escapes: each error
is re-raised as a `bridge.errors` class with the original chained as `__cause__`.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pydantic
import requests
import urllib3.exceptions

from bridge.errors import (
    BridgeError,
    ConfigurationError,
    InBandError,
    PlatformConnectionError,
    PlatformStatusError,
    PlatformTimeoutError,
    ProtocolError,
    RateLimitError,
    StreamInterruptedError,
    StreamTimeoutError,
    status_error_class,
)
from bridge.platforms._http import connect_failure, origin

__all__ = [
    "BODY_LIMIT",
    "REQUEST_ID_HEADER",
    "CallContext",
    "in_band_error",
    "is_connect_error",
    "map_errors",
    "status_error",
    "translate_error",
]

log = logging.getLogger(__name__)

REQUEST_ID_HEADER = "X-Appbuilder-Request-Id"
BODY_LIMIT = 500
"""Characters of a response body kept on an error (after redaction)."""


@dataclass
class CallContext:
    """What an error message needs to know about the call in progress."""

    operation: str
    """Human name of the call, e.g. "run" or "create_conversation"."""
    url: str
    connect_timeout: float
    idle_timeout: float
    sent_request_id: str | None = None
    """The id we sent in `X-Appbuilder-Request-Id` / `X-Bce-Request-Id`."""
    header_request_id: str | None = None
    """`X-Appbuilder-Request-Id` of the response, once there is one."""
    streaming: bool = False
    """True once the body of a successful answer is being read (no retry past this point)."""
    received: list[Any] = field(default_factory=list)
    """Chunks of a streamed run received so far."""

    def request_id(self, body_request_id: str | None = None) -> str | None:
        """The best id to report: the response header's, else the body's, else the one sent."""
        return self.header_request_id or body_request_id or self.sent_request_id


@contextlib.contextmanager
def map_errors(ctx: CallContext) -> Iterator[None]:
    """Translate every transport/decoding failure raised in the block into `bridge.errors`.

    `bridge.errors` exceptions pass through unchanged.
    """
    try:
        yield
    except BridgeError:
        raise
    except _FOREIGN as exc:
        raise translate_error(exc, ctx) from exc


_FOREIGN = (
    requests.exceptions.RequestException,
    json.JSONDecodeError,
    pydantic.ValidationError,
    UnicodeDecodeError,
)
"""Exception classes of the libraries underneath the client that `map_errors` translates."""


def translate_error(exc: BaseException, ctx: CallContext) -> BridgeError:
    """The `bridge.errors` exception for a failure of `requests`, JSON, pydantic or decoding.

    Callers raise the result `from exc`. A `BridgeError` is returned unchanged.
    """
    if isinstance(exc, BridgeError):
        return exc
    if isinstance(exc, requests.exceptions.RequestException):
        return _from_requests(exc, ctx)
    return ProtocolError(
        f"AppBuilder {ctx.operation}: the server sent data that cannot be decoded "
        f"(expected JSON of the AppBuilder conversation API): {_trim(str(exc))}",
        request_id=ctx.request_id(),
    )


def is_connect_error(exc: BaseException) -> bool:
    """True when the request cannot have reached the server (refused, DNS, connect timeout)."""
    if isinstance(exc, requests.exceptions.ConnectTimeout):
        return True
    if not isinstance(exc, requests.exceptions.ConnectionError) or isinstance(
        exc, requests.exceptions.ProxyError | requests.exceptions.SSLError
    ):
        return False
    reason: Any = exc.args[0] if exc.args else None
    if isinstance(reason, urllib3.exceptions.MaxRetryError):
        reason = reason.reason
    return isinstance(
        reason, urllib3.exceptions.NewConnectionError | urllib3.exceptions.ConnectTimeoutError
    )


def _is_read_timeout(exc: requests.exceptions.RequestException) -> bool:
    if isinstance(exc, requests.exceptions.ReadTimeout):
        return True
    # `Response.iter_content` reports a read timeout as a bare ConnectionError around urllib3's.
    reason: Any = exc.args[0] if exc.args else None
    if isinstance(reason, urllib3.exceptions.MaxRetryError):
        reason = reason.reason
    return isinstance(reason, urllib3.exceptions.ReadTimeoutError)


def _from_requests(exc: requests.exceptions.RequestException, ctx: CallContext) -> BridgeError:
    where = f"AppBuilder {ctx.operation} ({ctx.url})"
    last = ctx.received[-1] if ctx.received else None
    ids: dict[str, Any] = {"request_id": ctx.request_id(getattr(last, "request_id", None) or None)}
    reason = _trim(str(exc), 300)
    if isinstance(
        exc, requests.exceptions.InvalidJSONError | requests.exceptions.ContentDecodingError
    ):
        return ProtocolError(f"{where}: undecodable response body: {reason}", **ids)
    if isinstance(
        exc,
        requests.exceptions.MissingSchema
        | requests.exceptions.InvalidSchema
        | requests.exceptions.InvalidURL
        | requests.exceptions.URLRequired
        | requests.exceptions.InvalidHeader,
    ):
        return ConfigurationError(
            f"{where}: invalid request configuration ({reason}); check base_url / "
            "GATEWAY_URL_V2 (expected e.g. https://qianfan.baidubce.com) and the token"
        )
    if isinstance(exc, requests.exceptions.ConnectTimeout):
        return PlatformTimeoutError(
            f"{where}: could not connect within connect_timeout={ctx.connect_timeout} s", **ids
        )
    if _is_read_timeout(exc):
        if ctx.streaming:
            return StreamTimeoutError(
                f"{where}: the stream was idle for more than idle_timeout={ctx.idle_timeout} s "
                f"after {len(ctx.received)} chunk(s)",
                received=ctx.received,
                **ids,
            )
        return PlatformTimeoutError(
            f"{where}: no response within idle_timeout={ctx.idle_timeout} s", **ids
        )
    if ctx.streaming and isinstance(
        exc, requests.exceptions.ChunkedEncodingError | requests.exceptions.ConnectionError
    ):
        return StreamInterruptedError(
            f"{where}: the connection dropped mid-stream after {len(ctx.received)} chunk(s): "
            f"{reason}",
            received=ctx.received,
            **ids,
        )
    if isinstance(exc, requests.exceptions.TooManyRedirects):
        return ProtocolError(f"{where}: too many redirects", **ids)
    # In the OS's few words, not urllib3's "HTTPConnectionPool(host=...): Max retries..."
    # (the full text is still the exception's __cause__, for -v).
    if is_connect_error(exc):
        return PlatformConnectionError(
            f"AppBuilder {ctx.operation}: cannot connect to {origin(ctx.url)} "
            f"({connect_failure(exc)})",
            **ids,
        )
    return PlatformConnectionError(f"{where}: the request failed ({connect_failure(exc)})", **ids)


def status_error(
    ctx: CallContext,
    status: int,
    headers: Mapping[str, str],
    body: str,
    *,
    retry_after: float | None = None,
) -> PlatformStatusError:
    """The error for an HTTP error status, with the platform's code, message and request id."""
    payload = _json_object(body)
    code = _text(payload.get("code"))
    message = _text(payload.get("message")) or _trim(body, 200) or "(empty body)"
    request_id = headers.get(REQUEST_ID_HEADER) or ctx.request_id(_body_request_id(payload))
    cls = status_error_class(status)
    error = cls(
        f"AppBuilder {ctx.operation} failed with HTTP {status}: {message}",
        request_id=request_id,
        status_code=status,
        code=code,
        body=_trim(body),
    )
    if isinstance(error, RateLimitError):
        error.retry_after = retry_after
    return error


def in_band_error(ctx: CallContext, payload: Mapping[str, Any]) -> InBandError:
    """The error for an HTTP 200 answer that is an error (top-level `code`/`message`)."""
    code = _text(payload.get("code"))
    message = _text(payload.get("message")) or "(no message)"
    return InBandError(
        f"AppBuilder {ctx.operation} returned an error with HTTP 200: {message}",
        request_id=ctx.request_id(_body_request_id(payload)),
        status_code=200,
        code=code,
        body=_trim(json.dumps(payload, ensure_ascii=False, default=str)),
    )


def _body_request_id(payload: Mapping[str, Any]) -> str | None:
    return _text(payload.get("request_id") or payload.get("requestId"))


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _text(value: Any) -> str | None:
    if value is None or value == "":
        return None
    return str(value)


def _trim(text: str, limit: int = BODY_LIMIT) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[:limit] + "…"
