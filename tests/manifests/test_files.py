"""manifests/files.py: listing and reading under one root; traversal, absolute paths, symlink
escapes, binary files, FIFOs, devices and an unset root are refused, and a folder swapped for
a link to the outside while the tools run never leaks what is outside."""

from __future__ import annotations

import json
import os
import stat
import threading
from collections import Counter
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


@pytest.fixture
def arena(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A root whose `dir` a racing thread swaps for a link to a folder outside it."""
    root = tmp_path / "root"
    (root / "dir").mkdir(parents=True)
    (root / "dir" / "secret.txt").write_text("harmless", encoding="utf-8")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("TOP SECRET", encoding="utf-8")
    (outside / "TOPSECRET.txt").write_text("TOP SECRET", encoding="utf-8")
    monkeypatch.setenv("TOOLBRIDGE_FILES_ROOT", str(root))
    return root


class Swapper:
    """Keeps replacing `root/dir` by a symbolic link to `../outside` and back, until stopped."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.swaps = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        folder, held = self.root / "dir", self.root / "held"
        while not self._stop.is_set():
            folder.rename(held)
            folder.symlink_to(self.root.parent / "outside")
            folder.unlink()
            held.rename(folder)
            self.swaps += 1

    def __enter__(self) -> Swapper:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)


RACE_TRIES = 3000


def test_swapping_a_folder_for_a_link_never_reads_outside(arena: Path, call: Call) -> None:
    # Before the race: the same two states, one at a time, are read and refused.
    assert json.loads(call("read_file", {"path": "dir/secret.txt"}).output)["content"] == (
        "harmless"
    )
    (arena / "dir").rename(arena / "held")
    (arena / "dir").symlink_to(arena.parent / "outside")
    refused = call("read_file", {"path": "dir/secret.txt"})
    assert refused.output.startswith(
        "PermissionError: refused: 'dir/secret.txt' is outside the shared folder (a symbolic "
        "link leads out of it)"
    ), refused.output
    (arena / "dir").unlink()
    (arena / "held").rename(arena / "dir")

    outcomes: Counter[str] = Counter()
    with Swapper(arena) as swapper:
        for _ in range(RACE_TRIES):
            run = call("read_file", {"path": "dir/secret.txt"})
            assert "TOP SECRET" not in run.output
            outcomes["read" if run.error is None else run.output.split(":")[0]] += 1
    assert swapper.swaps > 0
    assert sum(outcomes.values()) == RACE_TRIES, outcomes
    assert set(outcomes) <= {"read", "PermissionError", "FileNotFoundError"}, outcomes


def test_swapping_a_folder_for_a_link_never_lists_outside(arena: Path, call: Call) -> None:
    with Swapper(arena) as swapper:
        for _ in range(RACE_TRIES // 3):
            run = call("list_files", {"path": "dir", "recursive": True})
            assert "TOPSECRET" not in run.output
            whole = call("list_files", {"recursive": True})
            assert "TOPSECRET" not in whole.output, whole.output
    assert swapper.swaps > 0


def test_fifos_are_shown_and_never_read(root: Path, call: Call) -> None:
    os.mkfifo(root / "pipe")
    (root / "to_pipe").symlink_to("pipe")
    listing = json.loads(call("list_files", {}).output)
    types = {entry["path"]: entry["type"] for entry in listing["entries"]}
    assert types["pipe"] == "fifo" and types["to_pipe"] == "fifo"
    # Opening a FIFO for reading waits for a writer forever: these must return at once.
    for path in ["pipe", "to_pipe"]:
        assert call("read_file", {"path": path}).output == (
            f"PermissionError: refused: {path!r} is a FIFO (named pipe); only regular text files "
            "can be read"
        )
    assert call("list_files", {"path": "pipe"}).output == (
        "NotADirectoryError: path: 'pipe' is a FIFO (named pipe), not a folder"
    )


@pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() != 0,
    reason="creating a device node (os.mknod) needs root; a link to /dev/null would only test "
    "the link rule",
)
def test_devices_are_shown_and_never_read(root: Path, call: Call) -> None:
    os.mknod(root / "null", 0o600 | stat.S_IFCHR, os.makedev(1, 3))
    listing = json.loads(call("list_files", {}).output)
    assert {"path": "null", "type": "device", "size": None} in listing["entries"]
    assert call("read_file", {"path": "null"}).output == (
        "PermissionError: refused: 'null' is a device; only regular text files can be read"
    )


def test_links_inside_are_followed_by_the_walk(root: Path, call: Call) -> None:
    (root / "relative").symlink_to("reports/../notes.md")
    (root / "loop_a").symlink_to("loop_b")
    (root / "loop_b").symlink_to("loop_a")
    (root / "reports" / "up").symlink_to("../../secret.txt")
    read = json.loads(call("read_file", {"path": "relative", "max_chars": 7}).output)
    assert read["path"] == "notes.md" and read["content"] == "# Notes"
    through = json.loads(call("read_file", {"path": "inner/../notes.md", "max_chars": 7}).output)
    assert through["content"] == "# Notes"  # `..` after a link goes up from where it leads
    assert call("read_file", {"path": "loop_a"}).output == (
        "PermissionError: refused: 'loop_a' goes through more than 40 symbolic links (a loop of "
        "links?)"
    )
    assert call("read_file", {"path": "reports/up"}).output == (
        "PermissionError: refused: 'reports/up' is outside the shared folder (a symbolic link "
        "leads out of it)"
    )
    listing = json.loads(call("list_files", {}).output)
    assert listing["skipped_links"] == 4  # escape.txt, outside, loop_a, loop_b


def test_long_files_are_read_in_parts(root: Path, call: Call) -> None:
    (root / "long.txt").write_text("é" * 300_000 + "end", encoding="utf-8")
    tail = json.loads(call("read_file", {"path": "long.txt", "offset": 299_998}).output)
    assert tail["content"] == "ééend" and tail["total_chars"] == 300_003
    assert tail["more"] is False
    (root / "latin1.txt").write_bytes(b"caf\xe9" * 10)
    assert call("read_file", {"path": "latin1.txt"}).output == (
        "ValueError: refused: 'latin1.txt' is not UTF-8 text"
    )
