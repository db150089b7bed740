"""Spans kept in memory, for tests that read what a bridge, a daemon or a source traced.

`recorded()` gives an SDK tracer provider of its own (never the global one, so tests do not
see each other's spans) and the exporter that keeps its finished spans. `by_name` and
`attributes` read them back.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


def recorded() -> tuple[TracerProvider, InMemorySpanExporter]:
    """A provider whose spans end up, synchronously, in the returned exporter."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def by_name(spans: Sequence[ReadableSpan], prefix: str) -> list[ReadableSpan]:
    """The spans whose name starts with `prefix`, in the order they ended."""
    return [s for s in spans if s.name.startswith(prefix)]


def attributes(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})
