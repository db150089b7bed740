"""When to retry a request to a platform and how long to wait: pure decisions, no I/O.

The HTTP kernel's loop (`bridge.platforms._transport`) asks `should_retry` after each failed
attempt and sleeps for `delay`; nothing here sleeps, reads a socket or logs. A request is only
ever retried before any byte of a streamed answer has been read: once the server has started
answering, a retry could run the agent (and its side effects) twice.
"""

from __future__ import annotations

import contextlib
import math
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from typing import Literal

__all__ = [
    "BACKOFF_ENV",
    "DEFAULT_BACKOFF_BASE",
    "DEFAULT_BACKOFF_MAX",
    "DEFAULT_JITTER",
    "DEFAULT_MAX_RETRIES",
    "DEFAULT_MAX_RETRY_AFTER",
    "RETRY_STATUSES",
    "ExcKind",
    "RetryNotice",
    "RetryPolicy",
]

DEFAULT_MAX_RETRIES = 3
DEFAULT_BACKOFF_BASE = 0.5
DEFAULT_BACKOFF_MAX = 8.0
DEFAULT_JITTER = 0.25
DEFAULT_MAX_RETRY_AFTER = 120.0

BACKOFF_ENV = "TOOLBRIDGE_RETRY_BACKOFF"
"""Seconds before the first retry when a policy is not given one (default
`DEFAULT_BACKOFF_BASE`): a process-wide setting, for instance so tests do not wait."""

RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
"""HTTP statuses worth another attempt: rate limiting and transient server failures."""

ExcKind = Literal["connect", "timeout", "read", "other"]
"""How a request failed without a status: `connect` means the request never reached the server
(refused, DNS, connect timeout) and is the only kind that is safe to resend."""


@dataclass(frozen=True)
class RetryNotice:
    """A client is about to wait `delay` seconds and try a request again: what a person
    watching (the CLI) is told, through `RetryPolicy.on_retry`.

    Attributes:
        attempt: The attempt about to be made (2 for the first retry).
        attempts: The most attempts the policy allows (`max_retries + 1`).
        delay: Seconds until that attempt.
        status: The HTTP status of the failed attempt; None when there was no answer.
        reason: Why it failed, in a few words: "cannot connect to http://host:port
            (connection refused)" when there was no answer.
    """

    attempt: int
    attempts: int
    delay: float
    status: int | None = None
    reason: str = ""

    def __str__(self) -> str:
        if self.status == 429:
            what = f"platform rate limit (HTTP {self.status})"
        elif self.status == 503:
            what = f"platform busy (HTTP {self.status})"
        elif self.status is not None:
            what = f"platform error (HTTP {self.status})"
        else:
            what = self.reason or "no answer"
        return f"{what}, retrying in {self.delay:.1f} s (attempt {self.attempt} of {self.attempts})"


def _backoff_base() -> float:
    """`DEFAULT_BACKOFF_BASE`, or the seconds `BACKOFF_ENV` gives."""
    value = os.environ.get(BACKOFF_ENV, "").strip()
    if not value:
        return DEFAULT_BACKOFF_BASE
    try:
        return float(value)
    except ValueError:
        raise ValueError(f"{BACKOFF_ENV}={value!r}: expected seconds, e.g. 0.5") from None


