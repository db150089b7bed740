"""What the loop benchmarks share: timing a conversation in a worker, running a worker, and
finding an official SDK's venv (`tests.support.sdk_venv`). Not a benchmark itself (`run_all`
runs ``bench_*.py`` only)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # for tests.support.sdk_venv when run as a script

__all__ = ["ROOT", "run_worker", "sdk_python", "timed"]


def timed(spec: dict[str, Any], conversation: Callable[[], str]) -> list[float]:
    """Wall seconds of `spec["n"]` conversations after `spec["warmup"]`; each answer must be
    `spec["expected"]` (a wrong one ends the worker, so a broken variant cannot look fast)."""
    for _ in range(spec["warmup"]):
        conversation()
    wall: list[float] = []
    for _ in range(spec["n"]):
        start = time.perf_counter()
        answer = conversation()
        wall.append(time.perf_counter() - start)
        if answer != spec["expected"]:
            raise SystemExit(f"unexpected answer: {answer!r}")
    return wall


def run_worker(cmd: list[str], env: dict[str, str] | None = None) -> list[float]:
    """Run a worker subprocess; return the JSON list of timings it prints last."""
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{cmd[0]} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    values: list[float] = json.loads(done.stdout.strip().splitlines()[-1])
    return values


def sdk_python(sdk: str, skip: bool) -> tuple[Path | None, str]:
    """The python of an SDK's venv, built if needed (`sdk`: ``APPBUILDER``, ``COZE`` or
    ``OPENAI``, as named in `tests.support.sdk_venv`), or None and why not (``--skip-sdk``,
    or the venv cannot be built)."""
    if skip:
        return None, "--skip-sdk given"
    try:
        from tests.support import sdk_venv
    except ImportError as exc:
        return None, f"SDK venv unavailable: {exc}"
    try:
        return sdk_venv.ensure_sdk_venv(getattr(sdk_venv, sdk)), ""
    except sdk_venv.SdkVenvError as exc:
        return None, f"SDK venv unavailable: {str(exc).splitlines()[0]}"
