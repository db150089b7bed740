"""The conversation loop's cost (ratios measured in one run; never pass/fail).

(a) A two-turn tool conversation on one emulator (query with a tool -> interrupt -> tool runs
    -> outputs submitted -> answer), done three ways, each in its own subprocess timing itself:
    - `Bridge.ask` (toolbridge's loop: manifests from the decorator, dispatcher, ledger...);
    - a minimal hand-written loop with `requests` (no validation, no retries: the floor);
    - the official appbuilder-sdk 1.1.5 `AppBuilderEventHandler` loop (`run_with_handler`),
      from `.venv-conformance/` (see tests/support/sdk_venv.py).
    The three take turns for several rounds (at least 5) so machine noise hits all alike; each
    ratio is the median of the rounds' ratios, printed with its target (issue 14) and range.
    Each worker also reports its process's CPU time per conversation, printed after the
    ratios: steadier than wall time on a shared machine.
(b) CLI start-up: `toolbridge --help` and `toolbridge run --help` against
    `python -c "import appbuilder"` (the SDK's import alone), `python -c "import bridge"`, and
    `toolbridge serve --emulator` until it listens and until `/readyz` says ready.

Run: `.venv/bin/python bench/bench_loop.py` (or `make bench`). Options: `--conversations N`,
`--rounds N`, `--skip-sdk`.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _harness import loop_args, sdk_python, timed

__all__ = ["main"]

SCENARIO = {
    "settings": {"chunk_chars": 8},
    "rules": [
        {
            "match": r"weather in (?P<city>\w+)",
            "steps": [{"tool": "get_weather", "arguments": {"city": "{city}"}}],
            "answer": "The weather in {city} is {outputs.get_weather}. Enjoy your day there!",
        }
    ],
}
QUERY = "What is the weather in Paris?"
EXPECTED = "The weather in Paris is sunny, 21 C. Enjoy your day there!"
WARMUP = 3
MIN_ROUNDS = 7
"""Issue 14 asks for the median of at least 5 runs; 7 rounds of 100 keep a burst of load on
the shared machine from deciding a ratio."""
TARGET_OVERHEAD = 1.05
"""Bridge.ask / hand-written requests loop: at most this."""
TARGET_SDK = 1.3
"""official SDK loop / Bridge.ask: at least this."""
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

# The official SDK's handler loop, run with .venv-conformance/bin/python.
SDK_WORKER = r"""
import json, sys, time
import appbuilder
from appbuilder import AppBuilderClient
from appbuilder.core.console.appbuilder_client.event_handler import AppBuilderEventHandler

def get_weather(city):
    return "sunny, 21 C"

class Handler(AppBuilderEventHandler):
    def __init__(self):
        super().__init__()
        self.answer = []

    def running(self, run_context, run_response):
        if run_response.answer:
            self.answer.append(run_response.answer)

    def interrupt(self, run_context, run_response):
        outputs = []
        for call in run_context.current_tool_calls:
            output = get_weather(**call.function.arguments)
            outputs.append({"tool_call_id": call.id, "output": output})
        return outputs

def conversation(client):
    conversation_id = client.create_conversation()
    handler = Handler()
    with client.run_with_handler(conversation_id=conversation_id, query=spec["query"],
                                 tools=[spec["tool"]], stream=True,
                                 event_handler=handler) as run:
        run.until_done()
    return "".join(handler.answer)

spec = json.loads(sys.argv[1])
client = AppBuilderClient(spec["app_id"])
for _ in range(spec["warmup"]):
    conversation(client)
wall, cpu = [], []
for _ in range(spec["n"]):
    start, start_cpu = time.perf_counter(), time.process_time()
    answer = conversation(client)
    wall.append(time.perf_counter() - start)
    cpu.append(time.process_time() - start_cpu)
    if answer != spec["expected"]:
        raise SystemExit("unexpected answer: %r" % answer)
