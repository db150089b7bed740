"""`/readyz`'s platform watch: one check, then cached; re-checked only when stale."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest

from bridge.daemon.readiness import PlatformWatch
from bridge.errors import (
    AuthenticationError,
    InBandError,
    NotFoundError,
    PlatformConnectionError,
    RateLimitError,
    ServerError,
)
from bridge.platforms.base import Platform


class Checked:
    """A platform whose `check()` answers from a list, counting the calls."""

    def __init__(self, *outcomes: Exception | None) -> None:
        self.outcomes = list(outcomes)
        self.calls = 0

    def check(self) -> str:
        self.calls += 1
        outcome = self.outcomes.pop(0) if len(self.outcomes) > 1 else self.outcomes[0]
        if outcome is not None:
            raise outcome
        return "ok"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def watch_of(platform: Checked, clock: Clock) -> PlatformWatch:
    return PlatformWatch(cast(Platform, platform), ok_interval=300, fail_interval=15, clock=clock)


def test_probes_are_answered_from_the_last_check() -> None:
    async def scenario() -> None:
        down = PlatformConnectionError("cannot connect to http://127.0.0.1:1 (connection refused)")
        platform, clock = Checked(None, down, None), Clock()
        watch = watch_of(platform, clock)
        first = await watch.current()
        assert first is not None and first.ok and platform.calls == 1
        for _ in range(50):  # a load balancer probing: no platform call per probe
            await watch.current()
        assert platform.calls == 1
        clock.now += 300  # stale: the probe answers from the cache and re-checks behind it
        assert (await watch.current()).ok  # type: ignore[union-attr]
        await asyncio.sleep(0.05)
        assert platform.calls == 2
        failed = await watch.current()
        assert failed is not None and not failed.ok and "connection refused" in failed.reason
        clock.now += 15  # a failing platform is re-checked sooner
        await watch.current()
        await asyncio.sleep(0.05)
        assert platform.calls == 3 and (await watch.current()).ok  # type: ignore[union-attr]

    asyncio.run(scenario())


@pytest.mark.parametrize(
    ("error", "ready"),
    [
        (PlatformConnectionError("down"), False),
        (AuthenticationError("refused", status_code=401), False),
        (InBandError("app not found"), False),
        (ServerError("boom", status_code=503), False),
        (NotFoundError("no such app", status_code=404), False),  # AppBuilder: the app is unknown
        (RateLimitError("slow down", status_code=429), True),  # it answered
    ],
)
def test_what_counts_as_unreachable(error: Exception, ready: bool) -> None:
    async def scenario() -> Any:
        return await watch_of(Checked(error), Clock()).current()

    outcome = asyncio.run(scenario())
    assert outcome is not None and outcome.ok is ready
