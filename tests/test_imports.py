"""The import graph of the `bridge` package: no cycles, and every arrow points down.

The walker reads every module of `bridge/` with `ast` (nothing is imported), collects every
import statement wherever it stands (module level, inside functions and methods, inside `try`
blocks), resolves relative imports, and builds a graph of module -> module arrows:

- `import a.b` is an arrow to `a.b`;
- `from a.b import c` is an arrow to `a.b.c` when `a/b/c` is a module, otherwise to `a.b`
  (the package `__init__` or the module that defines `c`);
- `from . import x` is resolved against the importing module's package.

Imports written under `if TYPE_CHECKING:` count too, for cycles and for the layer rules: they
never run, but two modules that name each other's types still know each other (and such a pair
turns into a runtime cycle the day one of the names is needed at run time). They are marked
"(type-only)" in the reports.

A package `__init__` importing its own submodules is an ordinary arrow; a submodule importing
its parent package (`from bridge.tools import Toolbox` inside `bridge/tools/x.py`) is an arrow
to that `__init__`, which imports the siblings: that is a cycle and is reported as one.
"""

from __future__ import annotations

import ast
import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE = "bridge"
ROOT = Path(__file__).resolve().parent.parent / PACKAGE

# No cycle is allowed; the check leaves out the arrows listed here (none).
ALLOWED_CYCLE_ARROWS: frozenset[tuple[str, str]] = frozenset()

# Layer rules from the architecture's layer table: layer -> layers it must not import.
# A layer is the first component under `bridge.` (`bridge.tools.schema` -> "tools"); the
# top-level modules `bridge.types` and `bridge.errors` form the "types" layer.
# The neutral vocabulary (`bridge.types`, `bridge.errors`) imports nothing of the package but
# itself.
TYPES_IMPORT_ONLY = frozenset({"types"})
FORBIDDEN: dict[str, frozenset[str]] = {
    # tools: manifests, schemas, toolbox, dispatcher; no platforms, no HTTP to agents, and not
    # the sources built on top of them
    "tools": frozenset(
        {"platforms", "daemon", "cli", "conversation", "emulator", "journal", "sources", "loading"}
    ),
    # platforms emit neutral events from the wire: how tools run (and how they are described,
    # which reaches an adapter as plain JSON through the loop) is not theirs, nor the emulator
    "platforms": frozenset(
        {"tools", "emulator", "daemon", "cli", "conversation", "journal", "sources", "loading"}
    ),
    # the journal stores steps; it knows neither platforms nor tools
    "journal": frozenset(
        {"platforms", "tools", "daemon", "cli", "conversation", "emulator", "sources", "loading"}
    ),
    # the emulator is a server, not a client: neither the loop nor the platforms
    "emulator": frozenset({"conversation", "platforms", "daemon", "cli", "journal"}),
    # sources are tools that are not Python functions
    "sources": frozenset({"platforms", "daemon", "cli", "conversation", "emulator", "journal"}),
    # the loop drives a platform and the tools; it is driven by the daemon and the CLI
    "conversation": frozenset({"daemon", "cli", "emulator"}),
    # the door decides who may do what; it knows neither platforms nor wire formats, and is
    # used by the loop, the daemon and the CLI rather than using them
    "access": frozenset({"platforms", "emulator", "daemon", "cli", "conversation"}),
    "daemon": frozenset({"cli"}),
    # spans are opened by every layer above, so the tracing module knows none of them
    "tracing": frozenset(
        {
            "platforms",
            "tools",
            "daemon",
            "cli",
            "conversation",
            "emulator",
            "journal",
            "sources",
            "loading",
            "access",
        }
    ),
}

# Arrows the layer rules forbid but that are allowed on purpose, one by one, with the reason.
DECLARED_EXCEPTIONS: frozenset[tuple[str, str]] = frozenset(
    {
        # The Responses API takes strict schemas when every tool fits OpenAI's strict rules:
        # the adapter asks the tools layer's schema dialects (pure JSON Schema transforms, no
        # running of tools) for that form, imported only once tools are sent.
        ("bridge.platforms.openai_responses.adapter", "bridge.tools.schema"),
    }
)


@dataclass(frozen=True)
class Arrow:
    source: str
    target: str
    line: int
    type_only: bool


