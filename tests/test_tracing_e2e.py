"""One trace from a client's request to the intranet service a tool calls, across a kill -9.

Real processes and servers only: an OTLP/HTTP receiver on loopback (tests/support/otlp.py),
``toolbridge serve`` processes exporting to it as the standard OTEL_* variables say, the
embedded emulator as the agent platform, and an "intranet" service on loopback behind a
declarative HTTP tool, which records the ``traceparent`` each request brings.

- A message sent with a ``traceparent`` reads as one tree in the caller's trace: the API
  request's SERVER span (child of the caller's span), ``invoke_agent``, ``execute_tool``, and
  the tool's HTTP CLIENT span, whose span id is the parent id the intranet service received.
- A daemon killed (kill -9) while the tool's request is in flight, then restarted on its
  SQLite journal; and a replica killed on a PostgreSQL journal, whose message the other
  replica takes over: the resumed run and the call run again stay in the caller's trace, carry
  ``toolbridge.resumed`` and link to the interrupted spans, whose ids the journal kept.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.trace import SpanKind

from bridge.emulator import Emulator
from bridge.tracing import RESUMED
from tests.daemon.conftest import DaemonProcess, in_background, stopped, wait_for
from tests.support.otlp import OtlpReceiver, ReceivedSpan, TraceView
from tests.support.postgres import PostgresServer

KEY = "tracing-e2e-key-0123456789abcdef"
LEASE = "2"  # seconds: a takeover comes quickly
SCENARIO: dict[str, Any] = {
    "settings": {"fallback": "plain", "chunk_chars": 8},
    "rules": [
        {
            "match": r"weather in (?P<city>\w+)",
            "steps": [{"tool": "intranet_weather", "arguments": {"city": "{city}"}}],
            "answer": "{city}: {outputs.intranet_weather.sky}",
        }
    ],
}
MANIFEST = """\
base_url: http://127.0.0.1:{port}
allow_hosts: ["127.0.0.1:{port}"]
tools:
  - name: intranet_weather
    description: The weather of a city, from the intranet.
    method: GET
    url: /weather/{{city}}
    parameters:
      type: object
      properties:
        city: {{type: string}}
      required: [city]
"""


class Intranet:
    """An intranet service on loopback: ``GET /weather/{city}``; it records each request's
    ``traceparent`` and, after `hold`, keeps the next request waiting until `release`."""

    def __init__(self) -> None:
        self.received: list[dict[str, str]] = []
        self._changed = threading.Condition()
        self._hold = False
        self._released = threading.Event()
        service = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                with service._changed:
                    held = service._hold
                    service._hold = False
                    service.received.append(
                        {
                            "path": self.path,
                            "traceparent": self.headers.get("traceparent", ""),
                            "tracestate": self.headers.get("tracestate", ""),
                        }
                    )
                    service._changed.notify_all()
                if held:
                    service._released.wait(60)
                city = self.path.rsplit("/", 1)[-1]
                body = json.dumps({"city": city, "sky": "sunny"}).encode()
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:
                    pass  # the daemon that asked was killed meanwhile

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def hold(self) -> None:
        self._released.clear()
        self._hold = True

    def release(self) -> None:
        self._released.set()

    def wait_requests(self, count: int, timeout: float = 60) -> list[dict[str, str]]:
        with self._changed:
            if not self._changed.wait_for(lambda: len(self.received) >= count, timeout):
                raise AssertionError(f"the intranet got {len(self.received)} of {count} requests")
            return list(self.received)

    def close(self) -> None:
        self.release()
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def intranet() -> Iterator[Intranet]:
    service = Intranet()
    try:
        yield service
    finally:
        service.close()


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as receiver:
        yield receiver


@pytest.fixture(scope="module")
def emulator() -> Iterator[Emulator]:
    with Emulator(scenario=SCENARIO) as emu:
        yield emu


def _traceparent() -> tuple[str, str, str]:
    """A caller's trace context: (trace id, span id, ``traceparent``)."""
    trace_id, span_id = uuid.uuid4().hex, uuid.uuid4().hex[:16]
    return trace_id, span_id, f"00-{trace_id}-{span_id}-01"


def _ids(traceparent: str) -> tuple[str, str]:
    """(trace id, parent id) of a ``traceparent``."""
    parts = traceparent.split("-")
    assert len(parts) == 4 and parts[0] == "00", traceparent
    return parts[1], parts[2]


