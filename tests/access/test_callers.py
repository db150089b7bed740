"""The caller file (TOML), the older ``name: key`` file and ``--api-key``: who they name, with
which roles, permissions, tools and rates, and a clear message for every mistake."""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path

import pytest

from bridge.access import ALL_TOOLS, CallerFileError, Callers, Permission, Rate, parse_callers
from bridge.access.callers import parse_rate
from bridge.errors import redact

ALICE = "alice-key-0123456789abcdef"
BOB = "bob-key-0123456789abcdef00"
CAROL = "carol-key-0123456789abcdef"


def sha(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


FILE = f"""\
# who may call
[roles.support]
permissions = ["converse"]
tools = ["crm_*", "lookup_order"]

[roles.approver]
permissions = ["approve", "read_all"]

[roles.ops]
permissions = ["admin"]

[callers.alice]
key_sha256 = "{sha(ALICE)}"
roles = ["support", "approver"]
rate = {{ messages = "30/minute", tool_calls = "120/minute" }}

[callers."bob@example.com"]
key = "${{BOB_KEY}}"
roles = ["support"]

[callers.carol]
key_sha256 = "{sha(CAROL).upper()}"
roles = ["ops"]
"""
ENV = {"BOB_KEY": BOB}


def write(tmp_path: Path, text: str, name: str = "callers.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_a_caller_has_the_union_of_its_roles() -> None:
    callers = parse_callers(FILE, environ=ENV)
    assert list(callers) == ["alice", "bob@example.com", "carol"]
    alice = callers["alice"]
    assert alice.roles == {"support", "approver"}
    assert alice.permissions == {Permission.CONVERSE, Permission.APPROVE, Permission.READ_ALL}
    assert alice.tools.patterns == ("crm_*", "lookup_order"), "approver lists no tools: none"
    assert alice.rates.messages == Rate(30, 60.0)
    assert alice.rates.tool_calls == Rate(120, 60.0)
    assert alice.via == "key"
    bob = callers["bob@example.com"]
    assert not bob.can(Permission.APPROVE)
    assert bob.rates.messages is None, "no rate: unlimited"
    assert bob.may_run("crm_find") and not bob.may_run("delete_user")
    carol = callers["carol"]
    assert carol.tools == ALL_TOOLS, "a role with admin and no tools list has every tool"
    assert carol.can(Permission.CALL_TOOLS)


def test_a_role_without_admin_and_without_tools_has_none() -> None:
    text = (
        '[roles.r]\npermissions = ["observe"]\n'
        f'[callers.a]\nkey_sha256 = "{sha(ALICE)}"\nroles = ["r"]\n'
    )
    assert parse_callers(text)["a"].tools.patterns == ()
    assert not parse_callers(text)["a"].may_run("anything")


def test_the_built_in_admin_role_and_source_patterns() -> None:
    text = f"""\
[roles.crm]
tools = ["source:crm", "ping"]
[roles.obs]
permissions = ["observe"]
tools = []
[callers.root]
key_sha256 = "{sha(ALICE)}"
roles = ["admin"]
[callers.a]
key_sha256 = "{sha(BOB)}"
roles = ["crm", "obs"]
"""
    callers = parse_callers(text)
    assert callers["root"].tools == ALL_TOOLS and callers["root"].can(Permission.APPROVE)
    a = callers["a"]
    assert a.may_run("anything", source="crm") and a.may_run("ping")
    assert not a.may_run("anything", source="billing") and not a.may_run("anything")
    assert a.permissions == {Permission.OBSERVE}


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (
            ('"converse"]', '"conversing"]'),
            "line 3: [roles.support] permissions: unknown permission 'conversing'; "
            "expected some of: converse, read_all, call_tools, approve, observe, admin",
        ),
        (
            ('["support", "approver"]', '["support", "approvers"]'),
            "line 14: [callers.alice] roles: unknown role 'approvers'; expected one of the "
            "[roles.NAME] tables: admin, approver, ops, support",
        ),
        (
            ('"30/minute"', '"30/min"'),
            "line 15: [callers.alice] rate.messages: the rate '30/min' is not N/second, "
            "N/minute, N/hour or N/day with N a whole number of at least 1",
        ),
        (('"120/minute"', '"0/hour"'), "rate.tool_calls: the rate '0/hour' is not"),
        (
            ("rate = { messages", "rate = { message"),
            "line 15: [callers.alice] rate: unknown setting 'message'; expected messages, "
            "tool_calls",
        ),
        (
            (sha(ALICE), sha(ALICE)[:40]),
            "line 13: [callers.alice] key_sha256: not a SHA-256 digest (40 characters); "
            'expected 64 hex digits, as printed by: printf %s "$KEY" | sha256sum',
        ),
        ((sha(ALICE), "z" * 64), "[callers.alice] key_sha256: not a SHA-256 digest"),
        (
            (sha(CAROL).upper(), sha(ALICE)),
            "line 21: [callers.carol]: the key of 'carol' is the key of 'alice' (line 12) "
            "too; every caller needs its own key",
        ),
        (
            ('[callers."bob@example.com"]', '[callers."bob smith"]'),
            "line 17: [callers.bob smith]: the caller name 'bob smith' is not 1 to 64 "
            "letters, digits, '_', '.', '@' or '-'",
        ),
        (("[callers.carol]", f"[callers.{'c' * 65}]"), "is not 1 to 64 letters"),
        (("[roles.ops]", '[roles."o p"]'), "line 9: [roles.o p]: the role name 'o p' is not"),
        (
            ('roles = ["ops"]', 'roles = ["ops"]\ncolour = "red"'),
            "line 21: [callers.carol]: unknown setting 'colour'; expected key_sha256 or key, "
            "roles, rate",
        ),
        (
            ("[roles.approver]\n", "[roles.approver]\nlevel = 2\n"),
            "line 6: [roles.approver]: unknown setting 'level'; expected permissions, tools",
        ),
        (
            ("# who may call\n", "version = 1\n"),
            "unknown setting 'version'; expected [roles.NAME] and [callers.NAME] tables",
        ),
        (
            ('roles = ["ops"]', ""),
            "line 21: [callers.carol]: missing 'roles', expected e.g. roles = [\"support\"]",
        ),
        (('roles = ["ops"]', "roles = []"), "line 23: [callers.carol] roles: no roles"),
        (
            ('tools = ["crm_*", "lookup_order"]', 'tools = "crm_*"'),
            "line 4: [roles.support] tools: Input should be a valid list (got str)",
        ),
        (('"lookup_order"]', '"source:"]'), "the tool pattern 'source:' is empty"),
        (
            ("[callers.carol]", "[callers.carol"),
            "not valid TOML: Expected ']' at the end of a table declaration (at line 21",
        ),
        (
            ("[callers.carol]", "[callers.alice]"),
            "not valid TOML: Cannot declare ('callers', 'alice') twice (at line 21",
        ),
        (
            ('key = "${BOB_KEY}"', 'key = "${NOT_SET_ANYWHERE}"'),
            "line 18: [callers.bob@example.com] key: the environment variable "
            "NOT_SET_ANYWHERE is not set; expected it to hold the key of 'bob@example.com'",
        ),
        (
            ('key = "${BOB_KEY}"', 'key = "${SHORT_KEY}"'),
            "the key in the environment variable SHORT_KEY must be at least 16 printable ASCII",
        ),
        (
            ('key = "${BOB_KEY}"', f'key_sha256 = "{sha(BOB)}"\nkey = "${{BOB_KEY}}"'),
            "[callers.bob@example.com]: both key_sha256 and key; expected one of them",
        ),
    ],
)
def test_every_mistake_is_named_with_its_line(change: tuple[str, str], problem: str) -> None:
    old, new = change
    assert old in FILE
    with pytest.raises(CallerFileError) as caught:
        parse_callers(
            FILE.replace(old, new, 1),
            source="callers.toml",
            environ={**ENV, "SHORT_KEY": "short-key"},
        )
    assert str(caught.value).startswith("callers.toml: ")
    assert problem in str(caught.value)


