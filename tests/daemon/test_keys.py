"""Named API keys (`--api-key-file`) and the approval webhook, without a daemon process."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from bridge.daemon.keys import ApiKeys, KeyFileError, parse_key_file
from bridge.daemon.server import _public_url
from bridge.daemon.settings import SettingsError, load_settings
from bridge.daemon.webhook import ApprovalWebhook
from tests.daemon.test_approvals import Receiver

ALICE = "alice-key-0123456789abcdef"
BOB = "bob-key-0123456789abcdef00"


def test_a_key_file_names_its_keys() -> None:
    text = f"# people\n\nalice: {ALICE}\n  bob.ops-1 :  {BOB}  \n"
    keys = parse_key_file(text)
    assert sorted(keys) == ["alice", "bob.ops-1"]
    assert all(len(digest) == 32 for digest in keys.values()), "only SHA-256 digests are kept"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (f"alice {ALICE}", "line 1: expected 'name: key'"),
        (f"al ice: {ALICE}", "line 1: the name 'al ice' is not 1 to 64 letters"),
        (f"{'a' * 65}: {ALICE}", "is not 1 to 64 letters"),
        ("alice: short", "line 1: the key of 'alice' must be at least 16 printable ASCII"),
        ("alice: has a space in the key", "without spaces"),
        ("alice: clé-secrète-0123456789", "printable ASCII characters without spaces"),
        ("alice: tab\tinside-0123456789", "printable ASCII characters without spaces"),
        (f"alice: {ALICE}\n# x\nalice: {BOB}", "line 3: the name 'alice' is used on line 1 too"),
        (f"alice: {ALICE}\nbob: {ALICE}", "line 2: the key of 'bob' is used on line 1 too"),
        ("# nothing\n\n", "no keys; expected one 'name: key' line per key"),
    ],
)
def test_bad_key_files_are_refused_with_line_numbers(text: str, problem: str) -> None:
    with pytest.raises(KeyFileError, match=r"keys\.txt: ") as caught:
        parse_key_file(text, source="keys.txt")
    assert problem in str(caught.value)
    assert ALICE not in str(caught.value) and "short" not in str(caught.value)


def test_every_problem_is_reported_at_once() -> None:
    with pytest.raises(KeyFileError) as caught:
        parse_key_file(f"alice {ALICE}\nbob: short\n")
    assert "line 1" in str(caught.value) and "line 2" in str(caught.value)


def test_keys_identify_their_name(tmp_path: Path) -> None:
    path = tmp_path / "keys.txt"
    path.write_text(f"alice: {ALICE}\n", encoding="utf-8")
    keys = ApiKeys("the-default-key-0123456789", path)
    assert keys.identify(ALICE) == "alice"
    assert keys.identify("the-default-key-0123456789") == "default"
    assert keys.identify(BOB) is None and keys.identify("") is None
    assert keys.names() == ["default", "alice"]
    assert ALICE not in repr(keys)


def test_the_default_name_and_key_belong_to_api_key(tmp_path: Path) -> None:
    path = tmp_path / "keys.txt"
    path.write_text(f"default: {ALICE}\n", encoding="utf-8")
    with pytest.raises(KeyFileError, match="the name 'default' is the --api-key's"):
        ApiKeys(BOB, path)
    path.write_text(f"alice: {BOB}\n", encoding="utf-8")
    with pytest.raises(KeyFileError, match="a key of the file is the --api-key too"):
        ApiKeys(BOB, path)
    with pytest.raises(KeyFileError, match="cannot read the key file"):
        ApiKeys(None, tmp_path / "missing.txt")


def test_reload_keeps_the_keys_when_the_file_breaks(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "keys.txt"
    path.write_text(f"alice: {ALICE}\n", encoding="utf-8")
    keys = ApiKeys(None, path)
    path.write_text(f"bob: {BOB}\n", encoding="utf-8")
    assert keys.reload() and keys.identify(BOB) == "bob" and keys.identify(ALICE) is None
    path.write_text("bob: short\n", encoding="utf-8")
    with caplog.at_level(logging.ERROR):
        assert not keys.reload()
    assert keys.identify(BOB) == "bob"
    assert "were not reloaded" in caplog.text and "line 1" in caplog.text
    assert not ApiKeys(ALICE).reload(), "nothing to reload without a file"


def test_settings_take_the_approval_options(tmp_path: Path) -> None:
    settings = load_settings(
        {
            "api_key_file": str(tmp_path / "k"),
            "host": "0.0.0.0",
            "approval_timeout": 30,
            "approval_webhook": "https://chat.example/hook",
        },
        env={},
    )
    assert settings.approval_timeout == 30 and settings.api_key_file == str(tmp_path / "k")
    assert load_settings({}, env={}).approval_timeout == 600
    with pytest.raises(SettingsError, match="expected an http:// or https:// URL"):
        load_settings({"approval_webhook": "ftp://x"}, env={})
    with pytest.raises(SettingsError, match="greater than 0"):
        load_settings({"approval_timeout": 0}, env={})
    with pytest.raises(SettingsError, match="--api-key-file"):
        load_settings({"host": "0.0.0.0"}, env={})


def test_the_public_url_for_links() -> None:
    assert _public_url("127.0.0.1", 8411, []) == "http://127.0.0.1:8411"
    assert _public_url("0.0.0.0", 8411, ["bridge.corp"]) == "http://bridge.corp:8411"
    assert _public_url("0.0.0.0", 8411, ["bridge.corp:443"]) == "http://bridge.corp:443"
    assert _public_url("[::]", 8411, ["[::1]:80"]) == "http://[::1]:80"


def test_the_webhook_retries_server_errors_and_gives_up_on_refusals(
    caplog: pytest.LogCaptureFixture,
) -> None:
    failing = Receiver(status=503)
    refusing = Receiver(status=400)
    try:
        with caplog.at_level(logging.INFO, logger="bridge.daemon.webhook"):
            for receiver in (failing, refusing):
                hook = ApprovalWebhook(receiver.url, attempts=3, backoff=0.01)
                hook.send({"event": "approval_requested", "approval": {"approval_id": "a1"}})
                hook.close(timeout=30)
        assert len(failing.bodies) == 3, "503 is retried up to the attempts"
        assert len(refusing.bodies) == 1, "a 4xx is not retried"
        assert caplog.text.count("could not post approval a1") == 2
        assert "/hooks/toolbridge" not in caplog.text, "only the origin is logged"
    finally:
        failing.close()
        refusing.close()
