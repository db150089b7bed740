"""The commands export spans where the standard ``OTEL_*`` variables say, and flush them
before they exit.

Each command runs as a real process whose ``OTEL_EXPORTER_OTLP_ENDPOINT`` is a loopback
HTTP server of the test's own, which keeps every export request (OTLP/HTTP, protobuf). The
batch processor's schedule is left at its default (seconds): a short command's spans reach
the receiver only because the command flushes them on its way out.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import requests
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from bridge.emulator import Emulator
from tests.daemon.conftest import SCENARIO, DaemonProcess, executions, in_background, wait_for
from tests.daemon.conftest import TOOLS as DAEMON_TOOLS

TOOLS = '''
from opentelemetry import trace

from bridge.tools import manifest


@manifest
def traced(word: str) -> str:
    """Opens a span of its own, through the global provider.

    Args:
        word: Anything.
    """
    with trace.get_tracer("tests.tools").start_as_current_span("inside the tool"):
        return f"said {word}"
'''

HIDE_SDK = """
import sys

class HideSdk:
    def find_spec(self, name, path=None, target=None):
        if name == "opentelemetry.sdk" or name.startswith("opentelemetry.sdk."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, HideSdk())
from bridge.cli import app
app(sys.argv[1:], prog_name="toolbridge")
"""


@dataclass
class Export:
    path: str
    content_type: str
    body: bytes

    def span_names(self) -> list[str]:
        request = ExportTraceServiceRequest.FromString(self.body)
        return [
            span.name
            for resource in request.resource_spans
            for scope in resource.scope_spans
            for span in scope.spans
        ]

    def service_names(self) -> set[str]:
        request = ExportTraceServiceRequest.FromString(self.body)
        return {
            attribute.value.string_value
            for resource in request.resource_spans
            for attribute in resource.resource.attributes
            if attribute.key == "service.name"
        }


class Receiver:
    """A loopback OTLP/HTTP endpoint that keeps what it is sent."""

    def __init__(self) -> None:
        self.exports: list[Export] = []
        received = self.exports

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                body = self.rfile.read(length)
                received.append(Export(self.path, self.headers.get("content-type", ""), body))
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def span_names(self) -> list[str]:
        return [name for export in self.exports for name in export.span_names()]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def tools(tmp_path: Path) -> Path:
    path = tmp_path / "traced_tools.py"
    path.write_text(TOOLS, encoding="utf-8")
    return path


def _env(**otel: str) -> dict[str, str]:
    """This process's environment without any OTEL_ variable, plus `otel`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    return {**env, "NO_COLOR": "1", **otel}


def _call(
    tools: Path, env: dict[str, str], *, hide_sdk: bool = False
) -> subprocess.CompletedProcess[str]:
    args = ["call", str(tools), "traced", json.dumps({"word": "hi"})]
    command = (
        [sys.executable, "-c", HIDE_SDK, *args]
        if hide_sdk
        else [
            sys.executable,
            "-m",
            "bridge",
            *args,
        ]
    )
    return subprocess.run(
        command, capture_output=True, text=True, env=env, timeout=120, check=False
    )


def test_a_short_command_exports_its_spans_before_it_exits(tools: Path, receiver: Receiver) -> None:
    done = _call(tools, _env(OTEL_EXPORTER_OTLP_ENDPOINT=receiver.url))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "said hi"
    assert receiver.exports, "no export arrived"
    for export in receiver.exports:
        assert export.path == "/v1/traces"
        assert export.content_type == "application/x-protobuf"
    assert "inside the tool" in receiver.span_names()
    assert "execute_tool traced" in receiver.span_names()
    assert {name for e in receiver.exports for name in e.service_names()} == {"toolbridge"}
    assert done.stderr == ""


