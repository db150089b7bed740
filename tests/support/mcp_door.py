"""Small implementations of the door's interfaces for the `mcp-serve` tests, and a runner of
the real `toolbridge` CLI that builds them from `mcp-serve`'s flags.

- `KeyDoor` (`Authenticates`): a key names a caller; ``limit`` refuses the callers it is told.
- `RulePolicy` (`Decides`): refuses transfers over 100, sends those over 10 to a person.
- `Entries` (`Records`): the audit events in a list (and, from the CLI, a JSON-lines file).

    python -m tests.support.mcp_door mcp-serve --transport http --callers keys.json \\
        --policy any --audit-db events.jsonl --tools ...

runs `toolbridge mcp-serve` with `open_access` (the one place the CLI builds the door's pieces)
answering from these: ``--callers`` is a JSON object ``{key: {"name": ..., "tools": [...]}}``,
``--policy`` (any value) is `RulePolicy`, ``--audit-db`` a file the events are appended to.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

from bridge.access import (
    AuditEvent,
    Authenticates,
    CallFacts,
    Decides,
    Permission,
    PolicyDecision,
    Principal,
    RateLimitedError,
    Records,
    ToolPatterns,
    UnauthenticatedError,
)

__all__ = ["Entries", "KeyDoor", "RulePolicy", "caller"]


def caller(name: str, *tools: str) -> Principal:
    return Principal(
        name=name,
        roles=frozenset({"user"}),
        permissions=frozenset({Permission.CALL_TOOLS}),
        tools=ToolPatterns(tools),
    )


class KeyDoor:
    """`Authenticates`: a key names a caller; `limit` refuses the callers in `limited`."""

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
            raise RateLimitedError(f"{principal.name} is over its tool call rate", retry_after=7)


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
    """`Records`: the audit events, in order (also appended to `path` as JSON lines)."""

    def __init__(self, path: Path | None = None) -> None:
        self.events: list[AuditEvent] = []
        self.path = path

    def record(self, event: AuditEvent) -> None:
        self.events.append(event)
        if self.path is not None:
            with self.path.open("a", encoding="utf-8") as out:
                out.write(json.dumps(dataclasses.asdict(event), default=str) + "\n")

    def kinds(self, tool: str | None = None) -> list[tuple[str, str, str | None]]:
        return [
            (event.kind, event.outcome, event.caller)
            for event in self.events
            if tool is None or event.tool == tool
        ]


def _open_access(
    *, callers: Path | None = None, policy: Path | None = None, audit_db: str | None = None,
    **_: Any,
) -> tuple[Authenticates | None, Decides | None, Records | None]:  # fmt: skip
    door = None
    if callers is not None:
        keys = json.loads(Path(callers).read_text(encoding="utf-8"))
        door = KeyDoor({key: caller(who["name"], *who["tools"]) for key, who in keys.items()})
    return (
        door,
        RulePolicy() if policy is not None else None,
        (Entries(Path(audit_db)) if audit_db is not None else None),
    )


def main() -> None:
    import bridge.cli.sources_cmd
    from bridge.cli import app

    bridge.cli.sources_cmd.open_access = _open_access
    app(sys.argv[1:], prog_name="toolbridge")


if __name__ == "__main__":
    main()