def test_a_literal_key_is_refused_without_showing_it() -> None:
    text = FILE.replace('key = "${BOB_KEY}"', 'key = "literal-secret-key-9876543210"')
    with pytest.raises(CallerFileError) as caught:
        parse_callers(text, source="callers.toml", environ=ENV)
    message = str(caught.value)
    assert (
        "line 18: [callers.bob@example.com] key: a literal key is refused: the caller file "
        'must not hold secrets; expected key = "${ENV_VAR}"' in message
    )
    assert "literal-secret" not in message


def test_every_problem_is_listed_at_once() -> None:
    text = FILE.replace('"converse"]', '"chat"]').replace('"${BOB_KEY}"', '"${NOPE_NOT_SET}"')
    with pytest.raises(CallerFileError) as caught:
        parse_callers(text, environ=ENV)
    assert "unknown permission 'chat'" in str(caught.value)
    text = FILE.replace('["ops"]', '["nobody"]').replace('"${BOB_KEY}"', '"${NOPE_NOT_SET}"')
    with pytest.raises(CallerFileError) as caught:
        parse_callers(text, environ=ENV)
    assert "NOPE_NOT_SET is not set" in str(caught.value)
    assert "unknown role 'nobody'" in str(caught.value)


def test_an_env_key_is_registered_as_a_secret() -> None:
    key = "env-held-key-5555aaaa7777"
    parse_callers(FILE, environ={"BOB_KEY": key})
    assert redact(f"the key is {key}") == "the key is [secure]"


