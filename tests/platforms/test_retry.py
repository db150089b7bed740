"""RetryPolicy decisions, table-driven, with a frozen clock and injected randomness."""

from __future__ import annotations

import math
from datetime import datetime, timezone
from email.utils import format_datetime

import pytest

from bridge.platforms.appbuilder import RetryPolicy
from bridge.platforms.retry import BACKOFF_ENV, RetryNotice

NOW = 1_700_000_000.0
"""The frozen clock (epoch seconds)."""


def _policy(**options: object) -> RetryPolicy:
    defaults: dict[str, object] = {"rand": lambda: 0.5, "now": lambda: NOW}
    defaults.update(options)
    return RetryPolicy(**defaults)  # type: ignore[arg-type]


def _http_date(offset: float) -> str:
    return format_datetime(datetime.fromtimestamp(NOW + offset, tz=timezone.utc), usegmt=True)


@pytest.mark.parametrize(
    ("attempt", "status", "exc_kind", "expected"),
    [
        (0, 429, None, True),
        (0, 500, None, True),
        (0, 502, None, True),
        (0, 503, None, True),
        (0, 504, None, True),
        (2, 503, None, True),
        (3, 503, None, False),  # max_retries=3 spent
        (0, 400, None, False),
        (0, 401, None, False),
        (0, 403, None, False),
        (0, 404, None, False),
        (0, 409, None, False),
        (0, 422, None, False),
        (0, 501, None, False),
        (0, 505, None, False),
        (0, None, "connect", True),
        (2, None, "connect", True),
        (3, None, "connect", False),
        (0, None, "timeout", False),  # the request may have reached the server
        (0, None, "read", False),
        (0, None, "other", False),
        (0, None, None, False),
    ],
)
def test_should_retry(
    attempt: int, status: int | None, exc_kind: str | None, expected: bool
) -> None:
    assert _policy().should_retry(attempt, status=status, exc_kind=exc_kind) is expected  # type: ignore[arg-type]


def test_zero_max_retries_never_retries() -> None:
    policy = _policy(max_retries=0)
    assert not policy.should_retry(0, status=503)
    assert not policy.should_retry(0, exc_kind="connect")


@pytest.mark.parametrize(
    ("attempt", "rand", "expected"),
    [
        (0, 0.0, 0.5),
        (1, 0.0, 1.0),
        (2, 0.0, 2.0),
        (3, 0.0, 4.0),
        (4, 0.0, 8.0),
        (5, 0.0, 8.0),  # capped at backoff_max
        (10, 0.0, 8.0),
        (0, 1.0, 0.375),  # jitter removes up to 25 %
        (2, 0.5, 1.75),
        (4, 1.0, 6.0),
    ],
)
def test_backoff_without_retry_after(attempt: int, rand: float, expected: float) -> None:
    assert _policy(rand=lambda: rand).delay(attempt) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("0", 0.0),
        ("1", 1.0),
        ("2.5", 2.5),
        (" 7 ", 7.0),
        ("120", 120.0),  # exactly the limit is still honoured
        ("121", math.inf),  # over max_retry_after: stop
        ("86400", math.inf),
        ("-5", 0.0),  # in the past / negative: retry now
        (_http_date(30), 30.0),
        (_http_date(0), 0.0),
        (_http_date(-60), 0.0),
        (_http_date(121), math.inf),
        ("", 1.75),  # unusable values fall back to the backoff (attempt 2, rand 0.5)
        ("soon", 1.75),
        ("nan", 1.75),
        ("Wed, 21 Oct 2015 07:28:00", 1.75),  # no zone: not an HTTP-date
        (None, 1.75),
    ],
)
def test_retry_after_table(header: str | None, expected: float) -> None:
    assert _policy().delay(2, header) == pytest.approx(expected)


def test_max_retry_after_is_configurable() -> None:
    assert _policy(max_retry_after=5).delay(0, "6") == math.inf
    assert _policy(max_retry_after=5).delay(0, "5") == 5.0


def test_policy_is_frozen_and_comparable() -> None:
    policy = _policy()
    with pytest.raises(AttributeError):
        policy.max_retries = 9  # type: ignore[misc]
    assert RetryPolicy() == RetryPolicy()  # rand/now are not part of equality
    assert RetryPolicy(max_retries=1) != RetryPolicy()


def test_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(BACKOFF_ENV, raising=False)
    policy = RetryPolicy()
    assert (policy.max_retries, policy.backoff_base, policy.backoff_max) == (3, 0.5, 8.0)
    assert policy.max_retry_after == 120.0
    assert 0 < policy.delay(0) <= 0.5


def test_the_environment_sets_the_first_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(BACKOFF_ENV, "0.01")
    assert RetryPolicy(jitter=0).delay(0) == 0.01
    assert RetryPolicy(jitter=0).delay(2) == 0.04
    assert RetryPolicy(backoff_base=2, jitter=0).delay(0) == 2  # a given one wins
    monkeypatch.setenv(BACKOFF_ENV, "soon")
    with pytest.raises(ValueError, match="TOOLBRIDGE_RETRY_BACKOFF='soon': expected seconds"):
        RetryPolicy()
    monkeypatch.setenv(BACKOFF_ENV, "-1")
    with pytest.raises(ValueError, match="backoff_base and backoff_max must be >= 0"):
        RetryPolicy()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max_retries": -1}, "max_retries must be >= 0 (got -1)"),
        ({"backoff_base": -0.1}, "backoff_base and backoff_max must be >= 0"),
        ({"jitter": 1.5}, "jitter must be between 0 and 1 (got 1.5)"),
        ({"max_retry_after": -1}, "max_retry_after must be >= 0 (got -1)"),
    ],
)
def test_invalid_policy_says_what_is_wrong(options: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match="invalid RetryPolicy") as info:
        RetryPolicy(**options)  # type: ignore[arg-type]
    assert message in str(info.value)


@pytest.mark.parametrize(
    ("notice", "text"),
    [
        (
            RetryNotice(2, 4, 2.0, 503),
            "platform busy (HTTP 503), retrying in 2.0 s (attempt 2 of 4)",
        ),
        (
            RetryNotice(3, 4, 0.25, 500),
            "platform error (HTTP 500), retrying in 0.2 s (attempt 3 of 4)",
        ),
        (
            RetryNotice(
                2, 2, 1.0, None, "cannot connect to http://127.0.0.1:1 (connection refused)"
            ),
            "cannot connect to http://127.0.0.1:1 (connection refused), retrying in 1.0 s "
            "(attempt 2 of 2)",
        ),
    ],
)
def test_retry_notice_reads_as_a_sentence(notice: RetryNotice, text: str) -> None:
    assert str(notice) == text


def test_announce_tells_on_retry_and_survives_its_errors() -> None:
    seen: list[RetryNotice] = []
    RetryPolicy(max_retries=3, on_retry=seen.append).announce(0, 0.5, status=503)
    assert seen == [RetryNotice(2, 4, 0.5, 503, "")]

    def broken(notice: RetryNotice) -> None:
        raise RuntimeError("display failed")

    RetryPolicy(on_retry=broken).announce(0, 0.5, status=503)  # does not raise
    RetryPolicy().announce(0, 0.5)  # nobody to tell
