"""The loopback OTLP/HTTP receiver (tests/support/otlp.py) reads what the real SDK exporter
sends, and `bridge.tracing.configure_from_environment` exports there as the OTEL_* variables
say: each exporting process is a subprocess of its own (a provider is process-global), which
flushes its spans when it exits, so once it has exited everything it would send has arrived."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import requests
from opentelemetry.trace import SpanKind, StatusCode

from tests.support.otlp import OtlpReceiver

ROOT = Path(__file__).resolve().parents[1]

# The real SDK pipeline, set up by hand: BatchSpanProcessor + OTLPSpanExporter (which reads
# OTEL_EXPORTER_OTLP_* itself), a parent, a client child with an event, a link and an error.
SDK_SCRIPT = """
import json
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import Link, SpanKind, Status, StatusCode

provider = TracerProvider(resource=Resource.create({"service.name": "receiver-test"}))
provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
tracer = provider.get_tracer("probe")
with tracer.start_as_current_span("earlier") as earlier:
    pass
with tracer.start_as_current_span("parent", attributes={"n": 3, "ok": True}) as parent:
    with tracer.start_as_current_span(
        "child",
        kind=SpanKind.CLIENT,
        attributes={"list": ["a", "b"], "ratio": 0.5, "text": "北京"},
        links=[Link(earlier.get_span_context(), {"why": "resumed"})],
    ) as child:
        child.add_event("retry", {"attempt": 2})
        child.set_status(Status(StatusCode.ERROR, "boom"))
ids = {
    name: (f"{s.get_span_context().trace_id:032x}", f"{s.get_span_context().span_id:016x}")
    for name, s in (("earlier", earlier), ("parent", parent), ("child", child))
}
provider.shutdown()
print(json.dumps(ids))
"""

# What the CLI and the daemon do: configure_from_environment, then spans through Tracing.
CONFIGURE_SCRIPT = """
import json
from bridge.tracing import SpanKind, Tracing, configure_from_environment, current_traceparent

configured = configure_from_environment()
tracing = Tracing()
traceparent = None
with tracing.span("invoke_agent probe", attributes={"gen_ai.operation.name": "invoke_agent"}):
    with tracing.span("execute_tool probe", kind=SpanKind.INTERNAL):
        traceparent = current_traceparent()
print(json.dumps({"configured": configured, "enabled": tracing.enabled, "tp": traceparent}))
"""


def _run(script: str, environ: dict[str, str]) -> tuple[dict[str, Any], str]:
    """Run `script` with only `environ`'s OTEL_* variables; (its JSON line, its stderr)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.update(environ)
    done = subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


@pytest.fixture
def receiver() -> Any:
    with OtlpReceiver() as receiver:
        yield receiver


def test_the_sdk_exporter_s_spans_read_back_as_sent(receiver: OtlpReceiver) -> None:
    ids, _ = _run(SDK_SCRIPT, receiver.environ(OTEL_EXPORTER_OTLP_COMPRESSION="gzip"))
    spans = receiver.wait_for_names("earlier", "parent", "child")
    assert receiver.encodings and set(receiver.encodings) == {"gzip"}
    by = {s.name: s for s in spans}
    parent, child, earlier = by["parent"], by["child"], by["earlier"]
    assert (parent.trace_id, parent.span_id) == tuple(ids["parent"])
    assert (child.trace_id, child.span_id) == tuple(ids["child"])
    assert child.parent_span_id == parent.span_id and parent.parent_span_id == ""
    assert parent.kind is SpanKind.INTERNAL and child.kind is SpanKind.CLIENT
    assert parent.attributes == {"n": 3, "ok": True}
    assert child.attributes == {"list": ("a", "b"), "ratio": 0.5, "text": "北京"}
    assert [(link.trace_id, link.span_id, link.attributes) for link in child.links] == [
        (earlier.trace_id, earlier.span_id, {"why": "resumed"})
    ]
    assert child.events == (("retry", {"attempt": 2}),)
    assert (child.status, child.status_message) == (StatusCode.ERROR, "boom")
    assert child.service == "receiver-test" and child.scope == "probe"
    assert child.start_ns <= child.end_ns
    tree = receiver.trace(parent.trace_id)
    assert tree.is_one_tree and tree.roots == [parent]
    assert tree.ancestors(child) == [parent] and tree.children(parent) == [child]
    assert receiver.trace(earlier.trace_id).spans == [earlier]  # its own trace
    assert "child [client]" in tree.render()


def test_an_uncompressed_export_is_read_too(receiver: OtlpReceiver) -> None:
    _run(SDK_SCRIPT, receiver.environ(OTEL_EXPORTER_OTLP_COMPRESSION="none"))
    receiver.wait_for_names("child")
    assert set(receiver.encodings) == {""}


def test_two_roots_in_one_trace_are_not_one_tree(receiver: OtlpReceiver) -> None:
    _run(SDK_SCRIPT, receiver.environ())
    spans = receiver.wait_for_names("child")
    parent = next(s for s in spans if s.name == "parent")
    child = next(s for s in spans if s.name == "child")
    view = receiver.trace(parent.trace_id)
    view.spans.remove(parent)  # the child's parent never arrived: the child is a root
    assert view.roots == [child] and view.is_one_tree
    view.spans.append(dataclasses.replace(parent, span_id="00" * 8))
    assert len(view.roots) == 2 and not view.is_one_tree


