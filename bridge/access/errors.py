"""Refusals at the door, each with an HTTP status and a code the API answers with."""

from __future__ import annotations

from bridge.errors import BridgeError

__all__ = ["AccessError", "ForbiddenError", "RateLimitedError", "UnauthenticatedError"]


class AccessError(BridgeError):
    """A request refused at the door. `status` and `code` are what the HTTP API answers."""

    status = 403
    code = "forbidden"


class UnauthenticatedError(AccessError):
    """No credentials, or credentials naming nobody (401: who are you?). The message says
    which (missing, unknown key, expired token...), never the credential."""

    status = 401
    code = "unauthorized"


class ForbiddenError(AccessError):
    """A known caller without the permission or tool it needs (403)."""

    status = 403
    code = "forbidden"


class RateLimitedError(AccessError):
    """A caller over one of its rate limits (429); `retry_after` in whole seconds."""

    status = 429
    code = "rate_limited"

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after
