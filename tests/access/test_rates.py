"""Per-caller rate limits on a fake clock: the limit is hit, the refusal says when to retry,
and the window slides."""

from __future__ import annotations

import threading

import pytest

from bridge.access import Principal, Rate, RateLimitedError, RateLimiter, RateLimits


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def caller(name: str = "alice", **rates: Rate) -> Principal:
    return Principal(name=name, rates=RateLimits(**rates))


def test_the_limit_is_hit_and_says_when_to_retry() -> None:
    clock = Clock()
    limiter = RateLimiter(clock)
    alice = caller(messages=Rate(3, 60.0))
    for _ in range(3):
        limiter.check(alice, "messages")
        clock.now += 10  # at 1000, 1010, 1020
    with pytest.raises(RateLimitedError) as caught:
        limiter.check(alice, "messages")  # at 1030: the oldest frees up at 1060
    assert caught.value.retry_after == 30
    assert caught.value.status == 429 and caught.value.code == "rate_limited"
    assert str(caught.value) == (
        "caller 'alice' is over its limit of 3/minute messages; retry in 30 s"
    )


def test_the_window_slides() -> None:
    clock = Clock()
    limiter = RateLimiter(clock)
    alice = caller(tool_calls=Rate(2, 60.0))
    limiter.check(alice, "tool_calls")  # 1000
    clock.now += 30
    limiter.check(alice, "tool_calls")  # 1030
    clock.now += 29.5  # 1059.5: both still within the minute
    with pytest.raises(RateLimitedError) as caught:
        limiter.check(alice, "tool_calls")
    assert caught.value.retry_after == 1, "0.5 s rounds up to a whole second"
    assert "2/minute tool calls" in str(caught.value)
    clock.now += 0.5  # 1060: the first has left the window, the second has not
    limiter.check(alice, "tool_calls")
    with pytest.raises(RateLimitedError) as caught:
        limiter.check(alice, "tool_calls")
    assert caught.value.retry_after == 30, "next free slot when the 1030 event leaves"


def test_a_refused_event_is_not_counted() -> None:
    clock = Clock()
    limiter = RateLimiter(clock)
    alice = caller(messages=Rate(1, 1.0))
    limiter.check(alice, "messages")
    for _ in range(5):
        with pytest.raises(RateLimitedError):
            limiter.check(alice, "messages")
    clock.now += 1
    limiter.check(alice, "messages")


def test_retry_after_is_at_least_one_second() -> None:
    clock = Clock()
    limiter = RateLimiter(clock)
    alice = caller(messages=Rate(1, 1.0))
    limiter.check(alice, "messages")
    clock.now += 0.999
    with pytest.raises(RateLimitedError) as caught:
        limiter.check(alice, "messages")
    assert caught.value.retry_after == 1


def test_callers_and_kinds_are_counted_apart() -> None:
    clock = Clock()
    limiter = RateLimiter(clock)
    alice = caller(messages=Rate(1, 3600.0), tool_calls=Rate(1, 86400.0))
    bob = caller("bob", messages=Rate(1, 3600.0))
    limiter.check(alice, "messages")
    limiter.check(alice, "tool_calls")
    limiter.check(bob, "messages")
    with pytest.raises(RateLimitedError, match="1/hour messages; retry in 3600 s"):
        limiter.check(alice, "messages")
    with pytest.raises(RateLimitedError, match="1/day tool calls; retry in 86400 s"):
        limiter.check(alice, "tool_calls")
    limiter.forget("alice")
    limiter.check(alice, "messages")
    with pytest.raises(RateLimitedError, match="caller 'bob'"):
        limiter.check(bob, "messages")


def test_no_rate_is_unlimited() -> None:
    limiter = RateLimiter(Clock())
    for _ in range(10_000):
        limiter.check(caller(), "messages")
        limiter.check(caller(messages=Rate(1, 60.0)), "tool_calls")


def test_threads_never_exceed_the_limit() -> None:
    limiter = RateLimiter(Clock())
    alice = caller(messages=Rate(50, 60.0))
    allowed: list[int] = []
    lock = threading.Lock()

    def send() -> None:
        for _ in range(40):
            try:
                limiter.check(alice, "messages")
            except RateLimitedError:
                continue
            with lock:
                allowed.append(1)

    threads = [threading.Thread(target=send) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(allowed) == 50
