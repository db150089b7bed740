"""`toolbridge demo`: run the shipped example on the embedded emulator."""

from __future__ import annotations

from typing import Annotated

import typer

from bridge.cli._app import app
from bridge.cli._common import EXIT_FAILED, fail
from bridge.errors import BridgeError

__all__ = ["demo"]


@app.command()
def demo(
    platform: Annotated[
        str | None,
        typer.Option(
            "--platform",
            help="Run the demo on this platform's emulator only (any platform with an embedded "
            "emulator: the same tools and script, another wire). Default: AppBuilder, then the "
            "first question again on the next platform's emulator.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Run a narrated conversation on the embedded emulator (no credentials needed)."""
    from bridge.cli._render import Renderer
    from bridge.demo import demo_platforms, run_demo
    from bridge.platforms.registry import DEFAULT_PLATFORM

    switch_to = None
    if platform is None:
        platform = DEFAULT_PLATFORM
        switch_to = next((name for name in demo_platforms() if name != platform), None)

    renderer = Renderer(one_stream=True, indent="   ")
    renderer.answer_prefix = "   [bold]agent:[/bold] "
    try:
        run_demo(renderer, platform, switch_to=switch_to)
    except BridgeError as exc:
        renderer.close()
        fail(exc)
    except RuntimeError as exc:
        renderer.close()
        fail(exc, code=EXIT_FAILED)
