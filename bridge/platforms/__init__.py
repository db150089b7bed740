"""Platform adapters, and a factory that builds one by name (for the CLI and the daemon).

Which platforms exist, and what each needs, is told once in `bridge.platforms.registry`.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bridge.errors import ConfigurationError
from bridge.platforms.registry import PLATFORMS, get_entry

if TYPE_CHECKING:
    from bridge.platforms.base import Platform, PlatformLimits, limits_of

__all__ = [
    "PLATFORMS",
    "Platform",
    "PlatformLimits",
    "create_platform",
    "limits_of",
    "open_platform",
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


@contextlib.contextmanager
def open_platform(
    name: str = "appbuilder",
    *,
    emulator: bool = False,
    scenario: str | Path | Mapping[str, Any] | None = None,
    **options: Any,
) -> Iterator[Platform]:
    """A platform, closed on exit: the real service, or its embedded emulator when asked.

    `emulator=True` starts the platform's emulator in this process (offline, no credentials;
    `scenario` scripts its agent, see `bridge.emulator.scenario`, and is ignored for a real
    service, so one call serves both); the settings the emulator provides (for AppBuilder
    `app_id`, `token`, `base_url`) are its own, other options still apply. An emulated agent
    whose tools are configured server-side (a Coze bot's plugins) gets the tools of each
    `Bridge` made on the platform, as ``toolbridge run --emulator`` declares the loaded ones
    (unless `scenario` declares its own). Otherwise the
    settings come from `options` or the platform's environment variables (for AppBuilder
    `APPBUILDER_APP_ID`/`APPBUILDER_TOKEN`/`GATEWAY_URL_V2`), and missing ones are an error: a
    mistyped variable must not quietly give emulated answers.

    Raises:
        UsageError: Unknown platform.
        ConfigurationError: Without `emulator=True`, a required setting is missing (all
            missing settings are named at once); with it, the platform has no emulator.
    """
    entry = get_entry(name)
    if not emulator:
        try:
            platform = entry.create(**options)
        except ConfigurationError as exc:
            if entry.emulator_protocol is None:
                raise
            call = "open_platform(emulator=True)"
            if name != "appbuilder":
                call = f"open_platform({name!r}, emulator=True)"
            raise ConfigurationError(f"{exc}; or use {call} for the embedded emulator") from None
        try:
            yield platform
        finally:
            platform.close()
        return
    server = entry.start_emulator(scenario=scenario)
    try:
        given = set(entry.emulated_options(server.env()))
        platform = entry.create(
            **{
                **{k: v for k, v in options.items() if k not in given},
                **entry.emulator_options(server.env()),
            }
        )
        declared = entry.emulator_tools
        if declared is not None:

            def declare_tools(tools: list[dict[str, Any]]) -> None:
                server.configure(declared(tools))

            # Read by `bridge.platforms.base.declare_tools_to` when a Bridge is made on it.
            platform.declare_tools = declare_tools  # type: ignore[attr-defined]
        try:
            yield platform
        finally:
            platform.close()
    finally:
        server.stop()
