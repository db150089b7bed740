"""AppBuilder client benchmarks (ratios measured in one run; never pass/fail).

(a) Two-turn tool conversation on one emulator: create a conversation, send a query with a
    tool, get the interrupt, send the tool output, read the answer; stream and non-stream.
    The toolbridge client and the official appbuilder-sdk 1.1.5 (from `.venv-conformance/`,
    see tests/support/sdk_venv.py) each run in their own subprocess and time themselves
    there, so neither shares a GIL with the emulator, which serves both from this process.
(b) SSE parsing throughput on a large in-memory AppBuilder-like stream: `iter_sse_data`
    (sseclient-py underneath, with CR/CRLF handling) against a naive `data:` line splitter,
    in MB/s and events/s, for network-sized and large read sizes; plus the full chunk
    decoding (JSON + `RunChunk` model) for scale.

Run: `.venv/bin/python bench/bench_client.py` (or `make bench` for every benchmark).
Options: `--conversations N` (default 30), `--skip-sdk`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # for tests.support.sdk_venv when run as a script

__all__ = ["main"]

Timings = dict[str, dict[str, list[float]]]
"""mode ("stream" / "non-stream") -> kind ("wall" / "cpu") -> seconds per conversation."""

SCENARIO = {
    "settings": {"chunk_chars": 8},
    "rules": [
        {
            "name": "weather",
            "match": r"weather in (?P<city>\w+)",
            "steps": [{"tool": "get_weather", "arguments": {"city": "{city}"}}],
            "answer": "The weather in {city} is {outputs.get_weather}. Enjoy your day there!",
        }
    ],
}
TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather of a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "City name"}},
            "required": ["city"],
        },
    },
}
QUERY = "What is the weather in Paris?"
OUTPUT = "sunny, 21 C"
EXPECTED = f"The weather in Paris is {OUTPUT}. Enjoy your day there!"
WARMUP = 3

# The official SDK side, run with .venv-conformance/bin/python (it cannot import `bridge`).
SDK_WORKER = r"""
import json, os, statistics, sys, time
from appbuilder import AppBuilderClient

def conversation(client, stream):
    conversation_id = client.create_conversation()
    message = client.run(conversation_id, QUERY, tools=[TOOL], stream=stream)
    answers = list(message.content) if stream else [message.content]
    calls = {}
    for answer in answers:
        for event in answer.events:
            for call in event.tool_calls or []:
                calls.setdefault(call.id, call)
    outputs = [{"tool_call_id": call_id, "output": OUTPUT} for call_id in calls]
    message = client.run(conversation_id, tool_outputs=outputs, stream=stream)
    answers = list(message.content) if stream else [message.content]
    return "".join(answer.answer for answer in answers)

def main():
    spec = json.loads(sys.argv[1])
    globals().update(QUERY=spec["query"], TOOL=spec["tool"], OUTPUT=spec["output"])
    client = AppBuilderClient(spec["app_id"])
    result = {}
    for stream in (True, False):
        for _ in range(spec["warmup"]):
            conversation(client, stream)
        wall, cpu = [], []
        for _ in range(spec["n"]):
            start, start_cpu = time.perf_counter(), time.process_time()
            answer = conversation(client, stream)
            wall.append(time.perf_counter() - start)
            cpu.append(time.process_time() - start_cpu)
            if answer != spec["expected"]:
                raise SystemExit("unexpected answer: %r" % answer)
        result["stream" if stream else "non-stream"] = {"wall": wall, "cpu": cpu}
    print(json.dumps(result))

