"""Rate limits per caller, in this process: at most N messages or tool calls per window.

A sliding window: a caller over ``30/minute`` is refused while 30 of its events fall within
the last 60 seconds, and may go on as soon as the oldest of them is a minute old (the refusal
says when). Limits count per process: with several daemons, each counts its own.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Literal

from bridge.access.errors import RateLimitedError
from bridge.access.principal import Principal, Rate

__all__ = ["RateKind", "RateLimiter"]

RateKind = Literal["messages", "tool_calls"]

_WORDS: dict[str, str] = {"messages": "messages", "tool_calls": "tool calls"}


class RateLimiter:
    """Counts each caller's messages and tool calls against its `RateLimits`.

    Args:
        clock: Seconds from a monotonic clock (`time.monotonic`; tests pass a fake one).
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._events: dict[tuple[str, str], deque[float]] = {}

    def check(self, principal: Principal, kind: RateKind) -> None:
        """Count one event of `kind` for `principal`, or refuse it.

        Unlimited when the principal has no rate for `kind`. A refused event is not counted.

        Raises:
            RateLimitedError: the caller is over its limit; `retry_after` is the whole number
                of seconds (at least 1) until it is not.
        """
        rate: Rate | None = getattr(principal.rates, kind)
        if rate is None:
            return
        key = (principal.name, kind)
        with self._lock:
            now = self._clock()
            events = self._events.setdefault(key, deque())
            while events and events[0] <= now - rate.seconds:
                events.popleft()
            if len(events) < rate.count:
                events.append(now)
                return
            wait = events[0] + rate.seconds - now
        retry_after = max(1, math.ceil(wait))
        raise RateLimitedError(
            f"caller {principal.name!r} is over its limit of {rate} {_WORDS[kind]}; "
            f"retry in {retry_after} s",
            retry_after=retry_after,
        )

    def forget(self, name: str | None = None) -> None:
        """Drop the counts of the caller `name` (of every caller when None)."""
        with self._lock:
            if name is None:
                self._events.clear()
            else:
                for key in [key for key in self._events if key[0] == name]:
                    del self._events[key]
