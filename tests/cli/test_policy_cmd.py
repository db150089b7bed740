"""`toolbridge policy schema|check` and `toolbridge call --policy`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bridge.cli import app

runner = CliRunner()

ROOT = Path(__file__).resolve().parents[2]
DEMO_POLICY = ROOT / "examples" / "policies" / "demo.cedar"
DEMO = "bridge.demo.tools"

TOOLS = '''
from pathlib import Path

from bridge.tools import manifest


@manifest
def refund(order_id: str, amount: int, marker: str = "") -> str:
    """Refund an order (writes `marker`: the side effect a refusal must prevent)."""
    if marker:
        Path(marker).write_text("ran", encoding="utf-8")
    return f"refunded {amount} on {order_id}"
'''

POLICY = """
@id("no-big-refunds")
@reason("refunds over 1000 need a manager")
forbid (principal, action, resource == Tool::"refund")
when { context.arguments has amount && context.arguments.amount > 1000 };

@id("mid-refunds")
@approval("required")
permit (principal, action, resource == Tool::"refund")
when { context.arguments has amount && context.arguments.amount > 100 };

@id("small-refunds")
permit (principal in Role::"support", action, resource in Source::"crm")
unless { context.arguments has amount && context.arguments.amount > 100 };
"""


@pytest.fixture
def crm(tmp_path: Path) -> Path:
    (tmp_path / "crm.py").write_text(TOOLS, encoding="utf-8")
    (tmp_path / "refunds.cedar").write_text(POLICY, encoding="utf-8")
    return tmp_path


def test_the_demo_policy_checks_against_the_demo_tools() -> None:
    result = runner.invoke(app, ["policy", "check", str(DEMO_POLICY), "--tools", DEMO])
    assert (result.exit_code, result.stdout) == (0, "ok: 4 policies\n"), result.output


SHIPPED = [
    "manifests/files.py source=files",
    "manifests/http_fetch.py source=web",
    "manifests/sqlite_query.py source=db",
    "manifests/time.py source=time",
]


def test_the_shipped_tools_policy_checks_and_decides() -> None:
    from bridge.access import CallFacts, Principal
    from bridge.access.policy import Policy
    from bridge.loading import load_tools

    path = ROOT / "examples" / "policies" / "manifests.cedar"
    specs = [arg for spec in SHIPPED for arg in ("--tools", str(ROOT / spec))]
    result = runner.invoke(app, ["policy", "check", str(path), *specs])
    assert (result.exit_code, result.stdout) == (0, "ok: 7 policies\n"), result.output
    policy = Policy.from_file(path)
    box = load_tools([str(ROOT / spec) for spec in SHIPPED])
    try:
        support = Principal("sam", roles=frozenset({"support"}))
        analyst = Principal("ann", roles=frozenset({"analyst"}))

        def decide(who: Principal, tool: str, arguments: dict[str, object]) -> tuple[str, ...]:
            decision = policy.decide(who, CallFacts.of(tool, box.get(tool), arguments))
            return (decision.effect, *decision.policies)

        assert decide(support, "read_file", {"path": "reports/q3.md"}) == (
            "allow",
            "shared-folder-for-support",
        )
        assert decide(support, "read_file", {"path": "hr/salaries.csv"}) == (
            "refuse",
            "no-hr-files",
        )
        assert decide(analyst, "read_file", {"path": "reports/q3.md"})[0] == "refuse"
        assert decide(analyst, "sqlite_query", {"sql": "select 1", "max_rows": 900}) == (
            "refuse",
            "row-cap",
        )
        assert decide(analyst, "fetch_url", {"url": "https://wiki.corp.example/x"})[0] == "allow"
        assert decide(analyst, "fetch_url", {"url": "https://evil.example/"})[0] == "approval"
        assert decide(support, "current_time", {})[0] == "allow"
    finally:
        box.close()


def test_schema_prints_or_writes_the_schema(tmp_path: Path) -> None:
    result = runner.invoke(app, ["policy", "schema", "--tools", DEMO])
    assert result.exit_code == 0, result.output
    assert '"city"?: String' in result.stdout
    assert "action call appliesTo" in result.stdout
    out = tmp_path / "demo.cedarschema"
    written = runner.invoke(app, ["policy", "schema", "--tools", DEMO, "-o", str(out)])
    assert written.exit_code == 0, written.output
    assert out.read_text(encoding="utf-8") == result.stdout


def test_check_lists_each_error_with_its_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.cedar"
    text = DEMO_POLICY.read_text(encoding="utf-8")
    text = text.replace('Tool::"find_employee" };', 'Tool::"find_employe" };')
    text = text.replace("context.arguments.city ==", "context.arguments.cty ==")
    bad.write_text(text, encoding="utf-8")
    lines = text.splitlines()
    lookups = lines.index('@id("lookups")') + 1
    shenzhen = lines.index('@id("shenzhen-closed")') + 1
    result = runner.invoke(app, ["policy", "check", str(bad), "--tools", DEMO])
    assert result.exit_code == 1
    assert result.stdout == ""
    errors = result.stderr.splitlines()
    assert errors[-1] == f"2 error(s) in {bad}"
    assert errors[0].startswith(f"error: {bad}:{lookups} (policy lookups): ")
    assert 'Tool::"find_employe" is not a loaded tool' in errors[0]
    assert errors[1].startswith(f"error: {bad}:{shenzhen} (policy shenzhen-closed): ")
    assert "cty" in errors[1]


def test_check_without_tools_or_file_is_a_usage_error(tmp_path: Path) -> None:
    result = runner.invoke(app, ["policy", "check", str(DEMO_POLICY)])
    assert result.exit_code == 2
    assert "--tools" in result.stderr
    missing = runner.invoke(app, ["policy", "check", str(tmp_path / "no.cedar"), "-t", DEMO])
    assert missing.exit_code == 2
    assert "cannot read the policy file" in missing.stderr


def _call(crm: Path, arguments: dict[str, object], *extra: str) -> tuple[int, str, str]:
    spec = f"{crm / 'crm.py'} source=crm"
    policy = str(crm / "refunds.cedar")
    result = runner.invoke(
        app, ["call", spec, "refund", json.dumps(arguments), "--policy", policy, *extra]
    )
    return result.exit_code, result.stdout, result.stderr


def test_call_with_a_policy_refuses_with_the_reason(crm: Path) -> None:
    marker = crm / "marker.txt"
    code, out, err = _call(crm, {"order_id": "A1", "amount": 5000, "marker": str(marker)})
    assert (code, out) == (1, "")
    assert err == (
        "The tool call was not run: refused by policy no-big-refunds: refunds over 1000 "
        "need a manager\n"
    )
    assert not marker.exists()


def test_call_with_a_policy_runs_what_it_permits_for_the_role(crm: Path) -> None:
    arguments = {"order_id": "A1", "amount": 50}
    assert _call(crm, arguments, "--role", "support") == (0, "refunded 50 on A1\n", "")
    # The local user (role admin) is permitted nothing here: Cedar's default refuses.
    code, out, err = _call(crm, arguments)
    assert (code, out) == (1, "")
    assert "refused by policy: no policy permits this call" in err


def test_call_with_a_policy_that_asks_for_approval(crm: Path) -> None:
    marker = crm / "marker.txt"
    arguments = {"order_id": "A1", "amount": 500, "marker": str(marker)}
    code, _, err = _call(crm, arguments)  # no terminal to ask on
    assert code == 1
    assert "needs approval and no approver is configured (no terminal to ask on" in err
    assert not marker.exists()
    assert _call(crm, arguments, "--yes") == (0, "refunded 500 on A1\n", "")
    assert marker.exists()


def test_call_with_a_bad_policy_file_is_a_usage_error(crm: Path) -> None:
    (crm / "refunds.cedar").write_text("permit (principal,, action, resource);\n")
    code, _, err = _call(crm, {"order_id": "A1", "amount": 5})
    assert code == 2
    assert "refunds.cedar:1: cannot parse" in err


def test_call_with_the_demo_policy(tmp_path: Path) -> None:
    base = ["call", DEMO, "book_meeting_room", "--policy", str(DEMO_POLICY), "--yes"]
    closed = {"city": "深圳", "attendee": "张三", "time": "明天 14:00"}
    result = runner.invoke(app, [*base[:3], json.dumps(closed), *base[3:]])
    assert result.exit_code == 1
    assert "shenzhen-closed" in result.stderr
    fine = {"city": "北京", "attendee": "张三", "time": "明天 14:00"}
    result = runner.invoke(app, [*base[:3], json.dumps(fine), *base[3:]])
    assert result.exit_code == 0, result.output
    assert "MR-1024" in result.stdout
