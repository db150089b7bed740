"""The daemon's spans: one SERVER span per request, the runs under it, its log lines, its
recoveries.

The daemon is served in the test's process (`InProcessDaemon`, the app `toolbridge serve`
serves) with a tracer provider of the test's own (`tests.support.tracing.recorded`), against
the emulator over loopback HTTP.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from bridge.daemon.app import FASTPATH_ENV
from bridge.daemon.logs import JsonFormatter, RequestIdFilter
from bridge.emulator import Emulator
from tests.daemon.conftest import SCENARIO, TOOLS, daemon_env, in_background, start_daemon, wait_for
from tests.daemon.inprocess import InProcessDaemon, marker_of
from tests.support.postgres import PostgresServer
from tests.support.tracing import attributes, by_name, recorded

KEY = "tracing-daemon-key-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {KEY}"}
TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
PARENT_ID = "b7ad6b7169203331"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_ID}-01"
MESSAGES = "/v1/conversations/{conversation_id}/messages"

TRACED_SCENARIO: dict[str, Any] = {
    **SCENARIO,
    "rules": [
        *SCENARIO["rules"],
        # The platform fails the run: the daemon answers 502.
        {"match": r"explode", "faults": "inband=ServiceError", "answer": "never"},
    ],
}


@pytest.fixture(scope="module")
def emulator() -> Iterator[Emulator]:
    with Emulator(scenario=TRACED_SCENARIO) as emu:
        yield emu


@pytest.fixture
def tools_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "tools"
    folder.mkdir()
    (folder / "daemon_tools.py").write_text(TOOLS, encoding="utf-8")
    return folder


class Traced:
    """A daemon in this process whose spans land in `spans`."""

    def __init__(self, daemon: InProcessDaemon, exporter: InMemorySpanExporter) -> None:
        self.daemon = daemon
        self.exporter = exporter

    def request(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        headers = {**AUTH, **kwargs.pop("headers", {})}
        return self.daemon.request(method, path, headers=headers, **kwargs)

    def new_conversation(self) -> str:
        response = self.request("POST", "/v1/conversations", json={})
        assert response.status_code == 201, response.text
        return str(response.json()["conversation_id"])

    @property
    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def server_span(self, request_id: str) -> ReadableSpan:
        """The SERVER span of the request that was answered with this X-Request-Id."""

        def found() -> ReadableSpan | None:
            for span in self.spans:
                if (
                    span.kind is SpanKind.SERVER
                    and attributes(span).get("toolbridge.request.id") == request_id
                ):
                    return span
            return None

        span: ReadableSpan = wait_for(found, f"the server span of request {request_id}")
        return span


def _start(
    tmp_path: Path,
    emulator: Emulator,
    tools_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    *,
    failpoint: str | None = None,
    db: Path | None = None,
) -> Traced:
    provider, exporter = recorded()
    argv = [
        "--tools",
        str(tools_dir / "daemon_tools.py"),
        "--db",
        str(db or tmp_path / "journal.db"),
        "--api-key",
        KEY,
    ]
    daemon = InProcessDaemon(
        argv,
        env=daemon_env(emulator, tools_dir),
        monkeypatch=monkeypatch,
        failpoint=failpoint,
        tracer_provider=provider,
    )
    return Traced(daemon, exporter)


@pytest.fixture
def traced(
    tmp_path: Path, emulator: Emulator, tools_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Traced]:
    daemon = _start(tmp_path, emulator, tools_dir, monkeypatch)
    try:
        yield daemon
    finally:
        daemon.daemon.stop()


class JsonLines(logging.Handler):
    """The daemon's JSON log lines, formatted where they are logged (as its stderr handler
    does), with its filters."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.addFilter(RequestIdFilter())
        self.setFormatter(JsonFormatter())
        self.lines: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(json.loads(self.format(record)))


@pytest.fixture
def json_lines() -> Iterator[JsonLines]:
    handler = JsonLines()
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


