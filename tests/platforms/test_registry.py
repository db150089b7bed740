"""The platform registry: one entry per platform, read by create_platform and open_platform."""

from __future__ import annotations

from dataclasses import replace

import pytest

from bridge import open_platform
from bridge.errors import ConfigurationError, UsageError
from bridge.platforms import create_platform
from bridge.platforms.registry import (
    COMMON_OPTIONS,
    PLATFORMS,
    Setting,
    flag_settings,
    get_entry,
    platforms_taking,
)


def test_every_entry_builds_and_its_settings_are_adapter_keywords() -> None:
    import inspect

    for entry in PLATFORMS.values():
        cls = entry.load()
        assert cls.name == entry.name, f"{entry.factory} is called {cls.name!r}"
        params = inspect.signature(cls).parameters
        takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
        for option in entry.options:
            assert takes_any or option in params, f"{entry.factory} lacks {option}="
        assert not set(entry.options) & COMMON_OPTIONS
        for setting in entry.settings:
            assert setting.flag.startswith("--") and setting.help and not setting.help.endswith(".")


def test_one_flag_means_one_option_everywhere() -> None:
    flags = flag_settings()
    assert "--platform" not in flags and "--emulator" not in flags
    for flag, settings in flags.items():
        assert len({s.option for s in settings}) == 1, flag


def test_a_flag_used_for_two_options_is_a_registry_mistake() -> None:
    from bridge.platforms.registry import PlatformEntry

    first = PlatformEntry("a", "A", "x:A", (Setting("token", "--key", None, None, "a key"),))
    second = PlatformEntry("b", "B", "x:B", (Setting("api_key", "--key", None, None, "a key"),))
    with pytest.raises(UsageError, match="--key is token on one platform and api_key on b"):
        flag_settings([first, second])


def test_unknown_platforms_are_named_with_the_known_ones() -> None:
    with pytest.raises(UsageError, match="unknown platform 'nowhere'; expected one of: appbuilder"):
        get_entry("nowhere")
    with pytest.raises(UsageError, match="unknown platform 'nowhere'"):
        create_platform("nowhere")


def test_an_option_of_another_platform_is_refused_by_flag() -> None:
    assert platforms_taking("model")[0] == "openai"
    with pytest.raises(UsageError, match="--model is for --platform openai"):
        create_platform("appbuilder", app_id="a", token="t", model="m")
    with pytest.raises(UsageError, match="--app-id is for --platform appbuilder"):
        create_platform("openai", base_url="http://127.0.0.1:1/v1", model="m", app_id="a")


def test_missing_required_settings_name_flag_and_variable() -> None:
    entry = get_entry("appbuilder")
    with pytest.raises(ConfigurationError) as info:
        entry.require({}, env={})
    message = str(info.value)
    assert "missing the token (--token or APPBUILDER_TOKEN" in message
    assert "the app id (--app-id or APPBUILDER_APP_ID" in message
    assert "--emulator" in message
    entry.require({"app_id": "a"}, env={"APPBUILDER_TOKEN": "t"})
    with pytest.raises(ConfigurationError) as info:
        get_entry("openai").require({}, env={"OPENAI_MODEL": "m"})
    assert "missing the base url (--base-url or OPENAI_BASE_URL" in str(info.value)
    assert "--model or OPENAI_MODEL" not in str(info.value)
    assert "pass --emulator for the embedded emulator" in str(info.value)


@pytest.mark.parametrize(
    ("setting", "value", "problem"),
    [
        (Setting("u", "--u", None, None, "u", kind="url"), "ftp://x", "is not an http"),
        (Setting("u", "--u", None, None, "u", kind="url", secret=True), "x", "the value is not"),
        (Setting("b", "--b", None, None, "b", kind="bool"), "maybe", "expected true or false"),
        (Setting("c", "--c", None, None, "c", kind="choice", choices=("x",)), "y", "should be 'x'"),
        (Setting("t", "--t", None, None, "t"), " padded", "without surrounding whitespace"),
    ],
)
def test_malformed_values_say_what_was_expected(setting: Setting, value: str, problem: str) -> None:
    assert problem in (setting.problem(value) or "")


def test_switches_parse_words() -> None:
    switch = Setting("store", "--store", "STORE", "true", "keep", kind="bool")
    assert switch.parse("false") is False and switch.parse("Yes") is True
    assert switch.parse(False) is False
    assert switch.given({}, {"STORE": "0"}) == "0"


def test_open_platform_keeps_todays_calls_and_takes_a_name() -> None:
    with open_platform(emulator=True, scenario={"rules": []}) as platform:
        assert platform.name == "appbuilder"
        assert platform.create_conversation()
    with open_platform("appbuilder", emulator=True, app_id="ignored") as platform:
        assert platform.create_conversation()


def test_open_platform_refuses_an_emulator_the_platform_has_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Every shipped platform has one: take the openai platform's away.
    monkeypatch.setitem(PLATFORMS, "openai", replace(PLATFORMS["openai"], emulator_protocol=None))
    with (
        pytest.raises(ConfigurationError, match="--platform openai has no embedded emulator"),
        open_platform("openai", emulator=True),
    ):
        pass


def test_open_platform_without_settings_points_at_the_emulator(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("APPBUILDER_TOKEN", raising=False)
    with (
        pytest.raises(ConfigurationError, match=r"open_platform\(emulator=True\)"),
        open_platform(app_id="a", token="", base_url=None),
    ):
        pass


def test_the_documented_table_is_the_registry() -> None:
    from pathlib import Path

    from bridge.platforms.registry import settings_table

    page = Path(__file__).resolve().parents[2] / "docs" / "platforms.md"
    text = page.read_text(encoding="utf-8")
    begin = "<!-- platform-settings: generated from bridge/platforms/registry.py"
    assert begin in text, "docs/platforms.md lost its platform settings table"
    table = text.split(begin, 1)[1].split("-->", 1)[1].split("<!-- /platform-settings -->")[0]
    assert table.strip() == settings_table(), (
        "docs/platforms.md's platform settings table differs from the registry; paste in "
        "`python -c 'from bridge.platforms.registry import settings_table as t; print(t())'`"
    )
    for entry in PLATFORMS.values():
        for setting in entry.settings:
            name = "every platform" if setting.shared else f"`{entry.name}`"
            assert f"| {name} | `{setting.flag}`" in table


@pytest.mark.parametrize("name", [n for n, e in PLATFORMS.items() if e.emulator_protocol])
def test_open_platform_starts_each_platforms_emulator(name: str) -> None:
    with open_platform(name, emulator=True, scenario={"rules": []}) as platform:
        assert platform.name == name
        assert platform.create_conversation()
        assert platform.check()
