"""The errors of the gate; their messages are what the model reads.

ToolError (bridge.tools.spec)
 +-- HttpToolError           the request failed: unreachable, timed out, too many redirects
      +-- HostNotAllowedError   the gate refused the URL, a redirect, or an address
"""

from __future__ import annotations

from bridge.errors import redact
from bridge.tools.spec import ToolError

__all__ = ["HostNotAllowedError", "HttpToolError"]


class HttpToolError(ToolError):
    """An HTTP tool call failed; the message (never holding a secret) is what the model reads."""

    def __init__(self, message: str) -> None:
        super().__init__(redact(message))


class HostNotAllowedError(HttpToolError):
    """The request, or a redirect, would go to a host or address the allowlist does not allow,
    or its URL is spelled so that parsers could disagree on the host."""
