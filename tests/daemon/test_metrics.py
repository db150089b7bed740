"""/metrics, read with prometheus_client's own parser: families, types, labels, process_* series."""

from __future__ import annotations

import uuid

import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from bridge.daemon.metrics import RUN_BUCKETS, TOOL_BUCKETS, Metrics
from bridge.errors import register_secret
from tests.daemon.conftest import API_KEY, DaemonProcess

TOOLBRIDGE_FAMILIES = {
    "toolbridge_conversations_in_flight": "gauge",
    "toolbridge_runs_queued": "gauge",
    "toolbridge_tools_loaded": "gauge",
    "toolbridge_approvals_pending": "gauge",
    "toolbridge_runs": "counter",
    "toolbridge_run_duration_seconds": "histogram",
    "toolbridge_tool_calls": "counter",
    "toolbridge_tool_call_duration_seconds": "histogram",
    "toolbridge_http_requests": "counter",
    "toolbridge_http_request_duration_seconds": "histogram",
    "toolbridge_recovered_messages": "counter",
    "toolbridge_tool_reloads": "counter",
    "toolbridge_approvals": "counter",
}


def _families(text: str) -> dict[str, tuple[str, list[Sample]]]:
    return {f.name: (f.type, list(f.samples)) for f in text_string_to_metric_families(text)}


def _value(samples: list[Sample], name: str, **labels: str) -> float:
    found = [s.value for s in samples if s.name == name and s.labels == labels]
    assert len(found) == 1, f"one sample {name}{labels} expected, got {found} from {samples}"
    return found[0]


