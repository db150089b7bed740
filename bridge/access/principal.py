"""Who is calling: a `Principal` (a named caller with roles, permissions, the tools it may see
and run, and its rate limits), the six permissions, and how a tool list matches a tool.

Every way in (the daemon's routes, the console, the SSE streams, the relay, `mcp-serve`,
`toolbridge call`, the `Bridge` library) turns its credentials into one `Principal` and asks
it; nothing else decides who may do what.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum
from typing import Literal, Protocol

__all__ = [
    "ALL_TOOLS",
    "ANONYMOUS",
    "LOCAL",
    "NO_TOOLS",
    "Authenticates",
    "Permission",
    "Principal",
    "Rate",
    "RateLimits",
    "RoleGrant",
    "ToolPatterns",
]


class Permission(str, Enum):
    """What a role may do (a caller has the union of its roles' permissions)."""

    CONVERSE = "converse"
    """Create conversations and send messages in its own."""
    READ_ALL = "read_all"
    """Read every conversation and the daemon-wide event stream."""
    CALL_TOOLS = "call_tools"
    """Call a tool directly (``POST /v1/tools/{name}/call``)."""
    APPROVE = "approve"
    """List and decide approvals."""
    OBSERVE = "observe"
    """Read ``/metrics`` and ``/v1/info``."""
    ADMIN = "admin"
    """All of the above, and reloading tools."""

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class ToolPatterns:
    """The tools a caller may see and run: names, globs (``crm_*``) or ``source:NAME`` for
    every tool of a source. A tool matches when any pattern does."""

    patterns: tuple[str, ...] = ("*",)

    def allows(self, name: str, source: str = "") -> bool:
        """Whether the tool `name` (loaded from `source`, "" for none) is in the list."""
        for pattern in self.patterns:
            if pattern.startswith("source:"):
                if source and fnmatch.fnmatchcase(source, pattern[len("source:") :]):
                    return True
            elif fnmatch.fnmatchcase(name, pattern):
                return True
        return False

    @property
    def everything(self) -> bool:
        return "*" in self.patterns

    def __str__(self) -> str:
        return ", ".join(self.patterns) or "(none)"


ALL_TOOLS = ToolPatterns(("*",))
NO_TOOLS = ToolPatterns(())


@dataclass(frozen=True)
class RoleGrant:
    """One role's permissions and the tools it may see and run (none unless given)."""

    permissions: frozenset[Permission] = frozenset()
    tools: ToolPatterns = NO_TOOLS


@dataclass(frozen=True)
class Rate:
    """At most `count` events per `seconds` (``"30/minute"``)."""

    count: int
    seconds: float

    def __str__(self) -> str:
        unit = {1.0: "second", 60.0: "minute", 3600.0: "hour", 86400.0: "day"}.get(self.seconds)
        return f"{self.count}/{unit}" if unit else f"{self.count}/{self.seconds:g}s"


@dataclass(frozen=True)
class RateLimits:
    """A caller's optional limits; None means unlimited."""

    messages: Rate | None = None
    tool_calls: Rate | None = None


Via = Literal["key", "oidc", "anonymous", "local"]


@dataclass(frozen=True)
class Principal:
    """One caller, as every entry point sees it.

    Attributes:
        name: Who it is (a caller file's ``[callers.NAME]``, a token's caller claim, or a key
            file's name); what the journal and the audit record write.
        roles: Its roles (Cedar: the principal is ``in`` each ``Role``).
        permissions: The union of its roles' permissions.
        tools: The tools it may see and run.
        via: How it was identified: a key, an identity provider's token, nobody (a daemon that
            takes requests without credentials), or the local user (CLI and library).
        rates: Its rate limits.
    """

    name: str
    roles: frozenset[str] = frozenset()
    permissions: frozenset[Permission] = frozenset()
    tools: ToolPatterns = ALL_TOOLS
    via: Via = "key"
    rates: RateLimits = field(default_factory=RateLimits)

    def can(self, permission: Permission) -> bool:
        """Whether it holds `permission` (``admin`` holds every one)."""
        return Permission.ADMIN in self.permissions or permission in self.permissions

    def may_run(self, name: str, source: str = "") -> bool:
        """Whether the tool `name` (from `source`) is among those it may see and run."""
        return self.tools.allows(name, source)

    def visible(self, tools: Iterable[tuple[str, str]]) -> list[str]:
        """The names among `(name, source)` pairs it may see, in order."""
        return [name for name, source in tools if self.may_run(name, source)]


def _everyone(name: str, via: Via) -> Principal:
    return Principal(
        name=name, roles=frozenset({"admin"}), permissions=frozenset(Permission), via=via
    )


ANONYMOUS = _everyone("anonymous", "anonymous")
"""The caller of a daemon that takes requests without credentials: every permission, as
before callers existed (the daemon then listens on loopback only)."""
LOCAL = _everyone("local", "local")
"""The person at the terminal (`toolbridge call`, `run`, `chat`) or the library's user."""


class Authenticates(Protocol):
    """Turns a request's credentials into a caller (`bridge.access.door.Door`)."""

    def authenticate(self, authorization: str | None) -> Principal:
        """The caller an ``Authorization`` header value names (``Bearer <key or token>``);
        `ANONYMOUS` when the door takes no credentials.

        Raises:
            UnauthenticatedError: missing, unknown, expired or badly signed credentials.
        """
        ...
