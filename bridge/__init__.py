"""toolbridge: the local half of a cloud agent. Run its tool calls on your own functions."""

from __future__ import annotations

from bridge.errors import (
    AuthenticationError,
    BridgeError,
    ConfigurationError,
    InBandError,
    MaxRoundsError,
    PlatformConnectionError,
    PlatformError,
    PlatformTimeoutError,
    RateLimitError,
    RunError,
    RunFailedError,
    StreamInterruptedError,
    UsageError,
)
from bridge.types import (
    HumanInputRequested,
    Other,
    RunFailed,
    RunFinished,
    TextDelta,
    ToolBatch,
    ToolCall,
    ToolCallFinished,
    ToolCallStarted,
    ToolCallsRequested,
    ToolResult,
    ToolRun,
)

__version__ = "0.1.0"

__all__ = [
    "AuthenticationError",
    "BridgeError",
    "ConfigurationError",
    "HumanInputRequested",
    "InBandError",
    "MaxRoundsError",
    "Other",
    "PlatformConnectionError",
    "PlatformError",
    "PlatformTimeoutError",
    "RateLimitError",
    "RunError",
    "RunFailed",
    "RunFailedError",
    "RunFinished",
    "StreamInterruptedError",
    "TextDelta",
    "ToolBatch",
    "ToolCall",
    "ToolCallFinished",
    "ToolCallStarted",
    "ToolCallsRequested",
    "ToolResult",
    "ToolRun",
    "UsageError",
]
