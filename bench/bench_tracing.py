"""What tracing costs: a two-turn tool conversation's CPU with OpenTelemetry off and on,
against the same code before tracing existed.

Each variant runs `Bridge.ask` on one embedded AppBuilder emulator (a conversation with one
tool call) on a SQLite file journal (as the daemon journals it), in its own subprocess that
measures its own process CPU (every thread: the journal's writer and the span exporter's
included); the variants take turns for several rounds, in a rotating order, so machine noise
hits all alike:

- ``baseline``: the package as it was before ``bridge/tracing.py`` existed (the parent of the
  commit that added it, found with ``git log --diff-filter=A``, extracted with ``git archive``
  into a temporary directory; ``--baseline COMMIT`` picks another). Without a git checkout,
  the current tree with `bridge.tracing.Tracing` short-circuited (its spans return the no-op
  span without even checking for a provider) stands in for it.
- ``off``: the current tree, no SDK configured (what a library user or a daemon without
  ``OTEL_*`` variables gets): every span is a check, not a span.
- ``on``: the current tree with the SDK as ``toolbridge serve`` sets it up from the
  environment (`bridge.tracing.configure_from_environment`: a ``BatchSpanProcessor`` and the
  ``OTLPSpanExporter``) exporting to an OTLP/HTTP receiver on loopback
  (``tests/support/otlp.py``, in this process: the collector's CPU is not the bridge's); the
  worker flushes its spans before it stops its clock, so their export is counted.
- ``sampled``: ``on`` keeping one trace in ten (``OTEL_TRACES_SAMPLER=parentbased_traceidratio``,
  ``OTEL_TRACES_SAMPLER_ARG=0.1``): what an operator who samples pays.

Then, alone: the CPU of one span opened and closed while off, times the spans a conversation
opens (counted by the receiver), as a share of a conversation: the off cost without the noise
of whole conversations.

Targets: off costs under 1 % over the baseline, on under 10 % over off. A benchmark reports;
it never fails a build on a figure. Run: `.venv/bin/python bench/bench_tracing.py` (or
`make bench`); `--conversations N`, `--rounds N`, `--baseline COMMIT`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _two_turns import EXPECTED, QUERY, SCENARIO, thread_timed, weather_tool

ROOT = Path(__file__).resolve().parents[1]
TARGET_OFF = 0.01
TARGET_ON = 0.10
WARMUP = 5
VARIANTS = ("baseline", "off", "on", "sampled")
SAMPLED = {"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.1"}


def _worker(spec: dict[str, Any]) -> dict[str, float]:
    import bridge

    tree = Path(spec["tree"]).resolve()
    if not Path(bridge.__file__).resolve().is_relative_to(tree):
        raise SystemExit(f"bridge imported from {bridge.__file__}, not from {tree}")
    from bridge import AppBuilderPlatform, Bridge
    from bridge.journal import SQLiteJournal

    spent = _account() if spec.get("account") else None
    counting = _count_calls() if spec.get("count") else None  # before the exporter's thread
    provider: Any = None
    if spec["variant"] == "on":
        from opentelemetry import trace

        from bridge.tracing import configure_from_environment

        if not configure_from_environment():
            raise SystemExit("the OTEL_* variables configured no tracer provider")
        provider = trace.get_tracer_provider()
    elif spec["variant"] == "short":
        _short_circuit()
    elif spec["variant"] == "off":
        from bridge.tracing import Tracing

        if Tracing().enabled:
            raise SystemExit("off must run without a tracer provider")

    get_weather = weather_tool()

    journal = SQLiteJournal(spec["db"])
    platform = AppBuilderPlatform(
        app_id=spec["app_id"], token=spec["token"], base_url=spec["base_url"]
    )
    with Bridge(platform, [get_weather], journal=journal) as bridge_:
        for n in range(WARMUP):
            bridge_.ask(QUERY.format(city=f"W{n}"))
        if provider is not None:
            provider.force_flush()
        if counting is not None:
            counting["on"] = 1
        start = time.process_time()
        for n in range(spec["n"]):
            city = f"C{n}"
            answer = bridge_.ask(QUERY.format(city=city)).answer
            if answer != EXPECTED.format(city=city):
                raise SystemExit(f"unexpected answer: {answer!r}")
        if provider is not None:
            provider.force_flush()  # the export of these conversations' spans counts
        cpu = (time.process_time() - start) / spec["n"]
        if counting is not None:
            counting["on"] = 0
    journal.close()
    per = {key: value / (spec["n"] + WARMUP) for key, value in (spent or {}).items()}
    if counting is not None:
        per["calls"] = counting["calls"] / spec["n"]
    return {"cpu": cpu, **per}


def _count_calls() -> dict[str, int]:
    """Count the Python and C function calls of every thread while ``["on"]`` is 1: work
    done, whatever the machine's load (the CPU time of so small a difference drowns in it)."""
    import threading

    counting = {"on": 0, "calls": 0}

    def profile(frame: Any, event: str, arg: Any) -> None:
        if counting["on"] and event in ("call", "c_call"):
            counting["calls"] += 1

    threading.setprofile(profile)  # the journal's writer, the dispatcher's threads
    sys.setprofile(profile)
    return counting