print(json.dumps({"wall": wall, "cpu": sorted(cpu)[len(cpu) // 2]}))
"""


def _timed(spec: dict[str, Any], conversation: Callable[[], str]) -> dict[str, Any]:
    """`timed`, plus the median CPU seconds this process spent per measured conversation
    (all its threads): steadier than wall time on a shared machine."""
    cpu: list[float] = []

    def counted() -> str:
        start = time.process_time()
        try:
            return conversation()
        finally:
            cpu.append(time.process_time() - start)

    wall = timed(spec, counted)
    return {"wall": wall, "cpu": statistics.median(cpu[spec["warmup"] :])}


def _run(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, float]:
    """Median wall ms and CPU ms per conversation of one worker process."""
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{cmd[0]} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return statistics.median(result["wall"]) * 1000, result["cpu"] * 1000


def bridge_worker(spec: dict[str, Any]) -> dict[str, Any]:
    """`Bridge.ask` with a decorated tool (runs in a subprocess)."""
    from bridge import AppBuilderPlatform, Bridge, manifest

    @manifest(description="Current weather of a city")
    def get_weather(city: str) -> str:
        """Weather.

        Args:
            city: City name
        """
        return "sunny, 21 C"

    platform = AppBuilderPlatform(
        app_id=spec["app_id"], token=spec["token"], base_url=spec["base_url"]
    )
    with Bridge(platform, [get_weather]) as bridge:
        return _timed(spec, lambda: bridge.ask(spec["query"]).answer)


def requests_worker(spec: dict[str, Any]) -> dict[str, Any]:
    """The floor: a hand-written loop with requests and json, nothing else."""
    import uuid

    import requests

    session = requests.Session()
    base = spec["base_url"] + "/v2/app/conversation"

    def headers() -> dict[str, str]:
        request_id = str(uuid.uuid4())
        return {
            "Authorization": "Bearer " + spec["token"],
            "Content-Type": "application/json",
            "X-Appbuilder-Request-Id": request_id,
        }

    def run(body: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
        answer, calls = [], []
        with session.post(base + "/runs", json=body, headers=headers(), stream=True) as reply:
            for line in reply.iter_lines():
                if not line.startswith(b"data:"):
                    continue
                chunk = json.loads(line[5:])
                answer.append(chunk.get("answer") or "")
                for event in chunk.get("content") or []:
                    calls.extend(event.get("tool_calls") or [])
        return "".join(answer), calls

    def conversation() -> str:
        created = session.post(base, json={"app_id": spec["app_id"]}, headers=headers()).json()
        conversation_id = created["conversation_id"]
        common = {"app_id": spec["app_id"], "conversation_id": conversation_id, "stream": True}
        _, calls = run({**common, "query": spec["query"], "tools": [spec["tool"]]})
        outputs = [{"tool_call_id": c["id"], "output": "sunny, 21 C"} for c in calls]
        answer, _ = run({**common, "query": "", "tools": [], "tool_outputs": outputs})
        return answer

    return _timed(spec, conversation)


def loop_benchmark(n: int, rounds: int, sdk: Path | None, why_not: str) -> dict[str, float]:
    """Benchmark (a); returns the two ratios (``overhead``, and ``sdk`` when measured)."""
    from bridge.emulator import Emulator

    rounds = max(rounds, MIN_ROUNDS)
    print(
        f"(a) two-turn tool conversation (stream), {rounds} alternating rounds of {n} runs "
        f"per variant after {WARMUP} warm-up runs; median ms per conversation"
    )
    with Emulator(scenario=SCENARIO, faults="") as emulator:
        spec = {
            "app_id": emulator.app_id,
            "token": emulator.token,
            "base_url": emulator.base_url,
            "query": QUERY,
            "tool": TOOL,
            "expected": EXPECTED,
            "n": n,
            "warmup": WARMUP,
        }
        sdk_env = {**os.environ, **emulator.env()}
        arg = json.dumps(spec)
        per_round: dict[str, list[float]] = {"requests": [], "bridge": [], "sdk": []}
        cpu: dict[str, list[float]] = {"requests": [], "bridge": [], "sdk": []}
        for _ in range(rounds):
            runs = {
                kind: ([sys.executable, __file__, "--worker", kind, "--spec", arg], None)
                for kind in ("requests", "bridge")
            }
            if sdk is not None:
                runs["sdk"] = ([str(sdk), "-c", SDK_WORKER, arg], sdk_env)
            for kind, (cmd, env) in runs.items():
                wall_ms, cpu_ms = _run(cmd, env)
                per_round[kind].append(wall_ms)
                cpu[kind].append(cpu_ms)
    ratios = _report(per_round, why_not)
    _report_cpu(cpu)
    return ratios


def _report_cpu(cpu: dict[str, list[float]]) -> None:
    """The client's CPU per conversation (no target: the targets are on wall time)."""
    mid = {kind: statistics.median(values) for kind, values in cpu.items() if values}
    line = ", ".join(f"{kind} {ms:.2f} ms" for kind, ms in mid.items())
    print(f"  client CPU per conversation (median of rounds): {line}")
    text = f"  CPU: Bridge.ask / hand-written = {mid['bridge'] / mid['requests']:.3f}"
    if "sdk" in mid:
        text += f"; SDK loop / Bridge.ask = {mid['sdk'] / mid['bridge']:.3f}"
    print(text)


def _report(per_round: dict[str, list[float]], why_not: str) -> dict[str, float]:
    """Print each variant's median and the two ratios with their targets."""
    names = {
        "requests": "hand-written requests loop",
        "bridge": "toolbridge Bridge.ask",
        "sdk": "official SDK handler loop",
    }
    width = max(map(len, names.values()))
    for kind, name in names.items():
        if per_round[kind]:
            print(f"  {name:<{width}} : {statistics.median(per_round[kind]):7.2f} ms")
        else:
            print(f"  {name:<{width}} : skipped ({why_not})")
    ratios: dict[str, float] = {}
    overhead = [b / r for b, r in zip(per_round["bridge"], per_round["requests"], strict=True)]
    ratios["overhead"] = _ratio_line(
        "Bridge.ask / hand-written requests", overhead, TARGET_OVERHEAD, at_most=True
    )
    if per_round["sdk"]:
        sdk = [s / b for s, b in zip(per_round["sdk"], per_round["bridge"], strict=True)]
        label = "official SDK loop / Bridge.ask"
        ratios["sdk"] = _ratio_line(label, sdk, TARGET_SDK, at_most=False)
    return ratios


def _ratio_line(label: str, values: list[float], target: float, *, at_most: bool) -> float:
    """Print `label = median (target ...: met / NOT met), rounds lo-hi`; return the median."""
    median = statistics.median(values)
    met = median <= target if at_most else median >= target
    sign = "<=" if at_most else ">="
    print(
        f"  {label} = {median:.3f} (target {sign} {target}: {'met' if met else 'NOT met'}); "
        f"rounds {min(values):.3f}-{max(values):.3f}"
    )
    return median


def _median_runtime(cmd: list[str], repeat: int, env: dict[str, str] | None = None) -> float:
    samples = []
    for _ in range(repeat + 1):
        start = time.perf_counter()
        subprocess.run(cmd, capture_output=True, check=True, timeout=120, env=env)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples[1:]) * 1000  # the first run warms the disk cache


def _serve_ready(command: list[str]) -> tuple[float, float]:
    """ms until `toolbridge serve` logs that it listens, and until /readyz answers 200."""
    import requests

    start = time.perf_counter()
    proc = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        url = ""
        for line in proc.stdout:
            if "listening on http://" in line:
                url = line.split("listening on ", 1)[1].split()[0]
                break
        listening = time.perf_counter() - start
        if not url:
            raise RuntimeError(f"toolbridge serve did not start (exit {proc.wait(timeout=30)})")
        while requests.get(url + "/readyz", timeout=10).status_code != 200:
            time.sleep(0.002)
        return listening * 1000, (time.perf_counter() - start) * 1000
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        if proc.stdout is not None:
            proc.stdout.close()


def startup_benchmark(sdk: Path | None, why_not: str, repeat: int = 7) -> None:
    """Benchmark (b)."""
    print(f"(b) start-up, median of {repeat} runs")
    toolbridge = shutil.which("toolbridge", path=str(Path(sys.executable).parent))
    cli_cmd = [toolbridge] if toolbridge else [sys.executable, "-m", "bridge"]
    cli = _median_runtime([*cli_cmd, "--help"], repeat)
    run_help = _median_runtime([*cli_cmd, "run", "--help"], repeat)
    bare = _median_runtime([sys.executable, "-c", "import bridge"], repeat)
    tools = str(Path(__file__).resolve().parent.parent / "examples" / "weather" / "tools.py")
    serve = [*cli_cmd, "serve", "--emulator", "--port", "0", "--db", ":memory:", "--tools", tools]
    serving = [_serve_ready(serve) for _ in range(repeat)]
    listening = statistics.median(s[0] for s in serving)
    ready = statistics.median(s[1] for s in serving)
    print(f"  toolbridge --help          : {cli:7.1f} ms")
    print(f"  toolbridge run --help      : {run_help:7.1f} ms")
    print(f"  python -c 'import bridge'  : {bare:7.1f} ms")
    print(f"  toolbridge serve --emulator: {listening:7.1f} ms to listen, {ready:7.1f} ms to ready")
    if sdk is None:
        print(f"  python -c 'import appbuilder': skipped ({why_not})")
        return
    sdk_import = _median_runtime([str(sdk), "-c", "import appbuilder"], repeat)
    print(f"  python -c 'import appbuilder': {sdk_import:7.1f} ms")
    ratio = sdk_import / cli
    verdict = "met" if ratio >= 4 else "NOT met"
    print(f"  import appbuilder / toolbridge --help = {ratio:.2f} (target >= 4: {verdict})")
    print(f"  import appbuilder / toolbridge run --help = {sdk_import / run_help:.2f}")


def main() -> None:
    args = loop_args(__doc__, 100, {"bridge": bridge_worker, "requests": requests_worker})
    if args is None:
        return
    sdk, why_not = sdk_python("APPBUILDER", args.skip_sdk)
    loop_benchmark(args.conversations, args.rounds, sdk, why_not)
    startup_benchmark(sdk, why_not)


if __name__ == "__main__":
    main()
