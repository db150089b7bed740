"""Run every `bench/bench_*.py` in turn with this interpreter (`make bench`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

__all__ = ["main"]


def main() -> int:
    """Run each benchmark as its own process; return 1 if any failed."""
    here = Path(__file__).resolve().parent
    failed = []
    for script in sorted(here.glob("bench_*.py")):
        print(f"== {script.name}", flush=True)
        if subprocess.run([sys.executable, str(script)], check=False).returncode != 0:
            failed.append(script.name)
        print(flush=True)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
