"""Weather tools, described the AppBuilder way: `manifest` decorators, Chinese descriptions.

Load them anywhere a SPEC is accepted: `toolbridge manifest examples/weather/tools.py`,
`toolbridge run "北京天气怎么样？" --tools examples/weather/tools.py`.
"""

from __future__ import annotations

from enum import Enum
from typing import Annotated

from pydantic import Field

from bridge import manifest, manifest_parameter, manifest_return

_NOW = {"北京": ("晴", 12.0, 30), "上海": ("多云", 16.5, 65), "广州": ("小雨", 22.0, 88)}


class Unit(str, Enum):
    """温度单位。"""

    CELSIUS = "celsius"
    FAHRENHEIT = "fahrenheit"


def _convert(celsius: float, unit: Unit) -> float:
    return celsius if unit is Unit.CELSIUS else round(celsius * 9 / 5 + 32, 1)


@manifest(description="查询城市当前的天气：天气现象、温度和湿度。")
@manifest_parameter(name="city", description="城市名，例如：北京、上海")
@manifest_return(description="天气现象、温度（按所选单位）和相对湿度（%）")
def get_current_weather(city: str, unit: Unit = Unit.CELSIUS) -> dict[str, object]:
    """Current weather (canned data so the example runs anywhere)."""
    if city not in _NOW:
        raise ValueError(f"暂无{city}的数据，可查询：{'、'.join(_NOW)}")
    condition, celsius, humidity = _NOW[city]
    return {
        "city": city,
        "condition": condition,
        "temperature": _convert(celsius, unit),
        "unit": unit.value,
        "humidity": humidity,
    }


@manifest(name="get_forecast")
def forecast(
    city: Annotated[str, "城市名"],
    days: Annotated[int, Field(ge=1, le=7, description="预报天数，1 到 7 天")] = 3,
) -> list[dict[str, object]]:
    """查询城市未来几天的天气预报。

    Args:
        city: 城市名（这条说明会被 Annotated 中的说明覆盖）
        days: 预报天数
    """
    if city not in _NOW:
        raise ValueError(f"暂无{city}的数据，可查询：{'、'.join(_NOW)}")
    condition, celsius, _ = _NOW[city]
    return [{"day": d + 1, "condition": condition, "high": celsius + d} for d in range(days)]
