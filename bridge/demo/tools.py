"""The demo's tools: a tiny intranet (weather service, staff directory, room booking)."""

from __future__ import annotations

from typing import Literal

from bridge.tools.manifest import manifest, manifest_parameter

__all__ = ["book_meeting_room", "find_employee", "get_weather"]

_WEATHER = {
    "北京": ("晴", 12),
    "上海": ("多云", 16),
    "广州": ("小雨", 22),
    "深圳": ("阴", 23),
}
_STAFF = {
    "张三": {
        "name": "张三",
        "city": "北京",
        "department": "平台研发部",
        "email": "zhangsan@example.com",
    },
    "李四": {"name": "李四", "city": "上海", "department": "市场部", "email": "lisi@example.com"},
}
_ROOMS = {
    "北京": "北京-3F-白塔",
    "上海": "上海-12F-外滩",
    "广州": "广州-5F-珠江",
    "深圳": "深圳-8F-南山",
}


@manifest(description="查询城市的实时天气。")
@manifest_parameter(name="city", description="城市名，例如：北京")
@manifest_parameter(name="unit", description="温度单位")
def get_weather(city: str, unit: Literal["celsius", "fahrenheit"] = "celsius") -> dict[str, object]:
    """Current weather of a city (canned data for the demo)."""
    if city not in _WEATHER:
        raise ValueError(f"没有{city}的天气数据；可查询：{'、'.join(_WEATHER)}")
    condition, celsius = _WEATHER[city]
    temp = celsius if unit == "celsius" else round(celsius * 9 / 5 + 32)
    return {"city": city, "condition": condition, "temp": temp, "unit": unit}


@manifest(description="在公司通讯录中按姓名查找同事，返回所在城市、部门和邮箱。")
@manifest_parameter(name="name", description="同事的姓名，例如：张三")
def find_employee(name: str) -> dict[str, str]:
    """Look a colleague up in the staff directory."""
    if name not in _STAFF:
        raise LookupError(f"通讯录中没有{name}")
    return _STAFF[name]


@manifest(description="在指定城市的办公室预订会议室。")
@manifest_parameter(name="city", description="办公室所在城市")
@manifest_parameter(name="attendee", description="参会人姓名")
@manifest_parameter(name="time", description="开始时间，例如：明天 14:00")
def book_meeting_room(city: str, attendee: str, time: str) -> dict[str, str]:
    """Book a meeting room (always succeeds in the demo)."""
    if city not in _ROOMS:
        raise ValueError(f"{city}没有办公室；可预订：{'、'.join(_ROOMS)}")
    return {"room": _ROOMS[city], "attendee": attendee, "time": time, "confirmation": "MR-1024"}
