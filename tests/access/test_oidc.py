"""OidcVerifier against a real loopback identity provider: good tokens name callers with the
roles table's permissions, every kind of bad token is refused with a message saying why, and the
JWKS is cached, refetched once on rotation, never hammered, and kept while the IdP is down."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bridge.access import (
    ALL_TOOLS,
    OidcVerifier,
    Permission,
    Principal,
    Rate,
    RateLimits,
    RoleGrant,
    ToolPatterns,
    UnauthenticatedError,
)
from tests.support.idp import IdentityProvider, b64url, running

ROLES: dict[str, RoleGrant | tuple[frozenset[Permission], ToolPatterns]] = {
    "operator": RoleGrant(
        frozenset({Permission.CONVERSE, Permission.CALL_TOOLS}), ToolPatterns(("crm_*",))
    ),
    "auditor": (frozenset({Permission.READ_ALL, Permission.OBSERVE}), ToolPatterns(("search",))),
}


class Clock:
    """Monotonic time the test moves by hand (the verifier's cache and refetch timing)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class CountingSession(requests.Session):
    """A real session that counts the requests it makes (to a server that is gone)."""

    def __init__(self) -> None:
        super().__init__()
        self.requests = 0

    def request(self, *args: Any, **kwargs: Any) -> requests.Response:
        self.requests += 1
        return super().request(*args, **kwargs)


@pytest.fixture
def idp() -> Iterator[IdentityProvider]:
    yield from running()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def verifier(idp: IdentityProvider, clock: Clock) -> OidcVerifier:
    return OidcVerifier(idp.issuer, idp.audience, roles=ROLES, clock=clock)


def refused(verifier: OidcVerifier, token: str) -> str:
    with pytest.raises(UnauthenticatedError) as caught:
        verifier.verify(token)
    message = str(caught.value)
    for part in token.split("."):
        assert len(part) < 4 or part not in message  # never the token, nor a piece of it
    assert caught.value.status == 401
    return message


# -- good tokens ------------------------------------------------------------------------------


def test_a_valid_token_names_the_caller_with_its_roles_permissions_and_tools(
    verifier: OidcVerifier, idp: IdentityProvider
) -> None:
    principal = verifier.verify(idp.token(sub="alice", roles=["operator", "auditor", "stranger"]))
    assert principal.name == "alice"
    assert principal.via == "oidc"
    assert principal.roles == {"operator", "auditor"}  # roles not in the table grant nothing
    assert principal.permissions == {
        Permission.CONVERSE,
        Permission.CALL_TOOLS,
        Permission.READ_ALL,
        Permission.OBSERVE,
    }
    assert principal.may_run("crm_lookup") and principal.may_run("search")
    assert not principal.may_run("shell")


def test_a_token_with_only_unknown_roles_or_none_grants_nothing(
    verifier: OidcVerifier, idp: IdentityProvider
) -> None:
    for roles in (["superuser"], None, 42, [1, None]):
        principal = verifier.verify(idp.token(sub="bob", roles=roles))
        assert principal.name == "bob"
        assert principal.roles == frozenset()
        assert principal.permissions == frozenset()
        assert not principal.may_run("crm_lookup")


def test_roles_claim_as_a_space_separated_string(
    verifier: OidcVerifier, idp: IdentityProvider
) -> None:
    principal = verifier.verify(idp.token(roles="operator  auditor"))
    assert principal.roles == {"operator", "auditor"}


def test_roles_claim_as_a_dotted_path_keycloak_style(idp: IdentityProvider) -> None:
    verifier = OidcVerifier(idp.issuer, idp.audience, roles_claim="realm_access.roles", roles=ROLES)
    token = idp.token(realm_access={"roles": ["auditor", "offline_access"]}, roles=["operator"])
    assert verifier.verify(token).roles == {"auditor"}


def test_a_claim_name_with_dots_is_taken_literally_first(idp: IdentityProvider) -> None:
    claim = "https://example.com/roles"
    verifier = OidcVerifier(idp.issuer, idp.audience, roles_claim=claim, roles=ROLES)
    assert verifier.verify(idp.sign({**idp.claims(), claim: ["operator"]})).roles == {"operator"}


def test_the_caller_claim_can_be_another_claim(idp: IdentityProvider) -> None:
    verifier = OidcVerifier(
        idp.issuer, idp.audience, caller_claim="preferred_username", roles=ROLES
    )
    principal = verifier.verify(idp.token(sub="f81d4fae", preferred_username="carol"))
    assert principal.name == "carol"
    message = refused(verifier, idp.token(sub="f81d4fae"))
    assert message == "token has no 'preferred_username' claim naming the caller"


def test_a_caller_in_the_caller_file_takes_that_entry_over_the_token_roles(
    idp: IdentityProvider,
) -> None:
    entry = Principal(
        name="alice",
        roles=frozenset({"admin"}),
        permissions=frozenset({Permission.ADMIN}),
        tools=ToolPatterns(("*",)),
        rates=RateLimits(messages=Rate(10, 60.0)),
    )
    verifier = OidcVerifier(
        idp.issuer,
        idp.audience,
        roles=ROLES,
        lookup=lambda name: entry if name == "alice" else None,
    )
    alice = verifier.verify(idp.token(sub="alice", roles=["operator"]))
    assert alice.roles == {"admin"}
    assert alice.permissions == {Permission.ADMIN}
    assert alice.rates == RateLimits(messages=Rate(10, 60.0))
    assert alice.via == "oidc"
    bob = verifier.verify(idp.token(sub="bob", roles=["operator"]))
    assert bob.roles == {"operator"}
    assert bob.rates == RateLimits()


def test_an_ec_key_and_other_asymmetric_algorithms_are_accepted(
    verifier: OidcVerifier, idp: IdentityProvider
) -> None:
    assert verifier.verify(idp.ec_token(sub="dave")).name == "dave"
    assert verifier.verify(idp.token(alg="PS256", sub="erin")).name == "erin"
    assert verifier.verify(idp.token(alg="RS512", sub="frank")).name == "frank"


def test_audience_may_be_a_list_and_expiry_has_leeway(
    verifier: OidcVerifier, idp: IdentityProvider
) -> None:
    assert verifier.verify(idp.token(aud=["other", idp.audience])).name == "alice"
    assert verifier.verify(idp.token(exp=-10)).name == "alice"  # within the 30 s leeway
    assert verifier.verify(idp.token(nbf=10)).name == "alice"


# -- refusals ---------------------------------------------------------------------------------


def test_an_expired_token_is_refused_saying_when(
    verifier: OidcVerifier, idp: IdentityProvider
) -> None:
    token = idp.token(exp=-3600)
    message = refused(verifier, token)
    assert message.startswith("token expired at 20")
    assert message.endswith("Z")


def test_a_token_not_yet_valid_is_refused(verifier: OidcVerifier, idp: IdentityProvider) -> None:
    assert refused(verifier, idp.token(nbf=3600)).startswith("token not valid before 20")


def test_a_token_issued_in_the_future_is_refused(
    verifier: OidcVerifier, idp: IdentityProvider
) -> None:
    assert refused(verifier, idp.token(iat=3600)).startswith("token issued in the future")


def test_a_token_without_expiry_is_refused(verifier: OidcVerifier, idp: IdentityProvider) -> None:
    assert refused(verifier, idp.token(exp=None)) == "token has no expiry (exp)"


def test_a_token_for_another_audience_is_refused(
    verifier: OidcVerifier, idp: IdentityProvider
) -> None:
    message = refused(verifier, idp.token(aud="billing"))
    assert message == "token is for audience 'billing', expected 'toolbridge'"
    message = refused(verifier, idp.token(aud=["billing", "crm"]))
    assert message == "token is for audience ['billing', 'crm'], expected 'toolbridge'"


def test_a_token_from_another_issuer_is_refused(
    verifier: OidcVerifier, idp: IdentityProvider
) -> None:
    message = refused(verifier, idp.token(iss="https://evil.example"))
    assert message == f"token issuer 'https://evil.example', expected {idp.issuer!r}"


def test_an_unsigned_token_is_refused(verifier: OidcVerifier, idp: IdentityProvider) -> None:
    assert refused(verifier, idp.unsigned()) == "unsigned token refused"


@pytest.mark.parametrize("alg", ["HS256", "HS384", "HS512"])
def test_an_hmac_token_signed_with_the_public_key_is_refused(
    verifier: OidcVerifier, idp: IdentityProvider, alg: str
) -> None:
    message = refused(verifier, idp.hmac_with_public_key(alg))
    assert message == (
        f"token algorithm {alg} is not accepted (expected an asymmetric algorithm such as RS256)"
    )
    assert idp.jwks_fetches == 0  # refused before any key is looked at


def test_a_token_signed_by_an_unknown_key_is_refused(
    verifier: OidcVerifier, idp: IdentityProvider
) -> None:
    assert refused(verifier, idp.signed_by_stranger()) == (
        "no key with kid stranger at the issuer's JWKS"
    )


def test_a_token_claiming_a_published_kid_but_signed_by_another_key_is_refused(
    verifier: OidcVerifier, idp: IdentityProvider
) -> None:
    message = refused(verifier, idp.signed_by_stranger(kid=idp.current.kid))
    assert message == "token signature does not verify"


def test_the_algorithm_must_fit_the_key(verifier: OidcVerifier, idp: IdentityProvider) -> None:
    # An EC signature presented as the RSA key's, and an RS256 header on the EC key's kid.
    message = refused(verifier, idp.token(key=idp.ec, kid=idp.current.kid))
    assert message.startswith("token algorithm ES256 does not fit the issuer's key rsa-1")
    message = refused(verifier, idp.token(kid=idp.ec.kid))
    assert message.startswith("token algorithm RS256 does not fit the issuer's key ec-1")


def test_a_token_without_the_caller_claim_is_refused(
    verifier: OidcVerifier, idp: IdentityProvider
) -> None:
    assert refused(verifier, idp.token(sub=None)) == "token has no 'sub' claim naming the caller"
    assert refused(verifier, idp.token(sub="")) == "token has no 'sub' claim naming the caller"
    assert (
        refused(verifier, idp.token(sub=7)) == "token claim 'sub' is not a caller name (a string)"
    )
    for name in ("  ", "alice\nbob", "x" * 257):
        assert "is not a caller name" in refused(verifier, idp.token(sub=name))
    odd = "auth0|5f7c8ec7c33c6c004bbafe82"
    assert verifier.verify(idp.token(sub=odd)).name == odd


@pytest.mark.parametrize("token", ["", "abc", "a.b.c", "e30.e30.", "x" * 20000])
def test_garbage_is_refused_as_malformed(verifier: OidcVerifier, token: str) -> None:
    message = refused(verifier, token)
    assert message.startswith(("malformed token", "unsigned token", "token is longer"))


# -- discovery and keys -----------------------------------------------------------------------


def test_discovery_naming_another_issuer_is_refused(
    verifier: OidcVerifier, idp: IdentityProvider
) -> None:
    idp.discovery_issuer = "https://evil.example"
    message = refused(verifier, idp.token())
    assert "names issuer 'https://evil.example', expected" in message
    assert idp.jwks_fetches == 0


def test_the_jwks_is_fetched_once_for_many_tokens(
    verifier: OidcVerifier, idp: IdentityProvider
) -> None:
    for n in range(20):
        assert verifier.verify(idp.token(sub=f"user{n}")).name == f"user{n}"
    assert verifier.verify(idp.ec_token()).name == "alice"
    assert (idp.discovery_fetches, idp.jwks_fetches) == (1, 1)


def test_the_jwks_is_fetched_again_when_the_cache_expires(
    verifier: OidcVerifier, idp: IdentityProvider, clock: Clock
) -> None:
    verifier.verify(idp.token())
    clock.advance(299)
    verifier.verify(idp.token())
    assert idp.jwks_fetches == 1
    clock.advance(2)
    verifier.verify(idp.token())
    assert (idp.discovery_fetches, idp.jwks_fetches) == (1, 2)


def test_a_rotated_key_is_accepted_after_one_refetch_and_the_retired_one_refused(
    verifier: OidcVerifier, idp: IdentityProvider, clock: Clock
) -> None:
    old = idp.token(sub="before")
    assert verifier.verify(old).name == "before"
    idp.rotate()
    clock.advance(10)
    assert verifier.verify(idp.token(sub="after")).name == "after"
    assert idp.jwks_fetches == 2
    assert verifier.verify(idp.token(sub="again")).name == "again"
    assert idp.jwks_fetches == 2
    assert refused(verifier, old) == "no key with kid rsa-1 at the issuer's JWKS"
    assert idp.jwks_fetches == 2


def test_a_flood_of_unknown_kids_refetches_at_most_once_per_interval(
    verifier: OidcVerifier, idp: IdentityProvider, clock: Clock
) -> None:
    verifier.verify(idp.token())
    clock.advance(10)
    for n in range(50):
        refused(verifier, idp.token(kid=f"bogus-{n}"))
    assert idp.jwks_fetches == 2
    clock.advance(1)
    for n in range(50):
        refused(verifier, idp.token(kid=f"bogus-{n}"))
    assert idp.jwks_fetches == 2
    clock.advance(10)
    refused(verifier, idp.token(kid="bogus"))
    assert idp.jwks_fetches == 3


def test_cached_keys_keep_working_while_the_idp_is_down(
    verifier: OidcVerifier, idp: IdentityProvider, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    assert verifier.verify(idp.token(sub="before")).name == "before"
    token = idp.token(sub="during")
    idp.stop()
    assert verifier.verify(token).name == "during"
    with caplog.at_level(logging.WARNING, logger="bridge.access.oidc"):
        for _ in range(3):
            clock.advance(600)  # past the cache's life: a refetch is tried, fails, keys kept
            assert verifier.verify(token).name == "during"
    unreachable = [r for r in caplog.records if "cannot reach the identity provider" in r.message]
    assert len(unreachable) == 1  # logged once, not on every attempt
    assert token not in caplog.text


def test_an_unreachable_idp_without_cached_keys_refuses_saying_so(
    idp: IdentityProvider, clock: Clock
) -> None:
    session = CountingSession()
    verifier = OidcVerifier(
        idp.issuer, idp.audience, roles=ROLES, clock=clock, timeout=2, session=session
    )
    token = idp.token()
    idp.stop()
    message = refused(verifier, token)
    assert message.startswith(
        f"cannot reach the identity provider at {idp.issuer}/.well-known/openid-configuration: "
    )
    assert message.endswith("(tokens cannot be checked until it answers)")
    assert session.requests == 1
    # Within the refetch interval the failure is answered without trying again.
    for _ in range(20):
        assert refused(verifier, token) == message
    assert session.requests == 1
    clock.advance(10)
    assert refused(verifier, token) == message
    assert session.requests == 2


def test_concurrent_verification_fetches_the_jwks_once(
    verifier: OidcVerifier, idp: IdentityProvider
) -> None:
    tokens = [idp.token(sub=f"user{n}") for n in range(8)]
    names: list[str] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def work(token: str) -> None:
        try:
            for _ in range(10):
                name = verifier.verify(token).name
                with lock:
                    names.append(name)
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=work, args=(token,)) for token in tokens]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    assert sorted(set(names)) == [f"user{n}" for n in range(8)] and len(names) == 80
    assert idp.jwks_fetches == 1