def _daemon(
    emulator: Emulator,
    receiver: OtlpReceiver,
    folder: Path,
    db: str,
    intranet: Intranet,
    *args: str,
    instance: str = "single",
    env: dict[str, str] | None = None,
) -> DaemonProcess:
    manifest = folder / "intranet.yaml"
    manifest.write_text(MANIFEST.format(port=intranet.port), encoding="utf-8")
    env = {
        **emulator.env(),
        **receiver.environ(
            OTEL_SERVICE_NAME="toolbridge-e2e",
            OTEL_RESOURCE_ATTRIBUTES=f"service.instance.id={instance}",
        ),
        **(env or {}),
    }
    argv = ["--tools", str(manifest), "--port", "0", "--db", db, "--api-key", KEY]
    return DaemonProcess([*argv, "--log-json", *args], env=env, api_key=KEY)


def _ask(daemon: DaemonProcess, cid: str, query: str, traceparent: str) -> Any:
    return daemon.request(
        "POST",
        f"/v1/conversations/{cid}/messages",
        json={"query": query},
        headers={"traceparent": traceparent},
    )


def _under(view: TraceView, top: ReceivedSpan) -> TraceView:
    """`top` and the spans under it, as a trace of their own."""
    return TraceView(view.trace_id, [s for s in view.spans if s == top or view.is_under(s, top)])


def _check_one_message(
    receiver: OtlpReceiver, intranet_request: dict[str, str], trace_id: str, caller_span: str
) -> TraceView:
    """The spans of an uninterrupted message, sent with the caller's span `caller_span`."""

    def complete(spans: list[ReceivedSpan]) -> bool:
        mine = [s for s in spans if s.trace_id == trace_id]
        return any(s.kind is SpanKind.SERVER and s.parent_span_id == caller_span for s in mine)

    receiver.wait_for(complete)
    view = receiver.trace(trace_id)
    assert view.is_one_tree, view.render()
    (request,) = view.roots
    assert request.kind is SpanKind.SERVER and request.parent_span_id == caller_span
    assert request.name == "POST /v1/conversations/{conversation_id}/messages", view.render()
    assert request.attributes.get("http.response.status_code") == 200
    run = view.one("invoke_agent")
    tool = view.one("execute_tool intranet_weather")
    assert view.is_under(run, request) and view.parent(tool) == run, view.render()
    assert tool.attributes.get("gen_ai.tool.name") == "intranet_weather"
    assert RESUMED not in run.attributes and RESUMED not in tool.attributes
    (http,) = [s for s in view.children(tool) if s.kind is SpanKind.CLIENT]
    assert http.attributes.get("http.request.method") == "GET"
    assert str(http.attributes.get("url.full", "")).endswith(intranet_request["path"])
    # The intranet service saw the tool's HTTP span as its caller.
    assert _ids(intranet_request["traceparent"]) == (trace_id, http.span_id)
    return view


def _check_resumed(
    receiver: OtlpReceiver,
    intranet: Intranet,
    *,
    trace_id: str,
    run_traceparent: str,
    call_traceparent: str,
    interrupted_request: dict[str, str],
    instance: str,
    takeover: bool,
) -> None:
    """The resumed run and the call run again, in the caller's trace, linked to the
    interrupted ones (whose trace context the journal kept)."""
    _, run_id = _ids(run_traceparent)
    _, call_id = _ids(call_traceparent)

    def resumed(spans: list[ReceivedSpan]) -> bool:
        runs = (s for s in spans if s.trace_id == trace_id and s.name.startswith("invoke_agent"))
        return any(s.attributes.get(RESUMED) for s in runs)

    receiver.wait_for(resumed, timeout=60)
    view = receiver.trace(trace_id)
    run = _resumed_run(receiver, view, run_id, instance=instance, takeover=takeover)
    resumed_view = _under(view, run)
    assert resumed_view.is_one_tree, resumed_view.render()
    (tool,) = resumed_view.named("execute_tool intranet_weather")
    assert tool.attributes.get(RESUMED) is True and resumed_view.parent(tool) == run
    assert [(link.trace_id, link.span_id) for link in tool.links] == [(trace_id, call_id)]
    (http,) = [s for s in resumed_view.children(tool) if s.kind is SpanKind.CLIENT]
    # The interrupted request came from the interrupted execution's span, in the same trace;
    # the request made again comes from the new execution's HTTP span.
    again = intranet.received[-1]
    assert _ids(interrupted_request["traceparent"])[0] == trace_id
    assert _ids(interrupted_request["traceparent"])[1] != http.span_id
    assert _ids(again["traceparent"]) == (trace_id, http.span_id)
    assert again["path"] == interrupted_request["path"]


