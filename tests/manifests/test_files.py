"""manifests/files.py: listing and reading under one root; traversal, absolute paths, symlink
escapes, binary files and an unset root are refused."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from bridge.tools import Toolbox
from tests.manifests.conftest import Call, loaded


@pytest.fixture(scope="module")
def box() -> Toolbox:
    return loaded("files.py")


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    shared = tmp_path / "shared"
    (shared / "reports").mkdir(parents=True)
    (shared / "reports" / "q1.txt").write_text("first quarter: ok\n", encoding="utf-8")
    (shared / "reports" / "q2.csv").write_text("a,b\n1,2\n", encoding="utf-8")
    (shared / "notes.md").write_text("# Notes\n" + "x" * 100, encoding="utf-8")
    (shared / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00")
    secret = tmp_path / "secret.txt"
    secret.write_text("top secret", encoding="utf-8")
    (shared / "escape.txt").symlink_to(secret)
    (shared / "outside").symlink_to(tmp_path)
    (shared / "inner").symlink_to(shared / "reports")
    monkeypatch.setenv("TOOLBRIDGE_FILES_ROOT", str(shared))
    return shared


@pytest.fixture
def call(box: Toolbox, call_in: Callable[[Toolbox], Call]) -> Call:
    return call_in(box)


def test_list_files(root: Path, call: Call) -> None:
    result = json.loads(call("list_files", {}).output)
    paths = [entry["path"] for entry in result["entries"]]
    assert paths == ["inner", "reports", "logo.png", "notes.md"]
    assert result["skipped_links"] == 2  # escape.txt and outside lead out of the root
    deep = json.loads(call("list_files", {"recursive": True, "pattern": "q*"}).output)
    assert [e["path"] for e in deep["entries"]] == ["reports/q1.txt", "reports/q2.csv"]
    assert deep["entries"][0] == {"path": "reports/q1.txt", "type": "file", "size": 18}


def test_read_file(root: Path, call: Call) -> None:
    result = json.loads(call("read_file", {"path": "reports/q1.txt"}).output)
    assert result == {
        "path": "reports/q1.txt",
        "offset": 0,
        "content": "first quarter: ok\n",
        "total_chars": 18,
        "more": False,
    }
    part = json.loads(call("read_file", {"path": "notes.md", "offset": 2, "max_chars": 5}).output)
    assert part["content"] == "Notes"
    assert part["more"] is True
    inside_link = json.loads(call("read_file", {"path": "inner/q2.csv"}).output)
    assert inside_link["content"] == "a,b\n1,2\n"


@pytest.mark.parametrize(
    ("tool", "arguments", "message"),
    [
        (
            "read_file",
            {"path": "../secret.txt"},
            "PermissionError: refused: '../secret.txt' is outside the shared folder (it climbs",
        ),
        (
            "read_file",
            {"path": "reports/../../secret.txt"},
            "PermissionError: refused: 'reports/../../secret.txt' is outside the shared folder",
        ),
        (
            "read_file",
            {"path": "escape.txt"},
            "PermissionError: refused: 'escape.txt' is outside the shared folder (a symbolic "
            "link leads out of it)",
        ),
        (
            "read_file",
            {"path": "outside/secret.txt"},
            "PermissionError: refused: 'outside/secret.txt' is outside the shared folder",
        ),
        (
            "list_files",
            {"path": "outside"},
            "PermissionError: refused: 'outside' is outside the shared folder",
        ),
        (
            "read_file",
            {"path": "/etc/passwd"},
            "PermissionError: refused: '/etc/passwd' is an absolute path; use a path relative",
        ),
        (
            "read_file",
            {"path": "logo.png"},
            "ValueError: refused: 'logo.png' is a binary file; only text files can be read",
        ),
        (
            "read_file",
            {"path": "reports"},
            "FileNotFoundError: path: 'reports' is a folder; expected a file (see list_files)",
        ),
        (
            "read_file",
            {"path": "missing.txt"},
            "FileNotFoundError: path: 'missing.txt' is missing; expected a file",
        ),
        (
            "list_files",
            {"path": "notes.md"},
            "NotADirectoryError: path: 'notes.md' is a file, not a folder; use read_file",
        ),
        (
            "read_file",
            {"path": "notes.md", "max_chars": 0},
            "ValueError: max_chars: expected 1 to 100000 (got 0)",
        ),
        ("read_file", {"path": ""}, "ValueError: path: expected a path relative to the shared"),
    ],
)
def test_refusals(
    root: Path, call: Call, tool: str, arguments: dict[str, object], message: str
) -> None:
    result = call(tool, arguments)
    assert result.error == "tool_error"
    assert result.output.startswith(message), result.output
    assert "top secret" not in result.output


def test_unset_root(call: Call, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TOOLBRIDGE_FILES_ROOT", raising=False)
    result = call("list_files", {})
    assert result.error == "tool_error"
    assert result.output == (
        "PermissionError: TOOLBRIDGE_FILES_ROOT is not set: set it to the folder these tools "
        "may read, where toolbridge runs"
    )
    monkeypatch.setenv("TOOLBRIDGE_FILES_ROOT", os.devnull)
    assert "which is not a folder" in call("list_files", {}).output
