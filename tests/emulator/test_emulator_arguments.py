"""How the default planner fills arguments, as a model would: examples and properties.

A value is taken from the query only where the query names it (an enum value or its usual
name, a quoted string, ``name=value``, a number next to its word, one call per listed value);
what the query does not name stays out. Manifests in the SDK's ``Manifest.from_function``
shape (descriptions only in the docstring) are read through their docstring.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from bridge.emulator.matching import fill_calls, tool_info
from bridge.emulator.reading import STOP_WORDS, normalise
from bridge.emulator.toolinfo import ToolInfo

DOCSTRING = """查询指定中国城市的当前天气。

    参数:
        location (str): 城市名称，例如："北京"
        unit (str): 温度单位，可选 "celsius" 或 "fahrenheit"

    返回:
        str: 天气情况描述
    """
SDK_PROPS = {
    "location": {"name": "location", "type": "str", "description": None, "required": True},
    "unit": {"name": "unit", "type": "str", "description": None, "required": True},
}
SDK_WEATHER = tool_info(
    "get_current_weather",
    DOCSTRING,
    {"type": "object", "properties": SDK_PROPS, "required": ["location", "unit"]},
)
PLAIN_WEATHER = tool_info(
    "get_current_weather",
    "Get the current weather of a city.",
    {
        "type": "object",
        "properties": {"location": {"type": "str"}, "unit": {"type": "str"}},
        "required": ["location"],
    },
)
FORECAST = tool_info(
    "get_forecast",
    "Weather forecast for a city",
    {
        "type": "object",
        "properties": {
            "city": {"type": "string", "description": "City name"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit", "kelvin"]},
            "days": {"type": "integer", "description": "number of days ahead"},
        },
        "required": ["city"],
    },
)
CITIES_ZH = ["北京", "上海", "广州", "深圳", "杭州", "成都", "西安", "南京", "武汉", "重庆"]
CITIES_EN = ["Paris", "Tokyo", "London", "Oslo", "Berlin", "Madrid", "Rome", "Lima"]


def _calls(query: str, info: ToolInfo) -> list[dict[str, Any]]:
    return [c.arguments for c in fill_calls(query, info)]


def test_a_docstring_gives_the_parameters_their_descriptions_and_choices() -> None:
    location, unit = SDK_WEATHER.params
    assert location.description == '城市名称，例如："北京"' and location.enum == ()
    assert unit.description == '温度单位，可选 "celsius" 或 "fahrenheit"'
    assert unit.enum == ("celsius", "fahrenheit")


def test_sphinx_and_english_docstrings_are_read_too() -> None:
    info = tool_info(
        "convert",
        "Convert.\n\nArgs:\n    value (float): the amount\n    scale: one of 'metric' or\n"
        "        'imperial'\n\nReturns:\n    str: the result\n:param extra: more text",
        {"properties": {"value": {"type": "float"}, "scale": {}, "extra": {}, "str": {}}},
    )
    value, scale, extra, returned = info.params
    assert value.description == "the amount"
    assert scale.description == "one of 'metric' or 'imperial'"
    assert scale.enum == ("metric", "imperial")
    assert extra.description == "more text" and returned.description == ""


def test_a_description_own_text_wins_over_the_docstring() -> None:
    info = tool_info(
        "t",
        "T.\n\nArgs:\n    a (str): from the docstring",
        {"properties": {"a": {"type": "string", "description": "from the schema"}}},
    )
    assert info.params[0].description == "from the schema"


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("北京今天天气怎么样？", [{"location": "北京", "unit": "celsius"}]),
        (
            "北京 上海的天气",
            [{"location": "北京", "unit": "celsius"}, {"location": "上海", "unit": "celsius"}],
        ),
        (
            "北京和上海今天天气怎么样，用华氏度",
            [
                {"location": "北京", "unit": "fahrenheit"},
                {"location": "上海", "unit": "fahrenheit"},
            ],
        ),
        (
            "What is the weather in Beijing in fahrenheit?",
            [{"location": "Beijing", "unit": "fahrenheit"}],
        ),
    ],
)
def test_the_sdk_docstring_manifest(query: str, expected: list[dict[str, Any]]) -> None:
    assert _calls(query, SDK_WEATHER) == expected


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        # The unit is a unit, not part of the city; an unnamed optional unit stays out.
        ("weather in Beijing in fahrenheit", [{"location": "Beijing", "unit": "fahrenheit"}]),
        ("weather in Beijing", [{"location": "Beijing"}]),
        # 天气 is what is asked about (北京的天气), even when the tool says "weather".
        ("北京和上海的天气", [{"location": "北京"}, {"location": "上海"}]),
        ("北京的天气，摄氏度", [{"location": "北京", "unit": "celsius"}]),
    ],
)
def test_a_manifest_without_descriptions(query: str, expected: list[dict[str, Any]]) -> None:
    assert _calls(query, PLAIN_WEATHER) == expected


# --- properties ------------------------------------------------------------------------------

_NAME = st.from_regex(r"[A-Z][a-z]{2,8}", fullmatch=True).filter(
    # The emulator reads words in a crude singular ("Ares" as "are"): a name whose singular
    # is a stop word is read as that word, as a plural of one would be.
    lambda w: normalise(w) not in STOP_WORDS
)
_RESERVED = {"celsius", "fahrenheit", "kelvin", "city", "unit", "days", "day", "forecast"}
_TOKEN = st.from_regex(r"[A-Za-z][A-Za-z0-9]{1,10}", fullmatch=True).filter(
    lambda w: normalise(w) not in STOP_WORDS and w.lower() not in _RESERVED
)


@settings(max_examples=100, deadline=None)
@given(unit=st.sampled_from(["celsius", "fahrenheit", "kelvin"]), city=st.sampled_from(CITIES_EN))
def test_a_mentioned_enum_value_is_chosen(unit: str, city: str) -> None:
    (call,) = _calls(f"forecast for {city} in {unit}", FORECAST)
    assert call == {"city": city, "unit": unit}


@settings(max_examples=100, deadline=None)
@given(city=st.sampled_from(CITIES_EN), days=st.integers(min_value=1, max_value=30))
def test_a_number_next_to_its_word_fills_a_number_parameter(city: str, days: int) -> None:
    (call,) = _calls(f"forecast for {city} {days} days ahead", FORECAST)
    assert call == {"city": city, "days": days}


@settings(max_examples=100, deadline=None)
@given(city=st.sampled_from(CITIES_EN), value=_TOKEN, sep=st.sampled_from(["=", ": ", " = "]))
def test_a_named_value_fills_its_parameter(city: str, value: str, sep: str) -> None:
    (call,) = _calls(f"forecast for {city} with unit{sep}kelvin city{sep}{value}", FORECAST)
    assert call["city"] == value and call["unit"] == "kelvin"


@settings(max_examples=100, deadline=None)
@given(value=st.text(min_size=1, max_size=30).filter(lambda v: '"' not in v and v.strip()))
@example(value=": ")  # a colon inside quotes is no message colon
def test_a_quoted_value_is_taken_as_written(value: str) -> None:
    search = tool_info(
        "search_docs",
        "Search the documents",
        {"properties": {"text": {"type": "string"}}, "required": ["text"]},
    )
    (call,) = _calls(f'search docs for "{value}"', search)
    assert call == {"text": value}


@settings(max_examples=100, deadline=None)
@given(
    cities=st.lists(st.sampled_from(CITIES_ZH), min_size=2, max_size=4, unique=True),
    sep=st.sampled_from(["和", "、", " ", "与"]),
    tail=st.sampled_from(["的天气", "今天天气怎么样", "天气如何？", ""]),
)
def test_several_values_of_one_parameter_make_one_call_each(
    cities: list[str], sep: str, tail: str
) -> None:
    assume(sep != "与" or len(cities) == 2)
    query = sep.join(cities) + tail
    assert _calls(query, SDK_WEATHER) == [{"location": c, "unit": "celsius"} for c in cities]


@settings(max_examples=100, deadline=None)
@given(cities=st.lists(_NAME, min_size=2, max_size=4, unique=True))
def test_a_list_of_names_makes_one_call_each(cities: list[str]) -> None:
    query = "forecast for " + ", ".join(cities[:-1]) + " and " + cities[-1]
    assert _calls(query, FORECAST) == [{"city": c} for c in cities]


@settings(max_examples=150, deadline=None)
@given(words=st.lists(_TOKEN, min_size=2, max_size=8))
def test_no_argument_is_the_whole_query_and_unnamed_optionals_stay_out(words: list[str]) -> None:
    query = "what is the forecast for " + " ".join(words)
    for info in (FORECAST, PLAIN_WEATHER, SDK_WEATHER):
        for call in _calls(query, info):
            assert query not in call.values()
            if not any(w.lower() in ("celsius", "fahrenheit", "kelvin") for w in words):
                assert "unit" not in call or info is SDK_WEATHER  # a required choice: the first
            assert "days" not in call
