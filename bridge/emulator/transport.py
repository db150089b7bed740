"""HTTP plumbing of the emulator: request ids, the request log, and responses with faults.

Why not sse-starlette's `EventSourceResponse`: the official SDK wants exactly one
``data: {json}`` line and a blank line per message, with no ``event:``/``id:`` fields and no
keep-alive frames; sse-starlette adds pings and CRLF separators by default, and runs the body in
a task group that wraps exceptions. The faults need byte-level control instead (a malformed
line, a duplicated message, a delay before each message, closing the TCP connection after N
messages), so the stream is a small Starlette `Response` that sends pre-encoded blocks itself.
Uvicorn closes the connection when the app raises after the response started; that is how a
drop is made real, and a log filter keeps those planned drops out of the error log.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from bridge.emulator.faults import HEADER, FaultSpec, FaultSpecError, header_faults
from bridge.emulator.state import EmulatorState, RecordedRequest

__all__ = [
    "JSON",
    "REQUEST_ID_HEADER",
    "SSE",
    "BlockResponse",
    "DroppedConnectionError",
    "RecordingMiddleware",
    "admit",
    "bearer_problem",
    "fault_block",
    "install_drop_log_filter",
    "protocol_app",
    "sse_block",
]

REQUEST_ID_HEADER = "X-Appbuilder-Request-Id"
JSON = "application/json"
SSE = "text/event-stream; charset=utf-8"


class DroppedConnectionError(Exception):
    """Raised inside a response to make uvicorn close the TCP connection (a planned fault)."""


class _DropFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not isinstance(exc, DroppedConnectionError)


_DROP_FILTER = _DropFilter()


def install_drop_log_filter() -> None:
    """Keep planned connection drops out of uvicorn's error log (idempotent)."""
    logger = logging.getLogger("uvicorn.error")
    if _DROP_FILTER not in logger.filters:
        logger.addFilter(_DROP_FILTER)


def bearer_problem(headers: Mapping[str, str], token: str) -> str | None:
    """What is wrong with a request's bearer token: ``missing``, ``wrong`` or None (it is
    `token`); compared in constant time, so the emulators do not teach timing attacks."""
    auth = headers.get("authorization", "")
    if not auth:
        return "missing"
    scheme, _, value = auth.partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(
        value.strip().encode(), token.encode()
    ):
        return "wrong"
    return None


async def admit(
    request: Request,
    token: str,
    *,
    unauthorized: Callable[[str], Exception],
    bad_request: Callable[[str], Exception],
    read_body: bool = True,
) -> FaultSpec | None:
    """Read the body (so the log has it), check the bearer token and return the request's
    ``X-Emulator-Fault``.

    Raises:
        Exception: the protocol's error, built by `unauthorized` from what is wrong with the
            token (``missing`` or ``wrong``), or by `bad_request` from what is wrong with the
            fault header.
    """
    if read_body:
        await request.body()
    problem = bearer_problem(request.headers, token)
    if problem is not None:
        raise unauthorized(problem)
    try:
        return header_faults(request.headers)
    except FaultSpecError as exc:
        raise bad_request(f"bad {HEADER} header: {exc.message}") from None


ErrorPage = Callable[[Request, Exception], Awaitable[Response]]


def protocol_app(
    routes: list[Route],
    *,
    state: EmulatorState,
    http_error: ErrorPage,
    crash: ErrorPage,
    wrap: Callable[[ASGIApp], ASGIApp] | None = None,
) -> ASGIApp:
    """The ASGI app of one emulator protocol: its `routes` on Starlette with the wire's own
    error pages (`http_error` for 404/405..., `crash` for anything raised), optionally wrapped
    (e.g. a header on every answer), every request recorded in `state`."""

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        # After uvicorn configured its loggers, so the filter is not lost.
        install_drop_log_filter()
        yield

    starlette = Starlette(
        routes=routes,
        exception_handlers={HTTPException: http_error, Exception: crash},
        lifespan=lifespan,
    )
    return RecordingMiddleware(wrap(starlette) if wrap is not None else starlette, state)


def sse_block(payload: bytes) -> bytes:
    """One SSE message exactly as the platform frames it: ``data: {json}`` and a blank line."""
    return b"data: " + payload + b"\n\n"


