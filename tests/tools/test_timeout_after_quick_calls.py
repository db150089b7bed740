"""A tool that was quick many times and then hangs is still abandoned at its timeout.

A worker hand-off costs microseconds; running "known quick" tools on the caller's thread
instead was tried (issue 14) and withdrawn: such a call cannot be abandoned, so one that hangs
after a streak of quick calls would hold its conversation until it returned. This pins the
guarantee. Nothing here measures time: the hanging call blocks on an event the test sets only
after the dispatcher has answered, so a dispatcher that waited for it would never answer.
"""

from __future__ import annotations

import threading

from bridge import manifest
from bridge.tools.dispatch import Dispatcher
from bridge.tools.toolbox import Toolbox
from bridge.types import ToolCall

RELEASE = threading.Event()
HANG = threading.Event()
RETURNED = threading.Event()
"""Set when the hanging call returns: after the dispatcher answered, if it abandoned it."""


@manifest(description="Answer at once, unless told to hang.", timeout=0.2)
def echo(text: str) -> str:
    """Echo.

    Args:
        text: Anything.
    """
    if HANG.is_set():
        RELEASE.wait(60)  # far past the timeout; the test releases it once answered
        RETURNED.set()
    return text


def test_a_tool_that_hangs_after_quick_calls_is_still_abandoned_at_its_timeout() -> None:
    toolbox = Toolbox([echo])
    dispatcher = Dispatcher(toolbox)
    try:
        for n in range(20):
            [run] = dispatcher.run(
                [ToolCall(call_id=f"q{n}", name="echo", arguments={"text": "x"})]
            )
            assert run.error is None and run.output == "x"
        HANG.set()
        [late] = dispatcher.run([ToolCall(call_id="hang", name="echo", arguments={"text": "y"})])
        still_blocked = not RETURNED.is_set()
    finally:
        RELEASE.set()
        dispatcher.close()
    assert still_blocked
    assert late.error == "timeout", late
