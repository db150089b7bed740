"""The emulated model's own traits, from the scenario's ``openai`` section.

Only this protocol reads the section (the other protocols never see it)::

    openai:
      native_tools: false      # a plain chat model: a request with `tools` is refused (400)
    rules: [...]               # the shared scenario format

A model without native tool calls is what toolbridge's text tool protocol is for
(``--tool-protocol text``): the tools are described in the system prompt and the model writes
its calls in its reply, which this emulator always understands. With ``native_tools: false``
the native protocol fails the way it fails on such a server, so both sides can be tried.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from bridge.emulator.scenario import Scenario, split_section

__all__ = ["SECTION", "ModelConfig", "split_scenario"]

SECTION = "openai"
"""The scenario key this protocol reads."""


class ModelConfig(BaseModel):
    """The ``openai`` section of a scenario."""

    model_config = ConfigDict(extra="forbid")

    native_tools: bool = True
    """False: the model has no native tool calls; requests that send `tools` get a 400."""


def split_scenario(
    source: str | Path | Mapping[str, Any] | Scenario | None,
) -> tuple[Scenario | None, ModelConfig]:
    """The shared scenario and the model's traits, read from one scenario source.

    Raises:
        ScenarioError: the file cannot be read or either part breaks its format; the message
            names the file and the key.
    """
    if source is None:
        return None, ModelConfig()
    if isinstance(source, Scenario):
        return source, ModelConfig()
    return split_section(source, SECTION, ModelConfig, whole_without_section=True)