def _account() -> dict[str, float]:
    """Thread CPU spent in each part of the SDK's work, whichever thread runs it (the loop's,
    the dispatcher's, the exporter's): what the difference between on and off is made of."""
    from opentelemetry import propagate
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk import trace as sdk_trace

    spent: dict[str, float] = {"start": 0.0, "end": 0.0, "export": 0.0, "inject": 0.0}

    thread_timed(spent, sdk_trace.Tracer, "start_span", "start")  # ids, sampler, attributes, links
    thread_timed(spent, sdk_trace.Span, "end", "end")  # handed to the batch processor's queue
    # protobuf and the POST, on the exporter's thread
    thread_timed(spent, OTLPSpanExporter, "export", "export")
    thread_timed(spent, propagate, "inject", "inject")  # traceparent on each outgoing request
    return spent


def _short_circuit() -> None:
    """`Tracing.span` and `Tracing.start` as if tracing did not exist: the no-op span, no
    check for a provider (the stand-in baseline when there is no git history to take one
    from)."""
    from collections.abc import Iterator
    from contextlib import contextmanager

    from opentelemetry.trace import INVALID_SPAN

    from bridge import tracing

    @contextmanager
    def span(self: Any, name: str, **_: Any) -> Iterator[Any]:
        yield INVALID_SPAN

    tracing.Tracing.span = span  # type: ignore[assignment,method-assign]
    tracing.Tracing.start = lambda self, name, **_: INVALID_SPAN  # type: ignore[method-assign]


def _micro(n: int) -> dict[str, float]:
    """CPU of one span opened and closed while off (no SDK), alone."""
    from bridge.tracing import Tracing

    tracing = Tracing()
    attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "get_weather"}
    for _ in range(1000):
        with tracing.span("execute_tool get_weather", attributes=attributes):
            pass
    start = time.process_time()
    for _ in range(n):
        with tracing.span("execute_tool get_weather", attributes=attributes) as span:
            if span.is_recording():
                span.set_attribute("never", 1)
    return {"span": (time.process_time() - start) / n}


def _run(spec: dict[str, Any], tree: Path, environ: dict[str, str]) -> float:
    return _run_all(spec, tree, environ)["cpu"]