def test_a_file_without_callers() -> None:
    with pytest.raises(CallerFileError, match="no callers; expected at least one"):
        parse_callers('[roles.r]\npermissions = ["observe"]\n')
    with pytest.raises(CallerFileError, match="no callers"):
        parse_callers("# nothing yet\n")


@pytest.mark.parametrize(
    ("text", "rate"),
    [
        ("1/second", Rate(1, 1.0)),
        (" 30 / minute ", Rate(30, 60.0)),
        ("5/hour", Rate(5, 3600.0)),
        ("1000/day", Rate(1000, 86400.0)),
    ],
)
def test_rates(text: str, rate: Rate) -> None:
    assert parse_rate(text) == rate
    assert str(parse_rate(text)) == text.replace(" ", "")


@pytest.mark.parametrize(
    "text", ["30", "30/min", "-1/minute", "0/second", "1.5/hour", "x/day", "30/minutes"]
)
def test_bad_rates(text: str) -> None:
    with pytest.raises(ValueError, match="is not N/second, N/minute, N/hour or N/day"):
        parse_rate(text)


# -- the older key file and --api-key -------------------------------------------------------


def test_a_key_file_loads_as_callers_with_every_permission(tmp_path: Path) -> None:
    path = write(tmp_path, f"# people\n\nalice: {ALICE}\n  bob.ops-1 :  {BOB}  \n", "keys.txt")
    for callers in (Callers(api_key_file=path), Callers(path)):
        assert callers.names() == ["alice", "bob.ops-1"]
        alice = callers.identify(ALICE)
        assert alice is not None and alice.name == "alice"
        assert alice.roles == {"admin"} and alice.permissions == set(Permission)
        assert alice.tools == ALL_TOOLS and alice.via == "key"
        assert alice.rates.messages is None and alice.rates.tool_calls is None


def test_a_key_file_keeps_its_messages(tmp_path: Path) -> None:
    path = write(tmp_path, f"alice: {ALICE}\nbob: short\nal ice: {BOB}\n", "keys.txt")
    for given in ({"api_key_file": path}, {"callers_file": path}):
        with pytest.raises(CallerFileError) as caught:
            Callers(**given)  # type: ignore[arg-type]
        message = str(caught.value)
        assert message.startswith(f"{path}: line 2: the key of 'bob' must be at least 16")
        assert "line 3: the name 'al ice' is not 1 to 64 letters" in message
    with pytest.raises(CallerFileError, match="cannot read the key file"):
        Callers(api_key_file=tmp_path / "absent.txt")
    with pytest.raises(CallerFileError, match="cannot read the caller file"):
        Callers(tmp_path / "absent.toml")


