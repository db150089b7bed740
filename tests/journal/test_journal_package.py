"""The journal package's shape: each module imports alone, and none imports in a circle."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import bridge
import bridge.journal

PACKAGE = Path(bridge.journal.__file__).parent
MODULES = sorted(
    "bridge.journal" if path.stem == "__init__" else f"bridge.journal.{path.stem}"
    for path in PACKAGE.glob("*.py")
)
PUBLIC = [
    "INTERRUPTED_CODE",
    "INTERRUPTED_MESSAGE",
    "INTERRUPTED_OUTPUT",
    "ApprovalDecidedError",
    "ApprovalRecord",
    "ApprovalStatus",
    "CallRecord",
    "CallState",
    "ConversationRecord",
    "Journal",
    "Ledger",
    "MemoryJournal",
    "MessageEnd",
    "MessageRecord",
    "MessageStatus",
    "MessageTrail",
    "PendingBatch",
    "PlatformConversationRecord",
    "PlatformStateRecord",
    "SQLiteJournal",
    "StateSnapshot",
    "now",
    "redacted_arguments",
    "redacted_state",
]


def _imports(module: str) -> set[str]:
    """The journal modules `module` imports (at any level, TYPE_CHECKING included)."""
    path = PACKAGE / ("__init__.py" if module == "bridge.journal" else f"{module[15:]}.py")
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module is not None:
            names = [node.module]
            # `from bridge.journal import memory` names a module too.
            names += [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        found.update(name for name in names if name in MODULES and name != module)
    return found


def test_the_package_has_its_modules() -> None:
    for name in ("base", "ledger", "memory", "migrations", "records", "sqlite"):
        assert f"bridge.journal.{name}" in MODULES


@pytest.mark.parametrize("module", MODULES)
def test_each_module_imports_alone_in_a_fresh_interpreter(module: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", f"import {module}"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def test_no_module_imports_the_package_or_in_a_circle() -> None:
    graph = {module: _imports(module) for module in MODULES}
    for module, imported in graph.items():
        if module != "bridge.journal":
            # The package's __init__ only re-exports: a module importing from it would
            # depend on every other one (the circle the old bridge/_journal_*.py had).
            assert "bridge.journal" not in imported, f"{module} imports from bridge.journal"
    visiting: list[str] = []
    done: set[str] = set()

    def visit(module: str) -> None:
        if module in visiting:
            cycle = [*visiting[visiting.index(module) :], module]
            raise AssertionError("import cycle: " + " -> ".join(cycle))
        if module in done:
            return
        visiting.append(module)
        for imported in sorted(graph[module]):
            visit(imported)
        visiting.pop()
        done.add(module)

    for module in MODULES:
        visit(module)


def test_public_names_are_importable_where_they_were() -> None:
    for name in PUBLIC:
        assert hasattr(bridge.journal, name), name
        assert name in bridge.journal.__all__
    for name in ("Journal", "MemoryJournal", "SQLiteJournal"):
        assert getattr(bridge, name) is getattr(bridge.journal, name)


def test_the_journal_does_not_know_tools() -> None:
    # `Ledger.plan` asks an `is_idempotent` callable: a store never imports the tool layer.
    for path in PACKAGE.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module is not None:
                assert not node.module.startswith("bridge.tools"), f"{path.name}: {node.module}"
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    assert not alias.name.startswith("bridge.tools"), f"{path.name}: {alias.name}"
