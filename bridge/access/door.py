"""The door: turns a request's ``Authorization`` header into a caller, and checks what that
caller may do, run and how often.

    door = Door.open(callers_path="callers.toml")
    caller = door.authenticate(request.headers.get("Authorization"))   # 401
    door.check(caller, Permission.APPROVE)                              # 403
    door.check_tool(caller, "delete_user", source="crm")                # 403
    door.limit(caller, "messages")                                      # 429

With neither callers nor an identity provider, every request is `ANONYMOUS` (every
permission): the daemon then listens on loopback only.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Protocol, runtime_checkable

from bridge.access.callers import Callers
from bridge.access.errors import ForbiddenError, UnauthenticatedError
from bridge.access.principal import ANONYMOUS, Permission, Principal
from bridge.access.rates import RateKind, RateLimiter
from bridge.errors import ConfigurationError

__all__ = ["Door", "TokenVerifier", "looks_like_jwt"]

_JWT = re.compile(r"^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*$")
# Double quotes, not backticks, around the placeholder: `redact` leaves "Bearer <...>" before
# a quote readable (it shows the header's shape, not a secret).
_MISSING = 'missing credentials: send "Authorization: Bearer <key or token>"'


def looks_like_jwt(credential: str) -> bool:
    """Whether `credential` has a JWT's shape: three base64url parts separated by dots."""
    return _JWT.fullmatch(credential) is not None


@runtime_checkable
class TokenVerifier(Protocol):
    """An identity provider's tokens (`bridge.access.oidc`)."""

    def verify(self, token: str) -> Principal:
        """The caller a token names (``via="oidc"``).

        Raises:
            UnauthenticatedError: expired, badly signed, for another audience or issuer, or
                naming no caller; the message says which, never the token.
        """
        ...


class Door:
    """Who is calling, and what it may do (`Authenticates`).

    Args:
        callers: The callers known by key (`Callers`), if any.
        oidc: The identity provider's token verifier, if any.
        rates: The rate limiter (one per process; a new one when None).
    """

    def __init__(
        self,
        callers: Callers | None = None,
        oidc: TokenVerifier | None = None,
        rates: RateLimiter | None = None,
    ) -> None:
        self.callers = callers
        self.oidc = oidc
        self.rates = rates if rates is not None else RateLimiter()

    @classmethod
    def open(
        cls,
        callers_path: str | Path | None = None,
        api_key: str | None = None,
        api_key_file: str | Path | None = None,
        oidc: TokenVerifier | None = None,
        *,
        oidc_issuer: str | None = None,
        oidc_audience: str | None = None,
        oidc_caller_claim: str = "sub",
        oidc_roles_claim: str = "roles",
    ) -> Door:
        """A door for these options: a caller file, ``--api-key``, ``--api-key-file``, an
        identity provider (`oidc`, or one made from the ``oidc_*`` options: its tokens' roles
        are the caller file's ``[roles.*]``, and a caller the file names takes the file's
        roles); with none of them, every request is `ANONYMOUS`.

        Raises:
            CallerFileError: a file cannot be read or is wrong.
        """
        callers = Callers.from_files(callers_path, api_key, api_key_file)
        if oidc is None and oidc_issuer is not None:
            if not oidc_audience:
                raise ConfigurationError(
                    "--oidc-issuer needs --oidc-audience: the audience tokens must be issued for"
                )
            # Imported only with an identity provider: it brings the JOSE library and its
            # cryptography, which a daemon of keys alone never needs at start.
            from bridge.access.oidc import OidcVerifier

            oidc = OidcVerifier(
                oidc_issuer,
                oidc_audience,
                caller_claim=oidc_caller_claim,
                roles_claim=oidc_roles_claim,
                roles=callers.roles if callers is not None else None,
                lookup=callers.get if callers is not None else None,
            )
        elif oidc_audience is not None and oidc is None:
            raise ConfigurationError(
                "--oidc-audience needs --oidc-issuer: the identity provider that issues tokens"
            )
        return cls(callers, oidc)

    @property
    def anonymous(self) -> bool:
        """Whether requests need no credentials (neither callers nor an identity provider)."""
        return self.callers is None and self.oidc is None

    def __repr__(self) -> str:
        return f"Door(callers={self.callers!r}, oidc={self.oidc is not None})"

    def authenticate(self, authorization: str | None) -> Principal:
        """The caller an ``Authorization`` header value names (``Bearer <key or token>``).

        A credential shaped like a JWT goes to the identity provider when there is one (and,
        refused there, is still tried as a key); anything else is a key.

        Raises:
            UnauthenticatedError: missing, unknown, expired or badly signed credentials.
        """
        if self.anonymous:
            return ANONYMOUS
        scheme, _, credential = (authorization or "").strip().partition(" ")
        credential = credential.strip()
        if not scheme or (scheme.lower() == "bearer" and not credential):
            raise UnauthenticatedError(_MISSING)
        if scheme.lower() != "bearer":
            raise UnauthenticatedError(
                'unsupported credentials: send "Authorization: Bearer <key or token>"'
            )
        if self.oidc is not None and looks_like_jwt(credential):
            try:
                return self.oidc.verify(credential)
            except UnauthenticatedError:
                found = self.callers.identify(credential) if self.callers is not None else None
                if found is None:
                    raise
                return found
        if self.callers is None:
            raise UnauthenticatedError(
                "unknown credentials: expected a token from the identity provider (a JWT)"
            )
        found = self.callers.identify(credential)
        if found is None:
            raise UnauthenticatedError("unknown API key")
        return found

    def check(self, principal: Principal, permission: Permission) -> None:
        """Refuse `principal` unless it holds `permission`.

        Raises:
            ForbiddenError: naming the caller, its roles and the permission missing.
        """
        if principal.can(permission):
            return
        roles = ", ".join(sorted(principal.roles)) or "none"
        raise ForbiddenError(
            f"caller {principal.name!r} may not {_doing(permission)}: its roles ({roles}) "
            f"lack the permission {permission.value!r}"
        )

    def check_tool(self, principal: Principal, name: str, source: str = "") -> None:
        """Refuse `principal` unless the tool `name` (from `source`) is among its tools.

        Raises:
            ForbiddenError: naming the caller and the tool.
        """
        if principal.may_run(name, source):
            return
        origin = f" (source {source!r})" if source else ""
        raise ForbiddenError(
            f"caller {principal.name!r} may not run the tool {name!r}{origin}: it is not "
            f"among the tools of its roles ({principal.tools})"
        )

    def limit(self, principal: Principal, kind: RateKind) -> None:
        """Count one message or tool call of `principal`, or refuse it.

        Raises:
            RateLimitedError: the caller is over its limit (with ``retry_after`` seconds).
        """
        self.rates.check(principal, kind)

    def reload(self) -> bool:
        """Read the caller files again (on SIGHUP); False, keeping the callers in use, when
        there are none or they are wrong (logged)."""
        return self.callers.reload() if self.callers is not None else False


def _doing(permission: Permission) -> str:
    return {
        Permission.CONVERSE: "converse",
        Permission.READ_ALL: "read every conversation",
        Permission.CALL_TOOLS: "call tools directly",
        Permission.APPROVE: "approve",
        Permission.OBSERVE: "observe",
        Permission.ADMIN: "administer",
    }[permission]
