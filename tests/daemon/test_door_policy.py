"""A direct call through the door's policy step and audit record, in process (the policy and
the audit log are the daemon's seams: `Service.policy`, `Service.audit`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from bridge._serve import ServerHandle, serve_in_thread
from bridge.access import AuditEvent, CallFacts, PolicyDecision, Principal
from bridge.daemon.app import create_app
from bridge.daemon.settings import load_settings
from bridge.emulator import Emulator
from tests.daemon.test_door import as_, write_callers


class Rules:
    """A policy: lookup of key "secret" refused, of key "big" sent to approval."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, CallFacts]] = []

    def decide(self, principal: Principal, call: CallFacts) -> PolicyDecision:
        self.asked.append((principal.name, call))
        key = call.arguments.get("key")
        if key == "secret":
            return PolicyDecision("refuse", ("no-secrets",), "secrets stay put")
        if key == "big":
            return PolicyDecision("approval", ("big-lookups",))
        return PolicyDecision("allow", ("lookups",))


class Log:
    def __init__(self) -> None:
        self.events: list[AuditEvent] = []

    def record(self, event: AuditEvent) -> None:
        self.events.append(event)


@pytest.fixture
def served(
    emulator: Emulator, tools_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[ServerHandle, Rules, Log]]:
    for name, value in {**emulator.env(), "TB_TOOLS_DIR": str(tools_dir)}.items():
        monkeypatch.setenv(name, value)
    callers = write_callers(
        tmp_path / "callers.toml",
        {"ops": {"roles": ["call_tools"], "tools": ["lookup"]}, "chat": {"roles": ["converse"]}},
    )
    settings = load_settings(
        {
            "tools": [str(tools_dir / "daemon_tools.py")],
            "db": str(tmp_path / "j.db"),
            "callers": str(callers),
        },
        config=None,
    )
    app = create_app(settings)
    rules, log = Rules(), Log()
    app.state.service.policy = rules
    app.state.service.audit = app.state.audit = log
    with serve_in_thread(app) as handle:
        yield handle, rules, log


def post(handle: ServerHandle, who: str | None, key: str) -> Any:
    return requests.post(
        handle.base_url + "/v1/tools/lookup/call",
        json={"arguments": {"key": key}},
        headers=as_(who),
        timeout=30,
    )


def test_a_direct_call_takes_the_policys_decision_and_is_audited(
    served: tuple[ServerHandle, Rules, Log],
) -> None:
    handle, rules, log = served
    ok = post(handle, "ops", "k1")
    assert ok.status_code == 200 and ok.json()["output"], ok.text
    assert rules.asked[-1][0] == "ops" and rules.asked[-1][1].tool == "lookup"

    refused = post(handle, "ops", "secret")
    assert refused.status_code == 403, refused.text
    error = refused.json()["error"]
    assert error["code"] == "policy_refused"
    assert "no-secrets" in error["message"] and "secrets stay put" in error["message"]

    waits = post(handle, "ops", "big")
    assert waits.status_code == 409 and waits.json()["error"]["code"] == "approval_required"
    assert "big-lookups" in waits.json()["error"]["message"]

    kinds = [(e.kind, e.outcome, e.caller) for e in log.events]
    assert ("direct_call", "ok", "ops") in kinds
    assert ("direct_call", "refused", "ops") in kinds
    assert ("policy", "approval", "ops") in kinds
    done = next(e for e in log.events if e.kind == "direct_call" and e.outcome == "ok")
    assert done.tool == "lookup" and done.arguments == {"key": "k1"}


def test_refusals_at_the_door_are_audited_as_identity_events(
    served: tuple[ServerHandle, Rules, Log],
) -> None:
    handle, _, log = served
    assert post(handle, None, "k").status_code == 401
    assert post(handle, "chat", "k").status_code == 403
    identity = [(e.outcome, e.caller) for e in log.events if e.kind == "identity"]
    assert identity == [("unauthorized", None), ("forbidden", "chat")]
    forbidden = [e for e in log.events if e.kind == "identity"][1]
    assert forbidden.detail["route"] == "POST /v1/tools/lookup/call"
