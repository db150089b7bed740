"""`bridge._connections.fit_descriptor_limit`: the open-files limit is raised so the connection
cap fits, or an operator is told which setting to lower (in a child process, whose limits the
test may change)."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import logging, resource, sys
logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(message)s")
soft, hard = (int(x) for x in sys.argv[1:3])
resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
from bridge._connections import ConnectionLimits, fit_descriptor_limit
fit_descriptor_limit(ConnectionLimits(max_connections=int(sys.argv[3])))
print(resource.getrlimit(resource.RLIMIT_NOFILE)[0])
"""


def _fit(soft: int, hard: int, cap: int) -> tuple[int, str]:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(soft), str(hard), str(cap)],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    return int(done.stdout), done.stderr


def test_the_soft_limit_is_raised_to_fit_the_cap() -> None:
    assert _fit(256, 4096, 1000) == (1128, "")


def test_a_cap_over_the_hard_limit_is_named() -> None:
    soft, warning = _fit(256, 512, 1000)
    assert soft == 512
    assert "--max-connections 1000" in warning and "lower --max-connections to about 384" in (
        warning
    )


def test_a_limit_that_fits_is_left_alone() -> None:
    assert _fit(2048, 4096, 1000) == (2048, "")
