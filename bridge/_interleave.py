"""`interleave`: the items of several blocking iterators, on the caller's thread, as they come.

The loop runs the calls of a batch that may run at once while others wait for a person's
decision (minutes): each source is drained on a thread of its own, and its items (the calls'
start and finish events) reach the caller in the order they happen.
"""

from __future__ import annotations

import contextvars
import queue
import threading
from collections.abc import Callable, Generator, Iterator, Sequence
from typing import TypeVar, cast

__all__ = ["interleave"]

T = TypeVar("T")

_ITEM, _ERROR, _DONE = 0, 1, 2


def interleave(
    sources: Sequence[Callable[[], Iterator[T]]],
    *,
    stop: threading.Event | None = None,
    name: str = "toolbridge-interleave",
) -> Generator[T, None, None]:
    """Yield every item of every source, as each arrives; return once all are drained.

    Args:
        sources: each makes one iterator, drained on its own thread (with a copy of the
            caller's context variables).
        stop: set when this generator ends early (a source raised, or the caller stopped
            reading): sources that wait on it give up; the others stop after their current
            item. Threads are not joined then: a source blocked in a tool ends on its own.
        name: the threads' name.

    Raises:
        Exception: the first exception a source raised.
    """
    stop = stop if stop is not None else threading.Event()
    items: queue.SimpleQueue[tuple[int, object]] = queue.SimpleQueue()

    def drain(source: Callable[[], Iterator[T]]) -> None:
        try:
            iterator = source()
            for item in iterator:
                items.put((_ITEM, item))
                if stop.is_set():
                    close = getattr(iterator, "close", None)
                    if close is not None:
                        close()
                    break
        except BaseException as exc:  # handed to the caller's thread, raised there
            items.put((_ERROR, exc))
        finally:
            items.put((_DONE, None))

    for index, source in enumerate(sources):
        context = contextvars.copy_context()
        thread = threading.Thread(
            target=context.run, args=(drain, source), name=f"{name}-{index}", daemon=True
        )
        thread.start()
    remaining = len(sources)
    try:
        while remaining:
            kind, value = items.get()
            if kind == _ITEM:
                yield cast(T, value)
            elif kind == _ERROR:
                assert isinstance(value, BaseException)
                raise value
            else:
                remaining -= 1
    finally:
        stop.set()
