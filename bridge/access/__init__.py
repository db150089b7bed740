"""The door: who is calling (keys, identity-provider tokens), what each caller may do and run,
the policy decision on a call's arguments (Cedar), and the hash-chained audit record.

Used by every entry point: the daemon, `mcp-serve`, `toolbridge call` and the `Bridge` library.
"""

from typing import TYPE_CHECKING

from bridge.access.audit import (
    AuditLog,
    AuditProblem,
    AuditWriteError,
    ChainHead,
    ExpectedHead,
    VerifyReport,
    export_audit,
    verify_audit,
)
from bridge.access.callers import CallerFileError, Callers, parse_callers, parse_rate
from bridge.access.decision import (
    ALLOW,
    AuditEvent,
    CallFacts,
    Decides,
    PolicyDecision,
    Records,
    decide_or_refuse,
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
    RoleGrant,
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
    "AuditLog",
    "AuditProblem",
    "AuditWriteError",
    "Authenticates",
    "CallFacts",
    "CallerFileError",
    "Callers",
    "ChainHead",
    "Decides",
    "Door",
    "ExpectedHead",
    "ForbiddenError",
    "OidcVerifier",
    "Permission",
    "PolicyDecision",
    "Principal",
    "Rate",
    "RateLimitedError",
    "RateLimiter",
    "RateLimits",
    "Records",
    "RoleGrant",
    "TokenVerifier",
    "ToolPatterns",
    "UnauthenticatedError",
    "VerifyReport",
    "decide_or_refuse",
    "export_audit",
    "parse_callers",
    "parse_rate",
    "source_of",
    "verify_audit",
]

if TYPE_CHECKING:
    from bridge.access.oidc import OidcVerifier


def __getattr__(name: str) -> object:
    # The identity-provider verifier is loaded when asked for: it brings PyJWT and its
    # cryptography, which every other use of the door does without.
    if name == "OidcVerifier":
        from bridge.access.oidc import OidcVerifier

        return OidcVerifier
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
