"""The daemon's Prometheus metrics, on `prometheus_client`.

Each `Metrics` owns its own `CollectorRegistry` (never the library's global ``REGISTRY``), so
two services in one process (tests, an embedding application) keep separate counts and never
collide on a metric name. The registry also carries the library's process, platform and GC
collectors, which give the standard ``process_*`` and ``python_*`` series.

The classes here are a thin façade over the library's metrics so call sites stay one short
line with label values positional (``metrics.tool_calls.inc(tool, outcome)``).

Label values that come from outside (tool names the agent sent) are bounded by the caller:
unknown tools are counted as ``tool="(unknown)"`` so a misbehaving agent cannot grow the
series without limit.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import prometheus_client
from prometheus_client import (
    GC_COLLECTOR,
    CollectorRegistry,
    GCCollector,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily

from bridge.errors import redact, secrets_generation

__all__ = ["CONTENT_TYPE", "Counter", "Histogram", "Metrics"]

# What `generate_latest` writes with its default (underscore) escaping: the classic text format.
# Spelled out because the library's CONTENT_TYPE_LATEST names version 1.0.0 in recent releases.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# HTTP requests: most answer in milliseconds, a streamed answer lasts as long as its run.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
# A tool call: a local function in a millisecond up to a slow HTTP or MCP tool near its timeout.
TOOL_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
    300.0,
)
# A run: one model turn in a fraction of a second up to many turns, or a wait for a person's
# approval (10 minutes by default), hence the last bucket past 600 s.
RUN_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0)


class Counter:
    """A value that only goes up, per label set."""

    def __init__(
        self, registry: CollectorRegistry, name: str, help: str, labels: Sequence[str] = ()
    ) -> None:
        self.name = name
        self.label_names = tuple(labels)
        self._registry = registry
        self._metric = prometheus_client.Counter(name, help, self.label_names, registry=registry)
        self._children = _Children()

    def inc(self, *labels: str, amount: float = 1.0) -> None:
        """Add `amount` to the series of `labels` (label values in declaration order)."""
        series = self._children.get(labels)
        if series is None:
            generation = secrets_generation()  # read before masking, as `redact_data` does
            series = self._children.keep(labels, generation, self._series(_public(labels)))
        series.inc(amount)

    def value(self, *labels: str) -> float:
        """The current value of one series (0 if never touched)."""
        found = self._registry.get_sample_value(self.name, dict(self._key(_public(labels))))
        return found or 0.0

    def _key(self, labels: Sequence[str]) -> list[tuple[str, str]]:
        if len(labels) != len(self.label_names):
            raise ValueError(f"{self.name} takes labels {self.label_names}, got {tuple(labels)}")
        return [(n, str(v)) for n, v in zip(self.label_names, labels, strict=True)]

    def _series(self, labels: Sequence[str]) -> prometheus_client.Counter:
        self._key(labels)
        return self._metric.labels(*labels) if labels else self._metric


class Histogram:
    """Observations counted into cumulative buckets, with their sum and count."""

    def __init__(
        self,
        registry: CollectorRegistry,
        name: str,
        help: str,
        labels: Sequence[str] = (),
        buckets: Sequence[float] = LATENCY_BUCKETS,
    ) -> None:
        self.name = name
        self.label_names = tuple(labels)
        self.buckets = tuple(buckets)
        self._metric = prometheus_client.Histogram(
            name, help, self.label_names, registry=registry, buckets=self.buckets
        )
        self._children = _Children()

    def observe(self, value: float, *labels: str) -> None:
        """Record one observation (label values in declaration order)."""
        series = self._children.get(labels)
        if series is None:
            if len(labels) != len(self.label_names):
                raise ValueError(
                    f"{self.name} takes labels {self.label_names}, got {tuple(labels)}"
                )
            generation = secrets_generation()  # read before masking, as `redact_data` does
            public = _public(labels)
            series = self._children.keep(
                labels, generation, self._metric.labels(*public) if public else self._metric
            )
        series.observe(value)


class _Children:
    """The series of a metric by the label values it was last given, masked, so a repeat
    costs one lookup (prometheus_client's own `labels` takes a lock and checks every value).
    An entry masked before a secret was registered no longer counts; the table starts over
    past 4,096 label sets (labels are bounded, but a client chooses some of them)."""

    _MOST = 4096

    def __init__(self) -> None:
        self._table: dict[tuple[str, ...], tuple[int, Any]] = {}

    def get(self, labels: tuple[str, ...]) -> Any:
        found = self._table.get(labels)
        if found is None or found[0] != secrets_generation():
            return None
        return found[1]

    def keep(self, labels: tuple[str, ...], generation: int, series: Any) -> Any:
        """Remember `series` for `labels`, masked under the secrets of `generation`."""
        if len(self._table) >= self._MOST:
            self._table.clear()
        self._table[labels] = (generation, series)
        return series


def _gauge(registry: CollectorRegistry, name: str, help: str, read: Callable[[], float]) -> None:
    """A gauge read from `read` at scrape time."""
    prometheus_client.Gauge(name, help, registry=registry).set_function(read)


class _ReadCounter:
    """A counter whose value lives elsewhere (read at scrape time), for `Metrics.count_from`."""

    def __init__(self, name: str, help: str, read: Callable[[], float]) -> None:
        self.name, self.help, self.read = name, help, read

    def collect(self) -> Iterator[CounterMetricFamily]:
        yield CounterMetricFamily(self.name, self.help, value=self.read())

    def describe(self) -> Iterator[CounterMetricFamily]:
        yield CounterMetricFamily(self.name, self.help)


def _no_pending() -> float:
    return 0.0


class Metrics:
    """Every metric the daemon exposes at /metrics, in a registry of its own.

    Args:
        in_flight: reads how many conversations are running now.
        queued: reads how many messages wait for a worker.
        tools_loaded: reads how many tools the current toolbox has.
        approvals_pending: reads how many approval requests wait for a decision.
    """

    def __init__(
        self,
        *,
        in_flight: Callable[[], float],
        queued: Callable[[], float],
        tools_loaded: Callable[[], float],
        approvals_pending: Callable[[], float] = _no_pending,
        replica: str = "",
    ) -> None:
        self.registry = registry = CollectorRegistry(auto_describe=True)
        prometheus_client.Info(
            "toolbridge_replica",
            "This daemon among replicas sharing a journal.",
            registry=registry,
        ).info({"replica": replica})
        ProcessCollector(registry=registry)
        PlatformCollector(registry=registry)
        # GCCollector registers nothing where the interpreter has no gc.get_stats (PyPy).
        if GC_COLLECTOR is not None:
            GCCollector(registry=registry)
        _gauge(
            registry,
            "toolbridge_conversations_in_flight",
            "Conversations with a run in progress (running or queued).",
            in_flight,
        )
        _gauge(registry, "toolbridge_runs_queued", "Runs waiting for a free worker.", queued)
        _gauge(registry, "toolbridge_tools_loaded", "Tools in the current toolbox.", tools_loaded)
        _gauge(
            registry,
            "toolbridge_approvals_pending",
            "Approval requests waiting for a person's decision.",
            approvals_pending,
        )
        self.runs = Counter(
            registry,
            "toolbridge_runs_total",
            "Runs (one per message) by how they ended.",
            ["outcome"],
        )
        self.run_seconds = Histogram(
            registry,
            "toolbridge_run_duration_seconds",
            "Wall time of a run, from the message to its end.",
            ["outcome"],
            RUN_BUCKETS,
        )
        self.tool_calls = Counter(
            registry,
            "toolbridge_tool_calls_total",
            'Tool calls by tool and outcome ("ok" or the error kind).',
            ["tool", "outcome"],
        )
        self.tool_seconds = Histogram(
            registry,
            "toolbridge_tool_call_duration_seconds",
            "Time a tool call took.",
            ["tool"],
            TOOL_BUCKETS,
        )
        self.http_requests = Counter(
            registry,
            "toolbridge_http_requests_total",
            "HTTP requests by method, route template and status.",
            ["method", "route", "status"],
        )
        self.http_seconds = Histogram(
            registry,
            "toolbridge_http_request_duration_seconds",
            "Time to the end of the response (a stream counts until it ends).",
            ["method", "route"],
        )
        self.recovered = Counter(
            registry,
            "toolbridge_recovered_messages_total",
            "Messages a restart found interrupted, by what recovery did.",
            ["action"],
        )
        self.takeovers = Counter(
            registry,
            "toolbridge_takeovers_total",
            "Unfinished messages this replica took over from replicas whose leases expired.",
        )
        self.leases_lost = Counter(
            registry,
            "toolbridge_leases_lost_total",
            "Leases this replica lost to another while running (paused or cut off too long).",
        )
        self.reloads = Counter(
            registry, "toolbridge_tool_reloads_total", "Tool reloads by outcome.", ["outcome"]
        )
        self.approvals = Counter(
            registry,
            "toolbridge_approvals_total",
            "Approval requests by how they were decided (approved, rejected, expired).",
            ["outcome"],
        )

    def count_from(self, name: str, help: str, read: Callable[[], float]) -> None:
        """Expose a counter kept by another part (the relay's), read at each scrape."""
        self.registry.register(_ReadCounter(name, help, read))

    def render(self) -> bytes:
        """The whole exposition in the text format of `CONTENT_TYPE`."""
        return generate_latest(self.registry)


def _public(labels: Sequence[str]) -> tuple[str, ...]:
    """Label values as they may be shown: registered secrets masked (`redact`)."""
    return tuple(redact(str(label)) for label in labels)