def _ids(span: ReadableSpan) -> tuple[str, str]:
    context = span.get_span_context()
    assert context is not None
    return f"{context.trace_id:032x}", f"{context.span_id:016x}"


# --- server spans, per kind of route ---------------------------------------------------------


@pytest.mark.parametrize("fastpath", ["1", "0"], ids=["fast-path", "fastapi"])
def test_the_two_conversation_posts_are_server_spans_named_by_their_route(
    fastpath: str,
    tmp_path: Path,
    emulator: Emulator,
    tools_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The fast path answers them without FastAPI's routing: their spans are the same."""
    monkeypatch.setenv(FASTPATH_ENV, fastpath)
    traced = _start(tmp_path, emulator, tools_dir, monkeypatch)
    try:
        created = traced.request("POST", "/v1/conversations", json={})
        assert created.status_code == 201, created.text
        cid = created.json()["conversation_id"]
        answered = traced.request(
            "POST", MESSAGES.format(conversation_id=cid), json={"query": "weather in Paris"}
        )
        assert answered.status_code == 200, answered.text
        opened = traced.server_span(created.headers["x-request-id"])
        sent = traced.server_span(answered.headers["x-request-id"])
    finally:
        traced.daemon.stop()
    # The platform call that opened the conversation (on a thread) is the request's child.
    [platform] = [
        span
        for span in traced.spans
        if span.parent is not None and span.parent.span_id == opened.get_span_context().span_id
    ]
    assert platform.kind is SpanKind.CLIENT
    assert str(attributes(platform)["url.full"]).endswith("/conversation")
    [run] = by_name(traced.spans, "invoke_agent")
    assert run.parent is not None and run.parent.span_id == sent.get_span_context().span_id
    assert opened.name == "POST /v1/conversations"
    assert attributes(opened) == {
        "http.request.method": "POST",
        "url.path": "/v1/conversations",
        "url.scheme": "http",
        "http.route": "/v1/conversations",
        "http.response.status_code": 201,
        "toolbridge.caller": "default",
        "toolbridge.request.id": created.headers["x-request-id"],
        "server.address": "127.0.0.1",
        "server.port": int(traced.daemon.url.rsplit(":", 1)[1]),
        "client.address": "127.0.0.1",
    }
    assert sent.name == "POST /v1/conversations/{conversation_id}/messages"
    seen = attributes(sent)
    assert seen["http.route"] == "/v1/conversations/{conversation_id}/messages"
    assert seen["url.path"] == f"/v1/conversations/{cid}/messages"
    assert seen["http.response.status_code"] == 200
    assert seen["gen_ai.conversation.id"] == cid
    assert "error.type" not in seen
    for span in (opened, sent):
        assert span.kind is SpanKind.SERVER
        assert span.parent is None  # no traceparent came: a trace of its own
        assert span.status.status_code is StatusCode.UNSET


def test_a_query_string_stays_off_the_span(traced: Traced) -> None:
    response = traced.request("GET", "/v1/conversations?limit=5&token=s3cr3t-in-the-query")
    assert response.status_code == 200, response.text
    span = traced.server_span(response.headers["x-request-id"])
    assert span.name == "GET /v1/conversations"
    assert attributes(span)["url.path"] == "/v1/conversations"
    assert "s3cr3t" not in repr(attributes(span))


def test_refusals_at_the_door_and_unknown_paths(traced: Traced) -> None:
    """401 and 403 carry the route they were refused on; 404 for a path no route serves has
    no route (and is named by its method alone); none of them is an error of the server."""
    no_key = traced.daemon.request("POST", "/v1/conversations", json={})
    wrong_key = traced.daemon.request(
        "GET", "/v1/conversations", headers={"Authorization": "Bearer not-the-key-at-all-0123"}
    )
    cross_origin = traced.request(
        "POST", "/v1/conversations", json={}, headers={"Origin": "http://elsewhere.example"}
    )
    missing = traced.request("GET", "/v1/no-such-thing?secret=1")
    unknown = traced.request("GET", "/v1/conversations/no-such-conversation")
    assert [no_key.status_code, wrong_key.status_code, cross_origin.status_code] == [401, 401, 403]
    assert [missing.status_code, unknown.status_code] == [404, 404]

    span = traced.server_span(no_key.headers["x-request-id"])
    assert span.name == "POST /v1/conversations"
    assert attributes(span)["http.response.status_code"] == 401
    assert "toolbridge.caller" not in attributes(span)  # the door named nobody

    span = traced.server_span(wrong_key.headers["x-request-id"])
    assert span.name == "GET /v1/conversations"
    assert attributes(span)["http.response.status_code"] == 401

    span = traced.server_span(cross_origin.headers["x-request-id"])
    assert span.name == "POST"  # refused before any route was chosen
    assert attributes(span)["http.response.status_code"] == 403
    assert "http.route" not in attributes(span)

    span = traced.server_span(missing.headers["x-request-id"])
    assert span.name == "GET"
    assert attributes(span)["url.path"] == "/v1/no-such-thing"
    assert attributes(span)["http.response.status_code"] == 404
    assert "http.route" not in attributes(span)

    span = traced.server_span(unknown.headers["x-request-id"])
    assert span.name == "GET /v1/conversations/{conversation_id}"
    assert attributes(span)["http.response.status_code"] == 404
    assert attributes(span)["toolbridge.caller"] == "default"

    for response in (no_key, wrong_key, cross_origin, missing, unknown):
        span = traced.server_span(response.headers["x-request-id"])
        assert "error.type" not in attributes(span)
        assert span.status.status_code is StatusCode.UNSET


def test_a_server_error_names_its_status_as_the_error_type(traced: Traced) -> None:
    cid = traced.new_conversation()
    response = traced.request(
        "POST", MESSAGES.format(conversation_id=cid), json={"query": "explode now"}
    )
    assert response.status_code == 502, response.text
    span = traced.server_span(response.headers["x-request-id"])
    assert attributes(span)["error.type"] == "502"
    assert attributes(span)["http.response.status_code"] == 502
    assert span.status.status_code is StatusCode.ERROR


def test_a_streamed_answer_s_span_ends_when_the_stream_does(traced: Traced) -> None:
    """The endpoint returns the stream at once; the span lasts until its last event went
    out (the run's tool takes a while, and the events after it came later)."""
    cid = traced.new_conversation()
    with traced.request(
        "POST",
        MESSAGES.format(conversation_id=cid),
        json={"query": "slow 0.3", "stream": True},
        stream=True,
    ) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        first_event_at: int | None = None
        events: list[str] = []
        for line in response.iter_lines(decode_unicode=True):
            if line.startswith("event: "):
                events.append(line.removeprefix("event: "))
                if first_event_at is None:
                    first_event_at = time.time_ns()
        request_id = response.headers["x-request-id"]
    assert events[-1] == "done", events
    assert "tool_call_finished" in events
    span = traced.server_span(request_id)
    assert span.name == "POST /v1/conversations/{conversation_id}/messages"
    assert attributes(span)["http.response.status_code"] == 200
    assert first_event_at is not None and span.end_time is not None
    # The tool slept 0.3 s after the first event: a span ended when the endpoint returned
    # the stream would have ended before the first event was even read.
    assert span.end_time > first_event_at
    assert span.end_time - first_event_at >= 250_000_000


# --- the caller's trace, continued; the run under the request ---------------------------------


def test_an_incoming_traceparent_is_continued_down_to_the_run(
    traced: Traced, json_lines: JsonLines
) -> None:
    cid = traced.new_conversation()
    response = traced.request(
        "POST",
        MESSAGES.format(conversation_id=cid),
        json={"query": "weather in Tokyo"},
        headers={"traceparent": TRACEPARENT, "tracestate": "vendor=kept"},
    )
    assert response.status_code == 200, response.text
    request_id = response.headers["x-request-id"]
    span = traced.server_span(request_id)
    trace_id, span_id = _ids(span)
    assert trace_id == TRACE_ID
    assert span.parent is not None and f"{span.parent.span_id:016x}" == PARENT_ID
    assert span.parent.is_remote
    assert span.get_span_context().trace_state.get("vendor") == "kept"
    # The run happened on a worker thread: its log lines are in the request's trace.
    run_lines = [
        line
        for line in json_lines.lines
        if line.get("request_id") == request_id and line["logger"] == "bridge.daemon.service"
    ]
    assert run_lines, json_lines.lines
    ended = [line for line in run_lines if line["message"] == "run finished"]
    assert ended, run_lines
    for line in run_lines:
        assert line["trace_id"] == TRACE_ID, line
    known = {_ids(s)[1] for s in traced.spans}
    assert all(line["span_id"] in known for line in run_lines), run_lines
    # The run (on its worker thread) is a child of the request's span, the tool call (on the
    # dispatcher's) of the run's: one trace, the caller's.
    [run] = wait_for(lambda: by_name(traced.spans, "invoke_agent"), "the run's span")
    [tool] = by_name(traced.spans, "execute_tool get_weather")
    assert _ids(run)[0] == _ids(tool)[0] == TRACE_ID
    assert run.parent is not None and f"{run.parent.span_id:016x}" == span_id
    assert tool.parent is not None and tool.parent.span_id == run.get_span_context().span_id
    assert attributes(run)["gen_ai.conversation.id"] == cid
    # The platform's HTTP requests of the run too (the run's client spans).
    posts = [s for s in traced.spans if s.kind is SpanKind.CLIENT and s.name == "POST"]
    in_run = [s for s in posts if s.parent and s.parent.span_id == run.get_span_context().span_id]
    assert len(in_run) == 2, posts  # the question, then the tool's output
    assert all(_ids(post)[0] == TRACE_ID for post in in_run)


def test_a_bad_traceparent_starts_a_trace_of_its_own(traced: Traced) -> None:
    response = traced.request(
        "GET", "/v1/conversations", headers={"traceparent": "00-not-a-trace-id-01"}
    )
    span = traced.server_span(response.headers["x-request-id"])
    assert span.parent is None
    assert _ids(span)[0] != TRACE_ID


# --- log lines --------------------------------------------------------------------------------


def test_json_log_lines_carry_the_span_they_were_logged_in(
    traced: Traced, json_lines: JsonLines
) -> None:
    cid = traced.new_conversation()
    response = traced.request(
        "POST", MESSAGES.format(conversation_id=cid), json={"query": "weather in Paris"}
    )
    assert response.status_code == 200, response.text
    request_id = response.headers["x-request-id"]
    span = traced.server_span(request_id)
    trace_id, span_id = _ids(span)
    [access] = [
        line
        for line in json_lines.lines
        if line["logger"] == "bridge.daemon.access" and line.get("request_id") == request_id
    ]
    assert (access["trace_id"], access["span_id"]) == (trace_id, span_id)
    # Outside any span: no ids at all.
    logging.getLogger("bridge.daemon").warning("between requests")
    assert "trace_id" not in json_lines.lines[-1] and "span_id" not in json_lines.lines[-1]


def test_text_log_lines_are_unchanged() -> None:
    formatter = logging.Formatter("%(levelname)s %(message)s")
    record = logging.LogRecord("bridge.daemon", logging.INFO, __file__, 1, "hello", None, None)
    RequestIdFilter().filter(record)
    assert formatter.format(record) == "INFO hello"


# --- recovery ---------------------------------------------------------------------------------


def test_a_recovered_message_runs_under_a_recovery_span_of_its_own(
    tmp_path: Path,
    emulator: Emulator,
    tools_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    json_lines: JsonLines,
) -> None:
    """A daemon dies after its journal took a tool batch; the next one on the same journal
    resumes the message under a ``recover conversation`` span (a trace of its own, linked to
    the interrupted run), and the resumed run continues the interrupted run's trace (the
    caller's)."""
    failpoint, marker = marker_of(tmp_path, "received")
    first = _start(tmp_path, emulator, tools_dir, monkeypatch, failpoint=failpoint)
    second: Traced | None = None
    try:
        cid = first.new_conversation()
        in_background(
            lambda: first.request(
                "POST",
                MESSAGES.format(conversation_id=cid),
                json={"query": "lookup k1"},
                headers={"traceparent": TRACEPARENT},
            )
        )
        wait_for(marker.exists, "the journal to take the tool batch")
        first.daemon.crash()
        second = _start(tmp_path, emulator, tools_dir, monkeypatch)

        def recovered() -> list[ReadableSpan]:
            return by_name(second.spans, "recover conversation") if second else []

        [span] = wait_for(recovered, "the recovery span")
        wait_for(
            lambda: any(line["message"] == "run finished" for line in json_lines.lines),
            "the resumed run",
        )
    finally:
        first.daemon.bury()
        if second is not None:
            second.daemon.stop()
    seen = attributes(span)
    assert seen["gen_ai.conversation.id"] == cid
    assert seen["toolbridge.recovery.outcome"] == "resumed"
    assert seen["toolbridge.recovery.takeover"] is False
    assert seen["toolbridge.resumed"] is True
    assert isinstance(seen["toolbridge.message.id"], int)
    assert span.parent is None
    trace_id, _ = _ids(span)
    assert trace_id != TRACE_ID
    [link] = span.links
    assert f"{link.context.trace_id:032x}" == TRACE_ID  # the interrupted run's span
    assert link.attributes is not None and link.attributes["toolbridge.resumed"] is True
    assert second is not None
    [resumed] = by_name(second.spans, "invoke_agent")
    assert _ids(resumed)[0] == TRACE_ID
    assert attributes(resumed)["toolbridge.resumed"] is True
    [lookup] = by_name(second.spans, "execute_tool lookup")
    assert _ids(lookup)[0] == TRACE_ID
    run_lines = [
        line
        for line in json_lines.lines
        if line["logger"] == "bridge.daemon.service" and line.get("conversation_id") == cid
    ]
    finished = [line for line in run_lines if line["message"] == "run finished"]
    assert finished, run_lines
    assert finished[-1]["trace_id"] == trace_id


def test_a_direct_tool_call_runs_in_the_request_s_trace(traced: Traced) -> None:
    response = traced.request(
        "POST",
        "/v1/tools/lookup/call",
        json={"arguments": {"key": "k9"}},
        headers={"traceparent": TRACEPARENT},
    )
    assert response.status_code == 200, response.text
    span = traced.server_span(response.headers["x-request-id"])
    assert span.name == "POST /v1/tools/{name}/call"
    [tool] = by_name(traced.spans, "execute_tool lookup")
    assert _ids(tool)[0] == _ids(span)[0] == TRACE_ID
    assert tool.parent is not None and tool.parent.span_id == span.get_span_context().span_id


# --- replicas ---------------------------------------------------------------------------------


def test_a_takeover_from_a_dead_replica_runs_under_its_recovery_span(
    tmp_path: Path,
    emulator: Emulator,
    tools_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    postgres: PostgresServer,
) -> None:
    """Replica a (a process, tracing on) dies with a message in flight; replica b takes it
    over once a's lease expired: a ``recover conversation`` span saying so, linked to a's
    run, and the run it resumes continues a's trace, the caller's."""
    dsn = postgres.create_database(f"t_{uuid.uuid4().hex[:12]}")
    mark = tmp_path / "hit-received"
    lease = ["--lease-seconds", "2"]
    a = start_daemon(
        emulator,
        tools_dir,
        dsn,
        "--replica-id",
        "replica-a",
        *lease,
        api_key=KEY,
        # Spans on (printed, nobody reads them): the run's trace context is journaled.
        env={"TOOLBRIDGE_FAILPOINT": f"received:{mark}", "OTEL_TRACES_EXPORTER": "console"},
    )
    b: Traced | None = None
    try:
        cid = a.new_conversation()
        in_background(
            lambda: a.request(
                "POST",
                MESSAGES.format(conversation_id=cid),
                json={"query": "lookup k7"},
                headers={"traceparent": TRACEPARENT},
            )
        )
        wait_for(mark.exists, "replica a to journal the tool batch")
        provider, exporter = recorded()
        b = Traced(
            InProcessDaemon(
                [
                    "--tools",
                    str(tools_dir / "daemon_tools.py"),
                    "--db",
                    dsn,
                    "--replica-id",
                    "replica-b",
                    *lease,
                    "--api-key",
                    KEY,
                ],
                env=daemon_env(emulator, tools_dir),
                monkeypatch=monkeypatch,
                tracer_provider=provider,
            ),
            exporter,
        )
        a.kill9()
        traced = b
        [span] = wait_for(
            lambda: by_name(traced.spans, "recover conversation"), "replica b's takeover", 60
        )
        [resumed] = wait_for(lambda: by_name(traced.spans, "invoke_agent"), "the resumed run", 60)
    finally:
        a.stop()
        if b is not None:
            b.daemon.stop()
    seen = attributes(span)
    assert seen["toolbridge.recovery.takeover"] is True
    assert seen["toolbridge.recovery.previous_replica"] == "replica-a"
    assert seen["toolbridge.replica"] == "replica-b"
    assert seen["toolbridge.recovery.outcome"] == "resumed"
    assert seen["gen_ai.conversation.id"] == cid
    [link] = span.links
    assert f"{link.context.trace_id:032x}" == TRACE_ID
    assert _ids(resumed)[0] == TRACE_ID
    assert attributes(resumed)["toolbridge.resumed"] is True


def test_a_request_the_caller_did_not_sample_records_nothing_below_it(traced: Traced) -> None:
    """The caller's ``traceparent`` says "not sampled": the request's span is not recorded,
    and neither is the run it starts (not a new trace of its own either)."""
    cid = traced.new_conversation()
    before = len(traced.spans)
    response = traced.request(
        "POST",
        MESSAGES.format(conversation_id=cid),
        json={"query": "weather in Paris"},
        headers={"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-00"},
    )
    assert response.status_code == 200, response.text
    # Another request, sampled, ends after it: every span of the first has ended by then.
    after = traced.request("GET", "/v1/conversations")
    traced.server_span(after.headers["x-request-id"])
    assert [span.name for span in traced.spans[before:]] == ["GET /v1/conversations"]


def test_paths_the_operator_excludes_are_not_traced(
    tmp_path: Path,
    emulator: Emulator,
    tools_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Probes every few seconds are noise in a trace store: OTEL_PYTHON_EXCLUDED_URLS (as
    OpenTelemetry's web instrumentations read it) leaves them out; a bad expression is named
    in the log and the rest still apply."""
    monkeypatch.setenv("OTEL_PYTHON_EXCLUDED_URLS", "^/healthz$, [unclosed ,/readyz")
    daemon = _start(tmp_path, emulator, tools_dir, monkeypatch)
    try:
        probe = daemon.request("GET", "/healthz")
        assert probe.status_code == 200
        listed = daemon.request("GET", "/v1/conversations")
        assert listed.status_code == 200, listed.text
        daemon.server_span(listed.headers["x-request-id"])
        names = [s.name for s in daemon.exporter.get_finished_spans()]
        assert "GET /healthz" not in names and "GET /v1/conversations" in names
    finally:
        daemon.daemon.stop()
    assert "'[unclosed' is not a regular expression" in caplog.text
