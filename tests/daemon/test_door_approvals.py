"""Approvals behind the door: only callers with ``approve`` list and decide them, and with
``--four-eyes`` the caller whose message asked for a call cannot approve it; another can."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bridge.emulator import Emulator
from tests.daemon.conftest import DaemonProcess, executions, wait_for
from tests.daemon.test_approvals import SCENARIO, TOOLS, Stream, start
from tests.daemon.test_door import as_, key_of, write_callers


@pytest.fixture(scope="module")
def emulator() -> Iterator[Emulator]:
    with Emulator(scenario=SCENARIO) as emu:
        yield emu


@pytest.fixture
def tools_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "tools"
    folder.mkdir()
    (folder / "approval_tools.py").write_text(TOOLS, encoding="utf-8")
    return folder


@pytest.fixture
def four_eyes(emulator: Emulator, tools_dir: Path, tmp_path: Path) -> Iterator[DaemonProcess]:
    callers = write_callers(
        tmp_path / "callers.toml",
        {
            # a support person who may also approve, another approver, and a chat user
            "sam": {"roles": ["converse", "approve"]},
            "pat": {"roles": ["approve"]},
            "cid": {"roles": ["converse"]},
        },
    )
    daemon = start(
        emulator,
        tools_dir,
        tmp_path / "journal.db",
        "--callers",
        str(callers),
        "--four-eyes",
        key=key_of("sam"),
    )
    try:
        yield daemon
    finally:
        daemon.stop()


def test_the_sender_cannot_approve_its_own_call_with_four_eyes_another_approver_can(
    four_eyes: DaemonProcess, tools_dir: Path
) -> None:
    daemon = four_eyes
    cid = daemon.new_conversation()
    stream = Stream(daemon, cid, "wire 5 to bob")
    [request] = wait_for(
        lambda: daemon.request("GET", "/v1/approvals", headers=as_("pat")).json()["items"],
        "the approval request",
    )
    assert request["requested_by"] == "sam"
    path = f"/v1/approvals/{request['approval_id']}"

    # a caller without approve may neither see nor decide it
    for method in ("GET", "POST"):
        refused = daemon.request(method, path, json={"decision": "approve"}, headers=as_("cid"))
        assert refused.status_code == 403, refused.text
    # sam asked for it: four eyes refuse sam's decision, and nothing runs
    own = daemon.request("POST", path, json={"decision": "approve"})
    assert own.status_code == 403, own.text
    error = own.json()["error"]
    assert error["code"] == "forbidden" and "four eyes" in error["message"]
    assert "'sam'" in error["message"] and "another approver" in error["message"]
    assert executions(tools_dir) == []
    assert daemon.request("GET", path).json()["status"] == "pending"

    decided = daemon.request("POST", path, json={"decision": "approve"}, headers=as_("pat"))
    assert decided.status_code == 200, decided.text
    assert decided.json()["decided_by"] == "pat"
    assert stream.result()["result"]["answer"] == "result: wired 5 to bob"
    assert executions(tools_dir) == ["wire 5 bob"]


def test_without_four_eyes_the_sender_may_approve_its_own_call(
    emulator: Emulator, tools_dir: Path, tmp_path: Path
) -> None:
    callers = write_callers(tmp_path / "c.toml", {"sam": {"roles": ["converse", "approve"]}})
    daemon = start(
        emulator, tools_dir, tmp_path / "j.db", "--callers", str(callers), key=key_of("sam")
    )
    try:
        cid = daemon.new_conversation()
        stream = Stream(daemon, cid, "wire 7 to bob")
        [request] = wait_for(
            lambda: daemon.request("GET", "/v1/approvals").json()["items"], "the request"
        )
        path = f"/v1/approvals/{request['approval_id']}"
        decided = daemon.request("POST", path, json={"decision": "approve"})
        assert decided.status_code == 200 and decided.json()["decided_by"] == "sam"
        assert stream.result()["result"]["answer"] == "result: wired 7 to bob"
    finally:
        daemon.stop()
