"""A daemon of its own for the console tests: tools with every kind of parameter, a confirm
tool, a long output, an HTTP manifest, and a scenario whose "explode" rule fails the run
after its tool call (an in-band error of the platform)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from bridge.emulator import Emulator
from tests.daemon.conftest import DaemonProcess

API_KEY = "console-key-0123456789abcdef"

TOOLS = '''
"""Console test tools."""

from typing import Literal

from bridge import manifest


@manifest(description="Current weather of a city.", idempotent=True, timeout=20)
def get_weather(city: str, unit: Literal["C", "F"] = "C") -> dict:
    """Weather.

    Args:
        city: City name, e.g. Paris.
        unit: Celsius or Fahrenheit.
    """
    temp = {"Paris": 18, "Tokyo": 22, "Oslo": 4}.get(city, 0)
    return {"city": city, "temp": temp if unit == "C" else round(temp * 9 / 5 + 32), "unit": unit}


@manifest(description="Wire money: a person approves each call.", confirm=True)
def wire(amount: int, to: str) -> str:
    """Wire.

    Args:
        amount: Euros.
        to: Recipient.
    """
    return f"wired {amount} to {to}"


@manifest(description="A long report, one line per row.", read_only=True)
def big_report(rows: int) -> str:
    """Report.

    Args:
        rows: How many rows.
    """
    return "\\n".join(f"row {i}: " + "x" * 40 for i in range(1, rows + 1))
'''

MANIFEST = """\
base_url: http://127.0.0.1:9
tools:
  - name: list_tickets
    description: The open tickets of a queue.
    url: /tickets
    parameters:
      type: object
      properties:
        queue: {type: string, description: The queue, enum: [it, facilities]}
      required: [queue]
"""


def _rule(match: str, tool: str, arguments: dict[str, str], answer: str) -> dict[str, Any]:
    return {"match": match, "steps": [{"tool": tool, "arguments": arguments}], "answer": answer}


SCENARIO: dict[str, Any] = {
    "settings": {"fallback": "plain", "chunk_chars": 4},
    "rules": [
        {
            "match": r"explode",
            "steps": [{"tool": "get_weather", "arguments": {"city": "Oslo"}}],
            "answer": "never shown",
            "faults": "inband=ServiceError,message=the code node failed,round=1",
        },
        _rule(
            r"weather in (?P<city>\w+)",
            "get_weather",
            {"city": "{city}"},
            "{city}: {outputs.get_weather.temp} degrees",
        ),
        _rule(
            r"wire (?P<n>\d+) to (?P<to>\w+)",
            "wire",
            {"amount": "{n}", "to": "{to}"},
            "result: {outputs.wire}",
        ),
        _rule(r"report (?P<n>\d+)", "big_report", {"rows": "{n}"}, "the report has {n} rows"),
    ],
}


def write_tools(folder: Path) -> list[str]:
    """Write the tool files; the --tools arguments that load them."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "console_tools.py").write_text(TOOLS, encoding="utf-8")
    (folder / "tickets.yaml").write_text(MANIFEST, encoding="utf-8")
    return ["--tools", str(folder / "console_tools.py"), "--tools", str(folder / "tickets.yaml")]


def start_console_daemon(emulator: Emulator, folder: Path, *args: str) -> DaemonProcess:
    """A daemon with the console tools, an API key and a journal in `folder`."""
    argv = [
        *write_tools(folder / "tools"),
        "--port",
        "0",
        "--db",
        str(folder / "journal.db"),
        "--api-key",
        API_KEY,
        "--approval-timeout",
        "300",
        *args,
    ]
    env = {**emulator.env(), "TB_TOOLS_DIR": str(folder / "tools")}
    return DaemonProcess(argv, env=env, api_key=API_KEY)


def screenshot_dir() -> Path | None:
    """Where screenshots are kept: ``TOOLBRIDGE_SCREENSHOTS`` (e.g. docs/images), else nowhere."""
    where = os.environ.get("TOOLBRIDGE_SCREENSHOTS")
    return Path(where) if where else None
