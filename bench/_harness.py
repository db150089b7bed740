"""What the loop benchmarks share: timing a conversation in a worker, running a worker, and
finding an official SDK's venv (`tests.support.sdk_venv`). Not a benchmark itself (`run_all`
runs ``bench_*.py`` only)."""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # for tests.support.sdk_venv when run as a script

__all__ = [
    "ROOT",
    "count_instructions",
    "loop_args",
    "report",
    "run_worker",
    "sdk_python",
    "take_turns",
    "timed",
]


def timed(spec: dict[str, Any], conversation: Callable[[], str]) -> list[float]:
    """Wall seconds of `spec["n"]` conversations after `spec["warmup"]`; each answer must be
    `spec["expected"]` (a wrong one ends the worker, so a broken variant cannot look fast)."""
    for _ in range(spec["warmup"]):
        conversation()
    wall: list[float] = []
    for _ in range(spec["n"]):
        start = time.perf_counter()
        answer = conversation()
        wall.append(time.perf_counter() - start)
        if answer != spec["expected"]:
            raise SystemExit(f"unexpected answer: {answer!r}")
    return wall


def count_instructions(
    warmup: int, n: int, conversation: Callable[[], object], pid: int | None = None
) -> None:
    """For a process run under valgrind's callgrind with ``--instr-atstart=no`` (`pid`, this
    one by default): `warmup` conversations, then `n` with instrumentation on, then the counts
    dumped (the runner reads them: `bench_instructions`). With another `pid`, this process is
    the client whose `conversation` the measured server answers."""
    import os

    target = str(os.getpid() if pid is None else pid)

    def control(*args: str) -> None:
        subprocess.run(["callgrind_control", *args, target], check=True, capture_output=True)

    for _ in range(warmup):
        conversation()
    control("-i", "on")
    for _ in range(n):
        conversation()
    control("-i", "off")
    control("-d")


def run_worker(cmd: list[str], env: dict[str, str] | None = None) -> list[float]:
    """Run a worker subprocess; return the JSON list of timings it prints last."""
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{cmd[0]} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    values: list[float] = json.loads(done.stdout.strip().splitlines()[-1])
    return values


def sdk_python(sdk: str, skip: bool) -> tuple[Path | None, str]:
    """The python of an SDK's venv, built if needed (`sdk`: ``APPBUILDER``, ``COZE`` or
    ``OPENAI``, as named in `tests.support.sdk_venv`), or None and why not (``--skip-sdk``,
    or the venv cannot be built)."""
    if skip:
        return None, "--skip-sdk given"
    try:
        from tests.support import sdk_venv
    except ImportError as exc:
        return None, f"SDK venv unavailable: {exc}"
    try:
        return sdk_venv.ensure_sdk_venv(getattr(sdk_venv, sdk)), ""
    except sdk_venv.SdkVenvError as exc:
        return None, f"SDK venv unavailable: {str(exc).splitlines()[0]}"


def take_turns(
    script: str,
    spec: dict[str, Any],
    rounds: int,
    sdk: Path | None,
    sdk_worker: str,
    sdk_env: dict[str, str],
) -> dict[str, float]:
    """Median ms per conversation of the ``bridge`` and ``requests`` workers of `script` and of
    `sdk_worker` run by the SDK venv's `sdk` (when there is one), taking turns for `rounds`
    rounds so that machine noise falls on every variant alike."""
    arg = json.dumps(spec)
    times: dict[str, list[float]] = {"bridge": [], "requests": [], "sdk": []}
    for _ in range(rounds):
        for kind in ("bridge", "requests"):
            times[kind] += run_worker([sys.executable, script, "--worker", kind, "--spec", arg])
        if sdk is not None:
            times["sdk"] += run_worker([str(sdk), "-c", sdk_worker, arg], env=sdk_env)
    return {k: statistics.median(v) * 1000 for k, v in times.items() if v}


def report(med: dict[str, float], *, bridge: str, sdk: str, why_not: str, note: str = "") -> None:
    """Print the medians of `take_turns` and the two ratios (`note` follows the first)."""
    width = max(len("hand-written requests loop"), len(bridge), len(sdk))
    print(f"  {'hand-written requests loop':<{width}} : {med['requests']:7.2f} ms")
    print(f"  {bridge:<{width}} : {med['bridge']:7.2f} ms")
    if "sdk" in med:
        print(f"  {sdk:<{width}} : {med['sdk']:7.2f} ms")
    else:
        print(f"  {sdk:<{width}} : skipped ({why_not})")
    ratio = med["bridge"] / med["requests"]
    print(f"  Bridge.ask / hand-written = {ratio:.3f}  (overhead {100 * (ratio - 1):+.1f}%{note})")
    if "sdk" in med:
        print(
            f"  SDK loop / Bridge.ask = {med['sdk'] / med['bridge']:.3f}  (> 1: Bridge is faster)"
        )


def loop_args(
    doc: str,
    conversations: int,
    workers: dict[str, Callable[[dict[str, Any]], list[float]]],
) -> argparse.Namespace | None:
    """The command line of a loop benchmark; None when this process was a worker (its timings
    are printed as the last line of JSON for `run_worker`)."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--conversations", type=int, default=conversations)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--skip-sdk", action="store_true")
    parser.add_argument("--worker", choices=sorted(workers), help=argparse.SUPPRESS)
    parser.add_argument("--spec", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(workers[args.worker](json.loads(args.spec))))
        return None
    return args
