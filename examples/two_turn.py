"""The classic AppBuilder "two-turn" tool pattern, automated by the loop.

With the official SDK you run the query with `tools=[...]`, read the interrupt's `tool_calls`,
call your function, then run again with `tool_outputs=[...]`. `Bridge.ask` does all of that
(and any further rounds) for you.

Run it: `python examples/two_turn.py --emulator` (offline), or without `--emulator` against the
app of APPBUILDER_TOKEN and APPBUILDER_APP_ID (whose agent should have this tool in mind).
"""

from __future__ import annotations

import sys

from bridge import Bridge, Platform, Result, manifest, open_platform

# Scripts the emulated agent; a real AppBuilder agent decides by itself.
SCENARIO = {
    "rules": [
        {
            "match": r"(?P<name>张三|李四).*(电话|phone)",
            "steps": [{"tool": "get_phone_number", "arguments": {"name": "{name}"}}],
            "answer": "{name}的电话是 {outputs.get_phone_number}。",
        }
    ]
}

_DIRECTORY = {"张三": "010-8888-0001", "李四": "021-6666-0002"}


@manifest(description="根据姓名查询同事的办公电话。")
def get_phone_number(name: str) -> str:
    """Look up a colleague's office phone number.

    Args:
        name: 同事的姓名，例如：张三
    """
    return _DIRECTORY.get(name, "未找到")


def main(platform: Platform) -> list[Result]:
    """Ask two questions in one conversation; each takes one tool round."""
    with Bridge(platform, [get_phone_number]) as bridge, bridge.conversation() as conversation:
        return [conversation.ask("张三的电话是多少？"), conversation.ask("那李四的电话呢？")]


if __name__ == "__main__":
    # --emulator: offline, on the embedded emulator scripted by SCENARIO; without it, your app
    # (APPBUILDER_TOKEN and APPBUILDER_APP_ID).
    with open_platform(emulator="--emulator" in sys.argv[1:], scenario=SCENARIO) as platform:
        for result in main(platform):
            print(result.answer, f"(tool rounds: {result.rounds})")
