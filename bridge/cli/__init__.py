"""The `toolbridge` command line: one module per group of commands, registered on one app."""

from __future__ import annotations

from bridge.cli._app import app

__all__ = ["app"]
