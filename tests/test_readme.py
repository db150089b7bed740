"""The README's ```python blocks run as written (```py blocks are illustrations needing a
server or credentials). Each block runs alone in a fresh interpreter, offline."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BLOCKS = re.findall(r"^```python\n(.*?)^```", (ROOT / "README.md").read_text("utf-8"), re.M | re.S)


def test_the_readme_has_runnable_examples() -> None:
    assert len(BLOCKS) >= 5


@pytest.mark.parametrize("code", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_block_runs(code: str, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("APPBUILDER_", "GATEWAY_"))}
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    # Where a block shows its output in comments, the output is what it prints.
    for line in re.findall(r"^# ((?:\d \w|unknown argument|limit:).*)$", code, re.M):
        assert line in done.stdout, f"{line!r} not in output:\n{done.stdout}"
