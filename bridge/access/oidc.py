"""Identity-provider tokens at the door: an OpenID Connect issuer's signed JWTs name callers.

`OidcVerifier` checks a bearer token the way a resource server should: the signing key comes
from the issuer's own JWKS (found through its discovery document, whose ``issuer`` must be the
configured one exactly), only asymmetric algorithms are taken and the algorithm must fit the key,
and ``iss``, ``aud``, ``exp``, ``nbf`` and ``iat`` are checked with a small leeway. The caller
claim names the caller; the roles claim picks roles from the roles table, whose permissions and
tools the caller gets (or, when the caller is also in the caller file, that entry's).

The JWKS is cached; a token with an unknown ``kid`` refetches it once (the issuer rotated its
keys), at most once every few seconds however many such tokens arrive, and cached keys keep
working while the identity provider is down. Every refusal is an `UnauthenticatedError` that
says what was wrong, never the token.
"""

from __future__ import annotations

import json
import logging
import math
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Any, Protocol

import jwt
import requests
from jwt.api_jws import PyJWS

from bridge.access.errors import UnauthenticatedError
from bridge.access.principal import (
    ALL_TOOLS,
    Permission,
    Principal,
    RoleGrant,
    ToolPatterns,
)

__all__ = ["ACCEPTED_ALGORITHMS", "GrantsRole", "OidcVerifier", "RoleGrant"]

log = logging.getLogger("bridge.access.oidc")

ACCEPTED_ALGORITHMS: frozenset[str] = frozenset(
    {
        "RS256",
        "RS384",
        "RS512",
        "PS256",
        "PS384",
        "PS512",
        "ES256",
        "ES384",
        "ES512",
        "EdDSA",
    }
)
"""The signing algorithms a token may use: asymmetric ones only (never ``none`` or ``HS*``)."""

