"""The AppBuilder SDK's documented function-calling examples, ported to `Bridge`.

The sources are the SDK's own docs (github.com/baidubce/app-builder):
`docs/Application/Agent/ToolCall/tool_call.md` (three ways to describe a local tool: a JSON
Schema dict, a function with a Google docstring, `@manifest`/`@manifest_parameter`; then
`run(tools=...)`, read `events[-1].tool_calls`, run the function, `run(tool_outputs=...)`),
`docs/Application/Agent/ToolChoice/tool_choice.md` and the cookbook
`cookbooks/end2end_application/agent/tool_choice.ipynb` (`tool_choice` forcing a tool with
its `input`), and the run API's `tools[].type` enum (`function`, `code_interpreter`,
`file_retrieval`). The SDK is never imported: its examples' shapes are kept, and the loop
the examples write by hand is `Bridge.ask`. The agent is the embedded emulator, scripted to
plan as the docs' agent does.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, Literal

import pytest
from pydantic import BaseModel, Field

from bridge import Bridge, Emulator, Manifest, manifest, manifest_parameter
from bridge.platforms.appbuilder import AppBuilderPlatform

# The agent of the docs: it asks for Beijing's weather in Celsius, and answers with the output.
SCENARIO: dict[str, Any] = {
    "rules": [
        {
            "match": "天气怎么样",
            "steps": [
                {
                    "tool": "get_current_weather",
                    "arguments": {"location": "北京", "unit": "celsius"},
                }
            ],
            "answer": "{outputs.get_current_weather}",
        }
    ]
}


@pytest.fixture(scope="module")
def emulator() -> Iterator[Emulator]:
    with Emulator(scenario=SCENARIO) as emu:
        yield emu


@pytest.fixture()
def platform(emulator: Emulator) -> Iterator[AppBuilderPlatform]:
    emulator.clear_requests()
    platform = AppBuilderPlatform(
        app_id=emulator.app_id, token=emulator.token, base_url=emulator.base_url
    )
    yield platform
    platform.close()


def _bodies(emulator: Emulator) -> list[dict[str, Any]]:
    return [
        r.json
        for r in emulator.requests
        if r.path.endswith("/conversation/runs") and isinstance(r.json, dict)
    ]


# --- tool_call.md, way 1: the tool as a JSON Schema dict ------------------------------------------

DESCRIPTION = "仅支持中国城市的天气查询，参数location为中国城市名称，其他国家城市不支持天气查询"
SDK_TOOL = {
    "type": "function",
    "function": {
        "name": "get_current_weather",
        "description": DESCRIPTION,
        "parameters": {
            "type": "object",
            "properties": {
                "location": {"type": "string", "description": "城市名，举例：北京"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["location", "unit"],
        },
    },
}


def test_way_1_the_json_schema_tool_is_a_typed_function(
    platform: AppBuilderPlatform, emulator: Emulator
) -> None:
    # The dict describes a function toolbridge would run; written as one, it says the same.
    @manifest(description=DESCRIPTION)
    @manifest_parameter("location", description="城市名，举例：北京")
    def get_current_weather(location: str, unit: Literal["celsius", "fahrenheit"]) -> str:
        return "北京今天35度"

    assert Manifest.from_function(get_current_weather) == SDK_TOOL
    # client.run(query, tools) ... events[-1].tool_calls ... client.run(tool_outputs): one ask.
    with Bridge(platform, [get_current_weather]) as bridge:
        result = bridge.ask("今天北京天气怎么样？")
    assert result.answer == "北京今天35度"
    [run] = result.tool_runs
    assert run.arguments == {"location": "北京", "unit": "celsius"}
    ask, outputs = _bodies(emulator)
    assert ask["tools"][0]["function"]["name"] == "get_current_weather"
    assert outputs["tool_outputs"] == [{"tool_call_id": run.call_id, "output": "北京今天35度"}]


# --- way 2: a function with a Google docstring (Manifest.from_function) ---------------------------


def get_current_weather(location: str, unit: str) -> str:
    """获取指定中国城市的当前天气信息。

    仅支持中国城市的天气查询。参数 `location` 为中国城市名称，其他国家城市不支持天气查询。

    Args:
        location (str): 城市名，例如："北京"。
        unit (int): 温度单位，支持 "celsius" 或 "fahrenheit"。

    Returns:
        str: 天气情况描述
    """
    return "北京今天25度"


def test_way_2_a_documented_function(platform: AppBuilderPlatform) -> None:
    described = Manifest.from_function(get_current_weather)["function"]
    assert described["description"].startswith("获取指定中国城市的当前天气信息。")
    assert (
        described["parameters"]["properties"]["location"]["description"] == '城市名，例如："北京"。'
    )
    # The annotation wins over the docstring's `(int)`, as the SDK's own schema builder does.
    assert described["parameters"]["properties"]["unit"]["type"] == "string"
    with Bridge(platform, [get_current_weather]) as bridge:
        result = bridge.ask("今天北京的天气怎么样？")
    assert result.answer == "北京今天25度"
    assert result.tool_runs[0].output == "北京今天25度"


# --- way 3: the decorators -----------------------------------------------------------------------


@manifest(
    name="get_current_weather",
    description="获取指定中国城市的当前天气信息。仅支持中国城市的天气查询。"
    "参数 `location` 为中国城市名称，其他国家城市不支持天气查询。",
)
@manifest_parameter(name="location", description="城市名，例如：北京。")
@manifest_parameter(name="unit", description="温度单位，支持 'celsius' 或 'fahrenheit'")
def decorated_weather(location: str, unit: str) -> str:
    return "北京今天25度"


def test_way_3_decorators(platform: AppBuilderPlatform) -> None:
    tool = decorated_weather
    printed = json.dumps(Manifest.from_function(tool), indent=4, ensure_ascii=False)
    assert '"description": "城市名，例如：北京。"' in printed
    with Bridge(platform, [tool]) as bridge:
        result = bridge.ask("今天北京的天气怎么样？")
    assert result.answer == "北京今天25度"


# --- tool_choice.md and the cookbook: force a tool and its input ---------------------------------


def weather_query(city: str) -> str:
    """The docs force the app's component `WeatherQuery`; here it is a local tool."""
    return f"{city}：晴，25度"


