"""Ask about the weather with the tools of `tools.py`.

Run it: `python -m examples.weather.main --emulator` from the repository root (offline; without
`--emulator`, against the app of APPBUILDER_TOKEN and APPBUILDER_APP_ID).
"""

from __future__ import annotations

import sys

from bridge import Bridge, Platform, Result, open_platform
from examples.weather import tools

SCENARIO = {
    "rules": [
        {
            "match": r"(?P<city>北京|上海|广州).*(未来|预报).*?(?P<days>\d)\s*天",
            "steps": [{"tool": "get_forecast", "arguments": {"city": "{city}", "days": "{days}"}}],
            "answer": "{city}未来{days}天：{outputs.get_forecast}",
        },
        {
            "match": r"(?P<city>北京|上海|广州)",
            "steps": [{"tool": "get_current_weather", "arguments": {"city": "{city}"}}],
            "answer": (
                "{city}现在{outputs.get_current_weather.condition}，"
                "{outputs.get_current_weather.temperature}°C，"
                "湿度 {outputs.get_current_weather.humidity}%。"
            ),
        },
    ]
}


def main(platform: Platform) -> list[Result]:
    """Two questions: current weather, then a forecast (arguments coerced from text)."""
    with Bridge(platform, tools) as bridge, bridge.conversation() as conversation:
        return [conversation.ask("上海天气怎么样？"), conversation.ask("北京未来 2 天的预报")]


if __name__ == "__main__":
    # --emulator: offline, on the embedded emulator scripted by SCENARIO; without it, your app
    # (APPBUILDER_TOKEN and APPBUILDER_APP_ID).
    with open_platform(emulator="--emulator" in sys.argv[1:], scenario=SCENARIO) as platform:
        for result in main(platform):
            print(result.answer)
