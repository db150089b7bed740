"""OpenAI-compatible Chat Completions (vLLM, Ollama, llama.cpp, any compatible gateway).

`OpenAIChatPlatform` keeps each conversation's history client-side; with
``tool_protocol="text"`` it describes the tools in the prompt and reads the calls from the
reply (`text_tools`) for models without native tool calls.
"""

from __future__ import annotations

from bridge.platforms.openai_chat.adapter import OpenAIChatPlatform
from bridge.platforms.openai_chat.client import ChatClient, ChatTransport
from bridge.platforms.openai_chat.text_tools import TextToolProtocol, tools_prompt

__all__ = ["ChatClient", "ChatTransport", "OpenAIChatPlatform", "TextToolProtocol", "tools_prompt"]
