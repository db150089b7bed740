"""``POST /v1/tools/{name}/call`` against a real `toolbridge serve`: refused before it acts,
journaled like any other call, and answered whatever text a tool returns.

The tools write a line to ``effects.log`` in their folder each time they run, so a test sees
whether a tool acted. Two named keys (alice, bob) tell the callers apart.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from bridge.emulator import Emulator
from bridge.journal import SQLiteJournal
from tests.daemon.conftest import DaemonProcess

TOOLS = '''
"""Tools with a visible side effect: a line in effects.log per run."""

import os
from pathlib import Path

from bridge import manifest

HERE = Path(os.environ["TB_TOOLS_DIR"])


def _effect(line: str) -> None:
    with open(HERE / "effects.log", "a", encoding="utf-8", errors="backslashreplace") as log:
        log.write(line + "\\n")


@manifest(description="Write a note.")
def note(text: str) -> str:
    """Note.

    Args:
        text: The note.
    """
    _effect(f"note {text!r}")
    return f"noted {text}"


@manifest(description="Stamp a document: a person approves each call.", confirm=True)
def stamp(text: str) -> str:
    """Stamp.

    Args:
        text: The document.
    """
    _effect(f"stamp {text!r}")
    return f"stamped {text}"


@manifest(description="Return text that is not text: a lone surrogate and a NUL.")
def garble() -> str:
    """Garble."""
    _effect("garble")
    return "half \\ud800 of a pair, \\x00 and a whole \\U0001F600"
'''

SCENARIO: dict[str, Any] = {
    "settings": {"fallback": "plain", "chunk_chars": 4},
    "rules": [
        {"match": r"garble", "steps": [{"tool": "garble"}], "answer": "{outputs.garble}"},
    ],
}

ALICE = "alice-" + secrets.token_hex(12)
BOB = "bob-" + secrets.token_hex(12)
NOT_TEXT = b'{"arguments": {"text": "\\u0000\\ud800"}}'
"""A NUL, then a lone surrogate: JSON can spell it, no journal or answer can hold it."""


@pytest.fixture(scope="module")
def emulator() -> Iterator[Emulator]:
    with Emulator(scenario=SCENARIO) as emu:
        yield emu


@pytest.fixture
def served(emulator: Emulator, tmp_path: Path) -> Iterator[DaemonProcess]:
    (tmp_path / "effect_tools.py").write_text(TOOLS, encoding="utf-8")
    keys = tmp_path / "keys.txt"
    keys.write_text(f"alice: {ALICE}\nbob: {BOB}\n", encoding="utf-8")
    daemon = DaemonProcess(
        [
            "--tools",
            str(tmp_path / "effect_tools.py"),
            "--port",
            "0",
            "--db",
            str(tmp_path / "journal.db"),
            "--api-key-file",
            str(keys),
        ],
        env={**emulator.env(), "TB_TOOLS_DIR": str(tmp_path)},
        api_key=ALICE,
    )
    try:
        yield daemon
    finally:
        daemon.stop()


def effects(folder: Path) -> list[str]:
    path = folder / "effects.log"
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


def post_raw(daemon: DaemonProcess, path: str, body: bytes, key: str = ALICE) -> requests.Response:
    return daemon.request(
        "POST",
        path,
        data=body,
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {key}"},
    )


def _refusal(response: requests.Response, field: str) -> str:
    assert response.status_code == 422, response.text
    assert "Traceback" not in response.text
    error = response.json()["error"]
    assert error["code"] == "invalid_request"
    message = str(error["message"])
    assert field in message and "lone surrogate (U+D800 at character 2)" in message, message
    assert "expected a string UTF-8 can encode" in message
    return message


def test_a_string_that_is_not_text_is_refused_before_the_tool_runs(
    served: DaemonProcess, tmp_path: Path
) -> None:
    refused = post_raw(served, "/v1/tools/note/call", NOT_TEXT)
    assert effects(tmp_path) == [], "the tool acted on a request that is then refused"
    _refusal(refused, "arguments.text")
    confirmed = NOT_TEXT[:-1] + b', "confirm": true}'
    _refusal(post_raw(served, "/v1/tools/stamp/call", confirmed), "arguments.text")
    key = b'{"arguments": {"\\udc00": "x"}}'
    refused = post_raw(served, "/v1/tools/note/call", key)
    assert refused.status_code == 422 and "a key of arguments" in refused.text, refused.text
    assert effects(tmp_path) == [], "a tool acted on a request that was then refused"
    # NaN and Infinity: Python's JSON reader takes them, JSON has no such numbers.
    for body, shown in (
        (b'{"arguments": {"text": NaN}}', "nan"),
        (b'{"arguments": {"text": [1e999]}}', "inf"),
    ):
        refused = post_raw(served, "/v1/tools/note/call", body)
        assert refused.status_code == 422, refused.text
        assert f"is {shown}, which JSON has no number for" in refused.text, refused.text
    assert effects(tmp_path) == [], "a tool acted on a request that was then refused"
    assert served.request("GET", "/v1/tools/calls").json() == {"items": [], "total": 0}
    assert "Traceback" not in served.log

    # The messages endpoint refuses the same string with the same words.
    cid = served.new_conversation()
    query = post_raw(served, f"/v1/conversations/{cid}/messages", b'{"query": "\\u0000\\ud800"}')
    assert "query: holds a lone" in _refusal(query, "query")
    forced = b'{"query": "x", "tool_choice": {"name": "note", "input": {"text": "\\u0000\\ud800"}}}'
    _refusal(post_raw(served, f"/v1/conversations/{cid}/messages", forced), "tool_choice.input")

    # A NUL alone is text: the call runs, is answered and journaled.
    ran = served.request("POST", "/v1/tools/note/call", json={"arguments": {"text": "a\x00b"}})
    assert ran.status_code == 200, ran.text
    assert ran.json()["output"] == "noted a\x00b"
    assert effects(tmp_path) == ["note 'a\\x00b'"]


def test_direct_calls_are_journaled_with_who_what_when_and_outcome(
    served: DaemonProcess, tmp_path: Path
) -> None:
    first = served.request("POST", "/v1/tools/note/call", json={"arguments": {"text": "hi"}})
    assert first.status_code == 200, first.text
    unconfirmed = served.request(
        "POST",
        "/v1/tools/stamp/call",
        json={"arguments": {"text": "deed"}},
        headers={"Authorization": f"Bearer {BOB}"},
    )
    assert unconfirmed.status_code == 409, unconfirmed.text
    second = served.request(
        "POST",
        "/v1/tools/stamp/call",
        json={"arguments": {"text": "deed"}, "confirm": True},
        headers={"Authorization": f"Bearer {BOB}"},
    )
    assert second.status_code == 200, second.text
    bad = served.request("POST", "/v1/tools/note/call", json={"arguments": {}})
    assert bad.status_code == 200 and bad.json()["error"] == "invalid_arguments", bad.text
    assert effects(tmp_path) == ["note 'hi'", "stamp 'deed'"]

    page = served.request("GET", "/v1/tools/calls").json()
    assert page["total"] == 3
    wrong, stamped, noted = page["items"]  # newest first
    assert (noted["tool"], noted["called_by"], noted["approved_by"]) == ("note", "alice", None)
    assert noted["arguments"] == {"text": "hi"} and noted["output"] == "noted hi"
    assert (noted["state"], noted["error"]) == ("finished", None)
    assert noted["call_id"] == first.json()["call_id"]
    assert noted["started_at"] <= noted["finished_at"]
    # The caller's "confirm": true is the approval, recorded as that caller's decision.
    assert (stamped["tool"], stamped["called_by"], stamped["approved_by"]) == (
        "stamp",
        "bob",
        "bob",
    )
    assert stamped["output"] == "stamped deed"
    assert (wrong["error"], wrong["state"]) == ("invalid_arguments", "finished")
    assert served.request("GET", "/v1/tools/calls", params={"limit": 1}).json()["items"] == [wrong]

    served.stop()
    journal = SQLiteJournal(tmp_path / "journal.db")
    try:
        records, total = journal.direct_calls()
    finally:
        journal.close()
    assert total == 3
    assert [(r.tool, r.called_by, r.approved_by) for r in records] == [
        ("note", "alice", None),
        ("stamp", "bob", "bob"),
        ("note", "alice", None),
    ]


def test_a_tool_output_that_is_not_text_is_answered(served: DaemonProcess, tmp_path: Path) -> None:
    expected = "half \ufffd of a pair, \x00 and a whole \U0001f600"
    direct = served.request("POST", "/v1/tools/garble/call", json={})
    assert direct.status_code == 200, direct.text
    assert direct.json()["output"] == expected

    cid = served.new_conversation()
    answered = served.ask(cid, "garble")
    assert answered.status_code == 200, answered.text
    assert answered.json()["answer"] == expected
    assert answered.json()["tool_runs"][0]["output"] == expected
    with served.request(
        "POST",
        f"/v1/conversations/{cid}/messages",
        json={"query": "garble", "stream": True},
        stream=True,
    ) as streamed:
        assert streamed.status_code == 200
        events = [
            (name, json.loads(data)) for name, data in _events(streamed.content.decode("utf-8"))
        ]
    assert events[-1][0] == "done" and events[-1][1]["status"] == "finished", events[-1]
    text = "".join(data["text"] for name, data in events if name == "text_delta")
    assert text == expected
    detail = served.request("GET", f"/v1/conversations/{cid}").json()
    assert [call["output"] for call in detail["tool_calls"]] == [expected, expected]
    assert "Traceback" not in served.log


def _events(text: str) -> list[tuple[str, str]]:
    found = []
    name = ""
    for line in text.splitlines():
        if line.startswith("event: "):
            name = line[7:]
        elif line.startswith("data: "):
            found.append((name, line[6:]))
    return found
