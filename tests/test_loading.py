"""Loading: discovery of every kind of tool in a module or file, `__tools__`, and the layering
rule that lets `bridge.loading` sit above both tools and sources."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

import bridge
import bridge.tools
from bridge.errors import UsageError
from bridge.loading import discover, load_module_file, load_tools
from bridge.tools import Toolbox

ROOT = Path(__file__).resolve().parents[1]

KINDS_FILE = '''
"""Every kind toolbridge discovers, and things it must leave alone."""

from pydantic import BaseModel

from bridge.tools import manifest
from helpers_mod import shared  # imported: not this module's tool


@manifest
def add(a: int, b: int = 1) -> int:
    """Add two numbers."""
    return a + b


def helper(x: int) -> int:
    """A plain function: a helper, not a tool."""
    return x


class Calculator:
    """Arithmetic on integers."""

    @manifest
    def mul(self, a: int, b: int) -> int:
        """Multiply."""
        return a * b


class Search:
    toolkit_description = "Look things up on the intranet."

    def web(self, query: str) -> str:
        """Search the web."""
        return query

    def _private(self) -> None:
        pass


class Lookup(BaseModel):
    """Look a key up."""

    key: str

    def run(self) -> str:
        return self.key.upper()


class Reply(BaseModel):
    """A data model (a return type): no run(), not a tool."""

    text: str


class Database:
    @manifest
    def query(self, sql: str) -> str:
        """Run SQL."""
        return f"{self.dsn}: {sql}"

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn


db = Database("sqlite://")  # the instance is the tool, not the class (which needs a dsn)
'''

HELPERS = '''
from bridge.tools import manifest


@manifest
def shared(x: int) -> int:
    """Defined here, imported by other modules."""
    return x
'''


@pytest.fixture
def tools_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    (tmp_path / "helpers_mod.py").write_text(HELPERS, encoding="utf-8")
    (tmp_path / "kinds_mod.py").write_text(KINDS_FILE, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in ("helpers_mod", "kinds_mod", "chosen_mod"):
        sys.modules.pop(name, None)


EXPECTED = ["add", "calculator_mul", "search_web", "lookup", "database_query"]


def test_a_file_holds_every_kind(tools_dir: Path) -> None:
    box = load_tools([str(tools_dir / "kinds_mod.py")])
    assert box.names() == EXPECTED
    run = box.get("database_query")
    assert run is not None
    assert run.function(**run.validate({"sql": "select 1"})) == "sqlite://: select 1"
    lookup = box.get("lookup")
    assert lookup is not None and lookup.function(**lookup.validate({"key": "k"})) == "K"
    web = box.get("search_web")
    assert web is not None and web.toolkit == "search"
    assert web.toolkit_description == "Look things up on the intranet."
    assert web.origin == f"{tools_dir / 'kinds_mod.py'}:Search.web"


def test_a_module_and_toolbox_add_discover_the_same(tools_dir: Path) -> None:
    import importlib

    module = importlib.import_module("kinds_mod")
    assert Toolbox([module]).names() == EXPECTED
    assert load_tools(["kinds_mod"]).names() == EXPECTED
    assert [getattr(v, "__name__", None) for v in discover(module)] == [
        "add",
        "Calculator",
        "Search",
        "Lookup",
        None,  # the Database instance `db`
    ]


def test_a_module_prefix_and_selection_apply_to_all_its_tools(tools_dir: Path) -> None:
    box = Toolbox()
    box.add(tools_dir / "kinds_mod.py", prefix="k", enable=["add", "lookup"])
    assert box.names() == ["k_add", "k_lookup"]
    with pytest.raises(UsageError) as caught:
        Toolbox().add(tools_dir / "kinds_mod.py", exclude=["nope"])
    assert "exclude= names 'nope', not a tool of the file" in str(caught.value)
    assert "add, calculator_mul, search_web, lookup, database_query" in str(caught.value)


CHOSEN = '''
from bridge.tools import manifest


def plain(x: int) -> int:
    """Listed in __tools__: a tool although not decorated."""
    return x


@manifest
def hidden(x: int) -> int:
    """Decorated but not listed: not exported."""
    return x


class Kit:
    toolkit_name = "kit"

    @manifest
    def ping(self) -> str:
        return "pong"


__tools__ = [plain, Kit]
'''


def test_tools_lists_what_a_module_exports(tmp_path: Path) -> None:
    path = tmp_path / "chosen.py"
    path.write_text(CHOSEN, encoding="utf-8")
    assert load_tools([str(path)]).names() == ["plain", "kit_ping"]


@pytest.mark.parametrize(
    ("tools", "message"),
    [
        ("[plain, 42]", r"__tools__ of the module .*: entry 1 \(42\) is not a tool; expected a"),
        ("['plain']", r"entry 0 is the name 'plain'; list the objects themselves"),
        ("plain", r"__tools__ of the module .* is a function; expected a list"),
        ("[plain, textwrap]", r"entry 1 \(<module 'textwrap'.*\) is not a tool"),
    ],
    ids=["not-a-tool", "a-name", "not-a-list", "a-module"],
)
def test_a_bad_tools_entry_is_named(tmp_path: Path, tools: str, message: str) -> None:
    path = tmp_path / "bad_tools.py"
    path.write_text(
        f"import textwrap\n\n\ndef plain(x: int) -> int:\n    return x\n\n\n__tools__ = {tools}\n",
        encoding="utf-8",
    )
    with pytest.raises(UsageError, match=message):
        load_tools([str(path)])


def test_undecorated_functions_are_not_discovered(tmp_path: Path) -> None:
    path = tmp_path / "plain_only.py"
    path.write_text("def f(x: int) -> int:\n    return x\n", encoding="utf-8")
    with pytest.raises(UsageError) as caught:
        Toolbox().add(path)
    assert str(caught.value) == (
        f"{path} has no @manifest functions or other tools; decorate the functions to expose "
        "with @manifest (from bridge.tools import manifest), or list the tools in "
        "__tools__ = [...]"
    )


def test_two_tools_of_one_name_in_a_module_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "twice.py"
    path.write_text(
        textwrap.dedent(
            """
            from bridge.tools import manifest


            @manifest(name="same")
            def one() -> int:
                return 1


            @manifest(name="same")
            def two() -> int:
                return 2
            """
        ),
        encoding="utf-8",
    )
    with pytest.raises(UsageError, match=r"duplicate tool name 'same' in the file .*twice\.py"):
        load_tools([str(path)])


def test_load_module_file_is_public_here(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_text("VALUE = 3\n", encoding="utf-8")
    assert load_module_file(path).VALUE == 3
    with pytest.raises(UsageError, match=r"is not a \.py file \(module names are loaded with"):
        load_module_file(tmp_path / "m.txt")


def test_load_tools_is_exported_from_bridge_not_from_bridge_tools() -> None:
    assert bridge.load_tools is load_tools
    assert "load_tools" in bridge.__all__
    assert "load_tools" not in bridge.tools.__all__
    assert not hasattr(bridge.tools, "load_tools")


def test_the_tools_layer_does_not_import_sources() -> None:
    # Arrows point down: sources borrow from tools, `bridge.loading` knows both.
    script = (
        "import sys\n"
        "import bridge.tools, bridge.tools.toolbox, bridge.tools.dispatch, bridge.tools.kinds\n"
        "from bridge.tools import Toolbox, manifest\n"
        "Toolbox([manifest(name='one')(lambda: 1)])\n"
        "print(sorted(m for m in sys.modules if m.startswith(('bridge.sources', "
        "'bridge.loading'))))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
    mentions = [
        str(path.relative_to(ROOT))
        for path in (ROOT / "bridge" / "tools").rglob("*.py")
        if "bridge.sources" in path.read_text(encoding="utf-8")
    ]
    assert mentions == []


OTHER_STYLES = '''
"""Tools written in other libraries' styles, found by shape."""

