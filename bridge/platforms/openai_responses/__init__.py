"""OpenAI Responses API: function calls as output items, rounds chained by
``previous_response_id`` (or resent item by item with ``store=False``)."""

from __future__ import annotations

from bridge.platforms.openai_responses.adapter import OpenAIResponsesPlatform
from bridge.platforms.openai_responses.client import ResponsesClient

__all__ = ["OpenAIResponsesPlatform", "ResponsesClient"]
