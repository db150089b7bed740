"""`OTEL_TRACES_EXPORTER=console` writes spans to stderr: stdout carries answers
(`toolbridge run --json`) and, for `mcp-serve` over stdio, the protocol itself."""

from __future__ import annotations

import os
import subprocess
import sys

SCRIPT = """
from bridge.tracing import Tracing, configure_from_environment
assert configure_from_environment()
with Tracing().span("console check"):
    pass
from opentelemetry import trace
trace.get_tracer_provider().shutdown()
print("answer")
"""


def test_console_spans_go_to_stderr_not_stdout() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["OTEL_TRACES_EXPORTER"] = "console"
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "answer\n"
    assert '"name": "console check"' in done.stderr