def discover(root: Path = ROOT, package: str = PACKAGE) -> dict[str, Path]:
    """Every module of the package: dotted name -> file."""
    modules: dict[str, Path] = {}
    for path in sorted(root.rglob("*.py")):
        parts = [package, *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


def _imports(tree: ast.AST) -> Iterable[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Every import statement in `tree` (any depth), with whether it is TYPE_CHECKING-only."""
    stack: list[tuple[ast.AST, bool]] = [(tree, False)]
    while stack:
        node, type_only = stack.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node, type_only
            continue
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend((child, True) for child in node.body)
            stack.extend((child, type_only) for child in node.orelse)
            continue
        stack.extend((child, type_only) for child in ast.iter_child_nodes(node))


def arrows_of(
    name: str, source: str, modules: Mapping[str, object], is_package: bool
) -> list[Arrow]:
    """The arrows from module `name` (whose text is `source`) to modules of `modules`."""
    found: list[Arrow] = []
    here = name if is_package else name.rpartition(".")[0]

    def add(target: str, node: ast.AST, type_only: bool) -> None:
        if target in modules and target != name:
            found.append(Arrow(name, target, getattr(node, "lineno", 0), type_only))

    for node, type_only in _imports(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name, node, type_only)
            continue
        if node.level:
            base_parts = here.split(".")
            if node.level > 1:
                base_parts = base_parts[: len(base_parts) - (node.level - 1)]
            base = ".".join(base_parts)
            origin = f"{base}.{node.module}" if node.module else base
        else:
            origin = node.module or ""
        for alias in node.names:
            submodule = f"{origin}.{alias.name}"
            add(submodule if submodule in modules else origin, node, type_only)
    return found


def build_graph(root: Path = ROOT, package: str = PACKAGE) -> list[Arrow]:
    modules = discover(root, package)
    arrows: list[Arrow] = []
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        arrows.extend(arrows_of(name, path.read_text(encoding="utf-8"), modules, is_package))
    return arrows


def as_graph(arrows: Iterable[Arrow]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for arrow in arrows:
        graph.setdefault(arrow.source, set()).add(arrow.target)
    return graph


def strongly_connected(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """Tarjan's algorithm (iterative): the components of more than one module, sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    counter = 0
    nodes = sorted(set(graph) | {t for targets in graph.values() for t in targets})
    for start in nodes:
        if start in index:
            continue
        work: list[tuple[str, list[str]]] = [(start, sorted(graph.get(start, ())))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, pending = work[-1]
            if pending:
                nxt = pending.pop(0)
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, sorted(graph.get(nxt, ()))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))
    return sorted(components)


def cycle_path(graph: Mapping[str, Iterable[str]], component: Iterable[str]) -> list[str]:
    """One shortest cycle through the first module of a component: [a, b, ..., a]."""
    members = set(component)
    start = min(members)
    parents: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following: list[str] = []
        for node in frontier:
            for nxt in sorted(graph.get(node, ())):
                if nxt not in members:
                    continue
                if nxt == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(parents[path[-1]])
                    return [start, *reversed(path[:-1]), start] if node != start else [start, start]
                if nxt not in parents:
                    parents[nxt] = node
                    following.append(nxt)
        frontier = following
    raise AssertionError(f"no cycle through {start}")  # pragma: no cover


def cycles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    return [cycle_path(graph, component) for component in strongly_connected(graph)]


def without(
    graph: Mapping[str, Iterable[str]], arrows: Iterable[tuple[str, str]]
) -> dict[str, set[str]]:
    dropped = set(arrows)
    return {
        source: {t for t in targets if (source, t) not in dropped}
        for source, targets in graph.items()
    }


LOOP_MODULES = frozenset({"conversation", "bridge", "options", "platform_state", "approval_flow"})
"""The loop layer: `bridge.conversation` (the loop) and the small modules beside it."""


def layer_of(module: str) -> str:
    parts = module.split(".")
    if len(parts) == 1:
        return "top"
    if parts[1] in {"types", "errors"}:
        return "types"
    if parts[1] in LOOP_MODULES:
        return "conversation"
    return parts[1]


# ---------------------------------------------------------------------------------------------
# the walker checks itself


def test_walker_sees_function_level_and_relative_imports() -> None:
    source = (
        "from typing import TYPE_CHECKING\n"
        "from . import sibling\n"
        "from .. import types\n"
        "if TYPE_CHECKING:\n"
        "    from pkg.sub.hidden import Thing\n"
        "def late():\n"
        "    import pkg.other\n"
        "class K:\n"
        "    def method(self):\n"
        "        from pkg.sub import deep\n"
    )
    modules = dict.fromkeys(
        [
            "pkg",
            "pkg.types",
            "pkg.other",
            "pkg.sub",
            "pkg.sub.me",
            "pkg.sub.sibling",
            "pkg.sub.deep",
            "pkg.sub.hidden",
        ]
    )
    arrows = arrows_of("pkg.sub.me", source, modules, is_package=False)
    assert {(a.target, a.type_only) for a in arrows} == {
        ("pkg.sub.sibling", False),
        ("pkg.types", False),
        ("pkg.sub.hidden", True),
        ("pkg.other", False),
        ("pkg.sub.deep", False),
    }


def test_walker_resolves_imports_of_a_package_init() -> None:
    arrows = arrows_of(
        "pkg.sub",
        "from .deep import x\nfrom pkg import sub\n",
        {"pkg": 0, "pkg.sub": 0, "pkg.sub.deep": 0},
        True,
    )
    assert [a.target for a in arrows] == ["pkg.sub.deep"]


def test_cycle_finder_reports_a_planted_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"a"}}
    assert cycles(graph) == [["a", "b", "c", "a"]]
    assert cycles(without(graph, {("c", "a")})) == []
    assert cycles({"x": {"y"}, "y": {"z"}}) == []