# -- tampering --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def shared() -> Iterator[tuple[IdentityProvider, OidcVerifier, str]]:
    with IdentityProvider() as idp:
        verifier = OidcVerifier(idp.issuer, idp.audience, roles=ROLES)
        token = idp.token(sub="alice", roles=["operator"], exp=3600)
        assert verifier.verify(token).name == "alice"
        yield idp, verifier, token


def _decode(segment: str) -> bytes:
    import base64

    return base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4))


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_any_tampering_of_a_valid_token_is_refused(
    shared: tuple[IdentityProvider, OidcVerifier, str], data: st.DataObject
) -> None:
    _, verifier, token = shared
    segments = token.split(".")
    which = data.draw(st.integers(0, 2), label="segment")
    raw = bytearray(_decode(segments[which]))
    how = data.draw(st.sampled_from(["flip", "cut", "append"]), label="how")
    if how == "flip":
        at = data.draw(st.integers(0, len(raw) - 1), label="at")
        raw[at] ^= data.draw(st.integers(1, 255), label="xor")
    elif how == "cut":
        at = data.draw(st.integers(0, len(raw) - 1), label="at")
        del raw[at]
    else:
        raw += data.draw(st.binary(min_size=1, max_size=8), label="extra")
    segments[which] = b64url(bytes(raw))
    tampered = ".".join(segments)
    assert tampered != token
    with pytest.raises(UnauthenticatedError):
        verifier.verify(tampered)


