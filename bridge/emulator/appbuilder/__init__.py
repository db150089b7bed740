"""The AppBuilder-compatible emulator: the v2 conversation API (runs, uploads, feedback) and
the console's app listing, as the official appbuilder-sdk sends and reads them.

`create_app` builds its ASGI app; `client_env` points the toolbridge adapter and the SDK at it.
"""

from __future__ import annotations

from bridge.emulator.appbuilder.app import EmulatorApp, client_env, create_app

__all__ = ["EmulatorApp", "client_env", "create_app"]
