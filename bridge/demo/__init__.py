"""`toolbridge demo`: a whole conversation on the embedded emulator, narrated.

Two turns in one conversation: the first makes the agent ask for two tool calls at once (run
in parallel), the second for a call whose arguments come from an earlier call's output
(chained). No credentials, no network beyond loopback. The same script and the same tools run
on every platform that has an emulator (``--platform``): only the wire differs.
"""

from __future__ import annotations

from importlib import resources
from typing import TYPE_CHECKING, Any

import yaml

from bridge.types import Event, ToolCallsRequested

if TYPE_CHECKING:
    from collections.abc import Callable

    from bridge.cli._render import Renderer
    from bridge.conversation import Result
    from bridge.platforms.registry import PlatformEntry

__all__ = ["TURNS", "demo_platforms", "run_demo"]

TURNS = ("北京和上海今天天气怎么样？", "请给张三订一间明天下午的会议室。")
_EXPECT = (("北京今天晴", "上海今天多云"), ("北京-3F-白塔", "MR-1024"))


def demo_platforms() -> list[str]:
    """The platforms the demo can run on: those with an embedded emulator."""
    from bridge.platforms.registry import PLATFORMS

    return [name for name, entry in PLATFORMS.items() if entry.emulator_protocol]


def run_demo(
    renderer: Renderer, platform: str = "appbuilder", *, switch_to: str | None = None
) -> list[Result]:
    """Run the demo on `platform`'s emulator, narrating to `renderer`; with `switch_to`, then
    ask the first question again on that platform's emulator, with the same tools.

    Raises:
        UsageError: Unknown platform.
        ConfigurationError: The platform has no emulator.
        RuntimeError: An answer is wrong.
    """
    from bridge.bridge import Bridge
    from bridge.demo import tools
    from bridge.emulator import Emulator
    from bridge.platforms.registry import get_entry

    entry = get_entry(platform)
    protocol = entry.require_emulator()
    switched = get_entry(switch_to) if switch_to is not None else None
    if switched is not None:
        switched.require_emulator()
    local_tools = [tools.get_weather, tools.find_employee, tools.book_meeting_room]
    say = renderer.err.print
    with Emulator(scenario=_scenario(entry, local_tools), protocol=protocol) as emu:
        say(
            "[bold]toolbridge demo[/bold]: a cloud agent calling tools that live on this machine.\n"
        )
        say(
            f"1. Started the {entry.short_title} emulator at {emu.base_url} "
            "(no credentials needed)."
        )
        adapter = entry.create(**entry.emulator_options(emu.env()))

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

        bridge = Bridge(adapter, local_tools, on_event=narrate)
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
    if switched is not None:
        results.append(_switch(switched, local_tools, narrate, renderer, len(TURNS) + 3))
    others = [name for name in demo_platforms() if name not in (platform, switch_to)]
    if others:
        say(
            "\nSame tools, another platform: "
            + ", ".join(f"`toolbridge demo --platform {name}`" for name in others)
            + "."
        )
    say("Next: `toolbridge run --help`, and README.md for using a real agent platform.")
    return results


def _switch(
    entry: PlatformEntry,
    local_tools: list[Any],
    narrate: Callable[[Event], None],
    renderer: Renderer,
    number: int,
) -> Result:
    """The first question again, on another platform's emulator: same tools, another wire."""
    from bridge.bridge import Bridge
    from bridge.emulator import Emulator

    say = renderer.err.print
    protocol = entry.require_emulator()
    with Emulator(scenario=_scenario(entry, local_tools), protocol=protocol) as emu:
        say(
            f"\n{number}. Switched platform: the {entry.short_title} emulator at "
            f"{emu.base_url} (--platform {entry.name}); the same tools, unchanged."
        )
        adapter = entry.create(**entry.emulator_options(emu.env()))
        with (
            Bridge(adapter, local_tools, on_event=narrate) as bridge,
            bridge.conversation() as conversation,
        ):
            say(f"   [bold]you:[/bold] {TURNS[0]}")
            renderer.waiting()
            result = conversation.ask(TURNS[0])
            renderer.close()
    missing = [text for text in _EXPECT[0] if text not in result.answer]
    if missing:
        raise RuntimeError(f"the demo's answer on {entry.name} lacks {missing}: {result.answer!r}")
    say(f"   Same answer over {entry.short_title}'s wire.")
    return result


def _scenario(entry: PlatformEntry, local_tools: list[Any]) -> dict[str, Any]:
    """The demo's script; an agent whose tools are configured server-side (a Coze bot's local
    plugin) also gets them declared, the same manifests the other platforms receive with each
    run."""
    from bridge.tools.toolbox import Toolbox

    text = resources.files("bridge.demo").joinpath("scenario.yaml").read_text(encoding="utf-8")
    scenario: dict[str, Any] = yaml.safe_load(text)
    if entry.emulator_tools is not None:
        scenario.update(entry.emulator_tools(Toolbox(local_tools).manifests("openai")))
    return scenario