def test_a_run_exports_the_run_the_tool_call_and_the_platform_requests(
    tools: Path, receiver: Receiver
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bridge", "run", "--emulator", "--tools", str(tools), "hello"],
        capture_output=True,
        text=True,
        env=_env(OTEL_EXPORTER_OTLP_ENDPOINT=receiver.url),
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    names = receiver.span_names()
    assert any(name.startswith("invoke_agent ") for name in names), names
    assert "POST" in names, names  # the platform's request (a client span)


def test_otel_service_name_names_the_service(tools: Path, receiver: Receiver) -> None:
    done = _call(
        tools,
        _env(OTEL_EXPORTER_OTLP_ENDPOINT=receiver.url, OTEL_SERVICE_NAME="tools-at-the-desk"),
    )
    assert done.returncode == 0, done.stderr
    assert {name for e in receiver.exports for name in e.service_names()} == {"tools-at-the-desk"}


def test_otel_sdk_disabled_exports_nothing(tools: Path, receiver: Receiver) -> None:
    done = _call(tools, _env(OTEL_EXPORTER_OTLP_ENDPOINT=receiver.url, OTEL_SDK_DISABLED="true"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "said hi"
    assert done.stderr == ""
    assert receiver.exports == []


def test_without_the_sdk_one_warning_and_the_command_still_works(
    tools: Path, receiver: Receiver
) -> None:
    done = _call(tools, _env(OTEL_EXPORTER_OTLP_ENDPOINT=receiver.url), hide_sdk=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "said hi"
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert "OpenTelemetry SDK is not installed" in lines[0]
    assert "pip install 'toolbridge[otel]'" in lines[0]
    assert receiver.exports == []


@pytest.mark.parametrize(
    ("command", "output"),
    [
        (["call", "{tools}", "traced", '{{"word": "hi"}}'], "said hi"),
        (["run", "--emulator", "--tools", "{tools}", "hello"], "plain reply to: hello"),
        (["chat", "--emulator", "--tools", "{tools}"], ""),
        (["mcp-serve", "--tools", "{tools}"], ""),
    ],
    ids=["call", "run", "chat", "mcp-serve"],
)
def test_every_command_reads_the_variables_an_unknown_exporter_is_one_warning(
    command: list[str], output: str, tools: Path
) -> None:
    """(`serve`: see the export tests below.) Standard input is closed: `chat` and the stdio
    MCP server end at once."""
    done = subprocess.run(
        [sys.executable, "-m", "bridge", *(arg.format(tools=tools) for arg in command)],
        capture_output=True,
        text=True,
        env=_env(OTEL_TRACES_EXPORTER="zipkin"),
        stdin=subprocess.DEVNULL,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert output in done.stdout
    warnings = [line for line in done.stderr.splitlines() if "OTEL_TRACES_EXPORTER" in line]
    assert len(warnings) == 1, done.stderr
    assert "'zipkin'" in warnings[0] and "otlp, console or none" in warnings[0]


def test_without_otel_variables_nothing_is_configured(tools: Path) -> None:
    probe = (
        "import sys\n"
        "from bridge.cli import app\n"
        "try:\n"
        "    app(sys.argv[1:], prog_name='toolbridge')\n"
        "except SystemExit:\n"
        "    pass\n"
        "from opentelemetry import trace\n"
        "print(type(trace.get_tracer_provider()).__name__)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, "call", str(tools), "traced", '{"word": "x"}'],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=120,
        check=False,
    )
    assert done.stdout.splitlines() == ["said x", "ProxyTracerProvider"], done.stderr


def test_the_daemon_exports_its_request_spans_when_stopped(
    tmp_path: Path, tools: Path, receiver: Receiver
) -> None:
    """`toolbridge serve` with OTEL_*: its spans go out, the last ones when SIGTERM stops it
    (the batch schedule is far longer than the test)."""
    with Emulator() as emulator:
        daemon = DaemonProcess(
            ["--tools", str(tools), "--port", "0", "--db", str(tmp_path / "journal.db")],
            env={
                **{k: "" for k in os.environ if k.startswith("OTEL_")},
                **emulator.env(),
                "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
                "OTEL_BSP_SCHEDULE_DELAY": "600000",
            },
        )
        try:
            response = requests.post(daemon.url + "/v1/conversations", json={}, timeout=60)
            assert response.status_code == 201, response.text
            assert receiver.exports == []
            daemon.proc.send_signal(signal.SIGTERM)
            assert daemon.wait_exit() == 0, daemon.log
        finally:
            daemon.stop()
    wait_for(lambda: receiver.exports, "the daemon's export")
    assert all(e.content_type == "application/x-protobuf" for e in receiver.exports)
    assert "POST /v1/conversations" in receiver.span_names(), daemon.log


def test_a_daemon_that_leaves_runs_behind_still_exports_its_spans(
    tmp_path: Path, receiver: Receiver
) -> None:
    """A run still in its tool when the grace ends: the daemon exits at once (no exit
    handler runs then), after sending its spans, the abandoned request's included."""
    (tmp_path / "daemon_tools.py").write_text(DAEMON_TOOLS, encoding="utf-8")
    with Emulator(scenario=SCENARIO) as emulator:
        daemon = DaemonProcess(
            [
                "--tools",
                str(tmp_path / "daemon_tools.py"),
                "--port",
                "0",
                "--db",
                str(tmp_path / "journal.db"),
                "--grace",
                "0.5",
            ],
            env={
                **{k: "" for k in os.environ if k.startswith("OTEL_")},
                **emulator.env(),
                "TB_TOOLS_DIR": str(tmp_path),
                "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
                "OTEL_BSP_SCHEDULE_DELAY": "600000",
            },
        )
        try:
            cid = daemon.new_conversation()
            asked = in_background(lambda: daemon.ask(cid, "slow 4.5"))
            wait_for(lambda: "slow_step 4.5" in executions(tmp_path), "the slow tool to start")
            daemon.proc.send_signal(signal.SIGTERM)
            assert daemon.wait_exit() == 0, daemon.log
            asked["thread"].join(timeout=30)
        finally:
            daemon.stop()
    assert "left for recovery" in daemon.log
    assert asked["response"].status_code == 503
    names = receiver.span_names()
    assert "POST /v1/conversations" in names, daemon.log
    assert "POST /v1/conversations/{conversation_id}/messages" in names, daemon.log
