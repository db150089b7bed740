"""Baidu Qianfan AppBuilder: a wire-exact client and its `Platform` adapter.

`AppBuilderClient` speaks the v2 conversation API exactly like appbuilder-sdk 1.1.5 (plus
timeouts, retries and typed errors); `AppBuilderPlatform` maps its chunks to neutral events.
"""

from __future__ import annotations

from bridge.errors import StreamTimeoutError
from bridge.platforms.appbuilder.adapter import AppBuilderPlatform, tool_choice_for
from bridge.platforms.appbuilder.client import AppBuilderClient, RunStream
from bridge.platforms.appbuilder.models import (
    Action,
    ActionParameters,
    ConversationResponse,
    FeedbackRequest,
    FeedbackResponse,
    FileUploadResponse,
    FunctionCall,
    InterruptEvent,
    RunChunk,
    RunEvent,
    RunRequest,
    RunResponse,
    ToolCallItem,
    ToolChoiceFunction,
    ToolOutput,
    Usage,
    WireToolChoice,
)
from bridge.platforms.retry import RetryPolicy

__all__ = [
    "Action",
    "ActionParameters",
    "AppBuilderClient",
    "AppBuilderPlatform",
    "ConversationResponse",
    "FeedbackRequest",
    "FeedbackResponse",
    "FileUploadResponse",
    "FunctionCall",
    "InterruptEvent",
    "RetryPolicy",
    "RunChunk",
    "RunEvent",
    "RunRequest",
    "RunResponse",
    "RunStream",
    "StreamTimeoutError",
    "ToolCallItem",
    "ToolChoiceFunction",
    "ToolOutput",
    "Usage",
    "WireToolChoice",
    "tool_choice_for",
]