def _resumed_run(
    receiver: OtlpReceiver, view: TraceView, run_id: str, *, instance: str, takeover: bool
) -> ReceivedSpan:
    """The resumed run in `view` (the caller's trace): a child of the interrupted run (which
    never ended, so was never exported), linked to it and to the daemon's recovery span, a
    span of its own trace that links to the interrupted run too."""
    trace_id = view.trace_id

    def recovery_of(spans: list[ReceivedSpan]) -> list[ReceivedSpan]:
        return [
            s
            for s in spans
            if s.name == "recover conversation"
            and [(link.trace_id, link.span_id) for link in s.links] == [(trace_id, run_id)]
        ]

    (recovery,) = recovery_of(receiver.wait_for(recovery_of))
    assert recovery.trace_id != trace_id and recovery.attributes.get(RESUMED) is True
    assert recovery.links[0].attributes.get(RESUMED) is True
    assert recovery.attributes.get("toolbridge.recovery.takeover") is takeover
    assert recovery.resource.get("service.instance.id") == instance
    run = next(s for s in view.named("invoke_agent") if s.attributes.get(RESUMED))
    assert run.resource.get("service.instance.id") == instance
    assert run.parent_span_id == run_id, view.render()
    assert [(link.trace_id, link.span_id) for link in run.links] == [
        (trace_id, run_id),
        (recovery.trace_id, recovery.span_id),
    ]
    assert run.links[0].attributes.get(RESUMED) is True
    return run


def _no_secret_on_any_span(receiver: OtlpReceiver) -> None:
    for span in receiver.spans:
        text = json.dumps([span.attributes, span.status_message, span.events], default=str)
        assert KEY not in text, span
        assert not any(key.lower().endswith("authorization") for key in span.attributes), span


def _logged_in(daemon: DaemonProcess, view: TraceView) -> list[dict[str, Any]]:
    """The daemon's JSON log lines that name a span of `view`."""
    ids = {s.span_id for s in view.spans}
    found = []
    for line in daemon.lines:
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and entry.get("trace_id") == view.trace_id:
            assert entry.get("span_id") in ids, entry
            found.append(entry)
    return found


def _journaled(db: Any, cid: str, placeholder: str) -> tuple[str, str]:
    """The (run, call) ``traceparent`` the journal holds for `cid`'s last message and call."""
    cursor = db.cursor()
    cursor.execute(
        f"SELECT traceparent FROM messages WHERE conversation_id = {placeholder} ORDER BY id",
        (cid,),
    )
    run = cursor.fetchall()[-1][0]
    cursor.execute(
        f"SELECT traceparent FROM calls WHERE conversation_id = {placeholder} ORDER BY seq",
        (cid,),
    )
    call = cursor.fetchall()[-1][0]
    assert run and call, (run, call)
    return str(run), str(call)


def test_one_trace_across_a_kill_9_and_the_restart(
    emulator: Emulator, receiver: OtlpReceiver, intranet: Intranet, tmp_path: Path
) -> None:
    db = str(tmp_path / "journal.db")
    first = _daemon(emulator, receiver, tmp_path, db, intranet)
    with stopped(first):
        cid = first.new_conversation()
        trace_id, caller, traceparent = _traceparent()
        answered = _ask(first, cid, "weather in Paris", traceparent)
        assert answered.status_code == 200 and answered.json()["answer"] == "Paris: sunny"
        (request,) = intranet.wait_requests(1)
        view = _check_one_message(receiver, request, trace_id, caller)
        assert _logged_in(first, view), "no JSON log line names the message's trace"

        # The next message: the daemon dies while the tool's request is at the intranet.
        trace_id, caller, traceparent = _traceparent()
        intranet.hold()
        in_background(lambda: _ask(first, cid, "weather in Tokyo", traceparent))
        interrupted = intranet.wait_requests(2)[1]
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as journal:
            run_tp, call_tp = _journaled(journal, cid, "?")
        first.kill9()
        intranet.release()
    assert _ids(run_tp)[0] == trace_id and _ids(call_tp)[0] == trace_id

    second = _daemon(emulator, receiver, tmp_path, db, intranet, instance="restarted")
    with stopped(second):
        intranet.wait_requests(3)

        def finished() -> Any:
            messages = second.request("GET", f"/v1/conversations/{cid}").json()["messages"]
            return messages[-1]["status"] == "finished" and messages[-1]

        assert wait_for(finished, "the resumed message", timeout=60)["answer"] == "Tokyo: sunny"
        _check_resumed(
            receiver,
            intranet,
            trace_id=trace_id,
            run_traceparent=run_tp,
            call_traceparent=call_tp,
            interrupted_request=interrupted,
            instance="restarted",
            takeover=False,
        )
    _no_secret_on_any_span(receiver)


