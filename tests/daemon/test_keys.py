"""The approval options and webhook, without a daemon process (key files and callers:
tests/access/test_callers.py; the daemon's door: tests/daemon/test_door.py)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from bridge.daemon.server import _public_url
from bridge.daemon.settings import SettingsError, load_settings
from bridge.daemon.webhook import ApprovalWebhook
from tests.daemon.test_approvals import Receiver


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
