"""Checks of the settings every adapter takes (timeouts, retries, and the OpenAI-style base
URL, model and extra body), with one wording."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from bridge.errors import ConfigurationError
from bridge.platforms.retry import RetryPolicy

__all__ = [
    "check_base_url",
    "check_extra_body",
    "check_model",
    "check_seconds",
    "retry_policy_for",
]


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


def check_base_url(base_url: str | None, endpoint: str) -> str:
    """An OpenAI-style API root (scheme, no spaces, not ending in the adapter's `endpoint`).

    Raises:
        ConfigurationError: saying what is missing or wrong, with an example of what is expected.
    """
    if not base_url:
        raise ConfigurationError(
            "no base URL for the OpenAI-compatible server: pass base_url= (--base-url) or set "
            "OPENAI_BASE_URL, e.g. http://127.0.0.1:8000/v1"
        )
    url = base_url.strip().rstrip("/")
    if not url.startswith(("http://", "https://")) or any(ch.isspace() for ch in url):
        raise ConfigurationError(
            f"base URL {base_url!r} is not an http(s) URL; expected e.g. http://127.0.0.1:8000/v1"
        )
    if url.endswith(endpoint):
        raise ConfigurationError(
            f"base URL {base_url!r} should stop before {endpoint}; expected e.g. "
            f"{url[: -len(endpoint)]}"
        )
    return url


def check_model(model: str | None) -> str:
    """A model name (stripped); refuses none or blank, saying where to find one."""
    if not model or not model.strip():
        raise ConfigurationError(
            "no model for the OpenAI-compatible server: pass model= (--model) or set "
            "OPENAI_MODEL to a model the server serves (e.g. what GET /v1/models lists)"
        )
    return model.strip()


def check_extra_body(
    extra_body: Mapping[str, Any] | None, managed: frozenset[str]
) -> dict[str, Any]:
    """Extra request fields: a JSON-serialisable mapping that sets none of the `managed` keys.

    Raises:
        ConfigurationError: not a mapping, a managed key set, or not JSON-serialisable.
    """
    if extra_body is None:
        return {}
    if not isinstance(extra_body, Mapping):
        raise ConfigurationError(f"extra_body must be a mapping, got {type(extra_body).__name__}")
    clash = sorted(managed & set(extra_body))
    if clash:
        raise ConfigurationError(
            f"extra_body must not set {', '.join(clash)}: the platform sets those itself"
        )
    try:
        json.dumps(extra_body)
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(f"extra_body must be JSON-serialisable: {exc}") from None
    return dict(extra_body)
