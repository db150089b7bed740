"""A real OTLP/HTTP trace receiver on loopback, for tests that read what a process exported.

`OtlpReceiver` listens on 127.0.0.1 (an ephemeral port) and takes what an OpenTelemetry
exporter sends to ``POST /v1/traces``: an ``ExportTraceServiceRequest`` in protobuf
(``application/x-protobuf``), gzip- or deflate-compressed when the exporter compresses. It
decodes it with ``opentelemetry-proto``, keeps every span as a plain `ReceivedSpan` (ids as
hex, attributes as a dict, the resource's attributes beside them) and answers 200 with an
``ExportTraceServiceResponse``, as a collector does. Point a process at it with
``OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint``.

`wait_for` waits (on a condition the handler signals, not by polling a clock) until the spans
received so far satisfy a predicate; `trace` gives one trace's spans as a `TraceView`, which
says whether they read as one tree and renders it for assertion messages.
"""

from __future__ import annotations

import gzip
import threading
import time
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.trace import SpanKind, StatusCode

__all__ = ["OtlpReceiver", "ReceivedLink", "ReceivedSpan", "TraceView"]

TRACES_PATH = "/v1/traces"
PROTOBUF = "application/x-protobuf"

# The proto's SpanKind counts from 1 (0 is "unspecified"), the API's from 0.
_KINDS = {
    0: SpanKind.INTERNAL,
    1: SpanKind.INTERNAL,
    2: SpanKind.SERVER,
    3: SpanKind.CLIENT,
    4: SpanKind.PRODUCER,
    5: SpanKind.CONSUMER,
}
_STATUS = {0: StatusCode.UNSET, 1: StatusCode.OK, 2: StatusCode.ERROR}


@dataclass(frozen=True)
class ReceivedLink:
    trace_id: str
    span_id: str
    attributes: dict[str, Any]


@dataclass(frozen=True)
class ReceivedSpan:
    """One span as it arrived: ids in lower-case hex (``parent_span_id`` is ``""`` for a
    root), the API's `SpanKind` and `StatusCode`, events as (name, attributes)."""

    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    kind: SpanKind
    attributes: dict[str, Any]
    links: tuple[ReceivedLink, ...]
    events: tuple[tuple[str, dict[str, Any]], ...]
    status: StatusCode
    status_message: str
    resource: dict[str, Any]
    scope: str
    start_ns: int
    end_ns: int
    flags: int = 1
    """The W3C trace flags the exporter sent (the SDK sends "sampled" only)."""

    @property
    def service(self) -> str | None:
        value = self.resource.get("service.name")
        return value if isinstance(value, str) else None

    @property
    def traceparent(self) -> str:
        """The W3C ``traceparent`` naming this span."""
        return f"00-{self.trace_id}-{self.span_id}-{self.flags:02x}"

    def __str__(self) -> str:
        return f"{self.name} [{self.kind.name.lower()}] {self.span_id}<-{self.parent_span_id}"


@dataclass
class TraceView:
    """The spans of one trace, as received."""

    trace_id: str
    spans: list[ReceivedSpan] = field(default_factory=list)

    @property
    def roots(self) -> list[ReceivedSpan]:
        """Spans whose parent is not in this trace: the tree's root, and any span whose
        parent never arrived (a remote caller's span that was not exported is a root too)."""
        ids = {s.span_id for s in self.spans}
        return [s for s in self.spans if not s.parent_span_id or s.parent_span_id not in ids]

    @property
    def is_one_tree(self) -> bool:
        """True when every span but one hangs under another span of the trace."""
        return len(self.spans) > 0 and len(self.roots) == 1

    def named(self, prefix: str) -> list[ReceivedSpan]:
        return [s for s in self.spans if s.name.startswith(prefix)]

    def one(self, prefix: str) -> ReceivedSpan:
        found = self.named(prefix)
        assert len(found) == 1, f"{len(found)} spans named {prefix!r} in\n{self.render()}"
        return found[0]

    def parent(self, span: ReceivedSpan) -> ReceivedSpan | None:
        return next((s for s in self.spans if s.span_id == span.parent_span_id), None)

    def children(self, span: ReceivedSpan) -> list[ReceivedSpan]:
        return sorted(
            (s for s in self.spans if s.parent_span_id == span.span_id), key=lambda s: s.start_ns
        )

    def ancestors(self, span: ReceivedSpan) -> list[ReceivedSpan]:
        """`span`'s parent, its parent's parent... up to the root."""
        chain: list[ReceivedSpan] = []
        current = self.parent(span)
        while current is not None and current not in chain:
            chain.append(current)
            current = self.parent(current)
        return chain

    def is_under(self, span: ReceivedSpan, ancestor: ReceivedSpan) -> bool:
        return ancestor in self.ancestors(span)

    def render(self) -> str:
        """The tree as indented lines (for an assertion's message)."""
        lines: list[str] = []

        def walk(span: ReceivedSpan, depth: int) -> None:
            lines.append("  " * depth + str(span))
            for child in self.children(span):
                walk(child, depth + 1)

        for root in sorted(self.roots, key=lambda s: s.start_ns):
            walk(root, 0)
        return "\n".join(lines) or "(no spans)"


def _value(any_value: AnyValue) -> Any:
    kind = any_value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return tuple(_value(v) for v in any_value.array_value.values)
    if kind == "kvlist_value":
        return _attributes(any_value.kvlist_value.values)
    return getattr(any_value, kind)


def _attributes(pairs: Iterable[KeyValue]) -> dict[str, Any]:
    return {pair.key: _value(pair.value) for pair in pairs}