from pydantic import BaseModel


class Bold:
    """Make text bold."""

    description = "Make text bold."

    def run(self, text: str) -> str:
        return f"**{text}**"


class Fetch:
    name = "fetch"
    description = "Fetch a URL."

    def call(self, url: str) -> str:
        return f"<{url}>"


fetcher = Fetch()  # the instance is the tool; the class is not registered twice


class Greet(BaseModel):
    request: str = "greet"
    purpose: str = "Greet someone by <who>."
    who: str

    def handle(self) -> str:
        return f"hello {self.who}"


class Lookup(BaseModel):
    """Look a key up."""

    key: str

    def run(self) -> str:
        return self.key


EXAMPLE = Lookup(key="x")  # an instance of a model tool: data, and the class stays a tool


class Runner:
    """A helper with a run() method, no name or description: not a tool."""

    def run(self) -> None:
        pass
'''


def test_other_libraries_styles_are_discovered(tmp_path: Path) -> None:
    path = tmp_path / "styles.py"
    path.write_text(OTHER_STYLES, encoding="utf-8")
    box = load_tools([str(path)])
    assert box.names() == ["bold", "fetch", "greet", "lookup"]
    fetch = box.get("fetch")
    assert fetch is not None and fetch.function(**fetch.validate({"url": "u"})) == "<u>"


# --- source names ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "name"),
    [
        ("tools/weather.py", "weather"),
        ("manifests/intranet.yaml", "intranet"),
        ("intranet.json", "intranet"),
        ("openapi:api/crm.json", "crm"),
        ("openapi:api/crm.json --include tickets", "crm"),
        ("openapi:https://example.com/v1/billing.yaml", "billing"),
        ("mypackage.tools", "tools"),
        ("mytools", "mytools"),
        ("mcp:uvx mcp-server-time", "mcp-server-time"),
        ("mcp:uvx --from mcp-time mcp-server-time --local-timezone UTC", "mcp-server-time"),
        ("mcp:npx -y @modelcontextprotocol/server-memory", "server-memory"),
        ("mcp:/usr/bin/python3 -m mcp_server_time --local-timezone UTC", "mcp_server_time"),
        ("mcp:python servers/files.py", "files"),
        ("mcp:/opt/bin/crm-server --port 1", "crm-server"),
        ("mcp:docker run -i --rm mcp/time", "time"),
        ("mcp+http://127.0.0.1:8000/mcp", "127.0.0.1"),
        ("mcp+https://tools.example.com/mcp", "tools.example.com"),
    ],
)
def test_the_default_source_name_of_each_kind_of_spec(spec: str, name: str) -> None:
    from bridge.loading import source_name

    assert source_name(spec) == name


def test_loaded_tools_carry_their_source(tools_dir: Path) -> None:
    petstore = Path(__file__).parent / "data" / "petstore.yaml"
    with load_tools(
        [str(tools_dir / "kinds_mod.py"), "bridge.demo.tools", f"openapi:{petstore}"]
    ) as box:
        sources = {spec.source for spec in box}
        assert {box.get("get_weather").source} == {"tools"}  # type: ignore[union-attr]
        assert sources == {"kinds_mod", "tools", "petstore"}


def test_source_option_names_the_source_with_or_without_a_prefix(tools_dir: Path) -> None:
    spec = str(tools_dir / "kinds_mod.py")
    with load_tools([f"{spec} source=crm", "bridge.demo.tools prefix=d_ source=intranet"]) as box:
        assert {s.source for s in box if not s.name.startswith("d_")} == {"crm"}
        assert box.get("d_get_weather").source == "intranet"  # type: ignore[union-attr]
    with load_tools(["bridge.demo.tools source=intranet prefix=e_"]) as box:
        assert box.get("e_get_weather").source == "intranet"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("given", "problem"),
    [("bridge.demo.tools source=no/slash", "source='no/slash'"), ("x.py source=", "source=''")],
)
def test_a_bad_source_name_is_refused(given: str, problem: str) -> None:
    with pytest.raises(UsageError, match=problem):
        load_tools([given])
