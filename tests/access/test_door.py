"""The door: an Authorization header to a caller (keys, identity-provider tokens, nobody), and
the 401/403/429 refusals with messages a person can act on."""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

import pytest

from bridge.access import (
    ANONYMOUS,
    Authenticates,
    Callers,
    Door,
    ForbiddenError,
    Permission,
    Principal,
    Rate,
    RateLimitedError,
    RateLimiter,
    RateLimits,
    TokenVerifier,
    UnauthenticatedError,
)
from bridge.access.door import looks_like_jwt

ALICE = "alice-key-0123456789abcdef"
BOB = "bob-key-0123456789abcdef00"
DOTTED = "abcdefgh.ijklmnop.qrstuvwx"  # a key that happens to look like a JWT
TOKEN = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJjYXJvbCJ9.c2lnbmF0dXJl"


def sha(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


FILE = f"""\
[roles.support]
permissions = ["converse"]
tools = ["crm_*", "source:billing"]

[callers.alice]
key_sha256 = "{sha(ALICE)}"
roles = ["admin"]

[callers.bob]
key_sha256 = "{sha(BOB)}"
roles = ["support"]
rate = {{ messages = "2/minute" }}

[callers.dotted]
key_sha256 = "{sha(DOTTED)}"
roles = ["support"]
"""


class Verifier:
    """An identity provider that knows one token (the real one is `bridge.access.oidc`)."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def verify(self, token: str) -> Principal:
        self.seen.append(token)
        if token != TOKEN:
            raise UnauthenticatedError("the token's signature does not verify")
        return Principal(name="carol", via="oidc", permissions=frozenset({Permission.OBSERVE}))


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def callers(tmp_path: Path) -> Callers:
    path = tmp_path / "callers.toml"
    path.write_text(FILE, encoding="utf-8")
    return Callers(path)


def test_a_door_without_callers_lets_everyone_in_as_anonymous() -> None:
    door = Door()
    assert door.anonymous
    for header in (None, "", "Bearer whatever", "Basic x"):
        assert door.authenticate(header) is ANONYMOUS
    assert Door.open().anonymous
    authenticates: Authenticates = door  # the interface the entry points use
    assert authenticates.authenticate(None).can(Permission.ADMIN)


@pytest.mark.parametrize("header", [None, "", "   ", "Bearer", "Bearer   "])
def test_missing_credentials(callers: Callers, header: str | None) -> None:
    with pytest.raises(UnauthenticatedError) as caught:
        Door(callers).authenticate(header)
    # Readable after redaction (every BridgeError message is redacted).
    assert str(caught.value) == 'missing credentials: send "Authorization: Bearer <key or token>"'
    assert caught.value.status == 401


def test_another_scheme_is_refused(callers: Callers) -> None:
    with pytest.raises(UnauthenticatedError, match='unsupported credentials: send "Authorization'):
        Door(callers).authenticate(f"Basic {ALICE}")


def test_a_key_names_its_caller(callers: Callers) -> None:
    door = Door(callers)
    assert not door.anonymous
    for header in (f"Bearer {ALICE}", f"bearer  {ALICE} ", f"BEARER {ALICE}"):
        principal = door.authenticate(header)
        assert principal.name == "alice" and principal.via == "key"
    assert door.authenticate(f"Bearer {BOB}").name == "bob"
    with pytest.raises(UnauthenticatedError) as caught:
        door.authenticate("Bearer not-a-known-key-0123456789")
    assert str(caught.value) == "unknown API key"
    assert "not-a-known" not in str(caught.value)


def test_a_token_goes_to_the_identity_provider(callers: Callers) -> None:
    verifier = Verifier()
    door = Door(callers, oidc=verifier)
    principal = door.authenticate(f"Bearer {TOKEN}")
    assert principal.name == "carol" and principal.via == "oidc"
    assert verifier.seen == [TOKEN]
    assert door.authenticate(f"Bearer {ALICE}").name == "alice", "keys still work"
    assert verifier.seen == [TOKEN], "a key is not sent to the identity provider"
    with pytest.raises(UnauthenticatedError, match="signature does not verify"):
        door.authenticate("Bearer aaaa.bbbb.cccc")
    # A key shaped like a token, refused by the provider, is still a key.
    assert door.authenticate(f"Bearer {DOTTED}").name == "dotted"


def test_only_an_identity_provider(callers: Callers) -> None:
    door = Door(oidc=Verifier())
    assert door.authenticate(f"Bearer {TOKEN}").name == "carol"
    with pytest.raises(UnauthenticatedError, match="expected a token from the identity provider"):
        door.authenticate(f"Bearer {ALICE}")
    assert isinstance(Verifier(), TokenVerifier)


def test_without_an_identity_provider_a_dotted_key_is_a_key(callers: Callers) -> None:
    assert Door(callers).authenticate(f"Bearer {DOTTED}").name == "dotted"


@pytest.mark.parametrize(
    ("text", "jwt"),
    [
        (TOKEN, True),
        ("a.b.c", True),
        ("a.b.", True),
        ("a.b", False),
        ("a.b.c.d", False),
        ("a b.c.d", False),
        ("a+b.c.d", False),
        (ALICE, False),
    ],
)
def test_jwt_shape(text: str, jwt: bool) -> None:
    assert looks_like_jwt(text) is jwt


def test_permissions(callers: Callers) -> None:
    door = Door(callers)
    bob = door.authenticate(f"Bearer {BOB}")
    door.check(bob, Permission.CONVERSE)
    with pytest.raises(ForbiddenError) as caught:
        door.check(bob, Permission.APPROVE)
    assert str(caught.value) == (
        "caller 'bob' may not approve: its roles (support) lack the permission 'approve'"
    )
    assert caught.value.status == 403
    with pytest.raises(ForbiddenError, match=r"may not read every conversation: .*'read_all'"):
        door.check(bob, Permission.READ_ALL)
    nobody = Principal(name="nobody", roles=frozenset(), permissions=frozenset())
    with pytest.raises(ForbiddenError, match=r"its roles \(none\) lack the permission 'observe'"):
        door.check(nobody, Permission.OBSERVE)
    alice = door.authenticate(f"Bearer {ALICE}")
    for permission in Permission:
        door.check(alice, permission)
        door.check(ANONYMOUS, permission)


def test_tools(callers: Callers) -> None:
    door = Door(callers)
    bob = door.authenticate(f"Bearer {BOB}")
    door.check_tool(bob, "crm_find")
    door.check_tool(bob, "invoice", source="billing")
    with pytest.raises(ForbiddenError) as caught:
        door.check_tool(bob, "delete_user", source="admin_api")
    assert str(caught.value) == (
        "caller 'bob' may not run the tool 'delete_user' (source 'admin_api'): it is not "
        "among the tools of its roles (crm_*, source:billing)"
    )
    with pytest.raises(ForbiddenError, match="may not run the tool 'invoice': it is not among"):
        door.check_tool(bob, "invoice")
    door.check_tool(door.authenticate(f"Bearer {ALICE}"), "delete_user", source="admin_api")


def test_rate_limits(callers: Callers) -> None:
    clock = Clock()
    door = Door(callers, rates=RateLimiter(clock))
    bob = door.authenticate(f"Bearer {BOB}")
    door.limit(bob, "messages")
    door.limit(bob, "messages")
    with pytest.raises(RateLimitedError) as caught:
        door.limit(bob, "messages")
    assert caught.value.retry_after == 60
    assert str(caught.value) == "caller 'bob' is over its limit of 2/minute messages; retry in 60 s"
    for _ in range(100):
        door.limit(bob, "tool_calls")
    clock.now = 60.0
    door.limit(bob, "messages")
    # The same person through a token shares the count of its name.
    token_bob = dataclasses.replace(bob, via="oidc")
    door.limit(token_bob, "messages")
    with pytest.raises(RateLimitedError):
        door.limit(token_bob, "messages")
    door.limit(Principal(name="x", rates=RateLimits(messages=None)), "messages")
    assert Rate(2, 60.0) == bob.rates.messages


def test_reload(tmp_path: Path) -> None:
    path = tmp_path / "callers.toml"
    path.write_text(FILE, encoding="utf-8")
    door = Door.open(callers_path=path)
    path.write_text(FILE.replace("[callers.bob]", "[callers.robert]"), encoding="utf-8")
    assert door.reload() is True
    assert door.authenticate(f"Bearer {BOB}").name == "robert"
    path.write_text("[callers.x\n", encoding="utf-8")
    assert door.reload() is False
    assert door.authenticate(f"Bearer {BOB}").name == "robert"
    assert Door().reload() is False


def test_open_with_keys(tmp_path: Path) -> None:
    keys = tmp_path / "keys.txt"
    keys.write_text(f"ops: {BOB}\n", encoding="utf-8")
    door = Door.open(api_key=ALICE, api_key_file=keys)
    assert door.authenticate(f"Bearer {ALICE}").name == "default"
    assert door.authenticate(f"Bearer {BOB}").name == "ops"
    assert door.callers is not None and door.callers.names() == ["default", "ops"]
    assert "oidc=False" in repr(door)
