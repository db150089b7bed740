"""The shape every adapter shares: `PlatformBase`, the optional-feature protocols, and a
platforms layer that imports nothing above it (the emulator, the daemon, the CLI, the loop)."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

import bridge.platforms
from bridge.errors import UsageError
from bridge.platforms import create_platform
from bridge.platforms.base import (
    KeepsState,
    KnowsConversations,
    PlatformBase,
    declare_tools_to,
    exports_state,
    knows_conversation,
)
from bridge.platforms.registry import PLATFORMS

ROOT = "http://127.0.0.1:9"
OPTIONS: dict[str, dict[str, Any]] = {
    "appbuilder": {"app_id": "app", "token": "t", "base_url": ROOT},
    "coze": {"bot_id": "bot", "token": "t", "base_url": ROOT},
    "responses": {"model": "m", "base_url": ROOT + "/v1"},
    "openai": {"model": "m", "base_url": ROOT + "/v1"},
}


@pytest.mark.parametrize("name", sorted(PLATFORMS))
def test_every_adapter_is_a_platform_base_and_closes_its_client(name: str) -> None:
    platform = create_platform(name, **OPTIONS[name])
    assert isinstance(platform, PlatformBase)
    closed: list[None] = []
    original = platform.client.close
    platform.client.close = lambda: closed.append(original())  # type: ignore[method-assign]
    with platform as entered:
        assert entered is platform
    assert closed == [None]


@pytest.mark.parametrize("name", ["openai", "responses"])
def test_refusals_are_worded_from_the_platform_name(name: str) -> None:
    platform: Any = create_platform(name, **OPTIONS[name])
    with platform:
        conversation = platform.create_conversation()
        with pytest.raises(UsageError, match=f"the {name} platform does not upload files"):
            platform.upload_file(conversation, "notes.txt")
        with pytest.raises(UsageError, match=f"resume is not supported on the {name} platform"):
            platform.resume(conversation, "i", "yes")
        with pytest.raises(UsageError, match="query must be a non-empty string"):
            platform.start(conversation, " ", tools=[])
        assert isinstance(opened_as(platform), KnowsConversations)
        assert knows_conversation(platform, conversation)
        platform.forget(conversation)
        assert not knows_conversation(platform, conversation)


def opened_as(platform: object) -> object:
    return platform


def test_optional_features_are_protocols_an_object_may_lack() -> None:
    class Bare:
        name = "bare"

    class Remembering(Bare):
        def __init__(self) -> None:
            self.declared: list[Any] = []
            self.declare_tools = self.declared.append

        def knows(self, conversation_id: str) -> bool:
            return conversation_id == "mine"

    assert knows_conversation(Bare(), "any") and not exports_state(Bare())
    remembering = Remembering()
    assert knows_conversation(remembering, "mine")
    assert not knows_conversation(remembering, "other")
    declare_tools_to(remembering, [{"type": "function"}])
    assert remembering.declared == [[{"type": "function"}]]
    assert not isinstance(remembering, KeepsState)


def test_the_platforms_layer_imports_nothing_above_it() -> None:
    above = (
        "bridge.emulator",
        "bridge.daemon",
        "bridge.cli",
        "bridge.conversation",
        "bridge._open",
    )
    found = []
    for path in sorted(Path(bridge.platforms.__file__).parent.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            found += [
                f"{path.name}:{node.lineno} imports {n}"
                for n in names
                if any(n == a or n.startswith(a + ".") for a in above)
            ]
    assert found == []


def test_a_feature_set_on_one_instance_is_seen_after_another_instance_lacked_it() -> None:
    from bridge.platforms.base import declare_tools_to, exports_state

    class Adapter:
        name = "fake"

    plain, emulated = Adapter(), Adapter()
    declared: list[Any] = []
    declare_tools_to(plain, [{"name": "t"}])  # no declare_tools: nothing happens
    emulated.declare_tools = declared.extend  # type: ignore[attr-defined]
    declare_tools_to(emulated, [{"name": "t"}])
    assert declared == [{"name": "t"}]
    assert not exports_state(plain)
