"""Running a drive script of the official `openai` package (in its own venv) against an
emulator: what the Responses and Chat Completions conformance tests share."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tests.support.sdk_venv import OPENAI, ensure_sdk_venv

__all__ = ["run_openai_drive"]


def run_openai_drive(script: Path, emulator_env: Mapping[str, str]) -> dict[str, Any]:
    """Build the SDK venv if needed, run `script` with the emulator's `OPENAI_*` variables
    (none of the caller's), and return the JSON object its last line prints; a part that
    crashed fails the caller's test."""
    python = ensure_sdk_venv(OPENAI)
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    env.update(emulator_env)
    done = subprocess.run(
        [str(python), str(script)],
        env=env,
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, f"SDK script failed:\n{done.stdout}\n{done.stderr}"
    results: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    crashed = {k: v for k, v in results.items() if isinstance(v, dict) and "crashed" in v}
    assert not crashed, json.dumps(crashed, indent=2, ensure_ascii=False)
    return results
