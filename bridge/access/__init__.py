"""The door: who is calling (keys, identity-provider tokens), what each caller may do and run,
the policy decision on a call's arguments (Cedar), and the hash-chained audit record.

Used by every entry point: the daemon, `mcp-serve`, `toolbridge call` and the `Bridge` library.
"""

from bridge.access.callers import CallerFileError, Callers, parse_callers, parse_rate
from bridge.access.decision import (
    ALLOW,
    AuditEvent,
    CallFacts,
    Decides,
    PolicyDecision,
    Records,
    source_of,
)
from bridge.access.door import Door, TokenVerifier
from bridge.access.errors import AccessError, ForbiddenError, RateLimitedError, UnauthenticatedError
from bridge.access.principal import (
    ALL_TOOLS,
    ANONYMOUS,
    LOCAL,
    Authenticates,
    Permission,
    Principal,
    Rate,
    RateLimits,
    ToolPatterns,
)
from bridge.access.rates import RateLimiter

__all__ = [
    "ALLOW",
    "ALL_TOOLS",
    "ANONYMOUS",
    "LOCAL",
    "AccessError",
    "AuditEvent",
    "Authenticates",
    "CallFacts",
    "CallerFileError",
    "Callers",
    "Decides",
    "Door",
    "ForbiddenError",
    "Permission",
    "PolicyDecision",
    "Principal",
    "Rate",
    "RateLimitedError",
    "RateLimiter",
    "RateLimits",
    "Records",
    "TokenVerifier",
    "ToolPatterns",
    "UnauthenticatedError",
    "parse_callers",
    "parse_rate",
    "source_of",
]
