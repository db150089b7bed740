"""Checks of the settings every adapter takes (timeouts, retries), with one wording."""

from __future__ import annotations

from bridge.errors import ConfigurationError
from bridge.platforms.retry import RetryPolicy

__all__ = ["check_seconds", "retry_policy_for"]


def check_seconds(**values: object) -> None:
    """Refuse any value that is not a number of seconds > 0 (booleans are not numbers here).

    Raises:
        ConfigurationError: naming the first bad setting and its value.
    """
    for label, value in values.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise ConfigurationError(f"{label} must be a number of seconds > 0, got {value!r}")


def retry_policy_for(max_retries: object, retry_policy: RetryPolicy | None) -> RetryPolicy:
    """`retry_policy` when given, else the default policy with `max_retries` retries.

    Raises:
        ConfigurationError: `max_retries` is not an integer >= 0 (and no policy was given).
    """
    if retry_policy is not None:
        return retry_policy
    if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
        raise ConfigurationError(f"max_retries must be an integer >= 0, got {max_retries!r}")
    return RetryPolicy(max_retries=max_retries)