# -- more hostile headers and claims ----------------------------------------------------------


def test_critical_header_extensions_are_refused(
    verifier: OidcVerifier, idp: IdentityProvider
) -> None:
    # PyJWT refuses extensions it does not implement while reading the header.
    assert refused(verifier, idp.token(headers={"crit": ["exp"]})).startswith("malformed token")


def test_an_infinite_expiry_is_refused(verifier: OidcVerifier, idp: IdentityProvider) -> None:
    # JSON as Python writes it takes Infinity and NaN; a token that never expires is refused.
    for name, value in (("exp", float("inf")), ("nbf", float("nan")), ("exp", "tomorrow")):
        token = idp.sign({**idp.claims(), name: value})
        assert (
            refused(verifier, token) == f"token claim {name!r} is not a time (seconds since 1970)"
        )


def test_prefetch_reports_an_unreachable_or_misconfigured_idp_at_once(
    idp: IdentityProvider,
) -> None:
    good = OidcVerifier(idp.issuer, idp.audience)
    good.prefetch()
    assert idp.jwks_fetches == 1
    idp.discovery_issuer = idp.issuer + "/"
    with pytest.raises(UnauthenticatedError, match="names issuer"):
        OidcVerifier(idp.issuer, idp.audience).prefetch()
    idp.stop()
    with pytest.raises(UnauthenticatedError, match="cannot reach the identity provider"):
        OidcVerifier(idp.issuer, idp.audience).prefetch()


