"""The one approval rule (`bridge.tools.approval`) every entry point uses for confirm tools."""

from __future__ import annotations

import pytest

from bridge.errors import UsageError
from bridge.tools import Toolbox, ToolOptions, build_spec, manifest
from bridge.tools.approval import (
    Verdict,
    arguments_digest,
    decide,
    needs_approval,
    question,
    verdict_for,
)
from bridge.types import ToolCall


@manifest(confirm=True)
def delete_record(record_id: int) -> str:
    """Delete a record."""
    return f"deleted {record_id}"


@manifest(read_only=True, idempotent=True)
def read_record(record_id: int) -> str:
    """Read a record."""
    return f"record {record_id}"


CALL = ToolCall(call_id="c1", name="delete_record", arguments={"record_id": 7})


def test_only_known_confirm_tools_need_approval() -> None:
    box = Toolbox([delete_record, read_record])
    assert needs_approval(box.get("delete_record")) is True
    assert needs_approval(box.get("read_record")) is False
    assert needs_approval(None) is False  # unknown: the dispatcher refuses it anyway


def test_a_tool_that_needs_no_approval_runs_without_asking() -> None:
    asked: list[ToolCall] = []
    spec = build_spec(read_record)
    call = ToolCall(call_id="c2", name="read_record", arguments={"record_id": 1})
    assert decide(spec, call, lambda c: asked.append(c) is None) == Verdict(run=True)
    assert asked == []


def test_the_answer_decides_and_the_wording_is_shared() -> None:
    spec = build_spec(delete_record)
    asked: list[ToolCall] = []

    def yes(call: ToolCall) -> bool:
        asked.append(call)
        return True

    assert decide(spec, CALL, yes) == Verdict(run=True)
    assert asked == [CALL]
    assert decide(spec, CALL, lambda call: False) == Verdict(False, "rejected by the user")
    assert decide(spec, CALL, None) == Verdict(
        False, "rejected: this tool needs approval and no approver is configured"
    )
    assert decide(spec, CALL, None, nobody="no terminal") == Verdict(
        False, "rejected: this tool needs approval and no approver is configured (no terminal)"
    )
    assert verdict_for("dismissed") == Verdict(
        False, "rejected: the person closed the question without approving"
    )


def test_an_approver_that_fails_refuses_the_call(caplog: pytest.LogCaptureFixture) -> None:
    def broken(call: ToolCall) -> bool:
        raise ConnectionError("console unreachable")

    verdict = decide(build_spec(delete_record), CALL, broken)
    assert verdict == Verdict(False, "rejected: asking for approval failed (ConnectionError)")
    assert "the approver of delete_record (call c1) failed" in caplog.text


def test_the_question_shows_the_tool_and_its_exact_arguments() -> None:
    assert question("delete_record", {"record_id": 7, "why": "dupe é"}) == (
        "The agent wants to run the tool 'delete_record' with these arguments:\n"
        '{\n  "record_id": 7,\n  "why": "dupe é"\n}'
    )
    assert question("x", "not json{") == (
        "The agent wants to run the tool 'x' with these arguments:\nnot json{"
    )


def test_the_digest_binds_the_name_and_the_exact_arguments() -> None:
    base = arguments_digest("delete_record", {"record_id": 7, "soft": True})
    assert base == arguments_digest("delete_record", {"soft": True, "record_id": 7})
    assert base != arguments_digest("delete_record", {"record_id": 8, "soft": True})
    assert base != arguments_digest("delete_record", {"record_id": "7", "soft": True})
    assert base != arguments_digest("delete_other", {"record_id": 7, "soft": True})
    assert arguments_digest("x", '{"a": 1}') != arguments_digest("x", {"a": 1})


def test_read_only_is_an_option_checked_like_the_others() -> None:
    assert build_spec(read_record).options == ToolOptions(read_only=True, idempotent=True)
    assert Toolbox().add(read_record, read_only=False)[0].options.read_only is False

    @manifest(read_only="yes")  # type: ignore[arg-type]
    def broken() -> None:
        """Nothing."""

    with pytest.raises(UsageError, match=r"read_only must be True or False \(got 'yes'\)"):
        build_spec(broken)