WEATHER_QUERY = manifest(name="WeatherQuery", description="天气查询")(weather_query)


def test_tool_choice_in_the_sdk_dict_form(platform: AppBuilderPlatform, emulator: Emulator) -> None:
    # tool_choice.md: run(..., end_user_id=..., tool_choice={"type": "function", ...}).
    sdk_choice = {
        "type": "function",
        "function": {"name": "WeatherQuery", "input": {"city": "北京"}},
    }
    with Bridge(
        platform, [WEATHER_QUERY], end_user_id="user_id_toolchoice", tool_choice=sdk_choice
    ) as bridge:
        result = bridge.ask("北京今天的天气")
    [run] = result.tool_runs
    assert (run.name, run.arguments) == ("WeatherQuery", {"city": "北京"})
    ask = _bodies(emulator)[0]
    assert ask["tool_choice"] == sdk_choice
    assert ask["end_user_id"] == "user_id_toolchoice"


class ToolChoiceFunction(BaseModel):
    """The SDK's `data_class.ToolChoiceFunction`, as far as its shape goes."""

    name: str
    input: dict[str, Any] = Field(default_factory=dict)


class ToolChoice(BaseModel):
    """The SDK's `data_class.ToolChoice`."""

    type: Literal["auto", "function"] = "auto"
    function: ToolChoiceFunction | None = None


def test_tool_choice_as_the_sdk_models_in_the_cookbook(
    platform: AppBuilderPlatform, emulator: Emulator
) -> None:
    # The cookbook: the parameters come from tool_choice, not from the model ({'city': '北京天气'}).
    tool_choice_function = ToolChoiceFunction(name="WeatherQuery", input={"city": "北京天气"})
    tool_choice = ToolChoice(type="function", function=tool_choice_function)
    with Bridge(platform, [WEATHER_QUERY]) as bridge:
        conversation = bridge.conversation()
        free = conversation.ask("北京今天的天气")  # without tool_choice the agent plans itself
        forced = conversation.ask("北京今天的天气", tool_choice=tool_choice)
    assert free.tool_runs[0].arguments != {"city": "北京天气"}
    assert forced.tool_runs[0].arguments == {"city": "北京天气"}
    assert forced.answer.startswith("北京天气：晴")


# --- the run API's other tool types, next to local tools ("端云组件联动") ------------------------


def test_cloud_and_local_tools_in_one_run(platform: AppBuilderPlatform, emulator: Emulator) -> None:
    with Bridge(
        platform,
        [get_current_weather],
        platform_tools=["code_interpreter", "file_retrieval"],
    ) as bridge:
        result = bridge.ask("今天北京的天气怎么样？")
    assert result.answer == "北京今天25度"
    tools = _bodies(emulator)[0]["tools"]
    assert [tool["type"] for tool in tools] == ["function", "code_interpreter", "file_retrieval"]