class BlockResponse(Response):
    """A response sent as pre-encoded blocks, with an optional delay and a planned drop.

    Stream mode (`length=False`): chunked transfer, one block per SSE message, `delay` seconds
    before each, the connection closed after `drop_after` blocks. Body mode (`length=True`): a
    `Content-Length` body, `delay` seconds before it, the connection closed after `drop_after`
    bytes.
    """

    def __init__(
        self,
        blocks: list[bytes],
        *,
        status_code: int = 200,
        media_type: str,
        headers: Mapping[str, str] | None = None,
        delay: float = 0.0,
        drop_after: int | None = None,
        length: bool = True,
    ) -> None:
        self.status_code = status_code
        self.media_type = media_type
        self.background: BackgroundTask | None = None
        self._blocks = blocks
        self._delay = delay
        self._drop_after = drop_after
        self._length = length
        if length:
            self.body = b"".join(blocks)
        self.init_headers(headers)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Send the blocks; raise `DroppedConnectionError` to cut the connection when planned."""
        await send(
            {"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers}
        )
        if self._length:
            if self._delay:
                await asyncio.sleep(self._delay)
            if self._drop_after is not None and self._drop_after < len(self.body):
                await send(
                    {
                        "type": "http.response.body",
                        "body": self.body[: self._drop_after],
                        "more_body": True,
                    }
                )
                raise DroppedConnectionError(f"dropped after {self._drop_after} bytes")
            await send({"type": "http.response.body", "body": self.body, "more_body": False})
            return
        gone = asyncio.Event()
        watcher = asyncio.create_task(_watch_disconnect(receive, gone)) if self._delay else None
        try:
            for index, block in enumerate(self._blocks):
                if self._drop_after is not None and index >= self._drop_after:
                    raise DroppedConnectionError(f"dropped after {index} SSE messages")
                if self._delay:
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(gone.wait(), self._delay)
                if gone.is_set():
                    return  # the client left: stop sleeping through the rest of the stream
                await send({"type": "http.response.body", "body": block, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            if watcher is not None:
                watcher.cancel()


async def _watch_disconnect(receive: Receive, gone: asyncio.Event) -> None:
    """Set `gone` when the client disconnects (the request body was already read)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            gone.set()
            return


class RecordingMiddleware:
    """Give every request an id (header and `request.state.request_id`) and log it.

    The id is the client's ``X-Appbuilder-Request-Id`` when it sent one, else a fresh UUID.

    It wraps the whole Starlette app, error pages included, so even a 404 for an unknown path
    or an unexpected 500 carries `X-Appbuilder-Request-Id`.
    """

    def __init__(self, app: ASGIApp, state: EmulatorState) -> None:
        self.app = app
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Run the app with a request id, capture the body and status, record the request."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = _client_request_id(scope) or str(uuid.uuid4())
        scope_state = scope.setdefault("state", {})
        scope_state["request_id"] = request_id
        body = bytearray()
        status: list[int] = []
        dropped = False

        async def receive_and_keep() -> Message:
            message = await receive()
            if message["type"] == "http.request":
                body.extend(message.get("body", b""))
            return message

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                # What the request changed is kept before the client can see any of it.
                self.state.changed()
                status.append(message["status"])
                headers = list(message.get("headers", []))
                if not any(k.lower() == b"x-appbuilder-request-id" for k, _ in headers):
                    headers.append((b"x-appbuilder-request-id", request_id.encode()))
                message = {**message, "headers": headers}
            await send(message)

        try:
            await self.app(scope, receive_and_keep, send_with_id)
        except DroppedConnectionError:
            dropped = True
            raise
        finally:
            headers = _masked_headers(scope)
            self.state.record(
                RecordedRequest(
                    method=scope["method"],
                    path=scope["path"],
                    headers=headers,
                    json=_json_or_none(bytes(body), headers),
                    form=scope_state.get("form"),
                    status=status[0] if status else None,
                    request_id=request_id,
                    dropped=dropped,
                )
            )


_MAX_REQUEST_ID = 128


def _client_request_id(scope: Scope) -> str | None:
    """The client's own ``X-Appbuilder-Request-Id``, echoed as the platform does.

    The official SDK sends one per request and logs it with errors, so tracing a request needs
    the same id on both sides. An empty, overlong or non-printable value is replaced.
    """
    for raw_name, raw_value in scope.get("headers", []):
        if raw_name.lower() == b"x-appbuilder-request-id":
            value = bytes(raw_value).decode("latin-1").strip()
            if 0 < len(value) <= _MAX_REQUEST_ID and value.isprintable():
                return value
            return None
    return None


def _masked_headers(scope: Scope) -> dict[str, str]:
    headers: dict[str, str] = {}
    for raw_name, raw_value in scope.get("headers", []):
        name, value = raw_name.decode("latin-1").lower(), raw_value.decode("latin-1")
        if name == "authorization":
            scheme = value.split(" ", 1)[0] if " " in value else ""
            value = f"{scheme} [secure]" if scheme else "[secure]"
        headers[name] = value
    return headers


def _json_or_none(body: bytes, headers: Mapping[str, str]) -> Any:
    if not body or "multipart/" in headers.get("content-type", ""):
        return None
    try:
        return json.loads(body)
    except ValueError:
        return None


def seconds_text(value: float) -> str:
    """Seconds as a header writes them: ``2``, ``0.5``."""
    return str(int(value)) if float(value).is_integer() else str(value)


def fault_block(
    fault: FaultSpec,
    body: bytes,
    headers: Mapping[str, str] | None = None,
    *,
    seconds: Callable[[float], str] = seconds_text,
) -> Response:
    """A fault's HTTP status (``fault.status``) with the JSON `body`, ``Retry-After`` (the
    fault's, or 1 s for a 429; written by `seconds`), and the fault's delay and drop."""
    assert fault.status is not None
    all_headers = dict(headers or {})
    retry_after = fault.retry_after
    if retry_after is None and fault.status == 429:
        retry_after = 1
    if retry_after is not None:
        all_headers["Retry-After"] = seconds(retry_after)
    return BlockResponse(
        [body],
        status_code=fault.status,
        media_type=JSON,
        headers=all_headers,
        delay=fault.delay,
        drop_after=fault.drop_after,
    )
