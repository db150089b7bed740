"""Platform adapters, and a factory that builds one by name (for the CLI and the daemon)."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from bridge.errors import UsageError
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

    appbuilder takes `app_id`, `token`, `base_url`; openai takes `base_url`, `model`, `api_key`.
    Both take `connect_timeout`, `idle_timeout` and `max_retries`.
    """
    options = {key: value for key, value in options.items() if value is not None}
    if name == "appbuilder":
        from bridge.platforms.appbuilder import AppBuilderPlatform

        for key in ("model", "api_key"):
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
    emulate: bool | None = None,
    scenario: str | Path | Mapping[str, Any] | None = None,
    **options: Any,
) -> Iterator[Platform]:
    """An AppBuilder platform: the real cloud when configured, else the embedded emulator.

    With `emulate=None` the emulator is used when no token is given and `APPBUILDER_TOKEN` is
    unset, so examples run offline and, unchanged, against a real app once the environment
    says which. `scenario` scripts the emulated agent (see `bridge.emulator.scenario`).
    """
    if emulate is None:
        emulate = not (options.get("token") or os.environ.get("APPBUILDER_TOKEN"))
    if not emulate:
        platform = create_platform("appbuilder", **options)
        try:
            yield platform
        finally:
            platform.close()
        return
    from bridge.emulator import Emulator

    with Emulator(scenario=scenario) as emulator:
        logger.info("no AppBuilder token configured: using the emulator at %s", emulator.base_url)
        platform = create_platform(
            "appbuilder",
            app_id=emulator.app_id,
            token=emulator.token,
            base_url=emulator.base_url,
            **{k: v for k, v in options.items() if k not in {"app_id", "token", "base_url"}},
        )
        try:
            yield platform
        finally:
            platform.close()
