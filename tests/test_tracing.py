"""bridge.tracing on its own: spans only when a provider records (`Tracing.enabled`), content
only when the operator opts in and then redacted and cut, errors without secrets, and the
trace context as ``traceparent`` text that survives a round trip and never raises on bad input.

Every span here goes to a provider of the test's own (`tests.support.tracing.recorded`)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import INVALID_SPAN, NoOpTracerProvider, SpanKind, StatusCode

from bridge import tracing
from bridge.errors import register_secret
from bridge.tracing import (
    CAPTURE_CONTENT_VARIABLE,
    CONTENT_LIMIT,
    Tracing,
    content,
    context_of,
    current_ids,
    current_traceparent,
    extract,
    inject,
    link_to,
    record_error,
    traceparent_of,
)
from tests.support.tracing import attributes, by_name, recorded

SECRET = "tb-registered-secret-8f2a9c41"
register_secret(SECRET)

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


# --- on and off ----------------------------------------------------------------------------


def test_off_without_a_provider_opens_no_span() -> None:
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)  # none global
    for off in (Tracing(), Tracing(NoOpTracerProvider())):
        assert off.enabled is False
        with off.span("invoke_agent x", attributes={"a": 1}) as span:
            assert span is INVALID_SPAN and not span.is_recording()
            assert current_traceparent() is None and current_ids() is None
        assert off.start("invoke_agent x") is INVALID_SPAN


def test_on_with_a_provider_spans_nest_and_carry_clean_attributes() -> None:
    provider, exporter = recorded()
    on = Tracing(provider)
    assert on.enabled and on.provider is provider
    with on.span("invoke_agent a", attributes={"gen_ai.agent.id": "a", "skip": None}) as outer:
        with on.span("execute_tool t", attributes={"text": "x\ud800y"}) as inner:
            assert current_traceparent() == traceparent_of(inner)
            ids = current_ids()
            assert ids == (
                f"{inner.get_span_context().trace_id:032x}",
                f"{inner.get_span_context().span_id:016x}",
            )
        assert current_traceparent() == traceparent_of(outer)
    assert current_traceparent() is None
    (tool,) = by_name(exporter.get_finished_spans(), "execute_tool")
    (agent,) = by_name(exporter.get_finished_spans(), "invoke_agent")
    assert tool.parent is not None and tool.parent.span_id == agent.context.span_id
    assert attributes(agent) == {"gen_ai.agent.id": "a"}  # None left out
    assert attributes(tool) == {"text": "x\ufffdy"}  # a lone surrogate made valid
    assert agent.instrumentation_scope is not None
    assert agent.instrumentation_scope.name == "toolbridge"


def test_start_is_not_current_and_the_caller_ends_it() -> None:
    provider, exporter = recorded()
    span = Tracing(provider).start("invoke_agent s", kind=SpanKind.CLIENT)
    assert span.is_recording() and current_traceparent() is None
    assert exporter.get_finished_spans() == ()
    span.end()
    (done,) = exporter.get_finished_spans()
    assert done.kind is SpanKind.CLIENT


def test_the_tracer_follows_a_provider_installed_later() -> None:
    provider, _ = recorded()
    late = Tracing(provider)
    first = late.tracer
    assert late.tracer is first  # cached while the provider stays the same
    other, exporter = recorded()
    late._provider = other  # what a global provider set after the bridge was made amounts to
    with late.span("x"):
        pass
    assert late.tracer is not first and len(exporter.get_finished_spans()) == 1


def test_an_exception_marks_the_span_failed_and_goes_on() -> None:
    provider, exporter = recorded()
    with pytest.raises(KeyError), Tracing(provider).span("execute_tool k"):
        raise KeyError(f"no entry for Bearer {SECRET}")
    (span,) = exporter.get_finished_spans()
    assert attributes(span)["error.type"] == "KeyError"
    assert span.status.status_code is StatusCode.ERROR
    assert SECRET not in (span.status.description or "")


# --- errors ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "message",
    [
        f"the token {SECRET} was refused",
        "Authorization: Bearer abcdefgh12345678 refused",
        "api_key=sk-0123456789abcdef in the URL",
    ],
)
def test_record_error_never_puts_a_secret_in_the_status(message: str) -> None:
    provider, exporter = recorded()
    span = Tracing(provider).start("x")
    record_error(span, RuntimeError(message))
    span.end()
    (done,) = exporter.get_finished_spans()
    description = done.status.description or ""
    assert "[secure]" in description
    for secret in (SECRET, "abcdefgh12345678", "sk-0123456789abcdef"):
        assert secret not in description
    assert not done.events  # no exception event with a traceback and the raw message
    assert attributes(done) == {"error.type": "RuntimeError"}


def test_record_error_names_the_type_cuts_the_message_and_ignores_off_spans() -> None:
    provider, exporter = recorded()
    span = Tracing(provider).start("x")
    record_error(span, ValueError("v" * 2000), error_type="tool_timeout")
    empty = Tracing(provider).start("y")
    record_error(empty, ValueError(""))
    span.end()
    empty.end()
    long, blank = exporter.get_finished_spans()
    assert attributes(long)["error.type"] == "tool_timeout"
    assert long.status.description == "v" * 500
    assert blank.status.description == "ValueError"  # the type when there is no message
    record_error(INVALID_SPAN, ValueError("nothing happens"))


# --- content ---------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [None, "", "false", "0", "no", "maybe"])
def test_content_stays_off_unless_the_operator_opts_in(
    monkeypatch: pytest.MonkeyPatch, value: str | None
) -> None:
    if value is None:
        monkeypatch.delenv(CAPTURE_CONTENT_VARIABLE, raising=False)
    else:
        monkeypatch.setenv(CAPTURE_CONTENT_VARIABLE, value)
    assert content({"city": "Paris"}) is None
    assert content("text") is None


@pytest.mark.parametrize("value", ["true", "TRUE", " 1 ", "yes"])
def test_content_opted_in_is_json_and_redacted(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv(CAPTURE_CONTENT_VARIABLE, value)
    captured = content({"city": "北京", "key": SECRET, SECRET: [f"Bearer {SECRET}"]})
    assert captured is not None and SECRET not in captured
    assert json.loads(captured) == {
        "city": "北京",
        "key": "[secure]",
        "[secure]": ["Bearer [secure]"],
    }
    assert content(f"a result with {SECRET} inside") == "a result with [secure] inside"
    assert content("token=abcdefgh12345678") == "token=[secure]"
    assert content("half \ud800 surrogate") == "half \ufffd surrogate"


def test_content_is_cut_to_the_limit_with_a_marker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CAPTURE_CONTENT_VARIABLE, "true")
    captured = content("x" * (CONTENT_LIMIT + 123))
    assert captured == "x" * CONTENT_LIMIT + "... [123 more characters]"
    assert content("y" * CONTENT_LIMIT) == "y" * CONTENT_LIMIT


def test_content_of_what_json_cannot_hold(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CAPTURE_CONTENT_VARIABLE, "true")
    loop: list[object] = []
    loop.append(loop)
    assert content(loop) == "[[...]]"  # the repr, not an exception
    assert content({"when": {1, 2}}) in ('{"when": "{1, 2}"}', '{"when": "{2, 1}"}')


# --- the trace context as text -------------------------------------------------------------


def test_traceparent_round_trips_through_context_of_and_link_to() -> None:
    provider, exporter = recorded()
    on = Tracing(provider)
    with on.span("invoke_agent first") as first:
        text = traceparent_of(first)
    assert text is not None
    ctx = first.get_span_context()
    parsed = trace.get_current_span(context_of(text)).get_span_context()
    assert (parsed.trace_id, parsed.span_id) == (ctx.trace_id, ctx.span_id)
    assert parsed.is_remote and parsed.trace_flags.sampled
    # a span resumed elsewhere: a child of the original, or a new span linked to it
    with on.span("execute_tool again", parent=context_of(text)):
        pass
    (link,) = link_to(text, **{tracing.RESUMED: True, "skip": None})
    assert (link.context.trace_id, link.context.span_id) == (ctx.trace_id, ctx.span_id)
    assert dict(link.attributes or {}) == {tracing.RESUMED: True}
    with on.span("execute_tool linked", links=link_to(text)):
        pass
    again = by_name(exporter.get_finished_spans(), "execute_tool again")[0]
    linked = by_name(exporter.get_finished_spans(), "execute_tool linked")[0]
    assert again.parent is not None and again.parent.span_id == ctx.span_id
    assert again.context.trace_id == ctx.trace_id
    assert linked.context.trace_id != ctx.trace_id  # its own trace, pointing back
    assert [(lk.context.trace_id, lk.context.span_id) for lk in linked.links] == [
        (ctx.trace_id, ctx.span_id)
    ]
    assert traceparent_of(INVALID_SPAN) is None


def test_a_known_traceparent_parses_to_its_ids() -> None:
    parsed = trace.get_current_span(context_of(TRACEPARENT)).get_span_context()
    assert f"{parsed.trace_id:032x}-{parsed.span_id:016x}" == TRACEPARENT[3:52]
    assert traceparent_of(trace.NonRecordingSpan(parsed)) == TRACEPARENT


@pytest.mark.parametrize(
    "text",
    [
        None,
        "",
        "garbage",
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",  # zero trace id
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",  # zero span id
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  # forbidden version
        "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",  # short trace id
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01",  # upper case
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
        TRACEPARENT.replace("-", "_"),
    ],
)
def test_bad_traceparents_give_nothing(text: str | None) -> None:
    assert context_of(text) is None
    assert link_to(text, why="x") == []


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.text(),
        st.from_regex(r"\A[0-9a-fA-F]{2}-[0-9a-fA-Fx]{1,33}-[0-9a-fA-F]{1,17}-[0-9a-fA-F]{1,3}\Z"),
        st.binary().map(lambda b: b.decode("latin-1")),
    )
)
def test_no_traceparent_text_makes_context_of_or_link_to_raise(text: str) -> None:
    ctx = context_of(text)
    links = link_to(text, reason=text)
    if ctx is None:
        assert links == []
    else:
        parsed = trace.get_current_span(ctx).get_span_context()
        assert parsed.is_valid and len(links) == 1
        assert links[0].context.span_id == parsed.span_id


def test_inject_writes_the_current_context_and_nothing_without_one() -> None:
    headers: dict[str, str] = {}
    inject(headers)
    assert headers == {}
    provider, _ = recorded()
    with Tracing(provider).span("GET") as span:
        inject(headers)
    assert headers["traceparent"] == traceparent_of(span)


def test_extract_reads_what_inject_wrote() -> None:
    provider, _ = recorded()
    headers: dict[str, str] = {}
    with Tracing(provider).span("GET") as span:
        inject(headers)
    ctx = extract(headers)
    assert ctx is not None
    got = trace.get_current_span(ctx).get_span_context()
    assert got.span_id == span.get_span_context().span_id and got.is_remote
    token = otel_context.attach(ctx)
    try:
        assert current_traceparent() == headers["traceparent"]
    finally:
        otel_context.detach(token)


@pytest.mark.parametrize(
    "carrier",
    [
        {},
        {"traceparent": "garbage"},
        {"traceparent": ""},
        {"traceparent": "00-00000000000000000000000000000000-0000000000000000-00"},
        {"tracestate": "a=b"},
        {"traceparent": ["not", "text"]},
        {"traceparent": 12},
        {"TRACEPARENT": "\x00\ud800"},
    ],
)
def test_extract_of_a_garbage_carrier_is_none(carrier: dict[str, object]) -> None:
    assert extract(carrier) is None  # type: ignore[arg-type]


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(["traceparent", "tracestate", "baggage", "x"]), st.text()))
def test_extract_never_raises(carrier: dict[str, str]) -> None:
    ctx = extract(carrier)
    assert ctx is None or trace.get_current_span(ctx).get_span_context().is_valid
