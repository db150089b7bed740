"""toolbridge: the local half of a cloud agent. Run its tool calls on your own functions.

Public names are imported lazily (PEP 562) so that `import bridge` and the `toolbridge`
command start fast; `from bridge import Bridge` works as usual.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from bridge._version import __version__ as __version__

# name -> module that defines it, by section. Low-level clients (e.g. AppBuilder's HTTP
# client) are not here: import them from their platform's package.
_EXPORTS: dict[str, str] = {
    # --- tools: describe functions as tools, register and run them ----------------------------
    "ArgumentError": "bridge.tools.spec",
    "ConversationScope": "bridge.tools.context",
    "Dispatcher": "bridge.tools.dispatch",
    "Manifest": "bridge.tools.manifest",
    "PoolExhaustedError": "bridge.tools.context",
    "ToolContext": "bridge.tools.context",
    "ToolError": "bridge.tools.spec",
    "ToolOptions": "bridge.tools.spec",
    "ToolSpec": "bridge.tools.spec",
    "Toolbox": "bridge.tools.toolbox",
    "load_tools": "bridge.loading",
    "manifest": "bridge.tools.manifest",
    "manifest_parameter": "bridge.tools.manifest",
    "manifest_return": "bridge.tools.manifest",
    # --- loop: a bridge and its conversations ---------------------------------------------------
    "Bridge": "bridge.bridge",
    "BridgeOptions": "bridge.options",
    "Conversation": "bridge.conversation",
    "Result": "bridge.conversation",
    # --- platforms: the agent platforms, and the emulator that speaks their protocols ----------
    "AppBuilderPlatform": "bridge.platforms.appbuilder",
    "CozePlatform": "bridge.platforms.coze",
    "Emulator": "bridge.emulator",
    "OpenAIChatPlatform": "bridge.platforms.openai_chat",
    "OpenAIResponsesPlatform": "bridge.platforms.openai_responses",
    "Platform": "bridge.platforms.base",
    "RetryPolicy": "bridge.platforms.retry",
    "create_platform": "bridge.platforms",
    "open_platform": "bridge._open",
    # --- journal: where conversations and tool calls are written down --------------------------
    "Journal": "bridge.journal",
    "MemoryJournal": "bridge.journal",
    "PostgresJournal": "bridge.journal",
    "SQLiteJournal": "bridge.journal",
    # --- daemon: the long-lived HTTP service ---------------------------------------------------
    "DaemonSettings": "bridge.daemon",
    "serve": "bridge.daemon",
    # --- sources: tools that live elsewhere ----------------------------------------------------
    "HttpToolSource": "bridge.sources",
    "ToolSource": "bridge.tools.toolbox",
    # --- errors & types: the exception tree and the neutral vocabulary -------------------------
    "AuthenticationError": "bridge.errors",
    "BadRequestError": "bridge.errors",
    "BridgeError": "bridge.errors",
    "ConfigurationError": "bridge.errors",
    "ConflictError": "bridge.errors",
    "InBandError": "bridge.errors",
    "MaxRoundsError": "bridge.errors",
    "NotFoundError": "bridge.errors",
    "PlatformConnectionError": "bridge.errors",
    "PlatformError": "bridge.errors",
    "PlatformStatusError": "bridge.errors",
    "PlatformTimeoutError": "bridge.errors",
    "PreconditionError": "bridge.errors",
    "ProtocolError": "bridge.errors",
    "RateLimitError": "bridge.errors",
    "RunError": "bridge.errors",
    "RunFailedError": "bridge.errors",
    "RunInterruptedError": "bridge.errors",
    "ServerError": "bridge.errors",
    "StreamInterruptedError": "bridge.errors",
    "StreamLimitError": "bridge.errors",
    "StreamTimeoutError": "bridge.errors",
    "UsageError": "bridge.errors",
    "HumanInputRequested": "bridge.types",
    "Other": "bridge.types",
    "RunFailed": "bridge.types",
    "RunFinished": "bridge.types",
    "TextDelta": "bridge.types",
    "ToolBatch": "bridge.types",
    "ToolCall": "bridge.types",
    "ToolCallFinished": "bridge.types",
    "ToolCallStarted": "bridge.types",
    "ToolCallsRequested": "bridge.types",
    "ToolChoice": "bridge.types",
    "ToolResult": "bridge.types",
    "ToolRun": "bridge.types",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:  # the same names, for type checkers
    from bridge._open import open_platform
    from bridge.bridge import Bridge
    from bridge.conversation import Conversation, Result
    from bridge.daemon import DaemonSettings, serve
    from bridge.emulator import Emulator
    from bridge.errors import (
        AuthenticationError,
        BadRequestError,
        BridgeError,
        ConfigurationError,
        ConflictError,
        InBandError,
        MaxRoundsError,
        NotFoundError,
        PlatformConnectionError,
        PlatformError,
        PlatformStatusError,
        PlatformTimeoutError,
        PreconditionError,
        ProtocolError,
        RateLimitError,
        RunError,
        RunFailedError,
        RunInterruptedError,
        ServerError,
        StreamInterruptedError,
        StreamLimitError,
        StreamTimeoutError,
        UsageError,
    )
    from bridge.journal import Journal, MemoryJournal, PostgresJournal, SQLiteJournal
    from bridge.loading import load_tools
    from bridge.options import BridgeOptions
    from bridge.platforms import create_platform
    from bridge.platforms.appbuilder import AppBuilderPlatform
    from bridge.platforms.base import Platform
    from bridge.platforms.coze import CozePlatform
    from bridge.platforms.openai_chat import OpenAIChatPlatform
    from bridge.platforms.openai_responses import OpenAIResponsesPlatform
    from bridge.platforms.retry import RetryPolicy
    from bridge.sources import HttpToolSource
    from bridge.tools.context import ConversationScope, PoolExhaustedError, ToolContext
    from bridge.tools.dispatch import Dispatcher
    from bridge.tools.manifest import Manifest, manifest, manifest_parameter, manifest_return
    from bridge.tools.spec import ArgumentError, ToolError, ToolOptions, ToolSpec
    from bridge.tools.toolbox import Toolbox, ToolSource
    from bridge.types import (
        HumanInputRequested,
        Other,
        RunFailed,
        RunFinished,
        TextDelta,
        ToolBatch,
        ToolCall,
        ToolCallFinished,
        ToolCallsRequested,
        ToolCallStarted,
        ToolChoice,
        ToolResult,
        ToolRun,
    )


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'bridge' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
