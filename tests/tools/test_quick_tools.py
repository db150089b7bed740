"""Quick sync tools skip the worker hand-off (`bridge.tools._threaded.QuickTools`).

Which thread ran a call is observed, never how long it took. The tests set the threshold
far above what a loaded machine's hand-off takes, so that a no-op always counts as quick, and
sleep far past it where a call must count as slow.
"""

from __future__ import annotations

import contextvars
import threading
import time

from bridge.tools.dispatch import Dispatcher
from bridge.tools.toolbox import Toolbox
from bridge.types import ToolCall

THRESHOLD = 0.5
SLOW = 1.0
"""Far above `THRESHOLD`."""

MARK: contextvars.ContextVar[str] = contextvars.ContextVar("MARK", default="unset")


def _call(name: str, call_id: str = "1", **arguments: object) -> ToolCall:
    return ToolCall(call_id=call_id, name=name, arguments=dict(arguments))


def test_a_quick_tool_runs_on_the_callers_thread_after_a_streak() -> None:
    threads: list[threading.Thread] = []
    marks: list[str] = []

    def where(slow: bool = False) -> str:
        """Report the thread."""
        threads.append(threading.current_thread())
        marks.append(MARK.get())
        if slow:
            time.sleep(SLOW)
        return "ok"

    with Dispatcher(Toolbox([where])) as dispatcher:
        dispatcher._quick.threshold = THRESHOLD
        streak = dispatcher._quick.streak
        MARK.set("caller's")
        for i in range(streak + 2):
            [run] = dispatcher.run([_call("where", str(i))])
            assert run.output == "ok"
        me = threading.current_thread()
        assert all(t is not me for t in threads[:streak]), "on workers until known quick"
        assert threads[streak:] == [me, me]
        # Inline, it still sees an empty context, as on a worker.
        assert set(marks) == {"unset"}

        # One slow call (inline, as the tool was known quick) sends it back to the workers.
        threads.clear()
        dispatcher.run([_call("where", "slow", slow=True)])
        dispatcher.run([_call("where", "after")])
        assert threads[0] is me and threads[1] is not me


def test_calls_of_one_batch_never_run_inline() -> None:
    """Two calls of a batch may wait for each other: they keep their own threads."""
    barrier = threading.Barrier(2, timeout=10)
    threads: set[threading.Thread] = set()

    def meet() -> str:
        """Wait for the other call."""
        threads.add(threading.current_thread())
        barrier.wait()
        return "met"

    with Dispatcher(Toolbox([meet])) as dispatcher:
        for _ in range(dispatcher._quick.streak):
            dispatcher._quick.observe("meet", 0.0)  # even a tool known quick
        assert dispatcher._quick.is_quick("meet")
        runs = dispatcher.run([_call("meet", "a"), _call("meet", "b")])
        assert [r.output for r in runs] == ["met", "met"]
        assert threading.current_thread() not in threads and len(threads) == 2


def test_an_inline_call_past_its_timeout_is_recorded_as_timed_out() -> None:
    def nap(seconds: float = 0.0) -> str:
        """Sleep."""
        time.sleep(seconds)
        return "woke"

    toolbox = Toolbox()
    toolbox.add(nap, timeout=THRESHOLD)
    with Dispatcher(toolbox) as dispatcher:
        dispatcher._quick.threshold = THRESHOLD
        for i in range(dispatcher._quick.streak):
            assert dispatcher.run([_call("nap", str(i))])[0].output == "woke"
        [run] = dispatcher.run([_call("nap", "late", seconds=SLOW)])
        assert run.error == "timeout"
        assert "timed out" in run.output
