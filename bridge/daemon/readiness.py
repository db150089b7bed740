"""Is the agent platform reachable? A cached answer for `/readyz`, never a call per probe.

Load balancers probe readiness every few seconds, and a platform call can cost money or clutter
(AppBuilder's check opens a conversation). So `/readyz` answers from the outcome of the last
`Platform.check()` and starts a new one (in the background, one at a time) only when that
outcome is older than `ok_interval` (5 minutes) after a success or `fail_interval` (15 s) after
a failure: a daemon whose platform went away is marked not ready within one probe after the
next check, and one whose platform came back is ready again within `fail_interval`, without
any traffic (a load balancer sends none to a replica that is not ready). Only the first probe
waits for a check (at most `first_wait` seconds), so a daemon never claims to be ready before
anything was verified.

Only "no message can get an answer" counts as unreachable: no connection, a timeout, a refused
key, a model or app the platform does not serve (an AppBuilder 404 or in-band error), a 5xx. A
platform that answers anything else (e.g. a 404 for `GET /v1/models` on a server without a
model list, a 429) is reachable.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from bridge.errors import (
    AuthenticationError,
    BridgeError,
    ConfigurationError,
    InBandError,
    NotFoundError,
    PlatformConnectionError,
    PlatformStatusError,
)
from bridge.platforms.base import Platform

__all__ = ["PlatformWatch", "Reachability"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Reachability:
    """The outcome of one check: `ok`, or why not (`reason`), and when (monotonic seconds)."""

    ok: bool
    reason: str
    at: float


class PlatformWatch:
    """The cached reachability of one platform (see the module docstring for the policy)."""

    def __init__(
        self,
        platform: Platform,
        *,
        ok_interval: float = 300.0,
        fail_interval: float = 15.0,
        first_wait: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.platform = platform
        self.ok_interval = ok_interval
        self.fail_interval = fail_interval
        self.first_wait = first_wait
        self._clock = clock
        self.last: Reachability | None = None
        self._task: asyncio.Task[Reachability] | None = None

    async def current(self) -> Reachability | None:
        """The latest outcome (None if the first check is still running after `first_wait`);
        starts a fresh check in the background when that outcome is stale."""
        if self.last is None:
            task = self._refresh()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(task), self.first_wait)
            return self.last
        interval = self.ok_interval if self.last.ok else self.fail_interval
        if self._clock() - self.last.at >= interval:
            self._refresh()
        return self.last

    def _refresh(self) -> asyncio.Task[Reachability]:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._check())
        return self._task

    async def _check(self) -> Reachability:
        try:
            await asyncio.to_thread(self.platform.check)
            outcome = Reachability(True, "", self._clock())
        except (
            PlatformConnectionError,
            AuthenticationError,
            ConfigurationError,
            InBandError,
        ) as exc:
            outcome = Reachability(False, str(exc), self._clock())
        except NotFoundError as exc:
            # An OpenAI-compatible server without GET /models still answers chat completions;
            # an AppBuilder app that is not found answers nothing useful.
            from bridge.platforms.openai_chat import OpenAIChatPlatform

            listless = isinstance(self.platform, OpenAIChatPlatform)
            outcome = Reachability(listless, "" if listless else str(exc), self._clock())
        except PlatformStatusError as exc:
            broken = exc.status_code is not None and exc.status_code >= 500
            outcome = Reachability(not broken, str(exc) if broken else "", self._clock())
        except BridgeError:
            outcome = Reachability(True, "", self._clock())  # it answered
        except Exception as exc:  # an adapter's bug must not take readiness down with it
            logger.warning("checking the platform failed unexpectedly: %r", exc)
            outcome = Reachability(False, f"checking the platform failed: {exc!r}", self._clock())
        if self.last is None or outcome.ok != self.last.ok:
            if outcome.ok:
                logger.info("the agent platform is reachable")
            else:
                logger.warning("the agent platform is unreachable: %s", outcome.reason)
        self.last = outcome
        return outcome
