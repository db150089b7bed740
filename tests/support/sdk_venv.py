"""A separate virtualenv with the official `appbuilder-sdk`, the oracle for wire fidelity.

appbuilder-sdk 1.1.5 pins old dependencies (urllib3 1.x, mcp 1.3, ...), so it gets its own
venv at ``.venv-conformance/`` in the repository root, built once and reused. A stamp file
records what was installed; a venv without a valid stamp (half-built, broken, other version)
is rebuilt. Concurrent callers (tests and benchmarks) serialise on a lock file.

Used by ``tests/test_conformance_sdk.py`` and ``bench/``::

    from tests.support.sdk_venv import ensure_sdk_venv
    python = ensure_sdk_venv()          # Path to .venv-conformance/bin/python
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

__all__ = ["ROOT", "SDK_REQUIREMENT", "VENV", "SdkVenvError", "ensure_sdk_venv", "sdk_python"]

ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / ".venv-conformance"
SDK_REQUIREMENT = "appbuilder-sdk==1.1.5"
SUPPORTED = ((3, 10), (3, 11), (3, 12))
"""Python versions appbuilder-sdk 1.1.5 supports and was checked to install on."""

_STAMP = VENV / ".toolbridge-sdk-stamp"
_INSTALL_TIMEOUT = 1800


class SdkVenvError(RuntimeError):
    """The SDK venv could not be built; the message says which step failed and its output."""


def sdk_python() -> Path:
    """Where the venv's interpreter lives (whether or not it exists yet)."""
    return VENV / "bin" / "python"


def ensure_sdk_venv() -> Path:
    """Return the SDK venv's python, building ``.venv-conformance/`` first if needed.

    Raises:
        SdkVenvError: no suitable Python was found, or creating the venv or installing the
            SDK failed (for instance PyPI cannot be reached).
    """
    with _lock():
        python = sdk_python()
        if _is_ready(python):
            return python
        _build(python)
        return python


def _expected_stamp(python: Path) -> str:
    version = _run([str(python), "-c", "import sys; print(sys.version.split()[0])"], 60).strip()
    return f"{SDK_REQUIREMENT}\npython {version}\n"


def _is_ready(python: Path) -> bool:
    if not python.exists() or not _STAMP.exists():
        return False
    try:
        if _STAMP.read_text(encoding="utf-8") != _expected_stamp(python):
            return False
        _check_import(python)
    except SdkVenvError:
        return False
    return True


def _build(python: Path) -> None:
    base = _find_base_python()
    shutil.rmtree(VENV, ignore_errors=True)
    _run([base, "-m", "venv", str(VENV)], 300, step=f"creating {VENV} with {base}")
    _run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "--disable-pip-version-check",
            "--no-input",
            "--quiet",
            SDK_REQUIREMENT,
        ],
        _INSTALL_TIMEOUT,
        step=f"installing {SDK_REQUIREMENT} into {VENV}",
    )
    _check_import(python)
    _STAMP.write_text(_expected_stamp(python), encoding="utf-8")


def _check_import(python: Path) -> None:
    wanted = SDK_REQUIREMENT.split("==")[1]
    code = (
        "import appbuilder, sys\n"
        "from appbuilder.core.console.appbuilder_client.event_handler import "
        "AppBuilderEventHandler, ToolCallEventHandler\n"
        f"sys.exit(0 if appbuilder.__version__ == {wanted!r} else 3)\n"
    )
    _run([str(python), "-c", code], 120, step=f"importing appbuilder {wanted} in {VENV}")


def _find_base_python() -> str:
    """A Python the SDK installs on: $TOOLBRIDGE_SDK_PYTHON, this one, then 3.12/3.11/3.10."""
    candidates: list[str] = []
    if os.environ.get("TOOLBRIDGE_SDK_PYTHON"):
        candidates.append(os.environ["TOOLBRIDGE_SDK_PYTHON"])
    candidates.append(sys.executable)
    for minor in (12, 11, 10):
        found = shutil.which(f"python3.{minor}")
        if found:
            candidates.append(found)
        pyenv_root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
        candidates += [str(p) for p in sorted(pyenv_root.glob(f"versions/3.{minor}*/bin/python3"))]
    tried = []
    for candidate in candidates:
        version = _version_of(candidate)
        tried.append(f"{candidate} ({version or 'not runnable'})")
        if version in SUPPORTED:
            return candidate
    raise SdkVenvError(
        "no Python 3.10-3.12 found to build the appbuilder-sdk venv; "
        "set TOOLBRIDGE_SDK_PYTHON to one. Tried: " + "; ".join(tried)
    )


def _version_of(python: str) -> tuple[int, int] | None:
    try:
        out = subprocess.run(
            [python, "-c", "import sys, venv; print(sys.version_info[0], sys.version_info[1])"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout.split()
        return int(out[0]), int(out[1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None  # pyenv shims of inactive versions fail here, which is fine


def _run(cmd: list[str], timeout: float, step: str | None = None) -> str:
    label = step or " ".join(cmd)
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise SdkVenvError(f"{label}: timed out after {timeout:.0f} s") from None
    except OSError as exc:
        raise SdkVenvError(f"{label}: cannot run {cmd[0]}: {exc}") from None
    if done.returncode != 0:
        tail = (done.stdout + done.stderr).strip()[-3000:]
        raise SdkVenvError(f"{label}: failed with exit code {done.returncode}:\n{tail}")
    return done.stdout


@contextlib.contextmanager
def _lock() -> Iterator[None]:
    digest = hashlib.sha256(str(ROOT).encode()).hexdigest()[:16]
    path = Path(tempfile.gettempdir()) / f"toolbridge-sdk-venv-{digest}.lock"
    with path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


if __name__ == "__main__":  # `python -m tests.support.sdk_venv` builds it by hand
    sys.stdout.write(f"{ensure_sdk_venv()}\n")