def _run_all(spec: dict[str, Any], tree: Path, environ: dict[str, str]) -> dict[str, float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["PYTHONPATH"] = str(tree)
    env.update(environ)
    cmd = [sys.executable, __file__, "--worker", json.dumps({**spec, "tree": str(tree)})]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"worker failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _baseline(commit: str | None, into: Path) -> tuple[Path | None, str]:
    """The package before tracing, extracted into `into`: (its tree, how it was found), or
    (None, why not)."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True
        ).stdout.strip()

    try:
        if commit is None:
            added = git("log", "--diff-filter=A", "--format=%H", "--", "bridge/tracing.py")
            if not added:
                return None, "no commit added bridge/tracing.py"
            commit = git("rev-parse", added.splitlines()[-1] + "^")
            how = f"{commit[:7]}, the parent of the commit that added bridge/tracing.py"
        else:
            commit = git("rev-parse", commit)
            how = f"{commit[:7]}, given"
        into.mkdir(parents=True)
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", "--format=tar", commit, "bridge"],
            capture_output=True,
            check=True,
        )
        subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        return None, f"no git history to take it from ({exc})"
    return into, how


def _ratio(
    label: str, numerator: list[float], denominator: list[float], target: float | None
) -> None:
    """Print the median of the rounds' ratios (against `target`, when there is one), their
    range, and the ratio of the two variants' quietest rounds (noise only adds CPU time)."""
    shares = [a / b - 1 for a, b in zip(numerator, denominator, strict=True)]
    share = statistics.median(shares)
    best = min(numerator) / min(denominator) - 1
    verdict = ""
    if target is not None:
        verdict = f", target < {100 * target:.0f} %: {'PASS' if share < target else 'FAIL'}"
    print(
        f"  {label} = {1 + share:.4f} ({100 * share:+.2f} %; rounds {100 * min(shares):+.2f} to "
        f"{100 * max(shares):+.2f} %; quietest rounds {100 * best:+.2f} %){verdict}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--baseline", help="The commit to compare with (default: before tracing).")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--micro", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(_worker(json.loads(args.worker))))
        return 0
    if args.micro:
        print(json.dumps(_micro(args.micro)))
        return 0
    sys.path.insert(0, str(ROOT))
    from bridge.emulator import Emulator
    from tests.support.otlp import OtlpReceiver

    with (
        tempfile.TemporaryDirectory() as tmp,
        Emulator(scenario=SCENARIO, faults="") as emulator,
        OtlpReceiver() as receiver,
    ):
        baseline, how = _baseline(args.baseline, Path(tmp) / "baseline")
        if baseline is None:
            how = f"the current tree with Tracing short-circuited ({how})"
        print(
            f"tracing per conversation: {args.rounds} rotating rounds of {args.conversations} "
            "two-turn conversations (Bridge.ask, one tool call, SQLite file journal) per "
            "variant; process CPU per conversation (median of rounds)"
        )
        print(f"  baseline: {how}")
        base = {
            "app_id": emulator.app_id,
            "token": emulator.token,
            "base_url": emulator.base_url,
            "n": args.conversations,
        }
        on_environ = receiver.environ()
        del on_environ["OTEL_BSP_SCHEDULE_DELAY"]  # the SDK's default batching, as deployed
        cpu: dict[str, list[float]] = {v: [] for v in VARIANTS}
        on_spans: list[Any] = []
        for turn in range(args.rounds):
            order = VARIANTS[turn % len(VARIANTS) :] + VARIANTS[: turn % len(VARIANTS)]
            for variant in order:
                db = str(Path(tmp) / f"{variant}-{turn}.db")
                spec = {**base, "db": db, "variant": variant}
                if variant == "baseline":
                    spec["variant"] = "short" if baseline is None else "baseline"
                    cpu[variant].append(_run(spec, baseline or ROOT, {}))
                elif variant == "off":
                    cpu[variant].append(_run(spec, ROOT, {}))
                elif variant == "on":
                    before = len(receiver.spans)  # a worker has exported all when it exits
                    cpu[variant].append(_run(spec, ROOT, on_environ))
                    on_spans += receiver.spans[before:]
                else:  # on, keeping one trace in ten
                    spec["variant"] = "on"
                    cpu[variant].append(_run(spec, ROOT, {**on_environ, **SAMPLED}))
        conversations = args.rounds * (args.conversations + WARMUP)
        per_conversation = len(on_spans) / conversations
        names = sorted({s.name.split(" ")[0] for s in on_spans})
        done = subprocess.run(
            [sys.executable, __file__, "--micro", "200000"],
            capture_output=True,
            text=True,
            timeout=900,
            env={**{k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}},
            check=True,
        )
        span_off = float(json.loads(done.stdout.strip().splitlines()[-1])["span"])
        calls = {
            variant: _run_all(
                {**base, "db": str(Path(tmp) / f"count-{variant}.db"), "variant": kind}
                | {"count": True, "n": 100},
                tree,
                environ,
            )["calls"]
            for variant, kind, tree, environ in (
                ("baseline", "short" if baseline is None else "baseline", baseline or ROOT, {}),
                ("off", "off", ROOT, {}),
                ("on", "on", ROOT, on_environ),
                ("sampled", "on", ROOT, {**on_environ, **SAMPLED}),
            )
        }
        account = _run_all(
            {**base, "db": str(Path(tmp) / "account.db"), "variant": "on", "account": True},
            ROOT,
            on_environ,
        )

    for variant in VARIANTS:
        print(f"  {variant:<8} : {statistics.median(cpu[variant]) * 1000:6.3f} ms CPU")

    _ratio("off / baseline", cpu["off"], cpu["baseline"], TARGET_OFF)
    _ratio("on / off", cpu["on"], cpu["off"], TARGET_ON)
    _ratio("on, one trace in ten kept / off", cpu["sampled"], cpu["off"], None)
    estimate = per_conversation * span_off / statistics.median(cpu["off"])
    print(
        f"  spans per conversation when on: {per_conversation:.1f} ({', '.join(names) or 'none'})"
        f"; one span off costs {span_off * 1e9:.0f} ns CPU alone, so off adds about "
        f"{per_conversation * span_off * 1e6:.2f} µs per conversation ({100 * estimate:.3f} %)"
    )
    added = calls["off"] - calls["baseline"]
    print(
        f"  function calls per conversation, counted (every thread, the work whatever the load):"
        f" baseline {calls['baseline']:.0f}, off {calls['off']:.0f} ({added:+.0f}, "
        f"{100 * added / calls['baseline']:+.2f} %), on {calls['on']:.0f} "
        f"({100 * (calls['on'] / calls['off'] - 1):+.1f} % over off), sampled "
        f"{calls['sampled']:.0f} ({100 * (calls['sampled'] / calls['off'] - 1):+.1f} % over off)"
    )
    print(
        "  in a conversation when on (thread CPU per conversation, whichever thread): span "
        f"starts {account['start'] * 1e6:.0f} µs, ends {account['end'] * 1e6:.0f} µs, "
        f"export (protobuf, POST) {account['export'] * 1e6:.0f} µs, traceparent injection "
        f"{account['inject'] * 1e6:.0f} µs; of {account['cpu'] * 1e3:.2f} ms"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