def test_metrics_after_a_message_with_a_tool_call(daemon: DaemonProcess) -> None:
    cid = daemon.new_conversation()
    assert daemon.ask(cid, "weather in Paris").status_code == 200
    response = daemon.request("GET", "/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert API_KEY not in response.text
    families = _families(response.text)

    for name, kind in TOOLBRIDGE_FAMILIES.items():
        assert name in families, f"{name} missing from /metrics"
        assert families[name][0] == kind, f"{name} is a {families[name][0]}, not a {kind}"

    runs = families["toolbridge_runs"][1]
    assert _value(runs, "toolbridge_runs_total", outcome="finished") >= 1

    calls = families["toolbridge_tool_calls"][1]
    assert _value(calls, "toolbridge_tool_calls_total", tool="get_weather", outcome="ok") >= 1

    tool_hist = families["toolbridge_tool_call_duration_seconds"][1]
    name = "toolbridge_tool_call_duration_seconds"
    count = _value(tool_hist, name + "_count", tool="get_weather")
    assert count >= 1
    assert _value(tool_hist, name + "_bucket", tool="get_weather", le="+Inf") == count
    bounds = [
        float(s.labels["le"])
        for s in tool_hist
        if s.name == name + "_bucket" and s.labels["tool"] == "get_weather"
    ]
    assert bounds == [*TOOL_BUCKETS, float("inf")]

    run_hist = families["toolbridge_run_duration_seconds"][1]
    name = "toolbridge_run_duration_seconds"
    assert _value(run_hist, name + "_count", outcome="finished") >= 1
    assert _value(run_hist, name + "_sum", outcome="finished") > 0

    http = families["toolbridge_http_requests"][1]
    route = "/v1/conversations/{conversation_id}/messages"
    posted = _value(
        http, "toolbridge_http_requests_total", method="POST", route=route, status="200"
    )
    assert posted >= 1
    http_hist = families["toolbridge_http_request_duration_seconds"][1]
    assert any(s.labels.get("route") == route for s in http_hist)

    assert _value(families["toolbridge_tools_loaded"][1], "toolbridge_tools_loaded") >= 6
    pending = families["toolbridge_approvals_pending"][1]
    assert _value(pending, "toolbridge_approvals_pending") >= 0

    # The standard process collector's series, from the daemon's own registry.
    assert _value(families["process_cpu_seconds"][1], "process_cpu_seconds_total") > 0
    assert _value(families["process_resident_memory_bytes"][1], "process_resident_memory_bytes") > 0
    assert "python_info" in families


def _idle() -> float:
    return 0.0


def test_two_metrics_in_one_process_do_not_collide() -> None:
    first = Metrics(in_flight=lambda: 2, queued=_idle, tools_loaded=lambda: 5)
    second = Metrics(
        in_flight=_idle, queued=_idle, tools_loaded=lambda: 1, approvals_pending=lambda: 3
    )
    first.runs.inc("finished")
    first.runs.inc("finished")
    second.runs.inc("failed")
    first.approvals.inc("approved")
    second.approvals.inc("expired")
    first.tool_seconds.observe(0.002, "get_weather")
    second.run_seconds.observe(700.0, "finished")

    one = _families(first.render().decode())
    two = _families(second.render().decode())
    assert one["toolbridge_runs"][1] == [
        Sample("toolbridge_runs_total", {"outcome": "finished"}, 2.0)
    ]
    assert two["toolbridge_runs"][1] == [
        Sample("toolbridge_runs_total", {"outcome": "failed"}, 1.0)
    ]
    assert _value(one["toolbridge_approvals"][1], "toolbridge_approvals_total", outcome="approved")
    assert [s.labels for s in two["toolbridge_approvals"][1]] == [{"outcome": "expired"}]
    assert _value(one["toolbridge_approvals_pending"][1], "toolbridge_approvals_pending") == 0
    assert _value(two["toolbridge_approvals_pending"][1], "toolbridge_approvals_pending") == 3
    assert (
        _value(one["toolbridge_conversations_in_flight"][1], "toolbridge_conversations_in_flight")
        == 2
    )
    assert one["toolbridge_run_duration_seconds"][1] == []
    assert two["toolbridge_tool_call_duration_seconds"][1] == []
    # A run that waited on a ten-minute approval still lands in a finite bucket.
    hist = two["toolbridge_run_duration_seconds"][1]
    bucket = "toolbridge_run_duration_seconds_bucket"
    assert _value(hist, bucket, outcome="finished", le="600.0") == 0
    assert _value(hist, bucket, outcome="finished", le=str(RUN_BUCKETS[-1])) == 1
    for families in (one, two):
        assert "process_cpu_seconds" in families and "process_resident_memory_bytes" in families
    assert first.runs.value("finished") == 2 and second.runs.value("finished") == 0


def test_a_wrong_number_of_labels_is_a_clear_error() -> None:
    metrics = Metrics(in_flight=_idle, queued=_idle, tools_loaded=_idle)
    with pytest.raises(
        ValueError, match=r"toolbridge_tool_calls_total takes labels \('tool', 'outcome'\)"
    ):
        metrics.tool_calls.inc("get_weather")
    with pytest.raises(
        ValueError, match=r"toolbridge_run_duration_seconds takes labels \('outcome',\)"
    ):
        metrics.run_seconds.observe(1.0)


def test_label_values_round_trip_and_buckets_are_cumulative() -> None:
    metrics = Metrics(in_flight=_idle, queued=_idle, tools_loaded=_idle)
    weird = 'we"ird\ntool\\'  # an agent-sent tool name must not break the exposition
    metrics.tool_calls.inc(weird, "ok")
    metrics.tool_calls.inc(weird, "ok", amount=2)
    for seconds in (0.0005, 0.001, 0.5, 400.0):
        metrics.tool_seconds.observe(seconds, weird)
    families = _families(metrics.render().decode())
    calls = families["toolbridge_tool_calls"][1]
    assert _value(calls, "toolbridge_tool_calls_total", tool=weird, outcome="ok") == 3
    hist = families["toolbridge_tool_call_duration_seconds"][1]
    bucket = "toolbridge_tool_call_duration_seconds_bucket"
    assert _value(hist, bucket, tool=weird, le="0.001") == 2
    assert _value(hist, bucket, tool=weird, le="0.5") == 3
    assert _value(hist, bucket, tool=weird, le="300.0") == 3
    assert _value(hist, bucket, tool=weird, le="+Inf") == 4
    assert _value(hist, "toolbridge_tool_call_duration_seconds_sum", tool=weird) == pytest.approx(
        400.5015
    )
    assert metrics.tool_calls.value(weird, "ok") == 3


def test_a_label_used_before_its_secret_was_registered_is_masked_after() -> None:
    """Series are remembered by their label values; a secret registered later is still masked
    in the next increments and observations (a new series), and the wrong label count stays an
    error on every call, remembered or not."""
    metrics = Metrics(in_flight=_idle, queued=_idle, tools_loaded=_idle)
    secret = f"sk-{uuid.uuid4().hex}"
    tool = f"tool-{secret}"
    metrics.tool_calls.inc(tool, "ok")
    metrics.tool_seconds.observe(0.5, tool)
    register_secret(secret)
    metrics.tool_calls.inc(tool, "ok")
    metrics.tool_seconds.observe(0.5, tool)
    families = _families(metrics.render().decode())
    calls = families["toolbridge_tool_calls"][1]
    assert _value(calls, "toolbridge_tool_calls_total", tool="tool-[secure]", outcome="ok") == 1
    hist = families["toolbridge_tool_call_duration_seconds"][1]
    assert _value(hist, "toolbridge_tool_call_duration_seconds_count", tool="tool-[secure]") == 1
    for _ in range(2):
        with pytest.raises(ValueError, match="takes labels"):
            metrics.tool_calls.inc(tool)
