"""Small implementations of the door's interfaces, for the tests of `mcp_server`'s own logic
(in process), and a runner of the real `toolbridge mcp-serve` process (`McpServe`).

- `KeyDoor` (`Authenticates`): a key names a caller; ``limit`` refuses the callers it is told.
- `RulePolicy` (`Decides`): refuses transfers over 100, sends those over 10 to a person.
- `Entries` (`Records`): the audit events in a list.
- `McpServe`: ``python -m bridge mcp-serve --transport http --port 0 ...`` started, its printed
  URL read, stopped (tests of the command use the real door, policy and audit record).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from types import TracebackType

from bridge.access import (
    AuditEvent,
    CallFacts,
    Permission,
    PolicyDecision,
    Principal,
    RateLimitedError,
    ToolPatterns,
    UnauthenticatedError,
)

__all__ = ["ROOT", "Entries", "KeyDoor", "McpServe", "RulePolicy", "caller"]

ROOT = Path(__file__).resolve().parents[2]


def caller(name: str, *tools: str) -> Principal:
    return Principal(
        name=name,
        roles=frozenset({"user"}),
        permissions=frozenset({Permission.CALL_TOOLS}),
        tools=ToolPatterns(tools),
    )


class KeyDoor:
    """`Authenticates`: a key names a caller; `limit` refuses the callers in `limited` (its
    message, as the real door's, says when to retry)."""

    def __init__(self, keys: dict[str, Principal], limited: tuple[str, ...] = ()) -> None:
        self.keys = keys
        self.limited = limited
        self.asked: list[str | None] = []

    def authenticate(self, authorization: str | None) -> Principal:
        self.asked.append(authorization)
        if not authorization or not authorization.startswith("Bearer "):
            raise UnauthenticatedError("missing credentials")
        principal = self.keys.get(authorization[len("Bearer ") :])
        if principal is None:
            raise UnauthenticatedError("unknown key")
        return principal

    def limit(self, principal: Principal, what: str) -> None:
        assert what == "tool_calls"
        if principal.name in self.limited:
            raise RateLimitedError(
                f"{principal.name} is over its tool call rate; retry in 7 s", retry_after=7
            )


class RulePolicy:
    """`Decides`: refuses transfers over 100 (policy ``big-transfers``), sends transfers over
    10 to a person (``ask-for-transfers``), allows the rest; keeps the facts it was shown."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, CallFacts]] = []

    def decide(self, principal: Principal, call: CallFacts) -> PolicyDecision:
        self.seen.append((principal.name, call))
        amount = call.arguments.get("amount", 0)
        if call.tool == "transfer" and amount > 100:
            return PolicyDecision("refuse", ("big-transfers",), "transfers over 100 need finance")
        if call.tool == "transfer" and amount > 10:
            return PolicyDecision("approval", ("ask-for-transfers",))
        return PolicyDecision("allow", ("default-allow",))


class Entries:
    """`Records`: the audit events, in order."""

    def __init__(self) -> None:
        self.events: list[AuditEvent] = []

    def record(self, event: AuditEvent) -> None:
        self.events.append(event)

    def stage(self, event: AuditEvent) -> None:
        self.record(event)

    def kinds(self, tool: str | None = None) -> list[tuple[str, str, str | None]]:
        return [
            (event.kind, event.outcome, event.caller)
            for event in self.events
            if tool is None or event.tool == tool
        ]


class McpServe:
    """A real ``toolbridge mcp-serve --transport http --port 0`` process (``python -m bridge``,
    from the checkout); ``with`` starts it and reads the URL it prints, then stops it.

    Attributes:
        url: The endpoint's URL as printed (``http://HOST:PORT/PATH``); "" when none was.
        process: The process.
        stderr: What it wrote to stderr, once stopped.
    """

    def __init__(self, *args: str) -> None:
        command = [sys.executable, "-m", "bridge", "mcp-serve", "--transport", "http"]
        command += ["--port", "0", *args]
        # stderr goes to a file (a pipe nobody reads could fill up and stall the server),
        # read through its own handle (`log`).
        self._dir = tempfile.TemporaryDirectory(prefix="mcp-serve-")
        self._log_path = Path(self._dir.name) / "stderr.txt"
        self._log = self._log_path.open("w", encoding="utf-8")
        self.process = subprocess.Popen(
            command, cwd=ROOT, stdout=subprocess.PIPE, stderr=self._log, text=True
        )
        self.url = ""
        self.stderr = ""

    def __enter__(self) -> McpServe:
        line: list[str] = []
        out = self.process.stdout
        assert out is not None
        reader = threading.Thread(target=lambda: line.append(out.readline()), daemon=True)
        reader.start()
        reader.join(timeout=60)
        printed = line[0] if line else ""
        if printed.startswith("toolbridge mcp-serve: "):
            self.url = printed.split(": ", 1)[1].strip()
        return self

    def log(self) -> str:
        """What the process wrote to stderr so far."""
        if self._log.closed:
            return self.stderr
        return self._log_path.read_text(encoding="utf-8", errors="replace")

    @property
    def base(self) -> str:
        """``http://HOST:PORT`` of the endpoint."""
        return self.url.rsplit("/", 1)[0]

    def stop(self) -> None:
        """Terminate the process (once; again is a no-op) and keep what it wrote to stderr."""
        if self._log.closed:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=5)
        if self.process.stdout is not None:
            self.process.stdout.close()
        self._log.close()
        self.stderr = self._log_path.read_text(encoding="utf-8", errors="replace")
        self._dir.cleanup()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
