"""The emulated Coze bot's own configuration: the local plugin APIs it may call.

Coze takes no tool list per request: a bot's local plugins (端插件) are configured in the Coze
UI. The emulated bot gets them from the scenario's ``coze`` section, which only this protocol
reads (the other protocols never see it)::

    coze:
      bot_name: Weather helper          # shown by GET /v1/bot/get_online_info
      plugin_name: local_plugin         # the plugin the APIs belong to
      plugins:                          # one entry per plugin API (a function tool)
        - name: get_weather
          description: Get the current weather for a city
          parameters: {type: object, properties: {city: {type: string}}, required: [city]}
    rules: [...]                        # the shared scenario format

An entry may also be a Chat Completions function tool (``{"type": "function", "function":
{...}}``), so ``toolbox.manifests("openai")`` can be pasted in as is. Without the section the
bot has no plugins and answers every query in plain text (or by the scenario's rules).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from bridge.emulator.scenario import Scenario, split_section
from bridge.emulator.wire import TOOL_NAME_PATTERN

__all__ = ["SECTION", "BotConfig", "PluginApi", "split_scenario"]

SECTION = "coze"
"""The scenario key this protocol reads."""


class PluginApi(BaseModel):
    """One API of the bot's local plugin: what a `requires_action` tool call may name."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=TOOL_NAME_PATTERN)
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object"})

    @model_validator(mode="before")
    @classmethod
    def _function_tool(cls, data: Any) -> Any:
        # Accept the Chat Completions shape so local manifests can be reused unchanged.
        if isinstance(data, Mapping) and data.get("type") == "function" and "function" in data:
            return data["function"]
        return data


class BotConfig(BaseModel):
    """The ``coze`` section of a scenario."""

    model_config = ConfigDict(extra="forbid")

    bot_name: str = "Emulated bot"
    plugin_name: str = "local_plugin"
    plugins: list[PluginApi] = Field(default_factory=list)

    @model_validator(mode="after")
    def _unique(self) -> BotConfig:
        names = [p.name for p in self.plugins]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"plugin API name(s) {', '.join(twice)} appear more than once")
        return self


def split_scenario(
    source: str | Path | Mapping[str, Any] | Scenario | None,
) -> tuple[Scenario | None, BotConfig]:
    """The shared scenario and the bot's configuration, read from one scenario source.

    Raises:
        ScenarioError: the file cannot be read or either part breaks its format; the message
            names the file and the key.
    """
    if source is None:
        return None, BotConfig()
    if isinstance(source, Scenario):
        return source, BotConfig()
    return split_section(source, SECTION, BotConfig)
