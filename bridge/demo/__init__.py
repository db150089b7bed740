"""`toolbridge demo`: a whole conversation on the embedded emulator, narrated.

Two turns in one conversation: the first makes the agent ask for two tool calls at once (run
in parallel), the second for a call whose arguments come from an earlier call's output
(chained). No credentials, no network beyond loopback.
"""

from __future__ import annotations

from importlib import resources
from typing import TYPE_CHECKING

from bridge.types import Event, ToolCallsRequested

if TYPE_CHECKING:
    from bridge.cli._render import Renderer
    from bridge.conversation import Result

__all__ = ["TURNS", "run_demo"]

TURNS = ("北京和上海今天天气怎么样？", "请给张三订一间明天下午的会议室。")
_EXPECT = (("北京今天晴", "上海今天多云"), ("北京-3F-白塔", "MR-1024"))


def run_demo(renderer: Renderer) -> list[Result]:
    """Run the demo, narrating to `renderer`; raises `RuntimeError` if an answer is wrong."""
    from bridge.conversation import Bridge
    from bridge.demo import tools
    from bridge.emulator import Emulator
    from bridge.platforms.appbuilder import AppBuilderPlatform

    say = renderer.err.print
    scenario = resources.files("bridge.demo").joinpath("scenario.yaml")
    with resources.as_file(scenario) as scenario_path, Emulator(scenario=scenario_path) as emu:
        say(
            "[bold]toolbridge demo[/bold]: a cloud agent calling tools that live on this machine.\n"
        )
        say(f"1. Started the AppBuilder emulator at {emu.base_url} (no credentials needed).")
        platform = AppBuilderPlatform(app_id=emu.app_id, token=emu.token, base_url=emu.base_url)

        rounds_this_turn = [0]

        def narrate(event: Event) -> None:
            if isinstance(event, ToolCallsRequested):
                renderer.close()
                rounds_this_turn[0] += 1
                count = len(event.batch.calls)
                if count > 1:
                    line = (
                        f"the agent asks for {count} calls at once: run in parallel, "
                        "answered in one request"
                    )
                elif rounds_this_turn[0] > 1:
                    line = "the agent chains a call whose arguments come from the previous output"
                else:
                    line = "the agent asks for a tool call: run here, its output posted back"
                say(f"   [dim]{line}[/dim]")
            renderer.handle(event)

        bridge = Bridge(
            platform,
            [tools.get_weather, tools.find_employee, tools.book_meeting_room],
            on_event=narrate,
        )
        say(
            f"2. Registered {len(bridge.toolbox)} local tools: {', '.join(bridge.toolbox.names())}."
        )
        results: list[Result] = []
        with bridge, bridge.conversation() as conversation:
            for number, (query, expected) in enumerate(zip(TURNS, _EXPECT, strict=True), start=3):
                rounds_this_turn[0] = 0
                say(f"\n{number}. [bold]you:[/bold] {query}")
                renderer.waiting()
                result = conversation.ask(query)
                renderer.close()
                missing = [text for text in expected if text not in result.answer]
                if missing:
                    raise RuntimeError(f"the demo's answer lacks {missing}: {result.answer!r}")
                results.append(result)
        calls = sum(len(r.tool_runs) for r in results)
        rounds = sum(r.rounds for r in results)
        say(
            f"\nDone: {len(results)} turns, {rounds} tool rounds, {calls} tool calls in "
            f"conversation {results[0].conversation_id}."
        )
        say("Next: `toolbridge run --help`, and README.md for using a real AppBuilder app.")
        return results
