"""The Responses loop's cost: toolbridge against the openai package's own loop (ratios from one
run; never pass/fail).

A two-turn tool conversation on one Responses emulator (a question -> a ``function_call``
item -> the tool runs -> its ``function_call_output`` -> the answer), streamed, in several
ways, each in its own subprocess timing itself:

- `Bridge.ask` on ``--platform responses`` (`OpenAIResponsesPlatform`, ``store=True``:
  outputs chained by ``previous_response_id``; registry of tools, dispatcher, ledger, journal
  in memory);
- (CPU only) the adapter alone, `OpenAIResponsesPlatform.start`/`submit` driven by hand;
- a minimal hand-written loop with `requests` (no validation, no retries, no sequence checks:
  the floor);
- the official openai 3.54.0 ``ResponsesToolRunner.run(..., stream=True)`` from
  ``.venv-openai/`` (see tests/support/sdk_venv.py), which resends the whole history instead
  of chaining.

`Bridge.ask`, the hand-written loop and the official runner take turns for several rounds so
machine noise hits all alike, timing the wall clock. Then `Bridge.ask`, the adapter alone and
the hand-written loop take turns again, each timing its process's CPU (all its threads) per
conversation: what a conversation costs the client whatever the emulator's speed (the
emulator runs in this process, apart from them all).

Run: `.venv/bin/python bench/bench_responses.py`. Options: `--conversations N`, `--rounds N`,
`--skip-sdk`.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _harness import (
    count_instructions,
    loop_args,
    report,
    run_worker,
    sdk_python,
    take_turns,
    timed,
)

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
TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "Current weather of a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string", "description": "City name"}},
        "required": ["city"],
        "additionalProperties": False,
    },
    "strict": True,
}

# The openai package's ResponsesToolRunner, run with .venv-openai/bin/python.
SDK_WORKER = r"""
import json, os, sys, time
import pydantic
from openai import OpenAI
from openai.lib._tools import pydantic_responses_function_tool
from openai.lib.responses_tool_runner import RegisteredFunction, ResponsesToolRunner

class GetWeather(pydantic.BaseModel):
    city: str

spec = json.loads(sys.argv[1])
client = OpenAI(max_retries=0)
tool = pydantic_responses_function_tool(
    GetWeather, name="get_weather", description="Current weather of a city"
)
runner = ResponsesToolRunner(
    functions=[RegisteredFunction.from_tool(tool, execute=lambda args: "sunny, 21 C")]
)

def conversation():
    final = runner.run(
        client, {"model": os.environ["OPENAI_MODEL"], "input": spec["query"]}, stream=True
    )
    return final.output_text

for _ in range(spec["warmup"]):
    conversation()
wall = []
for _ in range(spec["n"]):
    start = time.perf_counter()
    answer = conversation()
    wall.append(time.perf_counter() - start)
    if answer != spec["expected"]:
        raise SystemExit("unexpected answer: %r" % answer)
