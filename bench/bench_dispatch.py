"""Dispatcher benchmarks (ratios measured in one run; never pass/fail).

(a) Parallel batch: 8 calls that each sleep 0.2 s, sync and async. The ratio is the batch's
    wall time divided by its slowest single call; 1.0 means the calls fully overlapped
    (8.0 would mean they ran one after another).
(b) Overhead: a batch of 500 calls of a no-op tool, sync and async; microseconds per call
    (lookup, validation, thread hop or task, serialisation, the ToolRun record).
(c) Manifests: 1000 generated functions with varied signatures and Google docstrings,
    registered in a Toolbox, then `manifests("appbuilder")`; microseconds per tool and the
    total against the issue 14 target (<= 0.3 s). Each run is a fresh process (the caches of
    registration start empty, as when a program starts); the median of RUNS is shown.
(d) OpenAPI: a 1000-operation OpenAPI 3.1 document (query, path and body parameters, shared
    `$ref` components) opened as a tool source, registered, then `manifests("appbuilder")`.

Run: `.venv/bin/python bench/bench_dispatch.py [--only parallel|overhead|manifests|openapi]...`
(or `make bench` for every benchmark).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
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
OPERATIONS = 1000
RUNS = 3
TARGET_SECONDS = 0.3
"""Issue 14: register + render manifests for 1000 generated functions in at most this."""
PARTS = ("parallel", "overhead", "manifests", "openapi")


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


def manifest_cost(count: int) -> tuple[float, float, float]:
    """(register µs/tool, manifests µs/tool, CPU seconds of both) for `count` generated
    functions."""
    functions = generate(count)
    toolbox = Toolbox()
    cpu = time.process_time()
    began = time.perf_counter()
    for fn in functions:
        toolbox.add(fn)
    registered = time.perf_counter() - began
    began = time.perf_counter()
    manifests = toolbox.manifests("appbuilder")
    described = time.perf_counter() - began
    cpu = time.process_time() - cpu
    assert len(manifests) == count
    return registered / count * 1e6, described / count * 1e6, cpu


def openapi_document(count: int) -> dict[str, Any]:
    """An OpenAPI 3.1 document with `count` operations (four per resource)."""
    item_ref = {"$ref": "#/components/schemas/Item"}
    schemas = {
        "Address": {
            "type": "object",
            "properties": {
                "street": {"type": "string"},
                "city": {"type": "string", "description": "City name"},
                "zip": {"type": "string", "pattern": r"^\d{5}$"},
            },
            "required": ["street", "city"],
        },
        "Item": {
            "type": "object",
            "properties": {
                "id": {"type": "integer"},
                "name": {"type": "string"},
                "tags": {"type": "array", "items": {"type": "string"}},
                "address": {"$ref": "#/components/schemas/Address"},
            },
            "required": ["id"],
        },
    }
    paths: dict[str, dict[str, Any]] = {}
    for n in range(count):
        resource = f"res{n // 4}"
        method = ("get", "post", "put", "delete")[n % 4]
        path = f"/{resource}" if method == "post" else f"/{resource}/{{id}}"
        parameters: list[dict[str, Any]] = [
            {
                "name": "limit",
                "in": "query",
                "schema": {"type": "integer", "minimum": 1, "maximum": 100},
                "description": "How many.",
            },
            {"name": "q", "in": "query", "schema": {"type": "string"}},
        ]
        if method != "post":
            parameters.append(
                {
                    "name": "id",
                    "in": "path",
                    "required": True,
                    "schema": {"type": "integer"},
                    "description": "The id.",
                }
            )
        operation: dict[str, Any] = {
            "operationId": f"{method}_{resource}",
            "summary": f"Operation {n}.",
            "description": f"Does operation {n} on {resource}.",
            "parameters": parameters,
            "responses": {
                "200": {"description": "ok", "content": {"application/json": {"schema": item_ref}}}
            },
        }
        if method in ("post", "put"):
            operation["requestBody"] = {
                "required": True,
                "content": {"application/json": {"schema": item_ref}},
            }
        paths.setdefault(path, {})[method] = operation
    return {
        "openapi": "3.1.0",
        "info": {"title": "bench", "version": "1"},
        "servers": [{"url": "http://127.0.0.1:9"}],
        "paths": paths,
        "components": {"schemas": schemas},
    }


def openapi_cost(count: int) -> tuple[float, float]:
    """(seconds, CPU seconds) to open a `count`-operation OpenAPI file, register it and list
    its manifests."""
    from bridge.sources.openapi import open_openapi

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "api.json")
        with open(path, "w", encoding="utf-8") as file:
            json.dump(openapi_document(count), file)
        cpu = time.process_time()
        began = time.perf_counter()
        with Toolbox() as toolbox:
            toolbox.add_source(open_openapi(path))
            manifests = toolbox.manifests("appbuilder")
        elapsed = time.perf_counter() - began
        cpu = time.process_time() - cpu
    assert len(manifests) == count, len(manifests)
    return elapsed, cpu


def _child(part: str) -> dict[str, float]:
    """One measurement in this (fresh) process."""
    if part == "manifests":
        registered, described, cpu = manifest_cost(FUNCTIONS)
        seconds = (registered + described) * FUNCTIONS / 1e6
        return {"register": registered, "describe": described, "seconds": seconds, "cpu": cpu}
    seconds, cpu = openapi_cost(OPERATIONS)
    return {"seconds": seconds, "cpu": cpu}


def _fresh_runs(part: str) -> list[dict[str, float]]:
    """RUNS measurements of `part`, each in a new interpreter (caches empty, as at start-up)."""
    runs = []
    for _ in range(RUNS):
        done = subprocess.run(
            [sys.executable, __file__, "--child", part],
            check=True,
            capture_output=True,
            text=True,
        )
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    return sorted(runs, key=lambda run: run["seconds"])


def _verdict(seconds: float, target: float) -> str:
    return f"target <= {target} s: {'met' if seconds <= target else 'NOT met'}"


def main() -> None:
    """Print the measurements of the parts asked for (all by default)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--only", action="append", choices=PARTS, help="run only this part")
    parser.add_argument("--child", choices=("manifests", "openapi"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_child(args.child)))
        return
    parts = args.only or list(PARTS)
    print(f"Dispatcher benchmarks (Python {sys.version.split()[0]}, median of {REPEATS})")
    if "parallel" in parts or "overhead" in parts:
        _dispatch(parts)
    if "manifests" in parts:
        runs = _fresh_runs("manifests")
        mid = runs[len(runs) // 2]
        print(
            f"  manifests for {FUNCTIONS} generated functions: register {mid['register']:.0f} "
            f'us/tool, manifests("appbuilder") {mid["describe"]:.0f} us/tool'
        )
        print(
            f"  register + manifests for {FUNCTIONS} functions: {mid['seconds']:.3f} s "
            f"(CPU {mid['cpu']:.3f} s; median of {RUNS} fresh processes, "
            f"range {runs[0]['seconds']:.3f}-{runs[-1]['seconds']:.3f} s; "
            f"ratio to target {mid['seconds'] / TARGET_SECONDS:.2f}; "
            f"{_verdict(mid['seconds'], TARGET_SECONDS)})"
        )
    if "openapi" in parts:
        runs = _fresh_runs("openapi")
        mid = runs[len(runs) // 2]
        print(
            f"  OpenAPI document of {OPERATIONS} operations, open + register + manifests: "
            f"{mid['seconds']:.3f} s (CPU {mid['cpu']:.3f} s; median of {RUNS} fresh processes)"
        )


def _dispatch(parts: list[str]) -> None:
    toolbox = Toolbox()
    for fn in (nap, anap, noop, anoop):
        toolbox.add(fn)
    with Dispatcher(toolbox, max_concurrency=BATCH) as dispatcher:
        dispatcher.run([ToolCall(call_id="warm", name="nap", arguments={"seconds": 0})])
        if "parallel" in parts:
            for label, name in (("sync ", "nap"), ("async", "anap")):
                wall, slowest, ratio = batch_ratio(dispatcher, name)
                print(
                    f"  parallel batch, {label}: {BATCH} x {SLEEP} s in {wall:.3f} s; "
                    f"slowest call {slowest:.3f} s; ratio {ratio:.3f} (1.0 = fully parallel)"
                )
        if "overhead" in parts:
            for label, name in (("sync ", "noop"), ("async", "anoop")):
                print(
                    f"  overhead, {label}: {overhead(dispatcher, name):.0f} us/call "
                    f"(batch of {NOOP_CALLS} no-op calls, max_concurrency={BATCH})"
                )


if __name__ == "__main__":
    main()
