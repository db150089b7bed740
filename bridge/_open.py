"""Opening a platform by name: the real service, or its embedded emulator.

It sits above both the platforms (`bridge.platforms`, which know no emulator) and the emulator
(`bridge.emulator`, a server that knows no client): the CLI, the daemon and `open_platform`
start an emulator through `start_emulator` here.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bridge.errors import ConfigurationError
from bridge.platforms.registry import PlatformEntry, get_entry

if TYPE_CHECKING:
    from bridge.emulator import Emulator
    from bridge.platforms.base import Platform

__all__ = ["open_platform", "start_emulator"]

logger = logging.getLogger(__name__)


def start_emulator(
    entry: PlatformEntry,
    *,
    scenario: str | Path | Mapping[str, Any] | None = None,
    tools: Sequence[Mapping[str, Any]] = (),
    state_file: str | Path | None = None,
) -> Emulator:
    """Start `entry`'s platform's embedded emulator (the one way every entry point does).

    `scenario` scripts its agent (a file or mapping, see `bridge.emulator.scenario`);
    `tools` (Chat Completions function tools) are declared to an agent whose tools are
    configured server-side (`emulator_tools`: a Coze bot's plugins) unless the scenario
    declares its own; `state_file` keeps its conversations across restarts
    (`bridge.emulator.saving`).

    Raises:
        ConfigurationError: This platform has no emulator.
        ScenarioError: The scenario cannot be loaded (a `UsageError`, naming the file).
    """
    protocol = entry.require_emulator()
    # Imported here: what only opens a real platform does not load the emulator's server.
    from bridge.emulator import Emulator
    from bridge.emulator.scenario import with_sections

    declared = entry.emulator_tools([dict(t) for t in tools]) if entry.emulator_tools else {}
    source = with_sections(scenario, declared if tools else {})
    server = Emulator(protocol=protocol, scenario=source, state_file=state_file).start()
    logger.info("using the embedded %s emulator at %s", entry.short_title, server.base_url)
    return server


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
    server = start_emulator(entry, scenario=scenario)
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

            # Read by `bridge.platforms.base.declare_tools_to` (the `DeclaresTools` protocol)
            # when a Bridge is made on it.
            platform.declare_tools = declare_tools  # type: ignore[attr-defined]
        try:
            yield platform
        finally:
            platform.close()
    finally:
        server.stop()
