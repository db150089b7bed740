"""The ``execute_tool`` spans of one batch of tool calls (GenAI semantic conventions).

`CallSpans` is made for a batch only when tracing is on: a dispatcher without it opens no
span and builds no attribute. The conversation loop makes it before the policy and the
approvals see the batch, so a refused call, a rejected one and the wait for a person all end
up on the call's span; the dispatcher then opens (or takes over) each call's span and makes it
the current context wherever the call's steps run (worker threads, the loop thread).

All spans of a batch have the parent that was current when `CallSpans` was made (the run's
span), whatever thread opens them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, Span, Status, StatusCode

from bridge.tracing import RESUMED, Tracing, content, link_to, traceparent_of
from bridge.types import ToolCall, ToolRun

__all__ = ["CallSpans"]

FUNCTION = "function"
EXTENSION = "extension"


class CallSpans:
    """The ``execute_tool {name}`` spans of one batch, by call id.

    Args:
        tracing: where the spans go (only made when `tracing.enabled`).
        attributes: put on every span of the batch (the caller, the conversation).
        tool_type: the `gen_ai.tool.type` of a tool name ("function" by default).
        parent: the spans' parent context (default: the context current now).
    """

    __slots__ = ("_attributes", "_extra", "_links", "_lock", "_spans", "_type", "parent", "tracing")

    def __init__(
        self,
        tracing: Tracing,
        *,
        attributes: Mapping[str, Any] | None = None,
        tool_type: Callable[[str], str] | None = None,
        parent: otel_context.Context | None = None,
    ) -> None:
        self.tracing = tracing
        self.parent = parent if parent is not None else otel_context.get_current()
        self._attributes = dict(attributes or {})
        self._type = tool_type
        self._spans: dict[str, Span] = {}
        self._extra: dict[str, dict[str, Any]] = {}
        self._links: dict[str, list[Link]] = {}
        self._lock = threading.Lock()

    # --- before a span exists ------------------------------------------------------------------

    def note(self, call_id: str, attributes: Mapping[str, Any]) -> None:
        """Attributes for the call's span (set now if it is open, else when it opens)."""
        with self._lock:
            span = self._spans.get(call_id)
            if span is None:
                self._extra.setdefault(call_id, {}).update(attributes)
                return
        span.set_attributes({k: v for k, v in attributes.items() if v is not None})

    def resumed(self, call_id: str, traceparent: str | None) -> None:
        """The call runs again after a crash: its span links to the interrupted execution's
        (`traceparent`, from the journal) and says it resumed."""
        with self._lock:
            self._extra.setdefault(call_id, {})[RESUMED] = True
            self._links[call_id] = link_to(traceparent, **{RESUMED: True})

    # --- the spans -----------------------------------------------------------------------------

    def open(self, call: ToolCall) -> Span:
        """The call's span, started now unless it already was (e.g. to wait for approval)."""
        with self._lock:
            span = self._spans.get(call.call_id)
            if span is not None:
                return span
            extra = self._extra.pop(call.call_id, None)
            links = self._links.pop(call.call_id, ())
        kind = self._type(call.name) if self._type is not None else FUNCTION
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": call.name,
            "gen_ai.tool.call.id": call.call_id,
            "gen_ai.tool.type": kind,
            **self._attributes,
        }
        if extra:
            attributes.update(extra)
        arguments = content(call.arguments)
        if arguments is not None:
            attributes["gen_ai.tool.call.arguments"] = arguments
        span = self.tracing.start(
            f"execute_tool {call.name}", attributes=attributes, links=links, parent=self.parent
        )
        with self._lock:
            self._spans[call.call_id] = span
        return span

    def context(self, call: ToolCall) -> otel_context.Context:
        """A context whose current span is the call's (opened if need be)."""
        return trace.set_span_in_context(self.open(call), self.parent)

    def traceparents(self, calls: Iterable[ToolCall]) -> dict[str, str]:
        """Call id -> ``traceparent`` of its span, for the journal's "started"."""
        found: dict[str, str] = {}
        with self._lock:
            for call in calls:
                span = self._spans.get(call.call_id)
                text = traceparent_of(span) if span is not None else None
                if text is not None:
                    found[call.call_id] = text
        return found

    def event(self, call: ToolCall, name: str, attributes: Mapping[str, Any]) -> None:
        """An event on the call's span (opened if need be)."""
        self.open(call).add_event(name, {k: v for k, v in attributes.items() if v is not None})

    def close(self, run: ToolRun) -> None:
        """End the call's span with its outcome (a call never opened gets one now: refused,
        rejected, unknown to its caller)."""
        with self._lock:
            span = self._spans.pop(run.call_id, None)
        if span is None:
            span = self.open(ToolCall(call_id=run.call_id, name=run.name, arguments=run.arguments))
            with self._lock:
                self._spans.pop(run.call_id, None)
        if run.error is not None:
            span.set_attribute("error.type", run.error)
            first = run.output.splitlines()[0] if run.output else run.error
            span.set_status(Status(StatusCode.ERROR, first[:500]))
        else:
            result = content(run.output)
            if result is not None:
                span.set_attribute("gen_ai.tool.call.result", result)
        span.end()

    def abort(self, exc: BaseException, calls: Iterable[ToolCall]) -> None:
        """End the spans of `calls` still open: their batch stopped (a tool raised with
        ``errors="raise"``, the consumer went away)."""
        with self._lock:
            spans = [s for c in calls if (s := self._spans.pop(c.call_id, None)) is not None]
        # A closed generator: whoever read the batch went away, and the calls were cancelled.
        kind = "abandoned" if isinstance(exc, GeneratorExit) else type(exc).__qualname__
        for span in spans:
            span.set_attribute("error.type", kind)
            span.set_status(Status(StatusCode.ERROR, kind))
            span.end()
