"""The Coze v3 chat API, emulated: a bot whose local plugins (端插件) run on the client.

``Emulator(protocol="coze")`` or ``toolbridge emulator --protocol coze`` serves it. The app id
is the bot id; the scenario's ``coze`` section declares the bot's plugin APIs
(`bridge.emulator.coze.bot`), its ``rules`` and ``settings`` script the bot as for every
protocol, and without rules the shared default planner picks plugin APIs from the query.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bridge.emulator.coze.app import LOGID_HEADER, CozeApp
from bridge.emulator.coze.bot import BotConfig, PluginApi, split_scenario
from bridge.emulator.faults import FaultSpec, parse_faults
from bridge.emulator.scenario import Scenario, load_scenario

__all__ = [
    "LOGID_HEADER",
    "NO_PLUGINS_ANSWER",
    "BotConfig",
    "CozeApp",
    "PluginApi",
    "client_env",
    "create_app",
]

NO_PLUGINS_ANSWER = (
    "(emulated Coze bot) This bot has no local plugins, so it cannot call any tool; declare "
    "its plugin APIs in the scenario's coze section (coze: plugins: [...]). You asked: {query}"
)


def create_app(
    *,
    token: str = "emulator-token",
    app_id: str = "emulator-bot",
    scenario: str | Path | Mapping[str, Any] | Scenario | None = None,
    faults: str | FaultSpec | None = None,
) -> CozeApp:
    """Build the Coze emulator's ASGI app.

    Args:
        token: the personal access token clients must send (``Authorization: Bearer``).
        app_id: the one bot id served.
        scenario: a scenario file, mapping or `Scenario`; its ``coze`` section lists the bot's
            plugin APIs.
        faults: a fault spec applied to every matching request (see `bridge.emulator.faults`).

    Raises:
        ScenarioError: the scenario (or its ``coze`` section) cannot be loaded.
        FaultSpecError: the fault spec cannot be parsed.
    """
    loaded, bot = split_scenario(scenario)
    spec = parse_faults(faults) if isinstance(faults, str) else faults
    if loaded is None and not bot.plugins:
        # A bot without plugins can only chat; say why instead of a bare plain answer. Tools
        # declared later (`CozeApp.configure`) replace this script.
        chat_only = load_scenario({"settings": {"plain_answer": NO_PLUGINS_ANSWER}})
        app = CozeApp(token=token, bot_id=app_id, scenario=chat_only, bot=bot, faults=spec)
        app.chat_only = True
        return app
    return CozeApp(token=token, bot_id=app_id, scenario=loaded, bot=bot, faults=spec)


def client_env(base_url: str, token: str, app_id: str) -> dict[str, str]:
    """What toolbridge's Coze adapter and cozepy's examples read."""
    return {"COZE_API_BASE": base_url, "COZE_API_TOKEN": token, "COZE_BOT_ID": app_id}
