"""toolbridge: the local half of a cloud agent. Run its tool calls on your own functions.

Public names are imported lazily (PEP 562) so that `import bridge` and the `toolbridge`
command start fast; `from bridge import Bridge` works as usual.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# name -> module that defines it
_EXPORTS: dict[str, str] = {
    "AppBuilderClient": "bridge.platforms.appbuilder",
    "AppBuilderPlatform": "bridge.platforms.appbuilder",
    "ArgumentError": "bridge.tools.spec",
    "AuthenticationError": "bridge.errors",
    "BadRequestError": "bridge.errors",
    "Bridge": "bridge.bridge",
    "BridgeError": "bridge.errors",
    "BridgeOptions": "bridge.options",
    "ConfigurationError": "bridge.errors",
    "ConflictError": "bridge.errors",
    "Conversation": "bridge.conversation",
    "ConversationScope": "bridge.tools.context",
    "CozePlatform": "bridge.platforms.coze",
    "Dispatcher": "bridge.tools.dispatch",
    "Emulator": "bridge.emulator",
    "HttpToolSource": "bridge.sources",
    "HumanInputRequested": "bridge.types",
    "InBandError": "bridge.errors",
    "Journal": "bridge.journal",
    "Manifest": "bridge.tools.manifest",
    "MaxRoundsError": "bridge.errors",
    "MemoryJournal": "bridge.journal",
    "NotFoundError": "bridge.errors",
    "OpenAIChatPlatform": "bridge.platforms.openai_chat",
    "Other": "bridge.types",
    "Platform": "bridge.platforms.base",
    "PlatformConnectionError": "bridge.errors",
    "PlatformError": "bridge.errors",
    "PlatformStatusError": "bridge.errors",
    "PlatformTimeoutError": "bridge.errors",
    "PoolExhaustedError": "bridge.tools.context",
    "PreconditionError": "bridge.errors",
    "ProtocolError": "bridge.errors",
    "RateLimitError": "bridge.errors",
    "Result": "bridge.conversation",
    "RetryPolicy": "bridge.platforms.retry",
    "RunError": "bridge.errors",
    "RunFailed": "bridge.types",
    "RunFailedError": "bridge.errors",
    "RunInterruptedError": "bridge.errors",
    "RunFinished": "bridge.types",
    "SQLiteJournal": "bridge.journal",
    "ServerError": "bridge.errors",
    "StreamInterruptedError": "bridge.errors",
    "StreamLimitError": "bridge.errors",
    "StreamTimeoutError": "bridge.errors",
    "TextDelta": "bridge.types",
    "ToolBatch": "bridge.types",
    "ToolCall": "bridge.types",
    "ToolCallFinished": "bridge.types",
    "ToolCallStarted": "bridge.types",
    "ToolCallsRequested": "bridge.types",
    "ToolChoice": "bridge.types",
    "ToolContext": "bridge.tools.context",
    "ToolError": "bridge.tools.spec",
    "ToolOptions": "bridge.tools.spec",
    "ToolResult": "bridge.types",
    "ToolRun": "bridge.types",
    "ToolSource": "bridge.tools.toolbox",
    "ToolSpec": "bridge.tools.spec",
    "Toolbox": "bridge.tools.toolbox",
    "UsageError": "bridge.errors",
    "create_platform": "bridge.platforms",
    "load_tools": "bridge.loading",
    "manifest": "bridge.tools.manifest",
    "manifest_parameter": "bridge.tools.manifest",
    "manifest_return": "bridge.tools.manifest",
    "open_platform": "bridge.platforms",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:
    from bridge.bridge import Bridge
    from bridge.conversation import Conversation, Result
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
    from bridge.journal import Journal, MemoryJournal, SQLiteJournal
    from bridge.loading import load_tools
    from bridge.options import BridgeOptions
    from bridge.platforms import create_platform, open_platform
    from bridge.platforms.appbuilder import AppBuilderClient, AppBuilderPlatform
    from bridge.platforms.base import Platform
    from bridge.platforms.coze import CozePlatform
    from bridge.platforms.openai_chat import OpenAIChatPlatform
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
