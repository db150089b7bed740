"""Platform adapters, and a factory that builds one by name (for the CLI and the daemon).

Which platforms exist, and what each needs, is told once in `bridge.platforms.registry`;
`bridge.open_platform` (which can also start a platform's emulator) sits above this package.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from bridge.platforms.registry import PLATFORMS, get_entry

if TYPE_CHECKING:
    from bridge.platforms.base import Platform, PlatformLimits, limits_of

__all__ = [
    "PLATFORMS",
    "Platform",
    "PlatformLimits",
    "create_platform",
    "limits_of",
]

logger = logging.getLogger(__name__)

_LAZY = {"Platform", "PlatformLimits", "limits_of"}


def __getattr__(name: str) -> Any:
    # Imported on first use: the CLI registers its commands from the registry without paying
    # for pydantic, which `base` needs.
    if name in _LAZY:
        from bridge.platforms import base

        return getattr(base, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def create_platform(name: str, **options: Any) -> Platform:
    """Build the adapter called `name`; `None` options fall back to its environment defaults.

    The options are the platform's settings (`bridge.platforms.registry.PLATFORMS[name]`,
    e.g. appbuilder's `app_id`, `token`, `base_url`; openai's `base_url`, `model`, `api_key`,
    `tool_protocol`; every platform's stream limits `run_timeout`, `max_answer_chars`,
    `max_arguments_chars`, `max_tool_calls`), plus `connect_timeout`, `idle_timeout`,
    `max_retries`, `retry_policy` and `session`, which every adapter takes, and any other
    keyword its adapter class takes.

    Raises:
        UsageError: Unknown platform, or an option that only other platforms take (named by
            its flag, with the platforms that take it).
        ConfigurationError: The adapter finds a required setting missing or malformed.
    """
    return get_entry(name).create(**options)
