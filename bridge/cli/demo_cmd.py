"""`toolbridge demo`: run the shipped example on the embedded emulator."""

from __future__ import annotations

from bridge.cli._app import app
from bridge.cli._common import EXIT_FAILED, fail
from bridge.errors import BridgeError

__all__ = ["demo"]


@app.command()
def demo() -> None:
    """Run a narrated conversation on the embedded emulator (no credentials needed)."""
    from bridge.cli._render import Renderer
    from bridge.demo import run_demo

    renderer = Renderer(one_stream=True, indent="   ")
    renderer.answer_prefix = "   [bold]agent:[/bold] "
    try:
        run_demo(renderer)
    except BridgeError as exc:
        renderer.close()
        fail(exc)
    except RuntimeError as exc:
        renderer.close()
        fail(exc, code=EXIT_FAILED)