main()
"""


def toolbridge_worker(spec: dict[str, Any]) -> Timings:
    """The toolbridge side (runs in a subprocess started by `main`)."""
    from bridge.platforms.appbuilder import AppBuilderClient, RunResponse

    def conversation(client: AppBuilderClient, stream: bool) -> str:
        conversation_id = client.create_conversation()
        reply = client.run(conversation_id, spec["query"], tools=[spec["tool"]], stream=stream)
        chunks = [reply] if isinstance(reply, RunResponse) else list(reply)
        calls: dict[str, Any] = {}
        for item in chunks:
            for event in item.content:
                for call in event.tool_calls or ():
                    calls.setdefault(call.id, call)
        outputs = [{"tool_call_id": call_id, "output": spec["output"]} for call_id in calls]
        reply = client.run(conversation_id, tool_outputs=outputs, stream=stream)
        chunks = [reply] if isinstance(reply, RunResponse) else list(reply)
        return "".join(item.answer for item in chunks)

    result: Timings = {}
    with AppBuilderClient(spec["app_id"], spec["token"], spec["base_url"]) as client:
        for stream in (True, False):
            for _ in range(spec["warmup"]):
                conversation(client, stream)
            wall: list[float] = []
            cpu: list[float] = []
            for _ in range(spec["n"]):
                start, start_cpu = time.perf_counter(), time.process_time()
                answer = conversation(client, stream)
                wall.append(time.perf_counter() - start)
                cpu.append(time.process_time() - start_cpu)
                if answer != spec["expected"]:
                    raise SystemExit(f"unexpected answer: {answer!r}")
            result["stream" if stream else "non-stream"] = {"wall": wall, "cpu": cpu}
    return result


def _spec(emulator: Any, n: int) -> dict[str, Any]:
    return {
        "app_id": emulator.app_id,
        "token": emulator.token,
        "base_url": emulator.base_url,
        "query": QUERY,
        "tool": TOOL,
        "output": OUTPUT,
        "expected": EXPECTED,
        "n": n,
        "warmup": WARMUP,
    }


def _run_worker(cmd: list[str], env: dict[str, str] | None = None) -> Timings:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{cmd[0]} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    result: Timings = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _merge(into: Timings, more: Timings) -> None:
    for mode, series in more.items():
        for kind, values in series.items():
            into.setdefault(mode, {}).setdefault(kind, []).extend(values)


def conversations(n: int, *, skip_sdk: bool, rounds: int = 3) -> None:
    """Benchmark (a): print per-conversation times and the SDK/toolbridge ratios.

    The two clients take turns (`rounds` times each, alternating) so that load from other
    processes on the machine hits both alike; medians are over every run of every round.
    """
    import os

    from bridge.emulator import Emulator

    print(
        f"(a) two-turn tool conversation on one emulator: {rounds} alternating rounds of "
        f"{n} runs per client and mode (after {WARMUP} warm-up runs each)"
    )
    ours: Timings = {}
    theirs: Timings = {}
    with Emulator(scenario=SCENARIO, faults="") as emulator:
        spec = _spec(emulator, n)
        sdk_cmd: list[str] | None = None
        skipped = ""
        if skip_sdk:
            skipped = "--skip-sdk given"
        else:
            try:
                from tests.support.sdk_venv import SdkVenvError, ensure_sdk_venv

                python = ensure_sdk_venv()
            except (ImportError, SdkVenvError) as exc:
                skipped = f"SDK venv unavailable: {str(exc).splitlines()[0]}"
            else:
                sdk_cmd = [str(python), "-c", SDK_WORKER, json.dumps(spec)]
        sdk_env = {
            **os.environ,
            **emulator.env(),
            "APPBUILDER_LOGLEVEL": "ERROR",
            "APPBUILDER_SDK_PLATFORM": "unknown",
        }
        for _ in range(rounds):
            _merge(ours, _run_worker([sys.executable, __file__, "--worker", json.dumps(spec)]))
            if sdk_cmd is not None:
                _merge(theirs, _run_worker(sdk_cmd, env=sdk_env))
    for mode in ("stream", "non-stream"):
        wall = statistics.median(ours[mode]["wall"]) * 1000
        cpu = statistics.median(ours[mode]["cpu"]) * 1000
        line = f"  {mode:>10}: toolbridge {wall:5.2f} ms wall, {cpu:5.2f} ms client CPU"
        if theirs:
            sdk_wall = statistics.median(theirs[mode]["wall"]) * 1000
            sdk_cpu = statistics.median(theirs[mode]["cpu"]) * 1000
            line += (
                f" | appbuilder-sdk {sdk_wall:5.2f} ms wall, {sdk_cpu:5.2f} ms client CPU"
                f" | ratio sdk/toolbridge: wall {sdk_wall / wall:.2f}, CPU {sdk_cpu / cpu:.2f}"
            )
        print(line)
    if not theirs:
        print(f"  (official SDK side skipped: {skipped})")


# --- (b) SSE parsing ----------------------------------------------------------------------------


def _stream_bytes(events: int) -> bytes:
    from bridge.platforms.appbuilder import RunChunk  # noqa: F401 - same shapes as the wire

    pieces = []
    for i in range(events):
        payload = {
            "request_id": "4c1b0d5e-8f2a-4d6b-9a1e-000000000000",
            "date": "2024-09-23T08:05:00Z",
            "answer": "北京今天的天气情况如下：晴，气温二十一度。",
            "conversation_id": "c1",
            "message_id": "m1",
            "is_completion": False,
            "content": [
                {
                    "event_code": 0,
                    "event_message": "",
                    "event_type": "ChatAgent",
                    "event_id": str(i),
                    "event_status": "running",
                    "content_type": "text",
                    "outputs": {"text": "北京今天的天气情况如下：晴，气温二十一度。"},
                    "usage": {
                        "prompt_tokens": 1105,
                        "completion_tokens": i,
                        "total_tokens": 1105 + i,
                        "name": "Qianfan-Appbuilder-Speed-8k",
                    },
                }
            ],
        }
        pieces.append(b"data: " + json.dumps(payload, ensure_ascii=False).encode() + b"\n\n")
    return b"".join(pieces)


def naive_sse(chunks: Iterable[bytes]) -> Iterator[str]:
    """The simplest parser that works on well-formed LF streams: split lines, keep `data: `."""
    buffer = b""
    for chunk in chunks:
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            if line.startswith(b"data: "):
                yield line[6:].decode("utf-8")
    if buffer.startswith(b"data: "):
        yield buffer[6:].decode("utf-8")


def _best_of(runs: int, work: Callable[[], int]) -> tuple[float, int]:
    best = float("inf")
    count = 0
    for _ in range(runs):
        start = time.perf_counter()
        count = work()
        best = min(best, time.perf_counter() - start)
    return best, count


def sse_throughput(events: int = 20_000, runs: int = 3) -> None:
    """Benchmark (b): print MB/s and events/s of each parser and their ratio."""
    from bridge.platforms._sse import iter_sse_data
    from bridge.platforms.appbuilder import RunChunk

    data = _stream_bytes(events)
    megabytes = len(data) / 1e6
    print(f"(b) SSE parsing: {events} events, {megabytes:.1f} MB, best of {runs}")
    for size in (1460, 65536):
        chunks = [data[i : i + size] for i in range(0, len(data), size)]
        ours, n_ours = _best_of(runs, lambda c=chunks: sum(1 for _ in iter_sse_data(c)))
        naive, n_naive = _best_of(runs, lambda c=chunks: sum(1 for _ in naive_sse(c)))
        assert n_ours == n_naive == events, (n_ours, n_naive)
        print(
            f"  reads of {size:>5} B: iter_sse_data {megabytes / ours:6.1f} MB/s "
            f"({events / ours:8.0f} events/s); naive splitter {megabytes / naive:6.1f} MB/s "
            f"({events / naive:8.0f} events/s); ratio naive/iter_sse_data {ours / naive:.2f}"
        )
    chunks = [data[i : i + 65536] for i in range(0, len(data), 65536)]

    def decode_all() -> int:
        return sum(1 for text in iter_sse_data(chunks) if RunChunk.model_validate_json(text))

    full, _ = _best_of(runs, decode_all)
    print(
        f"  iter_sse_data + JSON + RunChunk model: {megabytes / full:6.1f} MB/s "
        f"({events / full:8.0f} events/s)"
    )


def main() -> None:
    """Run both benchmarks (or, with --worker, one client's side of (a))."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--conversations", type=int, default=30)
    parser.add_argument("--skip-sdk", action="store_true")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(toolbridge_worker(json.loads(args.worker))))
        return
    print(f"AppBuilder client benchmarks (Python {sys.version.split()[0]})")
    conversations(args.conversations, skip_sdk=args.skip_sdk)
    sse_throughput()


if __name__ == "__main__":
    main()
