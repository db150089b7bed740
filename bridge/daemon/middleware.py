"""The outermost layer of every request: request id, server span, Host/Origin gate, body size
limit, access log, metrics.

A pure ASGI middleware (not `BaseHTTPMiddleware`, which buffers streaming responses): the
request body is read up to the limit before the app sees it, so an oversized body is refused
with 413 before any route runs, whether it announced its length or was sent chunked. Before
that, a request for a name the daemon does not answer to gets 421 and a cross-origin browser
request 403 (`bridge._hosts`).

With tracing on (`bridge.tracing`), each request is a SERVER span, current while the request
is answered (the fast path, the routes, and the runs they queue, whose worker threads copy the
context), ended when the response has been sent: a stream's too. It continues the trace of an
incoming ``traceparent``; it is named ``{METHOD} {route template}`` once the route is known, and
carries the HTTP semantic conventions' attributes (never the query string) and the caller
(``toolbridge.caller``) once the door named it.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
import uuid
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from starlette.datastructures import Headers, MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from bridge._hosts import HostGate
from bridge.daemon.logs import request_id_var
from bridge.daemon.metrics import Metrics
from bridge.tracing import SpanKind, Tracing, extract, record_error

__all__ = ["REQUEST_ID_HEADER", "RequestContextMiddleware"]

logger = logging.getLogger(__name__)
access_log = logging.getLogger("bridge.daemon.access")

REQUEST_ID_HEADER = "x-request-id"
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
_CLIENT_GONE = 499
"""Recorded for a request whose client left before its body ended (nginx's number)."""


async def _gone() -> Message:  # pragma: no cover - a marker, never called
    return {"type": "http.disconnect"}


_GONE: Receive = _gone


def _request_id(headers: Headers) -> str:
    """The caller's id if it is sane (it is echoed and logged), else a fresh one."""
    given = headers.get(REQUEST_ID_HEADER)
    if given and _REQUEST_ID.fullmatch(given):
        return given
    return uuid.uuid4().hex


class RequestContextMiddleware:
    """Tags each request with an id, checks Host and Origin and the body limit, logs and
    counts it.

    Args:
        app: the application.
        max_body_bytes: larger request bodies get 413.
        metrics: where request counts and durations go.
        gate: the Host/Origin check (None: none, for embedding behind another gate).
        tracing: where the requests' server spans go (default: the global provider).
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        max_body_bytes: int,
        metrics: Metrics,
        gate: HostGate | None = None,
        tracing: Tracing | None = None,
    ) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.metrics = metrics
        self.gate = gate
        self.tracing = tracing if tracing is not None else Tracing()
        self.untraced = excluded_paths()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        request_id = _request_id(headers)
        scope.setdefault("state", {})["request_id"] = request_id
        token = request_id_var.set(request_id)
        began = time.perf_counter()
        status = [0]
        span = (
            None
            if self.untraced is not None and self.untraced.search(scope.get("path", ""))
            else _start_span(self.tracing, scope, headers, request_id)
        )
        attached = (
            otel_context.attach(trace.set_span_in_context(span)) if span is not None else None
        )
        failed = False

        async def send_tagged(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
                out = MutableHeaders(scope=message)
                out[REQUEST_ID_HEADER] = request_id
                out.setdefault("x-content-type-options", "nosniff")
                out.setdefault("referrer-policy", "no-referrer")
            await send(message)

        try:
            refusal = self.gate.check(headers, scope["method"]) if self.gate else None
            if refusal is not None:
                await _refuse(
                    send_tagged, refusal.status, refusal.code, refusal.message, request_id
                )
                return
            body_receive = await self._read_body(headers, receive)
            if body_receive is _GONE:
                status[0] = _CLIENT_GONE  # nobody to answer; the route must not run on a part
                return
            if body_receive is None:
                await _refuse(
                    send_tagged,
                    413,
                    "body_too_large",
                    f"the request body is larger than {self.max_body_bytes} bytes "
                    "(the daemon's max_body_bytes)",
                    request_id,
                )
            else:
                await self.app(scope, body_receive, send_tagged)
        except BaseException as exc:
            failed = True
            if span is not None:
                record_error(span, exc)
            raise
        finally:
            # The access line is logged in the span (its trace and span ids), then it ends.
            self._record(scope, status[0] or 500, time.perf_counter() - began, request_id)
            request_id_var.reset(token)
            if span is not None:
                _end_span(span, scope, status[0] or 500, failed)
            if attached is not None:
                otel_context.detach(attached)

    async def _read_body(self, headers: Headers, receive: Receive) -> Receive | None:
        """A `receive` replaying the whole body, None when the body is too large, `_GONE`
        when the client went away (or stopped sending, `bridge._connections`) before its end."""
        length = headers.get("content-length")
        if length is None and "transfer-encoding" not in headers:
            return receive
        if length is not None and (not length.isdigit() or int(length) > self.max_body_bytes):
            return None
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return _GONE  # half a body must never reach a route (it may parse!)
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()  # later calls: disconnect detection for streams
            replayed = True
            return {"type": "http.request", "body": b"".join(chunks), "more_body": False}

        return replay

    def _record(self, scope: Scope, status: int, seconds: float, request_id: str) -> None:
        route: Any = scope.get("route")
        template = getattr(route, "path", None) or "(unmatched)"
        method = scope.get("method", "?")
        if method not in _METHODS:
            method = "other"  # clients choose the method: keep the label set bounded
        self.metrics.http_requests.inc(method, template, str(status))
        self.metrics.http_seconds.observe(seconds, method, template)
        path = scope.get("path", "")[:512]
        access_log.info(
            "%s %s %d %.1f ms",
            method,
            path,
            status,
            seconds * 1000,
            extra={
                "request_id": request_id,
                "method": method,
                "path": path,
                "status": status,
                "duration_ms": round(seconds * 1000, 2),
            },
        )


def excluded_paths() -> re.Pattern[str] | None:
    """The paths whose requests are not traced, from ``OTEL_PYTHON_EXCLUDED_URLS`` (the
    variable OpenTelemetry's own web instrumentations read: comma-separated regular expressions
    searched in the path, e.g. ``/healthz,/readyz,/metrics`` for the probes). A bad expression
    is logged and left out."""
    text = os.environ.get("OTEL_PYTHON_EXCLUDED_URLS", "")
    kept: list[str] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        try:
            re.compile(part)
        except re.error as exc:
            logger.warning(
                "OTEL_PYTHON_EXCLUDED_URLS: %r is not a regular expression (%s); ignored",
                part,
                exc,
            )
            continue
        kept.append(part)
    return re.compile("|".join(f"(?:{p})" for p in kept)) if kept else None


def _start_span(
    tracing: Tracing, scope: Scope, headers: Headers, request_id: str
) -> trace.Span | None:
    """The request's SERVER span, continuing the caller's trace (None: tracing is off)."""
    if not tracing.enabled:
        return None
    method = scope.get("method", "")
    known = method in _METHODS
    attributes: dict[str, Any] = {
        "http.request.method": method if known else "_OTHER",
        "url.path": scope.get("path", "")[:2048],
        "url.scheme": scope.get("scheme", "http"),
        "toolbridge.request.id": request_id,
    }
    if not known:
        attributes["http.request.method_original"] = method[:64]
    server = scope.get("server")
    if server:
        attributes["server.address"], attributes["server.port"] = server[0], server[1]
    client = scope.get("client")
    if client:
        attributes["client.address"] = client[0]
    span = tracing.start(
        method if known else "HTTP",
        kind=SpanKind.SERVER,
        attributes=attributes,
        parent=extract(headers),
    )
    return span  # current even when sampled out: the runs under it follow that decision


def _end_span(span: trace.Span, scope: Scope, status: int, failed: bool) -> None:
    """Name the span after its route, say how the request ended, and end it (`failed`: an
    exception left the app, already recorded on the span)."""
    if not span.is_recording():
        span.end()
        return
    route: Any = scope.get("route")
    template = getattr(route, "path", None)
    if template:
        span.set_attribute("http.route", template)
        method = scope.get("method", "")
        span.update_name(f"{method if method in _METHODS else 'HTTP'} {template}")
    span.set_attribute("http.response.status_code", status)
    state = scope.get("state") or {}
    caller = state.get("api_key_name")
    if isinstance(caller, str):
        span.set_attribute("toolbridge.caller", caller)
    conversation_id = (scope.get("path_params") or {}).get("conversation_id")
    if isinstance(conversation_id, str):
        span.set_attribute("gen_ai.conversation.id", conversation_id)
    if status >= 500 and not failed:
        span.set_attribute("error.type", str(status))
        span.set_status(trace.Status(trace.StatusCode.ERROR))
    span.end()


async def _refuse(send: Send, status: int, code: str, message: str, request_id: str) -> None:
    """An `ErrorBody` answer sent before the app saw the request.

    The connection is closed after it: the request's body may still be unread on it.
    """
    body = json.dumps(
        {"error": {"code": code, "message": message, "request_id": request_id}}
    ).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