# ---------------------------------------------------------------------------------------------
# the package


@pytest.fixture(scope="module")
def arrows() -> list[Arrow]:
    return build_graph()


def test_no_import_cycles(arrows: list[Arrow]) -> None:
    graph = without(as_graph(arrows), ALLOWED_CYCLE_ARROWS)
    type_only = {(a.source, a.target) for a in arrows if a.type_only} - {
        (a.source, a.target) for a in arrows if not a.type_only
    }
    report = []
    for component in strongly_connected(graph):
        path = cycle_path(graph, component)
        steps = [
            f"{source} -> {target}{' (type-only)' if (source, target) in type_only else ''}"
            for source, target in itertools.pairwise(path)
        ]
        report.append(f"cycle among {component}:\n    " + "\n    ".join(steps))
    assert not report, "import cycles:\n" + "\n".join(report)


def test_allowed_cycle_arrows_still_lie_on_a_cycle(arrows: list[Arrow]) -> None:
    graph = as_graph(arrows)
    components = strongly_connected(graph)
    stale = sorted(
        (source, target)
        for source, target in ALLOWED_CYCLE_ARROWS
        if target not in graph.get(source, set())
        or not any(source in c and target in c for c in components)
    )
    assert not stale, f"remove these from the known cycles, they are gone: {stale}"


def _forbidden(source: str, target: str) -> bool:
    if source == "types":
        return target not in TYPES_IMPORT_ONLY
    return target in FORBIDDEN.get(source, frozenset())


def test_layer_rules_see_a_wrong_arrow() -> None:
    assert _forbidden(layer_of("bridge.types"), layer_of("bridge._hosts"))
    assert not _forbidden(layer_of("bridge.errors"), layer_of("bridge.types"))
    assert _forbidden(layer_of("bridge.tools.schema"), layer_of("bridge.platforms.base"))
    assert not _forbidden(layer_of("bridge.daemon.app"), layer_of("bridge.tools.toolbox"))
    assert _forbidden(layer_of("bridge.options"), layer_of("bridge.daemon.app"))


def test_arrows_point_down(arrows: list[Arrow]) -> None:
    wrong = sorted(
        {
            f"{a.source}:{a.line} -> {a.target}{' (type-only)' if a.type_only else ''}"
            for a in arrows
            if _forbidden(layer_of(a.source), layer_of(a.target))
            and (a.source, a.target) not in DECLARED_EXCEPTIONS
        }
    )
    assert not wrong, "arrows the layer table forbids:\n" + "\n".join(wrong)


def test_known_layer_arrows_still_exist(arrows: list[Arrow]) -> None:
    present = {(a.source, a.target) for a in arrows}
    stale = sorted(DECLARED_EXCEPTIONS - present)
    assert not stale, f"remove these from DECLARED_EXCEPTIONS, they are gone: {stale}"


def test_nothing_inside_imports_the_top_level_package(arrows: list[Arrow]) -> None:
    wrong = sorted({f"{a.source}:{a.line}" for a in arrows if a.target == PACKAGE})
    assert not wrong, f"modules of the library importing `{PACKAGE}` itself: {wrong}"


# ---------------------------------------------------------------------------------------------
# one name for one thing


def _classes_named(name: str) -> list[str]:
    found = []
    for module, path in discover().items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        found += [
            module
            for node in ast.walk(tree)
            if isinstance(node, ast.ClassDef) and node.name == name
        ]
    return found


def test_tool_choice_is_defined_once() -> None:
    """The neutral `ToolChoice` lives in `bridge.types`; wire forms have names of their own."""
    assert _classes_named("ToolChoice") == ["bridge.types"]
