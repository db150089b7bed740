"""The `toolbridge` command line: one module per group of commands, registered on one app."""

from __future__ import annotations

from bridge.cli import (  # noqa: F401
    audit_cmd,
    call_cmd,
    db_cmd,
    demo_cmd,
    doctor_cmd,
    emulator_cmd,
    policy_cmd,
    run_cmd,
    serve_cmd,
    sources_cmd,
    tools_cmd,
)
from bridge.cli._app import app

__all__ = ["app"]