def test_one_trace_when_a_replica_takes_over_on_postgresql(
    emulator: Emulator,
    receiver: OtlpReceiver,
    intranet: Intranet,
    postgres: PostgresServer,
    tmp_path: Path,
) -> None:
    import psycopg

    dsn = postgres.create_database(f"t_{uuid.uuid4().hex[:12]}")
    replica = ("--lease-seconds", LEASE)
    a = _daemon(
        emulator, receiver, tmp_path, dsn, intranet, "--replica-id", "a", *replica, instance="a"
    )
    b = _daemon(
        emulator, receiver, tmp_path, dsn, intranet, "--replica-id", "b", *replica, instance="b"
    )
    with stopped(a, b):
        cid = a.new_conversation()
        trace_id, caller, traceparent = _traceparent()
        answered = _ask(b, cid, "weather in Paris", traceparent)
        assert answered.status_code == 200 and answered.json()["answer"] == "Paris: sunny"
        (request,) = intranet.wait_requests(1)
        view = _check_one_message(receiver, request, trace_id, caller)
        assert {s.resource.get("service.instance.id") for s in view.spans} == {"b"}

        trace_id, caller, traceparent = _traceparent()
        intranet.hold()
        in_background(lambda: _ask(a, cid, "weather in Tokyo", traceparent))
        interrupted = intranet.wait_requests(2)[1]
        with psycopg.connect(dsn) as journal:
            run_tp, call_tp = _journaled(journal, cid, "%s")
        a.kill9()
        intranet.release()
        intranet.wait_requests(3)  # b took the message over, once a's lease expired

        def finished() -> Any:
            messages = b.request("GET", f"/v1/conversations/{cid}").json()["messages"]
            return messages[-1]["status"] == "finished" and messages[-1]

        done = wait_for(finished, "the message taken over", timeout=60)
        assert done["answer"] == "Tokyo: sunny" and done["replica"] == "b"
        _check_resumed(
            receiver,
            intranet,
            trace_id=trace_id,
            run_traceparent=run_tp,
            call_traceparent=call_tp,
            interrupted_request=interrupted,
            instance="b",
            takeover=True,
        )
    _no_secret_on_any_span(receiver)


def test_a_call_that_finished_before_the_crash_is_not_traced_as_run_again(
    emulator: Emulator, receiver: OtlpReceiver, intranet: Intranet, tmp_path: Path
) -> None:
    db = str(tmp_path / "journal.db")
    mark = tmp_path / "hit-finished"
    first = _daemon(
        emulator, receiver, tmp_path, db, intranet, env={"TOOLBRIDGE_FAILPOINT": f"finished:{mark}"}
    )
    trace_id, _, traceparent = _traceparent()
    with stopped(first):
        cid = first.new_conversation()
        in_background(lambda: _ask(first, cid, "weather in Tokyo", traceparent))
        wait_for(mark.exists, "the call's output to be journaled")
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as journal:
            run_tp, _ = _journaled(journal, cid, "?")
        first.kill9()
    assert len(intranet.received) == 1

    second = _daemon(emulator, receiver, tmp_path, db, intranet, instance="restarted")
    with stopped(second):

        def finished() -> Any:
            messages = second.request("GET", f"/v1/conversations/{cid}").json()["messages"]
            return messages[-1]["status"] == "finished" and messages[-1]

        assert wait_for(finished, "the resumed message", timeout=60)["answer"] == "Tokyo: sunny"

        def resumed(spans: list[ReceivedSpan]) -> bool:
            return any(s.trace_id == trace_id and s.attributes.get(RESUMED) for s in spans)

        receiver.wait_for(resumed, timeout=60)
    view = receiver.trace(trace_id)
    run = _resumed_run(receiver, view, _ids(run_tp)[1], instance="restarted", takeover=False)
    # Its output was journaled before the crash: delivered, not executed again, so no new
    # execution span, and the intranet service was asked once.
    assert _under(view, run).named("execute_tool") == [], view.render()
    assert len(intranet.received) == 1
