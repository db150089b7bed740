"""Dispatcher benchmarks (ratios measured in one run; never pass/fail).

(a) Parallel batch: 8 calls that each sleep 0.2 s, sync and async. The ratio is the batch's
    wall time divided by its slowest single call; 1.0 means the calls fully overlapped
    (8.0 would mean they ran one after another).
(b) Overhead: a batch of 500 calls of a no-op tool, sync and async; microseconds per call
    (lookup, validation, thread hop or task, serialisation, the ToolRun record).
(c) Manifests: 1000 generated functions with varied signatures and Google docstrings,
    registered in a Toolbox, then `manifests("appbuilder")`; microseconds per tool.

Run: `.venv/bin/python bench/bench_dispatch.py` (or `make bench` for every benchmark).
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from bridge.tools.dispatch import Dispatcher
from bridge.tools.toolbox import Toolbox
from bridge.types import ToolCall

__all__ = ["main"]

BATCH = 8
SLEEP = 0.2
REPEATS = 5
NOOP_CALLS = 500
FUNCTIONS = 1000


def nap(seconds: float) -> str:
    """Sleep on a worker thread.

    Args:
        seconds: How long.
    """
    time.sleep(seconds)
    return "ok"


async def anap(seconds: float) -> str:
    """Sleep on the event loop.

    Args:
        seconds: How long.
    """
    await asyncio.sleep(seconds)
    return "ok"


def batch_ratio(dispatcher: Dispatcher, name: str) -> tuple[float, float, float]:
    """Median over REPEATS of (batch wall s, slowest call s, ratio)."""
    samples = []
    for _ in range(REPEATS):
        calls = [
            ToolCall(call_id=f"{name}-{i}", name=name, arguments={"seconds": SLEEP})
            for i in range(BATCH)
        ]
        began = time.perf_counter()
        runs = dispatcher.run(calls)
        wall = time.perf_counter() - began
        assert all(run.error is None for run in runs), [run.output for run in runs]
        slowest = max(run.duration_ms for run in runs) / 1000
        samples.append((wall, slowest, wall / slowest))
    return sorted(samples, key=lambda s: s[2])[len(samples) // 2]


def noop(n: int) -> int:
    """Return n.

    Args:
        n: Any number.
    """
    return n


async def anoop(n: int) -> int:
    """Return n, async.

    Args:
        n: Any number.
    """
    return n


def overhead(dispatcher: Dispatcher, name: str) -> float:
    """Best of REPEATS: microseconds per call of a batch of NOOP_CALLS no-op calls."""
    best = float("inf")
    for _ in range(REPEATS):
        calls = [
            ToolCall(call_id=str(i), name=name, arguments={"n": str(i)}) for i in range(NOOP_CALLS)
        ]
        began = time.perf_counter()
        runs = dispatcher.run(calls)
        best = min(best, time.perf_counter() - began)
        assert all(run.error is None for run in runs)
    return best / NOOP_CALLS * 1e6


class Address(BaseModel):
    """A postal address."""

    street: str
    city: str = Field(description="City name")
    zip_code: Annotated[str, Field(pattern=r"^\d{5}$")] = "00000"


_PARAM_TYPES = [
    "int",
    "str",
    "float",
    "bool",
    "list[int]",
    "dict[str, float]",
    "Literal['a', 'b', 'c']",
    "str | None",
    "Annotated[int, Field(ge=0, le=100, description='A bounded count')]",
    "Address",
    "tuple[str, int]",
    "list[Address]",
]


def generate(count: int) -> list[Callable[..., Any]]:
    """`count` functions with 1-6 parameters of varied types, defaults and Google docstrings."""
    namespace: dict[str, Any] = {
        "Annotated": Annotated,
        "Field": Field,
        "Literal": Literal,
        "Address": Address,
    }
    functions = []
    for n in range(count):
        arity = 1 + n % 6
        params, docs = [], []
        for k in range(arity):
            kind = _PARAM_TYPES[(n + 3 * k) % len(_PARAM_TYPES)]
            default = " = None" if kind == "str | None" else ""
            params.append(f"p{k}: {kind}{default}")
            docs.append(f"        p{k}: Parameter {k} of tool {n}.")
        # Parameters without a default must come first.
        params.sort(key=lambda p: "=" in p)
        source = (
            f"def tool_{n}({', '.join(params)}) -> str:\n"
            f'    """Generated tool number {n}.\n\n'
            f"    Does nothing useful; exists to be described.\n\n"
            f"    Args:\n" + "\n".join(docs) + "\n\n"
            "    Returns:\n        A short text.\n"
            '    """\n'
            "    return 'ok'\n"
        )
        exec(source, namespace)
        functions.append(namespace[f"tool_{n}"])
    return functions


def manifest_cost(count: int) -> tuple[float, float]:
    """(register µs/tool, manifests µs/tool) for `count` generated functions."""
    functions = generate(count)
    toolbox = Toolbox()
    began = time.perf_counter()
    for fn in functions:
        toolbox.add(fn)
    registered = time.perf_counter() - began
    began = time.perf_counter()
    manifests = toolbox.manifests("appbuilder")
    described = time.perf_counter() - began
    assert len(manifests) == count
    return registered / count * 1e6, described / count * 1e6


def main() -> None:
    """Print both measurements."""
    toolbox = Toolbox()
    for fn in (nap, anap, noop, anoop):
        toolbox.add(fn)
    print(f"Dispatcher benchmarks (Python {sys.version.split()[0]}, median of {REPEATS})")
    with Dispatcher(toolbox, max_concurrency=BATCH) as dispatcher:
        dispatcher.run([ToolCall(call_id="warm", name="nap", arguments={"seconds": 0})])
        for label, name in (("sync ", "nap"), ("async", "anap")):
            wall, slowest, ratio = batch_ratio(dispatcher, name)
            print(
                f"  parallel batch, {label}: {BATCH} x {SLEEP} s in {wall:.3f} s; "
                f"slowest call {slowest:.3f} s; ratio {ratio:.3f} (1.0 = fully parallel)"
            )
        for label, name in (("sync ", "noop"), ("async", "anoop")):
            print(
                f"  overhead, {label}: {overhead(dispatcher, name):.0f} us/call "
                f"(batch of {NOOP_CALLS} no-op calls, max_concurrency={BATCH})"
            )
    registered, described = manifest_cost(FUNCTIONS)
    print(
        f"  manifests for {FUNCTIONS} generated functions: register {registered:.0f} us/tool, "
        f'manifests("appbuilder") {described:.0f} us/tool, total {registered + described:.0f} '
        "us/tool"
    )


if __name__ == "__main__":
    main()
