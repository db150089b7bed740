"""The long-lived bridge daemon: an HTTP service that owns conversations with the agent.

`toolbridge serve` runs it (`bridge.daemon.server.serve`); `create_app` builds the ASGI app;
settings come from flags, ``TOOLBRIDGE_*`` variables and a TOML file (`load_settings`).
"""

from __future__ import annotations

from bridge.daemon.app import create_app
from bridge.daemon.server import serve
from bridge.daemon.settings import DaemonSettings, SettingsError, load_settings

__all__ = ["DaemonSettings", "SettingsError", "create_app", "load_settings", "serve"]