@dataclass(frozen=True)
class RetryPolicy:
    """A shareable, immutable retry policy (exponential backoff with jitter, `Retry-After`).

    Attributes:
        max_retries: Retries after the first attempt (0 disables retrying).
        backoff_base: Delay before the first retry, doubled for each further retry (default:
            `DEFAULT_BACKOFF_BASE`, or ``$TOOLBRIDGE_RETRY_BACKOFF`` seconds when set).
        backoff_max: Upper bound of the backoff delay.
        jitter: Fraction of the backoff delay removed at random (0 = none, 0.25 = up to 25 %),
            so that many clients do not retry in lockstep.
        max_retry_after: A `Retry-After` longer than this many seconds means "give up".
        rand: Source of randomness in [0, 1); injectable for deterministic tests.
        now: Wall clock in epoch seconds, used for HTTP-date `Retry-After` values.
        on_retry: Told before each wait (a `RetryNotice`), so a person is not left staring at
            a silent terminal while the client backs off; an exception it raises is ignored.
    """

    max_retries: int = DEFAULT_MAX_RETRIES
    backoff_base: float = field(default_factory=_backoff_base)
    backoff_max: float = DEFAULT_BACKOFF_MAX
    jitter: float = DEFAULT_JITTER
    max_retry_after: float = DEFAULT_MAX_RETRY_AFTER
    rand: Callable[[], float] = field(default=random.random, compare=False, repr=False)
    now: Callable[[], float] = field(default=time.time, compare=False, repr=False)
    on_retry: Callable[[RetryNotice], None] | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        problems = []
        if self.max_retries < 0:
            problems.append(f"max_retries must be >= 0 (got {self.max_retries})")
        if self.backoff_base < 0 or self.backoff_max < 0:
            problems.append(
                f"backoff_base and backoff_max must be >= 0 "
                f"(got {self.backoff_base}, {self.backoff_max})"
            )
        if not 0 <= self.jitter <= 1:
            problems.append(f"jitter must be between 0 and 1 (got {self.jitter})")
        if self.max_retry_after < 0:
            problems.append(f"max_retry_after must be >= 0 (got {self.max_retry_after})")
        if problems:
            # ValueError rather than a bridge error: this module stays free of imports.
            raise ValueError("invalid RetryPolicy: " + "; ".join(problems))

    def should_retry(
        self, attempt: int, status: int | None = None, exc_kind: ExcKind | None = None
    ) -> bool:
        """Whether a failed attempt may be retried.

        Args:
            attempt: Retries already made for this request (0 after the first failure).
            status: The HTTP status of the failed attempt, if the server answered.
            exc_kind: How the attempt failed when there was no status.

        Returns:
            True for connect errors and for 429/500/502/503/504 while retries remain.
        """
        if attempt >= self.max_retries:
            return False
        if status is not None:
            return status in RETRY_STATUSES
        return exc_kind == "connect"

    def delay(self, attempt: int, retry_after_header: str | None = None) -> float:
        """Seconds to wait before retry number `attempt + 1`.

        A valid `Retry-After` (seconds or an HTTP-date) wins over the backoff; one longer than
        `max_retry_after` returns `math.inf`, which means "do not retry".

        Args:
            attempt: Retries already made for this request (0 before the first retry).
            retry_after_header: The raw `Retry-After` header of the failed response, if any.
        """
        advised = self.parse_retry_after(retry_after_header)
        if advised is not None:
            return advised if advised <= self.max_retry_after else math.inf
        backoff = min(self.backoff_base * (2.0 ** max(attempt, 0)), self.backoff_max)
        return backoff * (1.0 - self.jitter * self.rand())

    def announce(
        self, attempt: int, delay: float, *, status: int | None = None, reason: str = ""
    ) -> None:
        """Tell `on_retry` that retry number `attempt + 1` comes after `delay` seconds."""
        if self.on_retry is None:
            return
        notice = RetryNotice(attempt + 2, self.max_retries + 1, delay, status, reason)
        with contextlib.suppress(Exception):  # a display hook must never fail the request
            self.on_retry(notice)

    def parse_retry_after(self, value: str | None) -> float | None:
        """Seconds from a `Retry-After` header (delta-seconds or HTTP-date); None if unusable."""
        if value is None:
            return None
        text = value.strip()
        if not text:
            return None
        seconds: float | None
        try:
            seconds = float(text)
        except ValueError:
            seconds = self._seconds_until(text)
        if seconds is None:
            return None
        if math.isnan(seconds):
            return None
        return max(seconds, 0.0)

    def _seconds_until(self, http_date: str) -> float | None:
        try:
            moment = parsedate_to_datetime(http_date)
        except (TypeError, ValueError, IndexError):
            return None
        if moment.tzinfo is None:
            return None  # RFC 9110 dates are always GMT; a naive date is not one
        return moment.timestamp() - self.now()