# The key type (and curve) each algorithm needs.
_KEY_TYPES: dict[str, tuple[str, frozenset[str] | None]] = {
    **{alg: ("RSA", None) for alg in ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512")},
    "ES256": ("EC", frozenset({"P-256"})),
    "ES384": ("EC", frozenset({"P-384"})),
    "ES512": ("EC", frozenset({"P-521"})),
    "EdDSA": ("OKP", frozenset({"Ed25519", "Ed448"})),
}

_MAX_TOKEN = 16 * 1024
_MAX_NAME = 256
_MAX_DOCUMENT = 1024 * 1024
_IDENTIFIER = re.compile(r"[A-Za-z0-9_.:+/=-]{1,64}")


class GrantsRole(Protocol):
    """What a role in the roles table grants (the caller file's ``[roles.NAME]``)."""

    @property
    def permissions(self) -> frozenset[Permission]: ...

    @property
    def tools(self) -> ToolPatterns: ...


RoleTable = Mapping[str, "GrantsRole | tuple[frozenset[Permission], ToolPatterns]"]


def _grant(entry: GrantsRole | tuple[frozenset[Permission], ToolPatterns]) -> RoleGrant:
    if isinstance(entry, tuple):
        permissions, tools = entry
        return RoleGrant(frozenset(permissions), tools)
    return RoleGrant(frozenset(entry.permissions), entry.tools)


def _show(value: object, limit: int = 80) -> str:
    """A claim value for a message: repr'd (so nothing it holds reads as our text), bounded."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _plain(value: str) -> str:
    """A short identifier (an algorithm, a kid) as is; anything else as `_show` shows it."""
    return value if _IDENTIFIER.fullmatch(value) else _show(value, 60)


def _when(seconds: float) -> str:
    try:
        return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (OverflowError, OSError, ValueError):
        return f"{seconds:g} (seconds since 1970)"


def _claim(claims: Mapping[str, Any], name: str) -> Any:
    """The claim `name`: a top-level claim of that exact name, else a dotted path into nested
    objects (``realm_access.roles``); None when absent."""
    if name in claims:
        return claims[name]
    value: Any = claims
    for part in name.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    return value


def _roles(value: Any) -> frozenset[str]:
    """A roles claim's role names: a list of strings, or one space-separated string."""
    if isinstance(value, str):
        return frozenset(value.split())
    if isinstance(value, list):
        return frozenset(item for item in value if isinstance(item, str) and item)
    return frozenset()


def _number(claims: Mapping[str, Any], name: str) -> float | None:
    value = claims.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise UnauthenticatedError(f"token claim {name!r} is not a time (seconds since 1970)")
    return float(value)


@dataclass(frozen=True)
class _Keys:
    """One fetch of the issuer's JWKS: signing keys by kid (keys without a kid under "")."""

    by_kid: Mapping[str, tuple[dict[str, Any], ...]]
    fetched_at: float


class OidcVerifier:
    """Checks an identity provider's bearer tokens and names their caller (`TokenVerifier`).

    Args:
        issuer: The issuer URL, exactly as tokens' ``iss`` and the discovery document state it.
        audience: What tokens for this service carry in ``aud`` (a string or one of a list).
        caller_claim: The claim naming the caller (a dotted path for nested claims).
        roles_claim: The claim listing its roles: a list of strings or a space-separated string;
            a dotted path for nested claims (Keycloak's ``realm_access.roles``).
        roles: The roles table: role name -> what it grants (a `RoleGrant`, anything with
            ``permissions`` and ``tools``, or a ``(permissions, tools)`` pair), or a function
            returning the table in use (read on every token, so a reloaded caller file counts).
            Roles a token lists that are not in it grant nothing (and are not among the
            principal's roles).
        lookup: The caller file: a caller of that name there takes that entry's roles,
            permissions, tools and rate limits instead of the token's roles.
        leeway: Seconds of clock difference allowed on ``exp``, ``nbf`` and ``iat``.
        timeout: Seconds for each request to the identity provider.
        cache_seconds: How long a fetched JWKS is used before it is fetched again (kept past
            that while the identity provider cannot be reached).
        refetch_seconds: At least this long between two fetches of the JWKS prompted by tokens
            with an unknown ``kid`` (or after a failed fetch).
        clock: Monotonic seconds for the cache and refetch timing (tests pass their own).
        session: The `requests.Session` to fetch with (a new one by default).
    """

    def __init__(
        self,
        issuer: str,
        audience: str,
        *,
        caller_claim: str = "sub",
        roles_claim: str = "roles",
        roles: RoleTable | Callable[[], RoleTable] | None = None,
        lookup: Callable[[str], Principal | None] | None = None,
        leeway: float = 30.0,
        timeout: float = 5.0,
        cache_seconds: float = 300.0,
        refetch_seconds: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
        session: requests.Session | None = None,
    ) -> None:
        if not issuer:
            raise ValueError("an OIDC issuer URL is required")
        if not audience:
            raise ValueError("an OIDC audience is required")
        self.issuer = issuer
        self.audience = audience
        self.caller_claim = caller_claim
        self.roles_claim = roles_claim
        self._roles_table = roles
        self._lookup = lookup
        self.leeway = leeway
        self.timeout = timeout
        self.cache_seconds = cache_seconds
        self.refetch_seconds = refetch_seconds
        self._clock = clock
        self._session = session or requests.Session()
        self.discovery_url = issuer.rstrip("/") + "/.well-known/openid-configuration"
        self._lock = threading.Lock()
        self._jwks_uri: str | None = None
        self._keys: _Keys | None = None
        self._last_attempt: float | None = None
        self._failure: UnauthenticatedError | None = None
        self._jws = PyJWS()

    # -- the token ---------------------------------------------------------------------------

    def verify(self, token: str) -> Principal:
        """The caller `token` names.

        Raises:
            UnauthenticatedError: a malformed, unsigned, wrongly signed, expired, not yet valid
                token, one for another issuer or audience, one naming nobody, or an identity
                provider that cannot be reached and no cached keys.
        """
        if len(token) > _MAX_TOKEN:
            raise UnauthenticatedError(f"token is longer than {_MAX_TOKEN} characters")
        try:
            header = self._jws.get_unverified_header(token)
        except jwt.PyJWTError:
            raise UnauthenticatedError("malformed token (not a signed JWT)") from None
        alg = header.get("alg")
        if not isinstance(alg, str) or not alg:
            raise UnauthenticatedError("malformed token (its header names no algorithm)")
        if alg.lower() == "none":
            raise UnauthenticatedError("unsigned token refused")
        if alg not in ACCEPTED_ALGORITHMS:
            raise UnauthenticatedError(
                f"token algorithm {_plain(alg)} is not accepted "
                "(expected an asymmetric algorithm such as RS256)"
            )
        kid = header.get("kid", "")
        if not isinstance(kid, str):
            raise UnauthenticatedError("token header 'kid' is not a string")
        key = self._key_for(kid, alg)
        try:
            decoded = self._jws.decode_complete(token, key=key, algorithms=[alg])
        except jwt.InvalidSignatureError:
            raise UnauthenticatedError("token signature does not verify") from None
        except jwt.PyJWTError as error:
            raise UnauthenticatedError(f"token refused: {type(error).__name__}") from None
        try:
            claims = json.loads(decoded["payload"])
        except (ValueError, UnicodeDecodeError):
            raise UnauthenticatedError("malformed token (its claims are not JSON)") from None
        if not isinstance(claims, dict):
            raise UnauthenticatedError("malformed token (its claims are not a JSON object)")
        self._check_claims(claims)
        return self._principal(claims)

    def _check_claims(self, claims: Mapping[str, Any]) -> None:
        iss = claims.get("iss")
        if iss != self.issuer:
            raise UnauthenticatedError(
                f"token issuer {_show(iss)}, expected {self.issuer!r}"
                if iss is not None
                else f"token has no issuer (iss), expected {self.issuer!r}"
            )
        aud = claims.get("aud")
        audiences = [aud] if isinstance(aud, str) else aud if isinstance(aud, list) else None
        if audiences is None:
            raise UnauthenticatedError(f"token has no audience (aud), expected {self.audience!r}")
        if self.audience not in audiences:
            shown = _show(aud if isinstance(aud, str) else audiences)
            raise UnauthenticatedError(f"token is for audience {shown}, expected {self.audience!r}")
        now = time.time()
        exp = _number(claims, "exp")
        if exp is None:
            raise UnauthenticatedError("token has no expiry (exp)")
        if now - self.leeway >= exp:
            raise UnauthenticatedError(f"token expired at {_when(exp)}")
        nbf = _number(claims, "nbf")
        if nbf is not None and now + self.leeway < nbf:
            raise UnauthenticatedError(f"token not valid before {_when(nbf)}")
        iat = _number(claims, "iat")
        if iat is not None and now + self.leeway < iat:
            raise UnauthenticatedError(f"token issued in the future ({_when(iat)})")

    def _principal(self, claims: Mapping[str, Any]) -> Principal:
        name = _claim(claims, self.caller_claim)
        if name is None or name == "":
            raise UnauthenticatedError(
                f"token has no {self.caller_claim!r} claim naming the caller"
            )
        if not isinstance(name, str) or not name.strip():
            raise UnauthenticatedError(
                f"token claim {self.caller_claim!r} is not a caller name (a string)"
            )
        if len(name) > _MAX_NAME or not name.isprintable():
            raise UnauthenticatedError(
                f"token claim {self.caller_claim!r} is not a caller name (at most {_MAX_NAME} "
                "printable characters)"
            )
        if self._lookup is not None:
            known = self._lookup(name)
            if known is not None:
                return replace(known, name=name, via="oidc")
        table = self._roles_table() if callable(self._roles_table) else self._roles_table or {}
        roles = sorted(_roles(_claim(claims, self.roles_claim)) & table.keys())
        permissions: set[Permission] = set()
        patterns: list[str] = []
        for role in roles:
            grant = _grant(table[role])
            permissions |= grant.permissions
            patterns.extend(p for p in grant.tools.patterns if p not in patterns)
        return Principal(
            name=name,
            roles=frozenset(roles),
            permissions=frozenset(permissions),
            tools=ALL_TOOLS if "*" in patterns else ToolPatterns(tuple(patterns)),
            via="oidc",
        )

    # -- the keys ----------------------------------------------------------------------------

    def prefetch(self) -> None:
        """Fetch the discovery document and the JWKS now (at startup), so a misconfigured or
        unreachable identity provider shows at once rather than at the first token.

        Raises:
            UnauthenticatedError: the identity provider cannot be reached, or its discovery
                document names another issuer.
        """
        self._refresh(prompted=True)
        if self._failure is not None:
            raise UnauthenticatedError(str(self._failure))

    def _key_for(self, kid: str, alg: str) -> Any:
        group = self._group(self._current_keys(), kid, alg)
        if not group and self._may_refetch():
            group = self._group(self._refresh(prompted=True), kid, alg)
        if not group:
            if kid:
                raise UnauthenticatedError(f"no key with kid {_plain(kid)} at the issuer's JWKS")
            raise UnauthenticatedError(
                f"token has no kid and the issuer's JWKS has no single key for {alg}"
            )
        fitting = [jwk for jwk in group if _fits(jwk, alg)]
        if not fitting:
            jwk = group[0]
            raise UnauthenticatedError(
                f"token algorithm {alg} does not fit the issuer's key {_plain(kid)} "
                f"(kty {_show(jwk.get('kty'))}, alg {_show(jwk.get('alg'))})"
            )
        try:
            return jwt.PyJWK(fitting[0], algorithm=alg).key
        except (jwt.PyJWTError, ValueError, TypeError, KeyError):
            raise UnauthenticatedError(
                f"the issuer's key {_plain(kid)} cannot be used for {alg}"
            ) from None

    @staticmethod
    def _group(keys: _Keys | None, kid: str, alg: str) -> tuple[dict[str, Any], ...]:
        """The keys with `kid`; for a token without a kid, the one key `alg` fits (if one)."""
        if keys is None:
            return ()
        if kid:
            return keys.by_kid.get(kid, ())
        fitting = [jwk for group in keys.by_kid.values() for jwk in group if _fits(jwk, alg)]
        return (fitting[0],) if len(fitting) == 1 else ()

    def _current_keys(self) -> _Keys | None:
        keys = self._keys
        if keys is not None and self._clock() - keys.fetched_at < self.cache_seconds:
            return keys
        if keys is None or self._may_refetch():
            return self._refresh(prompted=False)
        return keys

    def _may_refetch(self) -> bool:
        last = self._last_attempt
        return last is None or self._clock() - last >= self.refetch_seconds

    def _refresh(self, *, prompted: bool) -> _Keys | None:
        """Fetch the JWKS (and the discovery document, once); on failure keep the cached keys,
        or raise when there are none."""
        with self._lock:
            keys = self._keys
            now = self._clock()
            # Another thread may have fetched while this one waited for the lock.
            if self._last_attempt is not None and now - self._last_attempt < self.refetch_seconds:
                if keys is None and self._failure is not None:
                    raise UnauthenticatedError(str(self._failure))
                return keys
            if not prompted and keys is not None and now - keys.fetched_at < self.cache_seconds:
                return keys
            self._last_attempt = now
            try:
                if self._jwks_uri is None:
                    self._jwks_uri = self._discover()
                fetched = _parse_jwks(self._get(self._jwks_uri, "JWKS"))
            except UnauthenticatedError as error:
                if self._failure is None:
                    log.warning("%s", error)
                self._failure = error
                if keys is None:
                    raise
                return keys
            if self._failure is not None:
                log.info("the identity provider at %s answers again", self.issuer)
                self._failure = None
            self._keys = _Keys(fetched, self._clock())
            return self._keys

    def _discover(self) -> str:
        document = self._get(self.discovery_url, "discovery document")
        issuer = document.get("issuer")
        if issuer != self.issuer:
            raise UnauthenticatedError(
                f"the identity provider's discovery document at {self.discovery_url} names "
                f"issuer {_show(issuer)}, expected {self.issuer!r}"
            )
        jwks_uri = document.get("jwks_uri")
        if not isinstance(jwks_uri, str) or not jwks_uri.startswith(("https://", "http://")):
            raise UnauthenticatedError(
                f"the identity provider's discovery document at {self.discovery_url} has no "
                "jwks_uri (an http(s) URL)"
            )
        return jwks_uri

    def _get(self, url: str, what: str) -> dict[str, Any]:
        def unreachable(reason: str) -> UnauthenticatedError:
            return UnauthenticatedError(
                f"cannot reach the identity provider at {url}: {reason} "
                "(tokens cannot be checked until it answers)"
            )

        try:
            with self._session.get(
                url,
                timeout=self.timeout,
                stream=True,
                allow_redirects=False,
                headers={"Accept": "application/json"},
            ) as response:
                if response.status_code != 200:
                    raise unreachable(f"HTTP {response.status_code} for its {what}")
                body = bytearray()
                for chunk in response.iter_content(65536):
                    body += chunk
                    if len(body) > _MAX_DOCUMENT:
                        raise unreachable(f"its {what} is larger than {_MAX_DOCUMENT} bytes")
        except requests.Timeout:
            raise unreachable(f"no answer within {self.timeout:g} s") from None
        except requests.ConnectionError:
            raise unreachable("the connection failed") from None
        except requests.RequestException as error:
            raise unreachable(type(error).__name__) from None
        try:
            document = json.loads(bytes(body))
        except ValueError:
            raise unreachable(f"its {what} is not JSON") from None
        if not isinstance(document, dict):
            raise unreachable(f"its {what} is not a JSON object")
        return document


def _fits(jwk: Mapping[str, Any], alg: str) -> bool:
    """Whether a token signed with `alg` may be checked with `jwk` (key type, curve, the key's
    own ``alg`` when it names one)."""
    kty, curves = _KEY_TYPES[alg]
    if jwk.get("kty") != kty:
        return False
    if curves is not None and jwk.get("crv") not in curves:
        return False
    key_alg = jwk.get("alg")
    return key_alg is None or key_alg == alg


def _parse_jwks(document: Mapping[str, Any]) -> dict[str, tuple[dict[str, Any], ...]]:
    """The signing keys of a JWKS document, by kid (encryption keys and symmetric keys left
    out)."""
    entries = document.get("keys")
    if not isinstance(entries, list):
        raise UnauthenticatedError("the identity provider's JWKS has no 'keys' list")
    by_kid: dict[str, list[dict[str, Any]]] = {}
    for jwk in _signing(entries):
        kid = jwk.get("kid", "")
        by_kid.setdefault(kid if isinstance(kid, str) else "", []).append(jwk)
    return {kid: tuple(group) for kid, group in by_kid.items()}


def _signing(entries: Iterable[Any]) -> Iterable[dict[str, Any]]:
    for jwk in entries:
        if not isinstance(jwk, dict) or jwk.get("kty") not in ("RSA", "EC", "OKP"):
            continue
        if jwk.get("use", "sig") != "sig":
            continue
        yield jwk
