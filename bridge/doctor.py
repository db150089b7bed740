"""Diagnostics of a configuration: what `toolbridge doctor` checks, as data to render.

What to check comes from the platform registry: each setting of the chosen platform (present,
well-formed, secrets never shown), then the adapter's own `check()`, then the tools: loaded and
valid for the platform's dialect, and, where the platform can list the tools its agent has
configured server-side (`remote_tool_names()`), compared with the loaded ones.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit, urlunsplit

from bridge.errors import BridgeError, ConfigurationError, UsageError

if TYPE_CHECKING:
    from bridge.platforms.base import Platform
    from bridge.platforms.registry import PlatformEntry, Setting

__all__ = ["Check", "diagnose"]


@dataclass
class Check:
    """One line of the report."""

    name: str
    status: Literal["ok", "warn", "fail"]
    detail: str
    error: BridgeError | None = None
    """For a failure: what failed, as the error its kind of problem raises (a command's exit
    code comes from it)."""


def diagnose(
    platform: str,
    settings: Mapping[str, Any],
    *,
    emulator: bool = False,
    tools: Sequence[str] = (),
    open_platform: Callable[[list[dict[str, Any]]], Platform],
) -> list[Check]:
    """Check the platform's settings, reach it, check the tools, in the order to report them.

    Args:
        platform: A platform name from the registry.
        settings: Its adapter options by name (None or absent: from the environment).
        emulator: The platform's embedded emulator stands in for the real service.
        tools: Tool SPECs to load and check.
        open_platform: Builds the adapter (given the loaded tools as Chat Completions function
            tools, for an emulated agent whose tools are configured server-side); it is
            closed after the checks.
    """
    from bridge.platforms.registry import PLATFORMS

    checks: list[Check] = []
    entry = PLATFORMS.get(platform)
    remote: list[str] | None = None
    if entry is None:
        known = " or ".join(PLATFORMS)
        detail = f"unknown {platform!r}; use {known}"
        checks.append(Check("platform", "fail", detail, UsageError(detail)))
    else:
        checks += _platform_checks(entry, settings, emulator)
    # The tools are loaded first (reported after reachability): with --emulator, an emulated
    # agent whose tools are configured server-side gets them declared, as `run` does.
    local: list[str] | None = None
    manifests: list[dict[str, Any]] = []
    if tools:
        local, manifests, tools_check = _tools_check(list(tools), entry)
    else:
        tools_check = Check("tools", "warn", "none given; pass --tools SPEC to check manifests")
    if entry is not None and not any(c.status == "fail" for c in checks):
        reachable, remote = _reachable(open_platform, entry, manifests)
        checks += reachable
    else:
        checks.append(Check("reachable", "warn", "not tried until the settings above are fixed"))
    checks.append(tools_check)
    if remote is not None:
        checks.append(_remote_tools_check(remote, local))
    return checks


def _platform_checks(
    entry: PlatformEntry, settings: Mapping[str, Any], emulator: bool
) -> list[Check]:
    """The platform's settings one by one, or the emulator that replaces them."""
    try:
        entry.refuse_foreign(settings)
    except BridgeError as exc:
        return [Check("flags", "fail", str(exc), exc)]
    if emulator:
        try:
            entry.require_emulator()
        except BridgeError as exc:
            return [Check("platform", "fail", str(exc), exc)]
        return [Check("platform", "ok", f"the embedded {entry.short_title} emulator (--emulator)")]
    offline = ", or pass --emulator to check the embedded emulator instead"
    # The stream limits every platform shares are listed only when given (then checked).
    return [
        _setting_check(setting, setting.given(settings), offline * bool(entry.emulator_protocol))
        for setting in entry.settings
        if not setting.shared or setting.given(settings) is not None
    ]


def _setting_check(setting: Setting, value: Any, offline: str) -> Check:
    name = setting.label
    if value is None:
        if setting.required:
            where = f"pass {setting.flag}" + (f" or set {setting.env}" if setting.env else "")
            detail = f"not set: {where} ({setting.help}){offline}"
            return Check(name, "fail", detail, ConfigurationError(detail))
        if setting.default is not None:
            return Check(name, "ok", f"{setting.default} (the default)")
        return Check(name, "ok", f"not set (optional: {setting.help})")
    problem = setting.problem(value)
    if problem is not None:
        return Check(name, "fail", problem, ConfigurationError(problem))
    text = str(setting.parse(value)).lower() if setting.kind == "bool" else str(value)
    shown = "set" if setting.secret else _shown_url(text) if setting.kind == "url" else text
    if setting.shape is not None and not re.search(setting.shape, text):
        if setting.secret:
            return Check(name, "warn", f"set, but it {setting.shape_hint}")
        quoted = shown if setting.kind == "url" else repr(shown)
        return Check(name, "warn", f"{quoted} {setting.shape_hint}")
    return Check(name, "ok", "set and well-formed" if setting.secret else shown)


