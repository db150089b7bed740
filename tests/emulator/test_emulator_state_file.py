"""An emulator with a state file knows its conversations after a restart.

Each protocol's emulator is asked a question that pauses on a tool call, stopped (its memory
gone, as a process killed with ``kill -9``), and made again on the same file: the tool call is
still pending there, the outputs are accepted, and the conversation takes another message.
A file that cannot be used (corrupt, or written under a scenario whose rules moved) is left
aside: the emulator starts empty instead of failing.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from bridge.emulator import Emulator
from bridge.platforms.base import export_state_of, import_state_into
from bridge.platforms.registry import get_entry
from bridge.types import RunFinished, ToolCallsRequested, ToolResult

SCENARIO: dict[str, Any] = {
    "rules": [
        {
            "match": r"weather in (?P<city>\w+)",
            "steps": [{"tool": "get_weather", "arguments": {"city": "{city}"}}],
            "answer": "{city}: {outputs.get_weather}",
        },
    ],
}
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather of a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
PLATFORMS = {"appbuilder": "appbuilder", "coze": "coze", "responses": "responses"}


def _scenario(platform: str) -> dict[str, Any]:
    entry = get_entry(platform)
    declared = entry.emulator_tools([WEATHER]) if entry.emulator_tools else {}
    return {**SCENARIO, **declared}


def _adapter(platform: str, emu: Emulator) -> Any:
    entry = get_entry(platform)
    return entry.create(**entry.emulator_options(emu.env()), max_retries=0)


def _tools(adapter: Any) -> list[dict[str, Any]]:
    from bridge import Toolbox, manifest

    @manifest(description="Weather of a city.")
    def get_weather(city: str) -> str:
        return city

    return Toolbox([get_weather]).manifests(adapter.dialect)


@pytest.mark.parametrize("platform", list(PLATFORMS))
def test_a_restarted_emulator_knows_its_conversations_and_their_pending_calls(
    platform: str, tmp_path: Path
) -> None:
    state_file = tmp_path / "journal.db.emulator.json"
    protocol = get_entry(platform).require_emulator()
    with Emulator(protocol=protocol, scenario=_scenario(platform), state_file=state_file) as first:
        adapter = _adapter(platform, first)
        try:
            tools = _tools(adapter)
            conversation = adapter.create_conversation()
            events = list(adapter.start(conversation, "weather in Paris", tools=tools))
            [batch] = [e.batch for e in events if isinstance(e, ToolCallsRequested)]
            saved_state = export_state_of(adapter, conversation)
        finally:
            adapter.close()
    assert state_file.exists(), "the state is on disk before the client sees the tool call"

    with Emulator(protocol=protocol, scenario=_scenario(platform), state_file=state_file) as again:
        adapter = _adapter(platform, again)
        try:
            if saved_state is not None:  # an adapter that keeps state client-side (Responses)
                import_state_into(adapter, conversation, saved_state)
            [call] = batch.calls
            results = [ToolResult(call_id=call.call_id, output="18 degrees")]
            finished = list(adapter.submit(conversation, batch, results))
            [answer] = [e for e in finished if isinstance(e, RunFinished)]
            assert answer.answer == "Paris: 18 degrees"
            more = list(adapter.start(conversation, "weather in Tokyo", tools=tools))
            assert any(isinstance(e, ToolCallsRequested) for e in more)
        finally:
            adapter.close()


def test_the_state_file_is_written_atomically_with_secrets_masked(tmp_path: Path) -> None:
    from bridge.errors import register_secret

    secret = "sk-live-state-file-secret-0123456789"
    register_secret(secret)
    state_file = tmp_path / "state.json"
    with Emulator(scenario=SCENARIO, state_file=state_file) as emu:
        adapter = _adapter("appbuilder", emu)
        try:
            conversation = adapter.create_conversation()
            list(adapter.start(conversation, f"weather in Paris {secret}", tools=_tools(adapter)))
        finally:
            adapter.close()
    text = state_file.read_text(encoding="utf-8")
    assert secret not in text
    assert json.loads(text)["format"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"], "no temporary file is left"
    assert state_file.stat().st_mode & 0o077 == 0, "only its owner reads it"


@pytest.mark.parametrize(
    "content",
    ["{not json", b"\x00\xff{{{", json.dumps({"format": 99}), "<scenario changed>"],
    ids=["corrupt", "not-utf-8", "other-format", "rules-moved"],
)
def test_a_state_file_that_cannot_be_used_is_left_aside(
    content: str | bytes, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    state_file = tmp_path / "state.json"
    if content == "<scenario changed>":
        with Emulator(scenario=SCENARIO, state_file=state_file) as emu:
            adapter = _adapter("appbuilder", emu)
            try:
                conversation = adapter.create_conversation()
                list(adapter.start(conversation, "weather in Paris", tools=_tools(adapter)))
            finally:
                adapter.close()
        scenario: dict[str, Any] = {"rules": []}
    else:
        if isinstance(content, bytes):
            state_file.write_bytes(content)
        else:
            state_file.write_text(content, encoding="utf-8")
        scenario = SCENARIO
    with (
        caplog.at_level(logging.WARNING, logger="bridge.emulator.saving"),
        Emulator(scenario=scenario, state_file=state_file) as emu,
    ):
        assert emu.conversation_ids() == []
    assert "starting empty" in caplog.text
