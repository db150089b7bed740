"""`bridge.doctor`: the diagnostics as data, usable without the CLI."""

from __future__ import annotations

import subprocess
import sys

from bridge.doctor import diagnose
from bridge.errors import ConfigurationError, UsageError


def _never_opened(tools: list[dict[str, object]]) -> object:
    raise AssertionError("the platform must not be reached when its settings are wrong")


def test_unknown_platform_and_missing_settings_are_failures_with_their_errors() -> None:
    checks = diagnose("nowhere", {}, open_platform=_never_opened)  # type: ignore[arg-type]
    assert checks[0].name == "platform" and checks[0].status == "fail"
    assert isinstance(checks[0].error, UsageError)
    missing = diagnose(
        "appbuilder",
        {"token": None, "app_id": None},
        open_platform=_never_opened,  # type: ignore[arg-type]
    )
    failed = [c for c in missing if c.status == "fail"]
    assert failed and all(isinstance(c.error, ConfigurationError) for c in failed)
    assert [c.name for c in missing][-2:] == ["reachable", "tools"]


def test_the_library_imports_no_terminal_ui() -> None:
    probe = (
        "import sys, bridge.doctor; print(sorted({'typer', 'rich', 'click'} & set(sys.modules)))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == "[]"
