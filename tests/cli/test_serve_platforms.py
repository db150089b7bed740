"""`toolbridge serve`'s platform settings come from the registry: every platform's flags, as
``TOOLBRIDGE_<NAME>`` variables and file keys too, checked and parsed, secrets kept secret."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from bridge.cli.serve_cmd import _check_platform_settings, _start_emulator
from bridge.daemon.settings import SettingsError, load_settings
from bridge.errors import ConfigurationError
from bridge.platforms.registry import PLATFORMS

needs_coze = pytest.mark.skipif("coze" not in PLATFORMS, reason="coze is not registered")
needs_responses = pytest.mark.skipif(
    "responses" not in PLATFORMS, reason="responses is not registered"
)


@needs_coze
def test_any_platform_setting_from_flags_environment_and_file(tmp_path: Path) -> None:
    config = tmp_path / "toolbridge.toml"
    config.write_text('[serve]\nplatform = "coze"\nuser-id = "ops"\n', encoding="utf-8")
    settings = load_settings(
        {"token": "pat_secret_value"},
        env={"TOOLBRIDGE_BOT_ID": "7446"},
        config=config,
    )
    assert settings.platform == "coze"
    assert settings.platform_options() == {
        "token": "pat_secret_value",
        "bot_id": "7446",
        "user_id": "ops",
    }
    assert "pat_secret_value" not in repr(settings)
    assert "pat_secret_value" in settings.secrets()


@needs_responses
def test_switches_are_parsed_and_checked() -> None:
    settings = load_settings({"platform": "responses"}, env={"TOOLBRIDGE_STORE": "false"})
    assert settings.platform_options()["store"] is False
    assert load_settings({"platform": "responses", "store": True}, env={}).platform_options()[
        "store"
    ]
    with pytest.raises(SettingsError) as info:
        load_settings({"platform": "responses"}, env={"TOOLBRIDGE_STORE": "maybe"})
    assert "'maybe' is not a yes/no value; expected true or false" in str(info.value)
    assert "(from TOOLBRIDGE_STORE='maybe')" in str(info.value)


def test_bad_values_name_their_source_but_never_a_secret() -> None:
    with pytest.raises(SettingsError) as info:
        load_settings({"platform": "openai"}, env={"TOOLBRIDGE_BASE_URL": "localhost:8000"})
    assert "'localhost:8000' is not an http:// or https:// URL" in str(info.value)
    assert "(from TOOLBRIDGE_BASE_URL='localhost:8000')" in str(info.value)
    with pytest.raises(SettingsError) as info:
        load_settings({}, env={"TOOLBRIDGE_TOKEN": "bce-v3/ALTAK-a b/1"})
    assert "contains spaces" in str(info.value) and "ALTAK-a b" not in str(info.value)
    assert "(from TOOLBRIDGE_TOKEN)" in str(info.value)
    with pytest.raises(SettingsError, match=r"model is for platform openai.* \(from --model\)"):
        load_settings({"platform": "appbuilder", "model": "m"}, env={})
    with pytest.raises(SettingsError, match="expected text, got int"):
        load_settings({"platform": "openai", "model": 7}, env={})


def test_the_platform_api_key_is_the_platforms_api_key() -> None:
    settings = load_settings(
        {"platform": "openai", "api_key": "d" * 16, "platform_api_key": "sk-platform"}, env={}
    )
    assert settings.platform_options()["api_key"] == "sk-platform"
    assert settings.api_key is not None and settings.api_key.get_secret_value() == "d" * 16


def test_missing_settings_are_named_in_flag_and_variable_words() -> None:
    settings = load_settings({"platform": "openai"}, env={})
    with pytest.raises(ConfigurationError) as info:
        _check_platform_settings(settings)
    assert "--base-url or OPENAI_BASE_URL" in str(info.value)
    assert "--model or OPENAI_MODEL" in str(info.value)


@pytest.mark.parametrize("platform", [n for n, e in PLATFORMS.items() if e.emulator_protocol])
def test_the_emulator_gives_each_platform_its_settings(platform: str) -> None:
    settings = load_settings({"platform": platform, "db": ":memory:"}, env={})
    server, emulated = _start_emulator(settings)
    try:
        options = emulated.platform_options()
        assert options.get("base_url", "").startswith(server.base_url)
        assert server.token in emulated.secrets()
        assert server.token not in repr(emulated)
        PLATFORMS[platform].require(options, env={})
    finally:
        server.stop()


def test_the_emulator_refuses_settings_it_gives_and_platforms_without_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    given = load_settings({"app_id": "mine"}, env={})
    with pytest.raises(ConfigurationError, match="so --app-id cannot be used with it"):
        _start_emulator(given)
    # Every shipped platform has one: take the openai platform's away.
    monkeypatch.setitem(PLATFORMS, "openai", replace(PLATFORMS["openai"], emulator_protocol=None))
    none = load_settings({"platform": "openai"}, env={})
    with pytest.raises(ConfigurationError, match="--platform openai has no embedded emulator"):
        _start_emulator(none)


@needs_coze
def test_an_emulated_coze_bot_gets_the_daemons_tools(tmp_path: Path) -> None:
    from bridge.platforms import create_platform

    tools = tmp_path / "weather.py"
    tools.write_text(
        "from bridge import manifest\n\n"
        "@manifest(description='Weather.')\n"
        "def get_weather(city: str) -> str:\n"
        "    return city\n",
        encoding="utf-8",
    )
    db = tmp_path / "journal.db"
    settings = load_settings({"platform": "coze", "tools": [str(tools)], "db": str(db)}, env={})
    server, emulated = _start_emulator(settings)
    try:
        platform = create_platform("coze", **emulated.platform_options())
        try:
            assert platform.remote_tool_names() == ["get_weather"]  # type: ignore[attr-defined]
        finally:
            platform.close()
    finally:
        server.stop()
