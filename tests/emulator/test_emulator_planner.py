"""The default planner: tool choice and arguments from the query, English and Chinese."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bridge.emulator.matching import choose_tool, coerce, fill_arguments, fill_calls, tool_info
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


def test_required_values_fall_back_to_defaults_neutral_values_or_a_placeholder() -> None:
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
    # As a model does, every required parameter is filled; a string never with the whole
    # query, but with a placeholder that says nothing was given.
    assert fill_arguments("do it", info) == {
        "n": 2,
        "x": 0.5,
        "tags": [],
        "opts": {},
        "name": "unknown",
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


# --- verbs, quoted values, lists, named values, people (issue 10 §5) --------------------------

ASSETS = [
    tool(
        "list_assets",
        "List the assets of the inventory",
        {"status": {"type": "string", "enum": ["active", "retired"]}},
        [],
    ),
    tool(
        "get_asset",
        "One asset of the inventory",
        {"asset_id": {"type": "string", "description": "Asset tag such as MN-1001"}},
        ["asset_id"],
    ),
    tool(
        "create_asset",
        "Register an asset",
        {"name": {"type": "string"}, "owner": {"type": "string", "description": "Who holds it"}},
        ["name"],
    ),
    tool(
        "delete_asset", "Retire an asset for good", {"asset_id": {"type": "string"}}, ["asset_id"]
    ),
]
ASSETS_ZH = [
    tool("list_assets", "列出所有资产", {}, []),
    tool(
        "get_asset",
        "资产详情",
        {"asset_id": {"type": "string", "description": "资产编号"}},
        ["asset_id"],
    ),
    tool(
        "create_asset",
        "登记资产",
        {"name": {"type": "string", "description": "资产名称"}},
        ["name"],
    ),
    tool(
        "delete_asset",
        "资产报废",
        {"asset_id": {"type": "string", "description": "资产编号"}},
        ["asset_id"],
    ),
]
# The intranet example's tools, as `toolbridge import-openapi` writes them (trimmed).
_NULLABLE_INT: dict[str, Any] = {"anyOf": [{"type": "integer"}, {"type": "null"}]}
_STATUS: dict[str, Any] = {"type": "string", "enum": ["open", "in_progress", "closed"]}
INTRANET = [
    tool(
        "search_employees",
        "Search the employee directory by name and department.",
        {
            "q": {"type": "string", "description": "Part of a name, case-insensitive."},
            "department": {"type": "string", "description": "Exact department."},
        },
        [],
    ),
    tool(
        "get_employee",
        "One employee of the directory, by id.",
        {"employee_id": {"type": "integer"}},
        ["employee_id"],
    ),
    tool(
        "list_tickets",
        "Tickets of the help desk, filtered by status and assignee.",
        {"status": _STATUS, "assignee_id": _NULLABLE_INT},
        [],
    ),
    tool(
        "create_ticket",
        "Open a help-desk ticket, optionally assigned to an employee.",
        {
            "title": {"type": "string", "description": "One line that says what is wrong."},
            "description": {"type": "string", "default": ""},
            "priority": {"type": "string", "enum": ["low", "normal", "high"]},
            "assignee_id": {**_NULLABLE_INT, "description": "Employee id of the assignee."},
        },
        ["title"],
    ),
    tool("get_ticket", "One ticket, by id.", {"ticket_id": {"type": "integer"}}, ["ticket_id"]),
]


def _batch(api: Api, query: str, tools: list[dict[str, Any]]) -> list[tuple[str, Any]]:
    """Every call of the first interrupt the emulator plans for `query`."""
    chunks = api.chunks(api.create(), query, stream=False, tools=tools)
    return [(c["function"]["name"], c["function"]["arguments"]) for c in interrupt_calls(chunks)]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ('get asset "MN-2001"', ("get_asset", {"asset_id": "MN-2001"})),
        ('show me asset "MN-2001"', ("get_asset", {"asset_id": "MN-2001"})),
        ("list assets", ("list_assets", {})),
        ("list retired assets", ("list_assets", {"status": "retired"})),
        ('please delete asset "MN-7"', ("delete_asset", {"asset_id": "MN-7"})),
        ('remove asset "MN-7"', ("delete_asset", {"asset_id": "MN-7"})),
        (
            'create an asset "laptop" for Chloé',
            ("create_asset", {"name": "laptop", "owner": "Chloé"}),
        ),
        ('file an asset named "dock"', ("create_asset", {"name": "dock"})),
    ],
)
def test_the_verb_picks_the_tool_and_quoted_values_the_parameter(
    api: Api, query: str, expected: tuple[str, Any]
) -> None:
    assert _batch(api, query, ASSETS) == [expected]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("查询资产 “MN-2001”", ("get_asset", {"asset_id": "MN-2001"})),
        ("获取资产「MN-2001」的详情", ("get_asset", {"asset_id": "MN-2001"})),
        ("列出资产", ("list_assets", {})),
        ("删除资产 'MN-7'", ("delete_asset", {"asset_id": "MN-7"})),
        ("新建资产《显示器》", ("create_asset", {"name": "显示器"})),
        ("创建资产：显示器", ("create_asset", {"name": "显示器"})),
    ],
)
def test_chinese_verbs_pick_the_tool(api: Api, query: str, expected: tuple[str, Any]) -> None:
    assert _batch(api, query, ASSETS_ZH) == [expected]


@pytest.mark.parametrize(
    ("query", "tools", "expected"),
    [
        (
            "What is the weather in Paris and Tokyo?",
            [TIME, WEATHER],
            [("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Tokyo"})],
        ),
        (
            "weather in Paris, Oslo and Rome in fahrenheit",
            [WEATHER],
            [("get_weather", {"city": c, "unit": "fahrenheit"}) for c in ("Paris", "Oslo", "Rome")],
        ),
        (
            "北京和上海今天天气怎么样？",
            [TIME_ZH, WEATHER_ZH],
            [("get_weather", {"city": "北京"}), ("get_weather", {"city": "上海"})],
        ),
        (
            "北京、上海、广州的天气",
            [WEATHER_ZH],
            [("get_weather", {"city": c}) for c in ("北京", "上海", "广州")],
        ),
        (
            "北京 上海 天气",
            [WEATHER_ZH],
            [("get_weather", {"city": "北京"}), ("get_weather", {"city": "上海"})],
        ),
        (
            'show assets "MN-1" and "MN-2"',
            ASSETS,
            [("get_asset", {"asset_id": "MN-1"}), ("get_asset", {"asset_id": "MN-2"})],
        ),
    ],
)
def test_a_list_makes_a_parallel_batch(
    api: Api, query: str, tools: list[dict[str, Any]], expected: list[tuple[str, Any]]
) -> None:
    assert _batch(api, query, tools) == expected


@pytest.mark.parametrize(
    ("query", "city"),
    [
        ("weather in New York", "New York"),  # two words, one name: no list
        ("search the weather for rain and wind", "rain wind"),  # not names: one value
    ],
)
def test_what_is_not_a_list_stays_one_call(api: Api, query: str, city: str) -> None:
    assert _batch(api, query, [WEATHER]) == [("get_weather", {"city": city})]


def test_a_list_fills_an_array_parameter_in_one_call(api: Api) -> None:
    compare = tool(
        "compare_cities",
        "Compare the weather of cities",
        {"cities": {"type": "array", "items": {"type": "string"}}},
        ["cities"],
    )
    compare_zh = tool(
        "compare_cities",
        "比较几个城市的天气",
        {"cities": {"type": "array", "items": {"type": "string"}, "description": "城市列表"}},
        ["cities"],
    )
    expected = [("compare_cities", {"cities": ["北京", "上海"]})]
    assert _batch(api, "比较北京和上海的天气", [compare_zh]) == expected
    assert _batch(api, 'compare cities "Oslo" and "Rome"', [compare]) == [
        ("compare_cities", {"cities": ["Oslo", "Rome"]})
    ]


def test_the_answer_names_each_item_of_a_batch(api: Api) -> None:
    conversation_id = api.create()
    chunks = api.chunks(conversation_id, "weather in Oslo and Rome", stream=False, tools=[WEATHER])
    calls = interrupt_calls(chunks)
    outputs = {c["id"]: f"{c['function']['arguments']['city']} is sunny" for c in calls}
    (body,) = api.submit(conversation_id, outputs, stream=False)
    assert body["answer"] == "Oslo: Oslo is sunny\nRome: Rome is sunny"


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        # The verb is not a value: "open" is no status of list_tickets.
        (
            "open a ticket, priority high: the printer on floor 2 jams",
            ("create_ticket", {"title": "the printer on floor 2 jams", "priority": "high"}),
        ),
        ("list open tickets", ("list_tickets", {"status": "open"})),
        ("search employees department IT", ("search_employees", {"department": "IT"})),
        ("find employees named Chloé", ("search_employees", {"q": "Chloé"})),
        ("get employee 3", ("get_employee", {"employee_id": 3})),
        ("show ticket 12", ("get_ticket", {"ticket_id": 12})),
    ],
)
def test_named_values_and_verbs_on_the_intranet_tools(
    api: Api, query: str, expected: tuple[str, Any]
) -> None:
    assert _batch(api, query, INTRANET) == [expected]


def test_an_optional_number_needs_a_word_of_its_parameter() -> None:
    (create,) = (
        tool_info(t["function"]["name"], t["function"]["description"], t["function"]["parameters"])
        for t in INTRANET
        if t["function"]["name"] == "create_ticket"
    )
    # "floor 2" is not an assignee id; "priority" and the title come from the query.
    assert fill_arguments("open a ticket: printer on floor 2 jams", create) == {
        "title": "printer on floor 2 jams"
    }


def test_a_parameter_is_never_the_whole_query(api: Api) -> None:
    note = tool("add_note", "Add a note", {"text": {"type": "string"}}, ["text"])
    assert _batch(api, "add note", [note]) == [("add_note", {"text": "unknown"})]


def test_a_person_id_is_looked_up_by_name_first(api: Api) -> None:
    conversation_id = api.create()
    query = "open a ticket for Chloé: the printer on floor 2 jams"
    chunks = api.chunks(conversation_id, query, stream=False, tools=INTRANET)
    (lookup,) = interrupt_calls(chunks)
    assert lookup["function"] == {"name": "search_employees", "arguments": {"q": "Chloé"}}
    found = '[{"id": 3, "name": "Chloé Dubois"}]'
    (body,) = api.submit(conversation_id, {lookup["id"]: found}, stream=False)
    (create,) = interrupt_calls([body])
    assert create["function"] == {
        "name": "create_ticket",
        "arguments": {"title": "the printer on floor 2 jams", "assignee_id": 3},
    }
    (body,) = api.submit(conversation_id, {create["id"]: '{"id": 1}'}, stream=False)
    assert body["answer"] == '{"id": 1}'


def test_a_lookup_that_finds_nobody_still_makes_the_call(api: Api) -> None:
    conversation_id = api.create()
    query = "open a ticket for Zoe: VPN down"
    (lookup,) = interrupt_calls(api.chunks(conversation_id, query, stream=False, tools=INTRANET))
    (body,) = api.submit(conversation_id, {lookup["id"]: "[]"}, stream=False)
    (create,) = interrupt_calls([body])
    assert create["function"]["arguments"] == {"title": "VPN down"}


def test_a_suggested_value_is_retried_once(api: Api) -> None:
    conversation_id = api.create()
    chunks = api.chunks(conversation_id, "time in Tokyo", stream=False, tools=[TIME])
    (first,) = interrupt_calls(chunks)
    assert first["function"]["arguments"] == {"timezone": "Tokyo"}
    error = "ValueError: unknown time zone 'Tokyo'; did you mean Asia/Tokyo?"
    (body,) = api.submit(conversation_id, {first["id"]: error}, stream=False)
    (second,) = interrupt_calls([body])
    assert second["function"]["arguments"] == {"timezone": "Asia/Tokyo"}
    # Once: a second suggestion is the answer, not another retry.
    (body,) = api.submit(conversation_id, {second["id"]: "did you mean Asia/Tokyo?"}, stream=False)
    assert body["answer"] == "did you mean Asia/Tokyo?"


_WORDS = st.sampled_from(
    [
        "get", "open", "list", "delete", "for", "Chloé", "and", "和", "、", "北京", "上海",
        '"MN-1"', "「A」", ":", "：", "priority", "high", "2", "3.5", "ticket", "asset", "to",
        "department", "IT", "查询", "创建", " ", ",", "did you mean", "=", "'", '"',
    ]
)  # fmt: skip
_QUERIES = st.one_of(st.text(max_size=60), st.lists(_WORDS, max_size=14).map(" ".join))
_TOOLS = [
    tool_info(t["function"]["name"], t["function"]["description"], t["function"]["parameters"])
    for t in [*INTRANET, *ASSETS, *ASSETS_ZH, WEATHER, WEATHER_ZH, TIME, SEARCH, BOOK_EN, FLAGS]
]


@settings(max_examples=200, deadline=None)
@given(query=_QUERIES)
def test_any_query_plans_without_error_and_the_same_way_twice(query: str) -> None:
    chosen = choose_tool(query, _TOOLS)
    assert chosen is choose_tool(query, _TOOLS)
    for info in _TOOLS:
        calls = fill_calls(query, info)
        assert calls == fill_calls(query, info)
        assert len(calls) >= 1
        names = {p.name for p in info.params}
        for call in calls:
            assert set(call.arguments) <= names
            # Never the whole query (unless every word of it is a value: "Paris").
            if {w.lower() for w in query.split()} & {"for", "and", "to", "get"}:
                assert query.strip() not in call.arguments.values()
