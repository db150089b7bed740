"""A door made from the command line's options: a caller file and an identity provider
together (the token's roles are the file's roles; a caller the file names by name only is
reached through its token, with the file's roles and rates)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bridge.access import Door, Permission, RateLimitedError, UnauthenticatedError
from bridge.errors import ConfigurationError
from tests.support.idp import IdentityProvider, running

KEY = "support-key-0123456789abcdef"

CALLERS = """\
[roles.support]
permissions = ["converse"]
tools = ["crm_*"]

[roles.approver]
permissions = ["approve", "read_all"]

[callers.desk]
key = "${DESK_KEY}"
roles = ["support"]

[callers."carol@example.com"]   # no key: only an identity provider's token names her
roles = ["approver"]
rate = { messages = "1/minute" }
"""


@pytest.fixture
def idp() -> Iterator[IdentityProvider]:
    yield from running()


@pytest.fixture
def door(idp: IdentityProvider, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Door:
    monkeypatch.setenv("DESK_KEY", KEY)
    path = tmp_path / "callers.toml"
    path.write_text(CALLERS, encoding="utf-8")
    return Door.open(path, oidc_issuer=idp.issuer, oidc_audience=idp.audience)


def test_a_token_takes_its_roles_from_the_caller_file(door: Door, idp: IdentityProvider) -> None:
    bob = door.authenticate("Bearer " + idp.token(sub="bob", roles=["support", "root"]))
    assert (bob.name, bob.via, bob.roles) == ("bob", "oidc", frozenset({"support"}))
    assert bob.can(Permission.CONVERSE) and not bob.can(Permission.APPROVE)
    assert bob.may_run("crm_lookup") and not bob.may_run("wire")


def test_a_caller_named_only_by_token_gets_the_files_roles_and_rates(
    door: Door, idp: IdentityProvider
) -> None:
    # The token claims "support"; the file says carol is an approver: the file wins.
    token = idp.token(sub="carol@example.com", roles=["support"])
    carol = door.authenticate("Bearer " + token)
    assert (carol.via, carol.roles) == ("oidc", frozenset({"approver"}))
    assert carol.can(Permission.APPROVE) and not carol.can(Permission.CONVERSE)
    door.limit(carol, "messages")
    with pytest.raises(RateLimitedError):
        door.limit(carol, "messages")


def test_a_caller_without_a_key_is_never_found_by_a_key(door: Door) -> None:
    desk = door.authenticate(f"Bearer {KEY}")
    assert (desk.name, desk.via) == ("desk", "key")
    assert door.callers is not None
    assert door.callers.get("carol@example.com") is not None
    for guess in ("", "0" * 64, "carol@example.com"):
        with pytest.raises(UnauthenticatedError):
            door.authenticate(f"Bearer {guess}x" if not guess else f"Bearer {guess}")


def test_oidc_options_come_in_pairs(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="--oidc-issuer needs --oidc-audience"):
        Door.open(oidc_issuer="http://127.0.0.1:1")
    with pytest.raises(ConfigurationError, match="--oidc-audience needs --oidc-issuer"):
        Door.open(oidc_audience="toolbridge")