def test_the_roles_table_may_be_read_on_every_token(idp: IdentityProvider) -> None:
    table: dict[str, RoleGrant] = {"operator": RoleGrant(frozenset({Permission.CONVERSE}))}
    verifier = OidcVerifier(idp.issuer, idp.audience, roles=lambda: table)
    token = idp.token(roles=["operator"])
    first = verifier.verify(token)
    assert first.permissions == {Permission.CONVERSE}
    assert not first.may_run("anything")  # a role grants no tools unless it names them
    table["operator"] = RoleGrant(frozenset({Permission.ADMIN}), ALL_TOOLS)  # a reload
    second = verifier.verify(token)
    assert second.permissions == {Permission.ADMIN}
    assert second.tools == ALL_TOOLS


def test_a_token_without_kid_takes_the_one_key_that_fits(
    verifier: OidcVerifier, idp: IdentityProvider
) -> None:
    # The JWKS holds one RSA and one EC key: each algorithm fits exactly one of them.
    assert verifier.verify(idp.token(kid="", sub="rsa")).name == "rsa"
    assert verifier.verify(idp.token(key=idp.ec, kid="", sub="ec")).name == "ec"
    idp.published = [*idp.published, idp.stranger()]  # now two RSA keys: which one is unsaid
    verifier_after = OidcVerifier(idp.issuer, idp.audience)
    message = refused(verifier_after, idp.token(kid=""))
    assert message == "token has no kid and the issuer's JWKS has no single key for RS256"
