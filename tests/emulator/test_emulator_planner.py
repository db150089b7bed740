"""The default planner: tool choice and arguments from the query, English and Chinese."""

from __future__ import annotations

from typing import Any

import pytest

from bridge.emulator.matching import choose_tool, coerce, fill_arguments, tool_info
from tests.emulator.helpers import (
    CLOTHES,
    SEARCH,
    TIME,
    WEATHER,
    WEATHER_ZH,
    Api,
    interrupt_calls,
    tool,
)

TIME_ZH = tool(
    "get_time",
    "查询城市的当前时间",
    {"city": {"type": "string", "description": "城市名"}},
    ["city"],
)
BOOK_ZH = tool(
    "book_room",
    "预订会议室",
    {
        "room": {"type": "string", "description": "会议室名称"},
        "people": {"type": "integer", "description": "人数"},
        "hours": {"type": "number", "description": "时长（小时）"},
    },
    ["room", "people"],
)
BOOK_EN = tool(
    "book_room",
    "Book a meeting room",
    {"room": {"type": "string"}, "people": {"type": "integer"}, "hours": {"type": "number"}},
    ["room", "people"],
)
FLAGS = tool(
    "list_files",
    "List the files of a folder",
    {
        "folder": {"type": "string"},
        "recursive": {"type": "boolean"},
        "limit": {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": None},
    },
    ["folder", "recursive"],
)
# What the official SDK's Manifest.from_function sends: Python type strings, per-property flags.
SDK_PAINT = {
    "type": "function",
    "function": {
        "name": "paint",
        "description": "Paint.",
        "parameters": {
            "type": "object",
            "properties": {
                "color": {"name": "color", "type": "Color", "description": None, "required": True},
                "mode": {
                    "name": "mode",
                    "type": "Literal[fast, slow]",
                    "description": None,
                    "required": True,
                },
                "level": {
                    "name": "level",
                    "type": "Union[int, str]",
                    "description": None,
                    "required": True,
                },
                "maybe": {
                    "name": "maybe",
                    "type": "Optional[int]",
                    "description": None,
                    "required": False,
                },
            },
            "required": ["color", "mode", "level"],
        },
    },
}


def _planned(api: Api, query: str, tools: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
    """The single call the emulator plans for `query` (over HTTP)."""
    conversation_id = api.create()
    chunks = api.chunks(conversation_id, query, stream=False, tools=tools, **fields)
    (call,) = interrupt_calls(chunks)
    return {"name": call["function"]["name"], "arguments": call["function"]["arguments"]}


@pytest.mark.parametrize(
    ("query", "tools", "expected"),
    [
        (
            "What is the weather in Paris in fahrenheit?",
            [TIME, WEATHER, SEARCH],
            {"name": "get_weather", "arguments": {"city": "Paris", "unit": "fahrenheit"}},
        ),
        (
            "What time is it in Tokyo?",
            [WEATHER, TIME, SEARCH],
            {"name": "get_time", "arguments": {"timezone": "Tokyo"}},
        ),
        (
            'search the docs for "rate limits" top 3',
            [WEATHER, TIME, SEARCH],
            {"name": "search_docs", "arguments": {"query": "rate limits", "top_k": 3}},
        ),
        (
            "book room Everest for 2.5 hours, 6 people",
            [WEATHER, BOOK_EN],
            {"name": "book_room", "arguments": {"room": "Everest", "people": 6, "hours": 2.5}},
        ),
        (
            "list files in src recursive",
            [WEATHER, FLAGS],
            {"name": "list_files", "arguments": {"folder": "src", "recursive": True}},
        ),
        (
            "list files in docs",
            [FLAGS],
            {"name": "list_files", "arguments": {"folder": "docs", "recursive": False}},
        ),
    ],
)
def test_english_queries(
    api: Api, query: str, tools: list[dict[str, Any]], expected: dict[str, Any]
) -> None:
    assert _planned(api, query, tools) == expected


@pytest.mark.parametrize(
    ("query", "tools", "expected"),
    [
        (
            "北京今天天气怎么样",
            [TIME_ZH, WEATHER_ZH],
            {"name": "get_weather", "arguments": {"city": "北京"}},
        ),
        (
            "帮我查询一下上海的时间",
            [WEATHER_ZH, TIME_ZH],
            {"name": "get_time", "arguments": {"city": "上海"}},
        ),
        (
            "上海明天的天气，用华氏度",
            [TIME_ZH, WEATHER_ZH],
            {"name": "get_weather", "arguments": {"city": "上海", "unit": "华氏度"}},
        ),
        (
            "预订3楼的会议室，5个人，2.5小时",
            [WEATHER_ZH, TIME_ZH, BOOK_ZH],
            {"name": "book_room", "arguments": {"room": "3楼", "people": 5, "hours": 2.5}},
        ),
        (
            "What's the weather in 深圳?",
            [TIME, WEATHER],
            {"name": "get_weather", "arguments": {"city": "深圳"}},
        ),
    ],
)
def test_chinese_queries(
    api: Api, query: str, tools: list[dict[str, Any]], expected: dict[str, Any]
) -> None:
    assert _planned(api, query, tools) == expected


def test_sdk_python_type_manifests_give_enums_and_numbers(api: Api) -> None:
    planned = _planned(api, "paint it red, slow mode, level 3", [SDK_PAINT])
    assert planned == {"name": "paint", "arguments": {"color": "red", "mode": "slow", "level": 3}}


def test_required_enum_not_mentioned_gets_the_first_value() -> None:
    info = tool_info(
        "convert",
        "Convert a temperature",
        {
            "type": "object",
            "properties": {
                "value": {"type": "number"},
                "to": {"type": "string", "enum": ["kelvin", "rankine"]},
            },
            "required": ["value", "to"],
        },
    )
    assert fill_arguments("convert 21.5 degrees", info) == {"value": 21.5, "to": "kelvin"}


def test_required_values_fall_back_to_defaults_or_neutral_values() -> None:
    info = tool_info(
        "f",
        "do it",
        {
            "type": "object",
            "properties": {
                "n": {"type": "integer", "minimum": 2},
                "x": {"type": "number", "default": 0.5},
                "tags": {"type": "array", "items": {"type": "string"}},
                "ids": {"type": "array", "items": {"type": "integer"}},
                "opts": {"type": "object", "properties": {}},
                "name": {"type": "string"},
            },
            "required": ["n", "x", "tags", "opts", "name"],
        },
    )
    assert fill_arguments("do it", info) == {
        "n": 2,
        "x": 0.5,
        "tags": [],
        "opts": {},
        "name": "do it",
    }
    assert fill_arguments('do it with "a" and "b", ids 4 5', info)["tags"] == ["a", "b"]


def test_tool_choice_forces_the_tool_and_its_input_wins(api: Api) -> None:
    choice = {"type": "function", "function": {"name": "get_time", "input": {"timezone": "UTC"}}}
    planned = _planned(api, "weather in Paris", [WEATHER, TIME], tool_choice=choice)
    assert planned == {"name": "get_time", "arguments": {"timezone": "UTC"}}


def test_tool_choice_without_input_fills_from_the_query(api: Api) -> None:
    choice = {"type": "function", "function": {"name": "search_docs", "input": {}}}
    planned = _planned(api, "weather in Paris", [WEATHER, SEARCH], tool_choice=choice)
    assert planned == {"name": "search_docs", "arguments": {"query": "weather Paris"}}


def test_tool_choice_auto_plans_normally(api: Api) -> None:
    planned = _planned(api, "time in Tokyo", [WEATHER, TIME], tool_choice={"type": "auto"})
    assert planned["name"] == "get_time"


@pytest.mark.parametrize(
    ("query", "tools", "expected"),
    [
        (
            "tell me a joke",
            [WEATHER, TIME, CLOTHES],
            "No tool matched, so a plain reply to: tell me",
        ),
        ("讲个笑话", [WEATHER_ZH, TIME_ZH], "没有匹配的工具，直接回答您的问题：讲个笑话"),
    ],
)
def test_a_query_matching_no_tool_gets_a_plain_answer(
    api: Api, query: str, tools: list[dict[str, Any]], expected: str
) -> None:
    conversation_id = api.create()
    (body,) = api.chunks(conversation_id, query, stream=False, tools=tools)
    assert body["content"][-1]["event_status"] == "success"
    assert expected in body["answer"]


def test_the_answer_is_the_tool_output(api: Api) -> None:
    conversation_id = api.create()
    chunks = api.chunks(conversation_id, "weather in Oslo", stream=True, tools=[WEATHER])
    (call,) = interrupt_calls(chunks)
    answer = api.submit(conversation_id, {call["id"]: '{"temp": -3}'}, stream=True)
    assert "".join(c["answer"] for c in answer) == '{"temp": -3}'


def test_planning_is_deterministic(api: Api) -> None:
    plans = [_planned(api, "time in Tokyo or weather?", [WEATHER, TIME]) for _ in range(3)]
    assert plans[0] == plans[1] == plans[2]


def test_ties_go_to_the_first_listed_tool() -> None:
    a = tool_info("alpha", "report status", {"type": "object", "properties": {}})
    b = tool_info("beta", "report status", {"type": "object", "properties": {}})
    assert choose_tool("status report", [a, b]) is a
    assert choose_tool("status report", [b, a]) is b


@pytest.mark.parametrize(
    ("kind_schema", "value", "expected"),
    [
        ({"type": "integer"}, "21", 21),
        ({"type": "number"}, "2.5", 2.5),
        ({"type": "number"}, "3", 3),
        ({"type": "boolean"}, "TRUE", True),
        ({"type": "string"}, 7, "7"),
        ({"type": "integer"}, "many", "many"),
        ({"type": "Optional[int]"}, "4", 4),
    ],
)
def test_coerce_to_the_schema_type(kind_schema: dict[str, Any], value: Any, expected: Any) -> None:
    info = tool_info("f", "", {"type": "object", "properties": {"p": kind_schema}})
    assert coerce(value, info.param("p")) == expected
    assert coerce(value, None) == value