def _link(link: Any) -> ReceivedLink:
    return ReceivedLink(link.trace_id.hex(), link.span_id.hex(), _attributes(link.attributes))


def decode(body: bytes) -> list[ReceivedSpan]:
    """The spans of one serialised ``ExportTraceServiceRequest``."""
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    spans: list[ReceivedSpan] = []
    for resource_spans in request.resource_spans:
        resource = _attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                spans.append(
                    ReceivedSpan(
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_span_id=span.parent_span_id.hex(),
                        name=span.name,
                        kind=_KINDS.get(span.kind, SpanKind.INTERNAL),
                        attributes=_attributes(span.attributes),
                        links=tuple(_link(link) for link in span.links),
                        events=tuple(
                            (event.name, _attributes(event.attributes)) for event in span.events
                        ),
                        status=_STATUS.get(span.status.code, StatusCode.UNSET),
                        status_message=span.status.message,
                        resource=resource,
                        scope=scope_spans.scope.name,
                        start_ns=span.start_time_unix_nano,
                        end_ns=span.end_time_unix_nano,
                        flags=(span.flags & 0xFF) or 1,
                    )
                )
    return spans


class OtlpReceiver:
    """An OTLP/HTTP receiver for traces on 127.0.0.1; a context manager (start, stop).

    `endpoint` is what ``OTEL_EXPORTER_OTLP_ENDPOINT`` takes (the exporter adds
    ``/v1/traces``); `spans` are all spans received, in arrival order; `requests` counts the
    export requests and `encodings` lists each one's ``Content-Encoding`` (``""``: none).
    """

    def __init__(self) -> None:
        self._spans: list[ReceivedSpan] = []
        self._changed = threading.Condition()
        self.requests = 0
        self.encodings: list[str] = []
        self.rejected: list[str] = []
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # --- life ---------------------------------------------------------------------------

    def start(self) -> OtlpReceiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                if self.path.split("?")[0] != TRACES_PATH:
                    self._answer(404, b"", "text/plain")
                    return
                ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip()
                if ctype != PROTOBUF:
                    receiver.rejected.append(f"content type {ctype!r}")
                    self._answer(415, b"only application/x-protobuf", "text/plain")
                    return
                encoding = (self.headers.get("Content-Encoding") or "").strip().lower()
                try:
                    if encoding == "gzip":
                        body = gzip.decompress(body)
                    elif encoding == "deflate":
                        body = zlib.decompress(body)
                    elif encoding:
                        raise ValueError(f"content encoding {encoding!r}")
                    spans = decode(body)
                except (OSError, ValueError, zlib.error, DecodeError) as exc:
                    receiver.rejected.append(str(exc))
                    self._answer(400, b"", "text/plain")
                    return
                receiver._add(spans, encoding)
                self._answer(200, ExportTraceServiceResponse().SerializeToString(), PROTOBUF)

            def _answer(self, status: int, body: bytes, ctype: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, name="otlp-receiver", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def __enter__(self) -> OtlpReceiver:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._server is not None, "the receiver is not started"
        return int(self._server.server_address[1])

    @property
    def endpoint(self) -> str:
        """For ``OTEL_EXPORTER_OTLP_ENDPOINT`` (no path: the exporter adds ``/v1/traces``)."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def traces_endpoint(self) -> str:
        """For ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` (the full URL)."""
        return self.endpoint + TRACES_PATH

    def environ(self, **extra: str) -> dict[str, str]:
        """OTEL_* variables that send a process's spans here, soon after they end."""
        return {
            "OTEL_EXPORTER_OTLP_ENDPOINT": self.endpoint,
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_BSP_SCHEDULE_DELAY": "50",
            **extra,
        }

    # --- what arrived -------------------------------------------------------------------

    def _add(self, spans: list[ReceivedSpan], encoding: str) -> None:
        with self._changed:
            self._spans.extend(spans)
            self.requests += 1
            self.encodings.append(encoding)
            self._changed.notify_all()

    @property
    def spans(self) -> list[ReceivedSpan]:
        with self._changed:
            return list(self._spans)

    def clear(self) -> None:
        with self._changed:
            self._spans.clear()

    def named(self, prefix: str) -> list[ReceivedSpan]:
        return [s for s in self.spans if s.name.startswith(prefix)]

    def trace_ids(self) -> list[str]:
        """The traces received, in the order their first span arrived."""
        return list(dict.fromkeys(s.trace_id for s in self.spans))

    def trace(self, trace_id: str) -> TraceView:
        return TraceView(trace_id, [s for s in self.spans if s.trace_id == trace_id])

    def wait_for(
        self, predicate: Callable[[list[ReceivedSpan]], Any], timeout: float = 20.0
    ) -> list[ReceivedSpan]:
        """Wait until `predicate(spans received so far)` is true; return those spans.

        Raises AssertionError after `timeout` seconds, naming what did arrive."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not predicate(list(self._spans)):
                left = deadline - time.monotonic()
                if left <= 0:
                    names = ", ".join(s.name for s in self._spans) or "none"
                    raise AssertionError(
                        f"the spans received in {timeout:g} s do not satisfy the predicate "
                        f"({self.requests} export requests; spans: {names}; "
                        f"rejected: {self.rejected or 'none'})"
                    )
                self._changed.wait(left)
            return list(self._spans)

    def wait_for_names(self, *prefixes: str, timeout: float = 20.0) -> list[ReceivedSpan]:
        """Wait until a span whose name starts with each of `prefixes` has arrived."""
        return self.wait_for(
            lambda spans: all(any(s.name.startswith(p) for s in spans) for p in prefixes),
            timeout,
        )
