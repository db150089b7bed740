"""The door: who is calling (keys, identity-provider tokens), what each caller may do and run,
the policy decision on a call's arguments (Cedar), and the hash-chained audit record.

Used by every entry point: the daemon, `mcp-serve`, `toolbridge call` and the `Bridge` library.
"""

from bridge.access.decision import (
    ALLOW,
    AuditEvent,
    CallFacts,
    Decides,
    PolicyDecision,
    Records,
    source_of,
)
from bridge.access.errors import AccessError, ForbiddenError, RateLimitedError, UnauthenticatedError
from bridge.access.oidc import OidcVerifier, RoleGrant
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

__all__ = [
    "ALLOW",
    "ALL_TOOLS",
    "ANONYMOUS",
    "LOCAL",
    "AccessError",
    "AuditEvent",
    "Authenticates",
    "CallFacts",
    "Decides",
    "ForbiddenError",
    "OidcVerifier",
    "Permission",
    "PolicyDecision",
    "Principal",
    "Rate",
    "RateLimitedError",
    "RateLimits",
    "Records",
    "RoleGrant",
    "ToolPatterns",
    "UnauthenticatedError",
    "source_of",
]