def test_anything_but_a_protobuf_export_is_refused(receiver: OtlpReceiver) -> None:
    url = receiver.traces_endpoint
    json_body = requests.post(url, json={"resourceSpans": []}, timeout=10)
    assert json_body.status_code == 415
    garbage = requests.post(
        url, data=b"\xff\x00garbage", headers={"Content-Type": "application/x-protobuf"}, timeout=10
    )
    assert garbage.status_code == 400
    assert requests.post(url.replace("traces", "logs"), data=b"", timeout=10).status_code == 404
    assert receiver.spans == [] and receiver.requests == 0


def test_configure_from_environment_exports_as_toolbridge(receiver: OtlpReceiver) -> None:
    out, _ = _run(CONFIGURE_SCRIPT, receiver.environ())
    assert out["configured"] is True and out["enabled"] is True
    spans = receiver.wait_for_names("invoke_agent probe", "execute_tool probe")
    agent, tool = (next(s for s in spans if s.name.startswith(n)) for n in ("invoke", "exec"))
    assert {agent.service, tool.service} == {"toolbridge"}
    assert tool.parent_span_id == agent.span_id
    assert out["tp"].split("-")[1:3] == [tool.trace_id, tool.span_id]
    assert agent.attributes == {"gen_ai.operation.name": "invoke_agent"}
    assert tool.scope == "toolbridge"
    assert receiver.trace(agent.trace_id).is_one_tree


def test_otel_service_name_overrides_the_default(receiver: OtlpReceiver) -> None:
    _run(CONFIGURE_SCRIPT, receiver.environ(OTEL_SERVICE_NAME="intranet-bridge"))
    _run(
        CONFIGURE_SCRIPT,
        receiver.environ(OTEL_RESOURCE_ATTRIBUTES="service.name=from-resource,team=infra"),
    )
    spans = receiver.wait_for(lambda spans: len(spans) == 4)
    assert {s.service for s in spans} == {"intranet-bridge", "from-resource"}
    assert {s.resource.get("team") for s in spans} == {None, "infra"}


def test_the_full_traces_endpoint_is_honoured(receiver: OtlpReceiver) -> None:
    out, _ = _run(
        CONFIGURE_SCRIPT,
        {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": receiver.traces_endpoint},
    )
    assert out["configured"] is True
    receiver.wait_for_names("execute_tool probe")


def test_an_always_off_sampler_exports_nothing(receiver: OtlpReceiver) -> None:
    out, _ = _run(CONFIGURE_SCRIPT, receiver.environ(OTEL_TRACES_SAMPLER="always_off"))
    # The provider is there (the process chose to trace), but samples nothing: the trace
    # context still goes on (to a service that may trace), flagged "not sampled".
    assert out["configured"] is True and int(out["tp"].split("-")[3], 16) & 1 == 0
    assert receiver.requests == 0 and receiver.spans == []


@pytest.mark.parametrize(
    "extra",
    [
        {"OTEL_TRACES_EXPORTER": "none"},
        {"OTEL_SDK_DISABLED": "true"},
        {"OTEL_SDK_DISABLED": "TRUE", "OTEL_TRACES_EXPORTER": "otlp"},
    ],
    ids=["exporter-none", "sdk-disabled", "sdk-disabled-wins"],
)
def test_switched_off_nothing_is_configured_or_sent(
    receiver: OtlpReceiver, extra: dict[str, str]
) -> None:
    out, _ = _run(CONFIGURE_SCRIPT, receiver.environ(**extra))
    assert out == {"configured": False, "enabled": False, "tp": None}
    assert receiver.requests == 0


def test_no_otel_variable_means_no_tracing(receiver: OtlpReceiver) -> None:
    out, stderr = _run(CONFIGURE_SCRIPT, {})
    assert out == {"configured": False, "enabled": False, "tp": None}
    assert stderr == "" and receiver.requests == 0


def test_an_unknown_exporter_name_warns_and_the_known_ones_still_export(
    receiver: OtlpReceiver,
) -> None:
    out, stderr = _run(CONFIGURE_SCRIPT, receiver.environ(OTEL_TRACES_EXPORTER="zipkin"))
    assert out["configured"] is False and "'zipkin'" in stderr and "otlp, console" in stderr
    assert receiver.requests == 0
    out, stderr = _run(CONFIGURE_SCRIPT, receiver.environ(OTEL_TRACES_EXPORTER="otlp,jaegr"))
    assert out["configured"] is True and "'jaegr'" in stderr
    receiver.wait_for_names("execute_tool probe")


def test_a_grpc_protocol_warns_and_exports_over_http(receiver: OtlpReceiver) -> None:
    out, stderr = _run(CONFIGURE_SCRIPT, receiver.environ(OTEL_EXPORTER_OTLP_PROTOCOL="grpc"))
    assert out["configured"] is True and "http/protobuf" in stderr
    receiver.wait_for_names("execute_tool probe")


def test_an_application_s_own_provider_is_left_alone(receiver: OtlpReceiver) -> None:
    script = (
        "from opentelemetry import trace\n"
        "from opentelemetry.sdk.trace import TracerProvider\n"
        "trace.set_tracer_provider(TracerProvider())\n" + CONFIGURE_SCRIPT
    )
    out, _ = _run(script, receiver.environ())
    assert out["configured"] is False and out["enabled"] is True
    assert receiver.requests == 0
