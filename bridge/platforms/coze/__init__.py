"""Coze (coze.cn, coze.com): a bot's local plugins (端插件) run by toolbridge.

See `bridge.platforms.coze.adapter` for the mapping of the chat API v3 to neutral events.
"""

from __future__ import annotations

from bridge.platforms.coze.adapter import CN_BASE_URL, COM_BASE_URL, CozePlatform
from bridge.platforms.coze.client import CozeClient

__all__ = ["CN_BASE_URL", "COM_BASE_URL", "CozeClient", "CozePlatform"]
