"""Prometheus metrics in the text exposition format (version 0.0.4), written by hand.

Why not `prometheus_client`: its registry is process-global (two apps in one test process
collide), and the daemon needs five metric families; counters, gauges and histograms with
labels fit in this module, with nothing to configure.

Label values that come from outside (tool names the agent sent) are bounded by the caller:
unknown tools are counted as ``tool="(unknown)"`` so a misbehaving agent cannot grow the
series without limit.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable, Iterable, Sequence

__all__ = ["CONTENT_TYPE", "Counter", "Gauge", "Histogram", "Metrics"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
RUN_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)

Labels = tuple[str, ...]


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(names: Sequence[str], values: Sequence[str], extra: str = "") -> str:
    parts = [f'{n}="{_escape(v)}"' for n, v in zip(names, values, strict=True)]
    if extra:
        parts.append(extra)
    return "{" + ",".join(parts) + "}" if parts else ""


def _number(value: float) -> str:
    if value == float("inf"):
        return "+Inf"
    return repr(float(value)) if not float(value).is_integer() else str(int(value))


class _Family:
    kind = "untyped"

    def __init__(self, name: str, help: str, labels: Sequence[str] = ()) -> None:
        self.name = name
        self.help = help
        self.label_names = tuple(labels)
        self._lock = threading.Lock()

    def _key(self, values: Sequence[str]) -> Labels:
        if len(values) != len(self.label_names):
            raise ValueError(f"{self.name} takes labels {self.label_names}, got {tuple(values)}")
        return tuple(str(v) for v in values)

    def header(self) -> list[str]:
        return [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} {self.kind}"]

    def render(self) -> list[str]:
        raise NotImplementedError


class Counter(_Family):
    """A value that only goes up, per label set."""

    kind = "counter"

    def __init__(self, name: str, help: str, labels: Sequence[str] = ()) -> None:
        super().__init__(name, help, labels)
        self._values: dict[Labels, float] = {}

    def inc(self, *labels: str, amount: float = 1.0) -> None:
        """Add `amount` to the series of `labels`."""
        key = self._key(labels)
        with self._lock:
            self._values[key] = self._values.get(key, 0.0) + amount

    def value(self, *labels: str) -> float:
        """The current value of one series (0 if never touched)."""
        with self._lock:
            return self._values.get(self._key(labels), 0.0)

    def render(self) -> list[str]:
        with self._lock:
            items = sorted(self._values.items())
        return self.header() + [
            f"{self.name}{_labels(self.label_names, k)} {_number(v)}" for k, v in items
        ]


class Gauge(_Family):
    """A value read from a function at scrape time."""

    kind = "gauge"

    def __init__(self, name: str, help: str, read: Callable[[], float]) -> None:
        super().__init__(name, help)
        self._read = read

    def render(self) -> list[str]:
        return [*self.header(), f"{self.name} {_number(self._read())}"]


class Histogram(_Family):
    """Observations counted into cumulative buckets, with their sum and count."""

    kind = "histogram"

    def __init__(
        self, name: str, help: str, labels: Sequence[str] = (), buckets: Iterable[float] = ()
    ) -> None:
        super().__init__(name, help, labels)
        self.buckets = tuple(sorted(buckets)) or LATENCY_BUCKETS
        self._series: dict[Labels, list[float]] = {}
        """Per label set: one count per bucket, then +Inf count, then the sum."""

    def observe(self, value: float, *labels: str) -> None:
        """Record one observation."""
        key = self._key(labels)
        with self._lock:
            series = self._series.get(key)
            if series is None:
                series = self._series[key] = [0.0] * (len(self.buckets) + 2)
            series[bisect.bisect_left(self.buckets, value)] += 1
            series[-1] += value

    def render(self) -> list[str]:
        with self._lock:
            items = sorted((k, list(v)) for k, v in self._series.items())
        lines = self.header()
        for key, series in items:
            running = 0.0
            for bound, count in zip((*self.buckets, float("inf")), series[:-1], strict=True):
                running += count
                le = f'le="{_number(bound)}"'
                lines.append(
                    f"{self.name}_bucket{_labels(self.label_names, key, le)} {_number(running)}"
                )
            lines.append(f"{self.name}_sum{_labels(self.label_names, key)} {_number(series[-1])}")
            lines.append(f"{self.name}_count{_labels(self.label_names, key)} {_number(running)}")
        return lines


class Metrics:
    """Every metric the daemon exposes at /metrics.

    Args:
        in_flight: reads how many conversations are running now.
        queued: reads how many messages wait for a worker.
        tools_loaded: reads how many tools the current toolbox has.
    """

    def __init__(
        self,
        *,
        in_flight: Callable[[], float],
        queued: Callable[[], float],
        tools_loaded: Callable[[], float],
    ) -> None:
        self.runs = Counter(
            "toolbridge_runs_total", "Runs (one per message) by how they ended.", ["outcome"]
        )
        self.run_seconds = Histogram(
            "toolbridge_run_duration_seconds",
            "Wall time of a run, from the message to its end.",
            ["outcome"],
            RUN_BUCKETS,
        )
        self.tool_calls = Counter(
            "toolbridge_tool_calls_total",
            'Tool calls by tool and outcome ("ok" or the error kind).',
            ["tool", "outcome"],
        )
        self.tool_seconds = Histogram(
            "toolbridge_tool_call_duration_seconds", "Time a tool call took.", ["tool"]
        )
        self.http_requests = Counter(
            "toolbridge_http_requests_total",
            "HTTP requests by method, route template and status.",
            ["method", "route", "status"],
        )
        self.http_seconds = Histogram(
            "toolbridge_http_request_duration_seconds",
            "Time to the end of the response (a stream counts until it ends).",
            ["method", "route"],
        )
        self.recovered = Counter(
            "toolbridge_recovered_messages_total",
            "Messages a restart found interrupted, by what recovery did.",
            ["action"],
        )
        self.reloads = Counter(
            "toolbridge_tool_reloads_total", "Tool reloads by outcome.", ["outcome"]
        )
        self._families: list[_Family] = [
            Gauge(
                "toolbridge_conversations_in_flight",
                "Conversations with a run in progress (running or queued).",
                in_flight,
            ),
            Gauge("toolbridge_runs_queued", "Runs waiting for a free worker.", queued),
            Gauge("toolbridge_tools_loaded", "Tools in the current toolbox.", tools_loaded),
            self.runs,
            self.run_seconds,
            self.tool_calls,
            self.tool_seconds,
            self.http_requests,
            self.http_seconds,
            self.recovered,
            self.reloads,
        ]

    def render(self) -> str:
        """The whole exposition, ending with a newline."""
        lines: list[str] = []
        for family in self._families:
            lines.extend(family.render())
        return "\n".join(lines) + "\n"
