"""OpenTelemetry spans, in the GenAI semantic conventions.

Every layer that does work worth following (the loop, the tools, the platforms' HTTP, the
sources' requests, the daemon's API) opens its spans through this module, which knows only the
OpenTelemetry API (``opentelemetry-api``: a no-op until an SDK is configured).

- `Tracing` is one bridge's view of a tracer provider: the one passed to it, or the global one.
  When no SDK is configured it opens no span at all, so a bridge that does not trace pays a
  check per span, not a span.
- `configure_from_environment` installs the SDK's provider with the OTLP/HTTP exporter when the
  standard ``OTEL_*`` variables ask for export; the CLI and the daemon call it, a library never
  does (its application decides).
- The trace context crosses processes as W3C ``traceparent`` text: in HTTP headers, in an MCP
  request's ``_meta``, and in the journal, so that a run or a call resumed after a crash, or on
  another replica, stays in the trace it started in (`context_of`, `link_to`).
- Content (tool arguments and results) goes on spans only when the operator opts in with
  ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``, and then redacted (`content`).
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from contextlib import contextmanager
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.trace import (
    INVALID_SPAN,
    Link,
    NonRecordingSpan,
    Span,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    Tracer,
    TracerProvider,
)
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from bridge._version import __version__
from bridge.errors import redact, redact_data, valid_text

__all__ = [
    "CAPTURE_CONTENT_VARIABLE",
    "RESUMED",
    "SpanKind",
    "Tracing",
    "configure_from_environment",
    "content",
    "context_of",
    "current_ids",
    "current_traceparent",
    "extract",
    "inject",
    "inject_span",
    "link_to",
    "mark_failed",
    "record_error",
    "traceparent_of",
]

logger = logging.getLogger(__name__)

TRACER_NAME = "toolbridge"
CAPTURE_CONTENT_VARIABLE = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
RESUMED = "toolbridge.resumed"
"""Attribute of a span that continues work a crash or a failover interrupted."""
CONTENT_LIMIT = 8192
"""Characters of captured content kept per attribute (arguments, results)."""

_TRACE_CONTEXT = TraceContextTextMapPropagator()


class Tracing:
    """The spans of one bridge (or daemon, or server): `provider`, or the global provider.

    `enabled` is re-read at each span, so a provider configured after the bridge was made
    (an application that sets it up late) is still used.
    """

    __slots__ = ("_provider", "_tracer", "_tracer_of")

    def __init__(self, provider: TracerProvider | None = None) -> None:
        self._provider = provider
        self._tracer: Tracer | None = None
        self._tracer_of: object = None

    @property
    def provider(self) -> TracerProvider | None:
        """The provider given to it (None: the global one)."""
        return self._provider

    @property
    def enabled(self) -> bool:
        """True when spans go somewhere: an SDK (or another real provider) is configured."""
        provider = self._provider if self._provider is not None else trace.get_tracer_provider()
        return not isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider)

    @property
    def tracer(self) -> Tracer:
        provider = self._provider if self._provider is not None else trace.get_tracer_provider()
        return self._tracer_from(provider)

    def _tracer_from(self, provider: TracerProvider) -> Tracer:
        if self._tracer is None or self._tracer_of is not provider:
            self._tracer = provider.get_tracer(TRACER_NAME, __version__)
            self._tracer_of = provider
        return self._tracer

    def _active(self) -> Tracer | None:
        """The tracer of the provider in use, or None when off: the provider looked up once
        per span (`enabled` and `tracer` in one)."""
        provider = self._provider if self._provider is not None else trace.get_tracer_provider()
        if isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
            return None
        if self._tracer_of is provider and self._tracer is not None:
            return self._tracer
        return self._tracer_from(provider)

    @contextmanager
    def span(
        self,
        name: str,
        *,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: Mapping[str, Any] | None = None,
        links: Sequence[Link] = (),
        parent: otel_context.Context | None = None,
    ) -> Iterator[Span]:
        """A span, current in its block: `INVALID_SPAN` (which records nothing) when off.

        An exception leaving the block marks the span failed with `error.type` and a redacted
        message (`record_error`), and goes on.
        """
        tracer = self._active()
        if tracer is None:
            yield INVALID_SPAN
            return
        span = tracer.start_span(
            name,
            context=parent,
            kind=kind,
            attributes=_clean(attributes) if attributes else None,
            links=links,
        )
        token = otel_context.attach(trace.set_span_in_context(span, parent))
        try:
            yield span
        except BaseException as exc:
            record_error(span, exc)
            raise
        finally:
            otel_context.detach(token)
            span.end()

    def start(
        self,
        name: str,
        *,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: Mapping[str, Any] | None = None,
        links: Sequence[Link] = (),
        parent: otel_context.Context | None = None,
    ) -> Span:
        """A span that is not made current (ended by the caller): for work that ends
        somewhere else than where it began, such as a streamed run."""
        tracer = self._active()
        if tracer is None:
            return INVALID_SPAN
        return tracer.start_span(
            name,
            context=parent,
            kind=kind,
            attributes=_clean(attributes) if attributes else None,
            links=links,
        )


def record_error(span: Span, exc: BaseException, *, error_type: str | None = None) -> None:
    """Mark `span` failed: `error.type` (the exception's class, or `error_type`), status
    ERROR with the redacted message. No traceback: a span is not a place for one."""
    if not span.is_recording():
        return
    kind = error_type or type(exc).__qualname__
    span.set_attribute("error.type", kind)
    message = redact(valid_text(str(exc)))[:500]
    span.set_status(Status(StatusCode.ERROR, message or kind))


def mark_failed(span: Span, error_type: str, description: str = "") -> None:
    """Mark `span` failed with `error.type` (an HTTP status as text, a class name) and a
    description chosen by the caller: for a request whose exception text would show its URL
    (and so its query string, where secrets live)."""
    if not span.is_recording():
        return
    span.set_attribute("error.type", error_type)
    span.set_status(Status(StatusCode.ERROR, description or None))


def content(value: Any) -> str | None:
    """`value` as redacted JSON text for a span attribute, or None unless the operator opted
    in to content capture (``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``)."""
    if os.environ.get(CAPTURE_CONTENT_VARIABLE, "").strip().lower() not in ("true", "1", "yes"):
        return None
    if isinstance(value, str):
        text = value
    else:
        try:
            text = json.dumps(redact_data(value), ensure_ascii=False, default=str)
        except (TypeError, ValueError, RecursionError):  # RecursionError: a cyclic value
            text = repr(value)
    text = redact(valid_text(text))
    if len(text) > CONTENT_LIMIT:
        text = text[:CONTENT_LIMIT] + f"... [{len(text) - CONTENT_LIMIT} more characters]"
    return text


# --- the trace context as text -------------------------------------------------------------


def traceparent_of(span: Span) -> str | None:
    """The W3C ``traceparent`` of `span`, or None for a span that records nothing."""
    ctx = span.get_span_context()
    if not ctx.is_valid:
        return None
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"


def current_traceparent() -> str | None:
    """The ``traceparent`` of the current span, if there is one."""
    return traceparent_of(trace.get_current_span())


def current_ids() -> tuple[str, str] | None:
    """(trace id, span id) of the current span as hex, for log lines; None without one."""
    ctx = trace.get_current_span().get_span_context()
    if not ctx.is_valid:
        return None
    return f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}"


def context_of(traceparent: str | None) -> otel_context.Context | None:
    """A context whose parent is the span `traceparent` names (None: text missing or bad)."""
    span_context = _span_context(traceparent)
    if span_context is None:
        return None
    return trace.set_span_in_context(NonRecordingSpan(span_context))


def link_to(traceparent: str | None, **attributes: Any) -> list[Link]:
    """A link to the span `traceparent` names, as a list of zero or one (for `links=`)."""
    span_context = _span_context(traceparent)
    if span_context is None:
        return []
    return [Link(span_context, _clean(attributes) if attributes else None)]


def inject(headers: MutableMapping[str, str]) -> None:
    """Write the current trace context into `headers` (``traceparent``, ``tracestate``, and
    whatever ``OTEL_PROPAGATORS`` adds); nothing when no span is current."""
    if trace.get_current_span().get_span_context().is_valid:
        propagate.inject(headers)


def inject_span(span: Span, headers: MutableMapping[str, str]) -> None:
    """Write the trace context of `span` (a client span that is not current) into `headers`;
    when `span` records nothing (tracing off), the current context's, if there is one, so a
    trace that came in goes on out even from a process that exports no span."""
    if span.get_span_context().is_valid:
        propagate.inject(headers, context=trace.set_span_in_context(span))
    else:
        inject(headers)


def extract(carrier: Mapping[str, str]) -> otel_context.Context | None:
    """The context a caller sent (headers or an MCP ``_meta``), or None when it sent none
    valid: the span then starts its own trace rather than an orphaned one."""
    try:
        ctx = propagate.extract(carrier)
    except (ValueError, TypeError):
        return None
    if not trace.get_current_span(ctx).get_span_context().is_valid:
        return None
    return ctx


def _span_context(traceparent: str | None) -> SpanContext | None:
    if not traceparent:
        return None
    ctx = _TRACE_CONTEXT.extract({"traceparent": traceparent})
    span_context = trace.get_current_span(ctx).get_span_context()
    if not span_context.is_valid:
        return None
    return SpanContext(
        span_context.trace_id,
        span_context.span_id,
        is_remote=True,
        trace_flags=TraceFlags(span_context.trace_flags),
    )


def _clean(attributes: Mapping[str, Any]) -> dict[str, Any]:
    """Attributes OpenTelemetry takes: None left out, text made valid."""
    kept: dict[str, Any] = {}
    for key, value in attributes.items():
        if value is None:
            continue
        # ASCII (nearly every attribute) is valid as it is: no need to try encoding it
        kept[key] = valid_text(value) if isinstance(value, str) and not value.isascii() else value
    return kept


# --- configuration from the standard variables ---------------------------------------------


def configure_from_environment(*, service_name: str = "toolbridge") -> bool:
    """Install the SDK's tracer provider when the ``OTEL_*`` variables ask for export.

    Export is asked for by ``OTEL_EXPORTER_OTLP_ENDPOINT``,
    ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` or ``OTEL_TRACES_EXPORTER`` (``otlp``, ``console``,
    or ``none``); ``OTEL_SDK_DISABLED=true`` turns it all off. The sampler
    (``OTEL_TRACES_SAMPLER``), the resource (``OTEL_SERVICE_NAME``,
    ``OTEL_RESOURCE_ATTRIBUTES``), the exporter's headers and timeouts and the batch
    processor's settings are read by the SDK itself, as everywhere else.

    Returns True when a provider was installed; False when nothing asked for one, when the
    application installed its own, or when the SDK is missing (then one warning says how to
    get it). Spans go out in batches; the provider flushes them when the process exits.
    """
    environ = os.environ
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    names = [
        n.strip().lower() for n in environ.get("OTEL_TRACES_EXPORTER", "").split(",") if n.strip()
    ]
    endpoint = environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or environ.get(
        "OTEL_EXPORTER_OTLP_ENDPOINT"
    )
    if not names:
        if not endpoint:
            return False
        names = ["otlp"]
    if names == ["none"]:
        return False
    if not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        return False  # the application configured its own
    try:
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider
        from opentelemetry.sdk.trace.export import (
            BatchSpanProcessor,
            ConsoleSpanExporter,
            SpanExporter,
        )
    except ImportError:
        logger.warning(
            "OTEL_* variables ask for traces, but the OpenTelemetry SDK is not installed: "
            "no spans are exported; install it with: pip install 'toolbridge[otel]'"
        )
        return False
    exporters: list[SpanExporter] = []
    for name in names:
        if name == "otlp":
            exporter = _otlp_exporter()
            if exporter is not None:
                exporters.append(exporter)
        elif name == "console":
            # stderr: stdout carries answers (`run --json`) and MCP over stdio
            exporters.append(ConsoleSpanExporter(out=sys.stderr))
        elif name != "none":
            logger.warning(
                "OTEL_TRACES_EXPORTER names %r, which toolbridge does not know; "
                "expected otlp, console or none",
                name,
            )
    if not exporters:
        return False
    named = "OTEL_SERVICE_NAME" in environ or "service.name=" in environ.get(
        "OTEL_RESOURCE_ATTRIBUTES", ""
    )
    resource = Resource.create({} if named else {SERVICE_NAME: service_name})
    provider = SdkTracerProvider(resource=resource)
    for exporter in exporters:
        provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    logger.debug("traces are exported by %s", ", ".join(type(e).__name__ for e in exporters))
    return True


def _otlp_exporter() -> Any:
    protocol = os.environ.get(
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL", "")
    )
    if protocol.strip().lower() not in ("", "http/protobuf"):
        logger.warning(
            "OTEL_EXPORTER_OTLP_PROTOCOL=%s is not supported; toolbridge exports traces over "
            "http/protobuf (set it to http/protobuf, or point the endpoint at the collector's "
            "HTTP port, usually 4318)",
            protocol,
        )
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError:
        logger.warning(
            "OTEL_* variables ask for OTLP export, but the OTLP exporter is not installed: "
            "no spans are exported; install it with: pip install 'toolbridge[otel]'"
        )
        return None
    return OTLPSpanExporter()
