"""Coze in the platform registry: `create_platform("coze")` and `open_platform("coze", ...)`."""

from __future__ import annotations

import pytest

from bridge import Bridge, Toolbox, open_platform
from bridge.errors import ConfigurationError, UsageError
from bridge.platforms import create_platform
from bridge.platforms.coze import CozePlatform
from bridge.platforms.registry import get_entry


def get_weather(city: str) -> str:
    """Get the current weather for a city.

    Args:
        city: City name.
    """
    return f"{city}: 21 C"


def test_the_entry_names_its_settings_and_emulator() -> None:
    entry = get_entry("coze")
    assert entry.emulator_protocol == "coze"
    assert [(s.option, s.flag, s.env) for s in entry.settings if not s.shared] == [
        ("token", "--token", "COZE_API_TOKEN"),
        ("bot_id", "--bot-id", "COZE_BOT_ID"),
        ("base_url", "--base-url", "COZE_API_BASE"),
        ("region", "--region", None),
        ("user_id", "--user-id", "COZE_USER_ID"),
    ]
    assert entry.setting("token") is not None and entry.setting("token").secret  # type: ignore[union-attr]


def test_create_platform_builds_it_and_refuses_other_platforms_options() -> None:
    platform = create_platform("coze", token="pat_x", bot_id="123", region="com")
    assert isinstance(platform, CozePlatform) and platform.base_url == "https://api.coze.com"
    with pytest.raises(UsageError, match="--app-id is for --platform appbuilder"):
        create_platform("coze", token="pat_x", bot_id="123", app_id="a")


def test_missing_settings_name_flag_and_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COZE_API_TOKEN", raising=False)
    monkeypatch.delenv("COZE_BOT_ID", raising=False)
    with pytest.raises(ConfigurationError, match="COZE_BOT_ID"), open_platform("coze"):
        pass


def test_open_platform_runs_a_bot_on_the_embedded_emulator() -> None:
    toolbox = Toolbox([get_weather])
    scenario = {"coze": {"plugins": toolbox.manifests("openai")}}
    with open_platform("coze", emulator=True, scenario=scenario) as platform:
        assert isinstance(platform, CozePlatform)
        with Bridge(platform, toolbox) as bridge:
            result = bridge.ask("What is the weather in Paris?")
    assert result.answer == "Paris: 21 C" and result.rounds == 1