print(json.dumps(wall))
"""


def bridge_worker(spec: dict[str, Any]) -> list[float]:
    """`Bridge.ask` with a decorated tool on the Responses adapter (runs in a subprocess)."""
    from bridge import Bridge, manifest
    from bridge.platforms.openai_responses import OpenAIResponsesPlatform

    @manifest(description="Current weather of a city")
    def get_weather(city: str) -> str:
        """Weather.

        Args:
            city: City name
        """
        return "sunny, 21 C"

    platform = OpenAIResponsesPlatform(spec["base_url"], spec["model"], spec["api_key"])
    with Bridge(platform, [get_weather]) as bridge:
        return _timed(spec, lambda: bridge.ask(spec["query"]).answer)


def requests_worker(spec: dict[str, Any]) -> list[float]:
    """The floor: a hand-written streamed loop with requests and json, nothing else."""
    import requests

    session = requests.Session()
    url = spec["base_url"] + "/responses"
    headers = {"Authorization": "Bearer " + spec["api_key"]}

    def respond(body: dict[str, Any]) -> dict[str, Any]:
        with session.post(url, json=body, headers=headers, stream=True) as reply:
            for line in reply.iter_lines():
                if line.startswith(b"data:"):
                    event = json.loads(line[5:])
                    if event["type"] == "response.completed":
                        completed: dict[str, Any] = event["response"]
        return completed

    def conversation() -> str:
        common = {"model": spec["model"], "tools": [spec["tool"]], "stream": True}
        first = respond({**common, "input": spec["query"]})
        outputs = [
            {"type": "function_call_output", "call_id": item["call_id"], "output": "sunny, 21 C"}
            for item in first["output"]
            if item["type"] == "function_call"
        ]
        final = respond({**common, "input": outputs, "previous_response_id": first["id"]})
        return "".join(
            part["text"]
            for item in final["output"]
            if item["type"] == "message"
            for part in item["content"]
        )

    return _timed(spec, conversation)


def adapter_worker(spec: dict[str, Any]) -> list[float]:
    """The adapter alone, driven by hand as the hand-written loop drives `requests`: no
    registry, dispatcher, ledger or journal (where `Bridge.ask`'s cost over the floor is)."""
    from bridge.platforms.openai_responses import OpenAIResponsesPlatform
    from bridge.types import RunFinished, ToolCallsRequested, ToolResult

    tool = {
        "type": "function",
        "function": {k: v for k, v in spec["tool"].items() if k not in ("type", "strict")},
    }
    platform = OpenAIResponsesPlatform(spec["base_url"], spec["model"], spec["api_key"])

    def conversation() -> str:
        conv = platform.create_conversation()
        last = list(platform.start(conv, spec["query"], tools=[tool]))[-1]
        while isinstance(last, ToolCallsRequested):
            batch = last.batch
            results = [ToolResult(call_id=c.call_id, output="sunny, 21 C") for c in batch.calls]
            last = list(platform.submit(conv, batch, results))[-1]
        return last.answer if isinstance(last, RunFinished) else repr(last)

    with platform:
        return _timed(spec, conversation)


def _timed(spec: dict[str, Any], conversation: Callable[[], str]) -> list[float]:
    """`timed`, or with ``spec["clock"] == "cpu"`` the process's CPU seconds of each
    conversation (every thread's: the tool runs in a worker thread); with ``"instructions"``
    (under callgrind: `bench_instructions`) the instructions are counted, nothing timed."""
    if spec.get("clock") == "instructions":

        def checked() -> None:
            answer = conversation()
            if answer != spec["expected"]:
                raise SystemExit(f"unexpected answer: {answer!r}")

        count_instructions(spec["warmup"], spec["n"], checked)
        return []
    if spec.get("clock") != "cpu":
        return timed(spec, conversation)
    for _ in range(spec["warmup"]):
        conversation()
    cpu: list[float] = []
    for _ in range(spec["n"]):
        start = time.process_time()
        answer = conversation()
        cpu.append(time.process_time() - start)
        if answer != spec["expected"]:
            raise SystemExit(f"unexpected answer: {answer!r}")
    return cpu


def cpu_turns(spec: dict[str, Any], rounds: int) -> dict[str, float]:
    """Median CPU ms per conversation of the ``bridge``, ``adapter`` and ``requests`` workers,
    taking turns for `rounds` rounds."""
    arg = json.dumps({**spec, "clock": "cpu"})
    times: dict[str, list[float]] = {"bridge": [], "adapter": [], "requests": []}
    for _ in range(rounds):
        for kind in times:
            times[kind] += run_worker([sys.executable, __file__, "--worker", kind, "--spec", arg])
    return {k: statistics.median(v) * 1000 for k, v in times.items()}


def loop_benchmark(n: int, rounds: int, sdk: Path | None, why_not: str) -> None:
    """Time the three loops on one emulator and print medians and ratios."""
    from bridge.emulator import Emulator

    print(
        f"two-turn tool conversation on the Responses emulator (stream), {rounds} alternating "
        f"rounds of {n} runs per variant after {WARMUP} warm-up runs; median ms per conversation"
    )
    with Emulator(protocol="responses", scenario=SCENARIO, faults="") as emulator:
        env = emulator.env()
        spec = {
            "base_url": env["OPENAI_BASE_URL"],
            "api_key": env["OPENAI_API_KEY"],
            "model": env["OPENAI_MODEL"],
            "query": QUERY,
            "tool": TOOL,
            "expected": EXPECTED,
            "n": n,
            "warmup": WARMUP,
        }
        sdk_env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
        sdk_env.update(env)
        med = take_turns(__file__, spec, rounds, sdk, SDK_WORKER, sdk_env)
        cpu = cpu_turns(spec, rounds)
    report(med, bridge="toolbridge Bridge.ask", sdk="openai ResponsesToolRunner", why_not=why_not)
    floor = cpu["requests"]
    print(
        f"  CPU of the client process, median ms per conversation: hand-written {floor:.2f}, "
        f"the adapter driven by hand {cpu['adapter']:.2f}, Bridge.ask {cpu['bridge']:.2f}"
    )
    print(
        f"  Bridge.ask / hand-written CPU = {cpu['bridge'] / floor:.3f}  (the adapter alone: "
        f"{cpu['adapter'] / floor:.3f}; the rest is the loop: journal, dispatcher, ledger)"
    )


def main() -> None:
    workers = {"bridge": bridge_worker, "adapter": adapter_worker, "requests": requests_worker}
    args = loop_args(__doc__, 20, workers)
    if args is None:
        return
    sdk, why_not = sdk_python("OPENAI", args.skip_sdk)
    loop_benchmark(args.conversations, args.rounds, sdk, why_not)


if __name__ == "__main__":
    main()
