"""The Coze loop's cost: toolbridge against cozepy's own loop (ratios from one run; never
pass/fail).

A two-turn tool conversation on one Coze emulator (a question -> ``requires_action`` -> the
local plugin runs -> ``submit_tool_outputs`` with a new stream -> the answer), three ways, each
in its own subprocess timing itself:

- `Bridge.ask` on ``--platform coze`` (`CozePlatform`: registry of tools, dispatcher, ledger,
  journal in memory);
- a minimal hand-written loop with `requests` making the same two requests (no validation,
  no retries: the floor);
- the official cozepy 0.20.0 loop of coze-py's ``examples/chat_local_plugin.py``
  (``chat.stream`` + ``submit_tool_outputs(stream=True)``), from ``.venv-cozepy/`` (see
  tests/support/sdk_venv.py).

All three make two requests: the chat, sent without a conversation id, opens the conversation
(toolbridge journals the id its first event names), then the tool outputs.

The three take turns for several rounds so machine noise hits all alike.

Run: `.venv/bin/python bench/bench_coze.py` (or `make bench`). Options: `--conversations N`,
`--rounds N`, `--skip-sdk`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from _harness import loop_args, report, sdk_python, take_turns, timed

__all__ = ["main"]

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
SCENARIO = {
    "settings": {"chunk_chars": 8},
    "coze": {"plugins": [TOOL]},
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

# coze-py's examples/chat_local_plugin.py loop, run with .venv-cozepy/bin/python.
SDK_WORKER = r"""
import json, os, sys, time
from cozepy import ChatEventType, Coze, Message, TokenAuth, ToolOutput

spec = json.loads(sys.argv[1])
coze = Coze(auth=TokenAuth(token=os.environ["COZE_API_TOKEN"]),
            base_url=os.environ["COZE_API_BASE"])

def get_weather(city):
    return "sunny, 21 C"

def handle_stream(stream, answer):
    for event in stream:
        if event.event == ChatEventType.CONVERSATION_MESSAGE_DELTA:
            answer.append(event.message.content)
        if event.event == ChatEventType.CONVERSATION_CHAT_REQUIRES_ACTION:
            outputs = []
            for call in event.chat.required_action.submit_tool_outputs.tool_calls:
                output = get_weather(**json.loads(call.function.arguments))
                outputs.append(ToolOutput(tool_call_id=call.id, output=output))
            handle_stream(coze.chat.submit_tool_outputs(
                conversation_id=event.chat.conversation_id, chat_id=event.chat.id,
                tool_outputs=outputs, stream=True), answer)

def conversation():
    answer = []
    handle_stream(coze.chat.stream(
        bot_id=os.environ["COZE_BOT_ID"], user_id="bench",
        additional_messages=[Message.build_user_question_text(spec["query"])]), answer)
    return "".join(answer)

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
    """`Bridge.ask` on the Coze platform (runs in a subprocess)."""
    from bridge import Bridge
    from bridge.platforms import create_platform

    def get_weather(city: str) -> str:
        """Current weather of a city.

        Args:
            city: City name
        """
        return "sunny, 21 C"

    env = spec["env"]
    platform = create_platform(
        "coze",
        token=env["COZE_API_TOKEN"],
        bot_id=env["COZE_BOT_ID"],
        base_url=env["COZE_API_BASE"],
    )
    with Bridge(platform, [get_weather]) as bridge:
        return timed(spec, lambda: bridge.ask(spec["query"]).answer)


def requests_worker(spec: dict[str, Any]) -> list[float]:
    """The floor: a hand-written loop with requests and json, nothing else."""
    import requests

    env = spec["env"]
    session = requests.Session()
    session.headers["Authorization"] = "Bearer " + env["COZE_API_TOKEN"]
    base = env["COZE_API_BASE"]

    def read(reply: requests.Response) -> tuple[str, dict[str, Any] | None]:
        answer, waiting, name = [], None, ""
        for line in reply.iter_lines(decode_unicode=True):
            if line.startswith("event:"):
                name = line[6:]
            elif line.startswith("data:") and name == "conversation.message.delta":
                message = json.loads(line[5:])
                if message["type"] == "answer":
                    answer.append(message["content"])
            elif line.startswith("data:") and name == "conversation.chat.requires_action":
                waiting = json.loads(line[5:])
        return "".join(answer), waiting

    def conversation() -> str:
        # The same two requests as toolbridge: the chat opens the conversation.
        body = {
            "bot_id": env["COZE_BOT_ID"],
            "user_id": "bench",
            "stream": True,
            "auto_save_history": True,
            "additional_messages": [
                {
                    "role": "user",
                    "type": "question",
                    "content": spec["query"],
                    "content_type": "text",
                }
            ],
        }
        with session.post(base + "/v3/chat", json=body, stream=True) as reply:
            _, chat = read(reply)
        assert chat is not None
        calls = chat["required_action"]["submit_tool_outputs"]["tool_calls"]
        outputs = [{"tool_call_id": c["id"], "output": "sunny, 21 C"} for c in calls]
        params = {"conversation_id": chat["conversation_id"], "chat_id": chat["id"]}
        with session.post(
            base + "/v3/chat/submit_tool_outputs",
            params=params,
            json={"tool_outputs": outputs, "stream": True},
            stream=True,
        ) as reply:
            answer, _ = read(reply)
        return answer

    return timed(spec, conversation)


def loop_benchmark(n: int, rounds: int, sdk: Path | None, why_not: str) -> None:
    """Time the three loops, alternating, and print medians and ratios."""
    from bridge.emulator import Emulator

    print(
        f"Coze two-turn tool conversation (stream), {rounds} alternating rounds of {n} runs "
        f"per variant after {WARMUP} warm-up runs; median ms per conversation"
    )
    with Emulator(protocol="coze", scenario=SCENARIO, faults="") as emulator:
        spec = {
            "env": emulator.env(),
            "query": QUERY,
            "expected": EXPECTED,
            "n": n,
            "warmup": WARMUP,
        }
        sdk_env = {**os.environ, **emulator.env(), "NO_PROXY": "127.0.0.1,localhost"}
        med = take_turns(__file__, spec, rounds, sdk, SDK_WORKER, sdk_env)
    report(
        med,
        bridge="toolbridge Bridge.ask (coze)",
        sdk="cozepy chat_local_plugin loop",
        why_not=why_not,
    )


def main() -> None:
    args = loop_args(__doc__, 20, {"bridge": bridge_worker, "requests": requests_worker})
    if args is None:
        return
    sdk, why_not = sdk_python("COZE", args.skip_sdk)
    loop_benchmark(args.conversations, args.rounds, sdk, why_not)


if __name__ == "__main__":
    main()
