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

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from bridge.emulator.scenario import Scenario, ScenarioError, load_scenario
from bridge.emulator.wire import format_validation_error

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
    label = "<scenario>"
    data: Any
    if isinstance(source, Mapping):
        data = dict(source)
    else:
        path = Path(source)
        label = str(path)
        data = _read(path)
    if not isinstance(data, dict) or SECTION not in data:
        return load_scenario(source), ModelConfig()
    section = data.pop(SECTION)
    try:
        model = ModelConfig.model_validate(section or {})
    except ValidationError as exc:
        raise ScenarioError(f"{label}: {SECTION}: {format_validation_error(exc)}") from None
    if not data:
        return None, model
    try:
        return load_scenario(data), model
    except ScenarioError as exc:
        # load_scenario names a mapping "<scenario>"; the person wrote a file.
        raise ScenarioError(str(exc).replace("<scenario>", label, 1)) from None


def _read(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ScenarioError(f"{path}: scenario file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ScenarioError(f"{path}: cannot read the scenario file: {exc}") from None
    try:
        if path.suffix.lower() == ".json":
            return json.loads(text)
        return yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise ScenarioError(f"{path}: not valid YAML/JSON: {exc}") from None