def test_a_broken_toml_file_is_not_read_as_a_key_file() -> None:
    # `=` lines are TOML: the TOML error is the one that helps.
    with pytest.raises(CallerFileError, match="not valid TOML"):
        parse_callers(f'[callers.a]\nkey_sha256 = "{sha(ALICE)}"\nroles = ["admin"\n')


def test_api_key_is_the_caller_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BOB_KEY", BOB)
    callers = Callers.from_files(api_key=ALICE)
    assert callers is not None and callers.names() == ["default"]
    found = callers.identify(ALICE)
    assert found is not None and found.name == "default" and found.permissions == set(Permission)
    assert Callers.from_files() is None
    both = Callers.from_files(
        write(tmp_path, FILE),
        api_key=CAROL + "x",
        api_key_file=write(tmp_path, f"dave: {BOB}x\n", "keys.txt"),
    )
    assert both is not None


def test_names_and_keys_are_unique_across_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BOB_KEY", BOB)
    callers_file = write(tmp_path, FILE)
    keys = write(tmp_path, f"alice: {ALICE}x\n", "keys.txt")
    with pytest.raises(CallerFileError, match=r"the caller 'alice' is named in .*keys\.txt too"):
        Callers(callers_file, api_key_file=keys)
    with pytest.raises(
        CallerFileError, match="the key of 'alice' is the key of 'default' \\(--api-key\\) too"
    ):
        Callers(callers_file, api_key=ALICE)
    with pytest.raises(CallerFileError, match="the caller 'default' is named in --api-key too"):
        Callers(write(tmp_path, f"default: {BOB}x\n", "k2.txt"), api_key=ALICE)


# -- identify, get, reload -----------------------------------------------------------------


def test_identify_finds_the_right_caller(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BOB_KEY", BOB)
    callers = Callers(write(tmp_path, FILE))
    for key, name in ((ALICE, "alice"), (BOB, "bob@example.com"), (CAROL, "carol")):
        found = callers.identify(key)
        assert found is not None and found.name == name and found.via == "key"
    assert callers.identify(ALICE[:-1]) is None
    assert callers.identify(sha(ALICE)) is None, "the digest is not the key"
    assert callers.identify("") is None


def test_identify_compares_every_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Constant time: every caller's digest is compared, whichever matches (or none).
    import hmac

    monkeypatch.setenv("BOB_KEY", BOB)
    callers = Callers(write(tmp_path, FILE))
    compared: list[bytes] = []
    original = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        compared.append(b)
        return original(a, b)

    monkeypatch.setattr(hmac, "compare_digest", spy)  # what callers.py calls
    for key in (ALICE, CAROL, "nobody-0123456789abcdef"):
        compared.clear()
        callers.identify(key)
        assert len(compared) == 3


def test_get_names_a_caller(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BOB_KEY", BOB)
    callers = Callers(write(tmp_path, FILE))
    bob = callers.get("bob@example.com")
    assert bob is not None and bob.roles == {"support"}
    assert callers.get("nobody") is None
    assert "alice" in repr(callers) and ALICE not in repr(callers)


def test_reload_keeps_the_old_callers_on_a_broken_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("BOB_KEY", BOB)
    path = write(tmp_path, FILE)
    callers = Callers(path)
    path.write_text(FILE.replace('["ops"]', '["opps"]'), encoding="utf-8")
    with caplog.at_level(logging.ERROR, logger="bridge.access.callers"):
        assert callers.reload() is False
    assert callers.names() == ["alice", "bob@example.com", "carol"]
    assert callers.identify(CAROL) is not None
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1
    assert f"{path}: line 23: [callers.carol] roles: unknown role 'opps'" in errors[0]
    assert "the previous ones stay" in errors[0]

    path.write_text(FILE.replace("[callers.carol]\n", "[callers.dave]\n"), encoding="utf-8")
    assert callers.reload() is True
    assert callers.names() == ["alice", "bob@example.com", "dave"]
    dave = callers.identify(CAROL)
    assert dave is not None and dave.name == "dave"
    assert callers.get("carol") is None

    path.unlink()
    assert callers.reload() is False
    assert callers.names() == ["alice", "bob@example.com", "dave"]
    assert Callers.from_files(api_key=ALICE).reload() is False  # type: ignore[union-attr]
