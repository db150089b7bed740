"""Platform adapters, and a factory that builds one by name (for the CLI and the daemon)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from bridge.errors import ConfigurationError, UsageError
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

PLATFORMS = ("appbuilder", "openai")


def create_platform(name: str, **options: Any) -> Platform:
    """Build the adapter called `name`; `None` options fall back to its environment defaults.

    appbuilder takes `app_id`, `token`, `base_url`; openai takes `base_url`, `model`, `api_key`
    and `tool_protocol` (``native`` or ``text``).
    Both take `connect_timeout`, `idle_timeout` and `max_retries`.
    """
    options = {key: value for key, value in options.items() if value is not None}
    if name == "appbuilder":
        from bridge.platforms.appbuilder import AppBuilderPlatform

        for key in ("model", "api_key", "tool_protocol"):
            if options.pop(key, None) is not None:
                raise UsageError(f"--{key.replace('_', '-')} is for --platform openai only")
        return AppBuilderPlatform(**options)
    if name == "openai":
        from bridge.platforms.openai_chat import OpenAIChatPlatform

        for key in ("app_id", "token"):
            if options.pop(key, None) is not None:
                raise UsageError(
                    f"--{key.replace('_', '-')} is for --platform appbuilder only "
                    "(use --api-key for an OpenAI-compatible server)"
                )
        return OpenAIChatPlatform(**options)
    raise UsageError(f"unknown platform {name!r}; expected one of: {', '.join(PLATFORMS)}")


@contextlib.contextmanager
def open_platform(
    *,
    emulator: bool = False,
    scenario: str | Path | Mapping[str, Any] | None = None,
    **options: Any,
) -> Iterator[Platform]:
    """An AppBuilder platform, closed on exit: your app, or the embedded emulator when asked.

    `emulator=True` starts the AppBuilder emulator in this process (offline, no credentials;
    `scenario` scripts its agent, see `bridge.emulator.scenario`, and is ignored for a real
    app, so one call serves both). Otherwise the app comes from
    `app_id`/`token`/`base_url` or `APPBUILDER_APP_ID`/`APPBUILDER_TOKEN`/`GATEWAY_URL_V2`, and
    missing ones are an error: a mistyped variable must not quietly give emulated answers.

    Raises:
        ConfigurationError: Without `emulator=True`, the app id or the token is missing (all
            missing settings are named at once).
    """
    if not emulator:
        try:
            platform = create_platform("appbuilder", **options)
        except ConfigurationError as exc:
            raise ConfigurationError(
                f"{exc}; or use open_platform(emulator=True) for the embedded emulator"
            ) from None
        try:
            yield platform
        finally:
            platform.close()
        return
    from bridge.emulator import Emulator

    with Emulator(scenario=scenario) as server:
        logger.info("using the embedded AppBuilder emulator at %s", server.base_url)
        platform = create_platform(
            "appbuilder",
            app_id=server.app_id,
            token=server.token,
            base_url=server.base_url,
            **{k: v for k, v in options.items() if k not in {"app_id", "token", "base_url"}},
        )
        try:
            yield platform
        finally:
            platform.close()