def _shown_url(url: str) -> str:
    """A URL as printed: without a password (`https://user:secret@host` happens)."""
    parts = urlsplit(url)
    if parts.password:
        netloc = parts.netloc.replace(f":{parts.password}@", ":[secure]@")
        return urlunsplit(parts._replace(netloc=netloc))
    return url


def _reachable(
    open_platform: Callable[[list[dict[str, Any]]], Platform],
    entry: PlatformEntry,
    manifests: list[dict[str, Any]],
) -> tuple[list[Check], list[str] | None]:
    """The adapter's `check()`, then the tools its agent has configured (None: it cannot say);
    `manifests` are the loaded tools, declared to an emulated agent that needs them."""
    from bridge.errors import NotFoundError
    from bridge.platforms.base import ChecksChat, DescribesItself, ListsRemoteTools

    adapter = None
    try:
        adapter = open_platform(manifests)
        try:
            reached = Check("reachable", "ok", adapter.check())
        except NotFoundError as exc:
            # Not every OpenAI-compatible server lists its models; what matters is that chat
            # completions answer.
            if not isinstance(adapter, ChecksChat):
                raise
            try:
                answered = adapter.check_chat()
            except BridgeError:
                raise exc from None
            described = adapter.describe() if isinstance(adapter, DescribesItself) else None
            where = (described and described.base_url) or "the server"
            reached = Check(
                "reachable", "warn", f"{where}/models is not served (404), but {answered}"
            )
        if not isinstance(adapter, ListsRemoteTools):
            return [reached], None
        try:
            remote = adapter.remote_tool_names()
        except BridgeError as exc:
            failed = Check("remote tools", "fail", _fix_hint(exc, entry), exc)
            return [reached, failed], None
        return [reached], None if remote is None else [str(name) for name in remote]
    except BridgeError as exc:
        return [Check("reachable", "fail", _fix_hint(exc, entry), exc)], None
    finally:
        if adapter is not None:
            adapter.close()


def _tools_check(
    specs: list[str], entry: PlatformEntry | None
) -> tuple[list[str] | None, list[dict[str, Any]], Check]:
    """The loaded tools' names and Chat Completions manifests, and the report line."""
    from bridge.loading import load_tools
    from bridge.platforms.registry import DEFAULT_PLATFORM, PLATFORMS

    dialect = str((entry or PLATFORMS[DEFAULT_PLATFORM]).load().dialect)
    try:
        with load_tools(list(specs)) as toolbox:
            toolbox.manifests(dialect)
            names = list(toolbox.names())
            manifests = toolbox.manifests("openai")
    except BridgeError as exc:
        return None, [], Check("tools", "fail", str(exc), exc)
    valid = f"{len(names)} valid: {', '.join(names) or '(none)'}"
    return names, manifests, Check("tools", "ok", valid)


def _remote_tools_check(remote: list[str], local: list[str] | None) -> Check:
    """The agent's server-side tools against the loaded ones: a call to a tool that is not
    loaded fails, a loaded tool the agent does not know is never called."""
    listed = ", ".join(remote) or "(none)"
    if local is None:
        return Check(
            "remote tools",
            "warn",
            f"the agent has {len(remote)} configured: {listed}; pass --tools SPEC to compare "
            "them with yours",
        )
    missing = [name for name in remote if name not in local]
    extra = [name for name in local if name not in remote]
    unused = (
        f"; loaded here but not configured on the agent (never called): {', '.join(extra)}"
        if extra
        else ""
    )
    if missing:
        return Check(
            "remote tools",
            "fail",
            f"the agent can call {', '.join(missing)}, not loaded here (those calls would get "
            f"an error): load them with --tools{unused}",
            ConfigurationError("tools the agent can call are not loaded"),
        )
    if extra:
        return Check(
            "remote tools", "warn", f"every tool the agent has is loaded: {listed}{unused}"
        )
    return Check("remote tools", "ok", f"every tool the agent has is loaded: {listed}")


def _fix_hint(exc: BridgeError, entry: PlatformEntry) -> str:
    from bridge.errors import AuthenticationError, NotFoundError, PlatformConnectionError

    kinds = (
        (AuthenticationError, "auth"),
        (NotFoundError, "not_found"),
        (PlatformConnectionError, "connect"),
    )
    hint = next((entry.hints.get(key) for cls, key in kinds if isinstance(exc, cls)), None)
    return f"{exc} — {hint}" if hint else str(exc)
