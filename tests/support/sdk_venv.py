"""Separate virtualenvs with the official SDKs, the oracles for wire fidelity.

Each official SDK (appbuilder-sdk, cozepy, openai) gets its own venv in the repository root,
built once and reused, so that its pinned dependencies never meet toolbridge's and toolbridge
can never import it by accident (appbuilder-sdk 1.1.5 pins urllib3 1.x, mcp 1.3, ...). A stamp
file records what was installed; a venv without a valid stamp (half-built, broken, other
version) is rebuilt. Concurrent callers (tests and benchmarks) serialise on a lock file.

Used by the conformance tests and ``bench/``::

    from tests.support.sdk_venv import COZE, ensure_sdk_venv
    python = ensure_sdk_venv()          # Path to .venv-conformance/bin/python (appbuilder-sdk)
    python = ensure_sdk_venv(COZE)      # Path to .venv-cozepy/bin/python
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
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "APPBUILDER",
    "COZE",
    "OPENAI",
    "ROOT",
    "SDK_REQUIREMENT",
    "VENV",
    "SdkVenv",
    "SdkVenvError",
    "ensure_sdk_venv",
    "sdk_python",
]

ROOT = Path(__file__).resolve().parents[2]
SUPPORTED = ((3, 10), (3, 11), (3, 12))
"""Python versions every SDK below supports and was checked to install on."""

_INSTALL_TIMEOUT = 1800


@dataclass(frozen=True)
class SdkVenv:
    """One official SDK in its own venv: where, what to install, and how to prove it imports."""

    directory: str
    """The venv's folder name in the repository root (listed in .gitignore and `make clean`)."""
    requirement: str
    """One pinned pip requirement, ``name==version``."""
    check: str
    """Python code run in the venv; exits non-zero when the SDK is not usable (gets `version`)."""

    @property
    def path(self) -> Path:
        return ROOT / self.directory

    @property
    def version(self) -> str:
        return self.requirement.split("==")[1]


APPBUILDER = SdkVenv(
    ".venv-conformance",
    "appbuilder-sdk==1.1.5",
    "import appbuilder, sys\n"
    "from appbuilder.core.console.appbuilder_client.event_handler import "
    "AppBuilderEventHandler, ToolCallEventHandler\n"
    "sys.exit(0 if appbuilder.__version__ == VERSION else 3)\n",
)
COZE = SdkVenv(
    ".venv-cozepy",
    "cozepy==0.20.0",
    "import sys, importlib.metadata as m, cozepy\n"
    "sys.exit(0 if m.version('cozepy') == VERSION else 3)\n",
)
OPENAI = SdkVenv(
    ".venv-openai",
    "openai==3.54.0",
    "import sys, openai\nsys.exit(0 if openai.__version__ == VERSION else 3)\n",
)

# The appbuilder-sdk venv under its historical names.
VENV = APPBUILDER.path
SDK_REQUIREMENT = APPBUILDER.requirement


class SdkVenvError(RuntimeError):
    """The SDK venv could not be built; the message says which step failed and its output."""


def sdk_python(sdk: SdkVenv = APPBUILDER) -> Path:
    """Where the venv's interpreter lives (whether or not it exists yet)."""
    return sdk.path / "bin" / "python"


def ensure_sdk_venv(sdk: SdkVenv = APPBUILDER) -> Path:
    """Return the SDK venv's python, building it first if needed.

    Raises:
        SdkVenvError: no suitable Python was found, or creating the venv or installing the
            SDK failed (for instance PyPI cannot be reached).
    """
    with _lock(sdk):
        python = sdk_python(sdk)
        if _is_ready(sdk, python):
            return python
        _build(sdk, python)
        return python


def _stamp(sdk: SdkVenv) -> Path:
    return sdk.path / ".toolbridge-sdk-stamp"


def _expected_stamp(sdk: SdkVenv, python: Path) -> str:
    version = _run([str(python), "-c", "import sys; print(sys.version.split()[0])"], 60).strip()
    return f"{sdk.requirement}\npython {version}\n"


def _is_ready(sdk: SdkVenv, python: Path) -> bool:
    stamp = _stamp(sdk)
    if not python.exists() or not stamp.exists():
        return False
    try:
        if stamp.read_text(encoding="utf-8") != _expected_stamp(sdk, python):
            return False
        _check_import(sdk, python)
    except SdkVenvError:
        return False
    return True


def _build(sdk: SdkVenv, python: Path) -> None:
    base = _find_base_python(sdk)
    venv = sdk.path
    shutil.rmtree(venv, ignore_errors=True)
    _run([base, "-m", "venv", str(venv)], 300, step=f"creating {venv} with {base}")
    _run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "--disable-pip-version-check",
            "--no-input",
            "--quiet",
            sdk.requirement,
        ],
        _INSTALL_TIMEOUT,
        step=f"installing {sdk.requirement} into {venv}",
    )
    _check_import(sdk, python)
    _stamp(sdk).write_text(_expected_stamp(sdk, python), encoding="utf-8")


def _check_import(sdk: SdkVenv, python: Path) -> None:
    code = f"VERSION = {sdk.version!r}\n" + sdk.check
    _run([str(python), "-c", code], 120, step=f"importing {sdk.requirement} in {sdk.path}")


def _find_base_python(sdk: SdkVenv) -> str:
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
        f"no Python 3.10-3.12 found to build the {sdk.requirement} venv; "
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
def _lock(sdk: SdkVenv) -> Iterator[None]:
    digest = hashlib.sha256(str(sdk.path).encode()).hexdigest()[:16]
    path = Path(tempfile.gettempdir()) / f"toolbridge-sdk-venv-{digest}.lock"
    with path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _main(names: list[str]) -> int:
    """Build (or check) the named venvs: an SDK's name or its folder (what `make sdk-venvs`
    passes); prints each venv's python."""
    chosen = {"appbuilder": APPBUILDER, "coze": COZE, "openai": OPENAI}
    chosen.update({sdk.directory: sdk for sdk in (APPBUILDER, COZE, OPENAI)})
    for name in names or ["appbuilder"]:
        if name not in chosen:
            sys.stderr.write(f"unknown SDK {name!r}; one of {', '.join(chosen)}\n")
            return 2
        try:
            sys.stdout.write(f"{ensure_sdk_venv(chosen[name])}\n")
        except SdkVenvError as exc:
            sys.stderr.write(f"{exc}\n")
            return 1
    return 0


if __name__ == "__main__":  # `python -m tests.support.sdk_venv [appbuilder|coze|openai|FOLDER]...`
    sys.exit(_main(sys.argv[1:]))
