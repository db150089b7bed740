"""The default planner fills arguments as a model would.

Every required parameter is filled (a tool is never called without one): from an enum, a
default, the values its description names (``支持 "celsius" 或 "fahrenheit"``), else a typed
placeholder. Values keep their shape (``billing-api`` stays ``billing-api``), and a person a
request is for is not part of the thing requested (``order a monitor for carol``).
"""

from __future__ import annotations

import string
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from bridge import Bridge, manifest
from bridge.emulator import Emulator
from bridge.emulator.matching import fill_arguments, tool_info
from bridge.emulator.reading import STOP_WORDS
from bridge.platforms.appbuilder import AppBuilderPlatform


def _tool(name: str, description: str, properties: dict[str, Any], required: list[str]) -> Any:
    return tool_info(
        name, description, {"type": "object", "properties": properties, "required": required}
    )


WEATHER = _tool(
    "get_current_weather",
    "获得指定地点的天气",
    {
        "location": {"type": "string", "description": "省，市名，例如：河北省"},
        "unit": {"type": "string", "description": '温度单位，支持 "celsius" 或 "fahrenheit"'},
    },
    ["location", "unit"],
)


@manifest(description="获得指定地点的天气")
def get_current_weather(location: str, unit: str) -> str:
    """查询天气。

    Args:
        location: 省，市名，例如：河北省
        unit: 温度单位，支持 "celsius" 或 "fahrenheit"
    """
    return f"{location}: 20 {unit}"


def test_a_required_parameter_the_query_does_not_mention_is_still_filled() -> None:
    """Through HTTP and the loop: the function is called with every required argument."""
    with Emulator() as emu:
        platform = AppBuilderPlatform(app_id=emu.app_id, token=emu.token, base_url=emu.base_url)
        with Bridge(platform, [get_current_weather]) as bridge:
            result = bridge.ask("今天北京的天气怎么样？")
    [run] = result.tool_runs
    assert run.error is None, run.output
    assert run.arguments == {"location": "北京", "unit": "celsius"}
    assert result.answer == "北京: 20 celsius"


def test_required_values_come_from_enum_default_description_then_a_placeholder() -> None:
    tool = _tool(
        "report",
        "Make a report",
        {
            "format": {"type": "string", "description": 'Output format; supports "pdf" or "csv"'},
            "level": {"type": "string", "enum": ["summary", "full"]},
            "lang": {"type": "string", "default": "en"},
            "city": {"type": "string", "description": 'A city, e.g. "Paris"'},
            "region": {"type": "string", "description": "省份，例如：河北省"},
            "owner": {"type": "string"},
            "copies": {"type": "integer", "minimum": 1},
            "draft": {"type": "boolean"},
        },
        ["format", "level", "lang", "city", "region", "owner", "copies", "draft"],
    )
    assert fill_arguments("make a report", tool) == {
        "format": "pdf",
        "level": "summary",
        "lang": "en",
        "city": "Paris",
        "region": "河北省",
        "owner": "unknown",
        "copies": 1,
        "draft": False,
    }
    # Values the query gives still win.
    assert fill_arguments("make a full report as csv", tool)["format"] == "csv"


def test_an_order_for_a_person_keeps_the_person_out_of_the_item() -> None:
    order = _tool(
        "order_item",
        "Order an item",
        {"item": {"type": "string"}, "quantity": {"type": "integer"}},
        ["item", "quantity"],
    )
    assert fill_arguments("order a monitor for carol, quantity 2", order) == {
        "item": "monitor",
        "quantity": 2,
    }
    for_customer = _tool(
        "order_item",
        "Order an item",
        {
            "customer": {"type": "string", "description": "Who the order is for"},
            "item": {"type": "string"},
            "quantity": {"type": "integer"},
        },
        ["item", "quantity"],
    )
    assert fill_arguments("order a monitor for carol, quantity 2", for_customer) == {
        "customer": "carol",
        "item": "monitor",
        "quantity": 2,
    }
    # A place after "to" stays with the value; "weather for paris" has nothing before it.
    search = _tool("search_flights", "Search flights", {"query": {"type": "string"}}, ["query"])
    assert fill_arguments("search cheap tickets to tokyo", search) == {
        "query": "cheap tickets tokyo"
    }
    weather = _tool("get_weather", "Weather", {"city": {"type": "string"}}, ["city"])
    assert fill_arguments("weather for paris", weather) == {"city": "paris"}


STATUS = _tool(
    "service_status",
    "Status of a service",
    {"service": {"type": "string"}},
    ["service"],
)


def test_identifiers_with_hyphens_keep_their_shape() -> None:
    assert fill_arguments("status of billing-api", STATUS) == {"service": "billing-api"}
    assert fill_arguments("status of the billing_api service", STATUS) == {"service": "billing_api"}
    assert fill_arguments("status of api.example.com", STATUS) == {"service": "api.example.com"}
    assert fill_arguments("status of ops@example.com", STATUS) == {"service": "ops@example.com"}


_PART = st.text(string.ascii_lowercase, min_size=2, max_size=8).filter(
    lambda w: w not in STOP_WORDS and w not in {"status", "service"}
)
_IDENTIFIER = st.builds(
    lambda first, rest: first + "".join(sep + part for sep, part in rest),
    _PART,
    st.lists(
        st.tuples(
            st.sampled_from(["-", "_"]), _PART | st.from_regex(r"[0-9]{1,3}", fullmatch=True)
        ),
        min_size=1,
        max_size=3,
    ),
)


@settings(max_examples=150, deadline=None)
@given(
    identifier=_IDENTIFIER,
    template=st.sampled_from(
        ["status of {}", "status of {} please", "{} status", "what is the status of {}?"]
    ),
)
def test_any_identifier_survives_verbatim(identifier: str, template: str) -> None:
    assert fill_arguments(template.format(identifier), STATUS) == {"service": identifier}


@settings(max_examples=100, deadline=None)
@given(
    required=st.lists(
        st.sampled_from(["string", "integer", "number", "boolean", "array", "object"]),
        min_size=1,
        max_size=5,
    ),
    query=st.text(min_size=0, max_size=40),
)
def test_every_required_parameter_is_filled_with_its_type(required: list[str], query: str) -> None:
    properties = {f"p{i}": {"type": kind} for i, kind in enumerate(required)}
    tool = _tool("do_it", "Do it", properties, list(properties))
    arguments = fill_arguments(query, tool)
    assert set(arguments) == set(properties)
    types = {
        "string": str,
        "integer": int,
        "number": (int, float),
        "boolean": bool,
        "array": list,
        "object": dict,
    }
    for name, kind in zip(properties, required, strict=True):
        assert isinstance(arguments[name], types[kind]), (name, kind, arguments)
