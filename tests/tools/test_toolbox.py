"""Toolbox: every way to register tools, names, state, options, loading, argument validation."""

import asyncio
import json
import sys
from pathlib import Path
from typing import Annotated, Any, Literal

import pytest
from pydantic import BaseModel, Field

from bridge.errors import UsageError
from bridge.loading import load_tools
from bridge.tools import (
    DIALECTS,
    ArgumentError,
    Toolbox,
    ToolOptions,
    ToolSpec,
    build_spec,
    manifest,
)
from bridge.tools.context import ToolContext

# --- tools used below ---------------------------------------------------------------------


@manifest(timeout=5, confirm=True)
def get_weather(city: str, days: int = 1) -> str:
    """Weather of a city.

    Args:
        city: City name.
        days: Forecast length.
    """
    return f"{city}:{days}"


def plain(x: int) -> int:
    """Not decorated: may still be added one by one."""
    return x


class WeatherTools:
    """A toolkit: several tools sharing state."""

    def __init__(self) -> None:
        self.calls = 0

    @manifest
    def today(self, city: str) -> str:
        """Today's weather."""
        self.calls += 1
        return f"sun in {city}"

    @manifest(name="week", idempotent=True)
    def forecast_week(self, city: str) -> str:
        """Seven days."""
        return city

    def helper(self) -> None:
        """Not a tool."""


class HTTPClientKit:
    toolkit_name = "web"

    @manifest
    def fetch(self, url: str) -> str:
        return url


class Base:
    @manifest
    def ping(self) -> str:
        return "pong"


class Derived(Base):
    @manifest
    def echo(self, text: str) -> str:
        return text


class NeedsArgs:
    def __init__(self, dsn: str) -> None:
        self.dsn = dsn

    @manifest
    def query(self, sql: str) -> str:
        return f"{self.dsn}:{sql}"


class Empty:
    def nothing(self) -> None:
        pass


class SearchDocs(BaseModel):
    """Search the documentation.

    Attributes:
        query: Words to look for.
    """

    query: str
    limit: int = Field(5, ge=1, le=50, description="Maximum hits.")

    def run(self) -> list[str]:
        return [self.query] * self.limit


class AsyncLookup(BaseModel):
    """Look something up, asynchronously, with the call's context."""

    key: str

    async def run(self, ctx: ToolContext) -> str:
        await asyncio.sleep(0)
        return f"{self.key}@{ctx.call_id}"


@manifest(name="lookup_v2", timeout=3)
class DecoratedModel(BaseModel):
    """Decorated model tool."""

    key: str

    def run(self) -> str:
        return self.key


class NoRun(BaseModel):
    key: str


class BadRun(BaseModel):
    key: str

    def run(self, extra: int) -> str:
        return self.key


# --- registration kinds -------------------------------------------------------------------


def test_add_a_function() -> None:
    box = Toolbox()
    specs = box.add(get_weather)
    assert [s.name for s in specs] == ["get_weather"]
    spec = box.get("get_weather")
    assert spec is not None and spec is specs[0]
    assert spec.origin == f"{__name__}:get_weather"
    assert "get_weather" in box and "nope" not in box and 3 not in box
    assert len(box) == 1
    assert list(box) == [spec]
    assert box.names() == ["get_weather"]
    assert box.add(plain, name="plain_tool", description="Echo.")[0].description == "Echo."
    assert box.names() == ["get_weather", "plain_tool"]


def test_constructor_adds_each_tool() -> None:
    box = Toolbox([get_weather, WeatherTools, SearchDocs])
    assert box.names() == [
        "get_weather",
        "weather_tools_today",
        "weather_tools_week",
        "search_docs",
    ]


def test_toolkit_class_instance_prefix_and_toolkit_name() -> None:
    box = Toolbox()
    specs = box.add(WeatherTools)
    assert [s.name for s in specs] == ["weather_tools_today", "weather_tools_week"]
    assert specs[1].options.idempotent is True
    assert specs[0].origin == f"{__name__}:WeatherTools.today"

    kit = WeatherTools()
    other = Toolbox()
    other.add(kit, prefix="wx")
    assert other.names() == ["wx_today", "wx_week"]
    spec = other.get("wx_today")
    assert spec is not None
    assert spec.function(**spec.validate({"city": "Oslo"})) == "sun in Oslo"
    assert kit.calls == 1  # the very instance that was registered

    assert Toolbox([HTTPClientKit]).names() == ["web_fetch"]
    assert Toolbox([Derived]).names() == ["derived_ping", "derived_echo"]
    assert [s.parameters["properties"] for s in Toolbox([Derived])] == [
        {},
        {"text": {"type": "string"}},
    ]


def test_toolkit_problems() -> None:
    with pytest.raises(UsageError) as caught:
        Toolbox().add(NeedsArgs)
    assert "cannot create the toolkit NeedsArgs without arguments" in str(caught.value)
    assert "pass an instance instead" in str(caught.value)
    assert Toolbox([NeedsArgs("db")]).names() == ["needs_args_query"]
    with pytest.raises(UsageError, match="toolkit Empty has no @manifest methods"):
        Toolbox().add(Empty)
    with pytest.raises(UsageError, match="name= and description= apply to a single tool"):
        Toolbox().add(WeatherTools, name="x")
    with pytest.raises(UsageError, match="prefix 'bad prefix' is invalid"):
        Toolbox().add(WeatherTools, prefix="bad prefix")


def test_pydantic_model_tool() -> None:
    box = Toolbox()
    [spec] = box.add(SearchDocs)
    assert spec.name == "search_docs"
    assert spec.description == "Search the documentation."
    assert spec.parameters["properties"] == {
        "query": {"description": "Words to look for.", "type": "string"},
        "limit": {
            "default": 5,
            "description": "Maximum hits.",
            "maximum": 50,
            "minimum": 1,
            "type": "integer",
        },
    }
    kwargs = spec.validate({"query": "install", "limit": "2"})
    assert spec.function(**kwargs) == ["install", "install"]
    assert spec.function(**spec.validate({"query": "x"})) == ["x"] * 5
    with pytest.raises(ArgumentError, match=r"limit: should be less than or equal to 50"):
        spec.validate({"query": "x", "limit": 51})
    for dialect in DIALECTS:
        assert box.manifests(dialect)


def test_async_model_tool_with_context() -> None:
    [spec] = Toolbox().add(AsyncLookup)
    assert spec.is_async and spec.context_param == "ctx"
    assert "ctx" not in spec.parameters["properties"]
    kwargs = spec.validate({"key": "k"})
    kwargs["ctx"] = ToolContext(call_id="c-1", tool_name=spec.name)
    assert asyncio.run(spec.function(**kwargs)) == "k@c-1"


def test_decorated_model_tool_and_model_problems() -> None:
    [spec] = Toolbox().add(DecoratedModel)
    assert spec.name == "lookup_v2" and spec.options.timeout == 3
    with pytest.raises(UsageError, match="needs a run\\(self\\) method"):
        Toolbox().add(NoRun)
    with pytest.raises(UsageError, match="run\\(\\) parameter 'extra' is not a ToolContext"):
        Toolbox().add(BadRun)
    with pytest.raises(UsageError, match="pass the class SearchDocs, not an instance"):
        Toolbox().add(SearchDocs(query="x"))


def test_things_that_are_not_tools() -> None:
    with pytest.raises(UsageError, match=r"expected a function, a module, a \.py path"):
        Toolbox().add(42)


# --- modules and files --------------------------------------------------------------------

HELPERS = '''
from bridge.tools import manifest


@manifest
def shared(x: int) -> int:
    """Defined here, imported by the tools module."""
    return x
'''

TOOLS = '''
"""Tools for the tests."""

from helpers_mod import shared  # imported: not one of this module's tools

from bridge.tools import manifest


@manifest(timeout=2)
def add(a: int, b: int = 1) -> int:
    """Add two numbers."""
    return a + b


@manifest(name="negate")
def neg(a: int) -> int:
    return -a


def not_a_tool() -> None:
    pass
'''


@pytest.fixture
def tools_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "helpers_mod.py").write_text(HELPERS, encoding="utf-8")
    (tmp_path / "tools_mod.py").write_text(TOOLS, encoding="utf-8")
    (tmp_path / "empty_mod.py").write_text("def f():\n    pass\n", encoding="utf-8")
    (tmp_path / "broken_mod.py").write_text("import nonexistent_dep_xyz\n", encoding="utf-8")
    (tmp_path / "syntax_mod.py").write_text("def f(:\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in ("helpers_mod", "tools_mod", "empty_mod", "broken_mod", "syntax_mod"):
        sys.modules.pop(name, None)


def test_add_a_module_object(tools_dir: Path) -> None:
    import importlib

    module = importlib.import_module("tools_mod")
    box = Toolbox()
    specs = box.add(module)
    assert [s.name for s in specs] == ["add", "negate"]
    assert specs[0].origin == "tools_mod:add"
    assert specs[0].options.timeout == 2
    with pytest.raises(UsageError, match="module empty_mod has no @manifest functions"):
        box.add(importlib.import_module("empty_mod"))
    with pytest.raises(UsageError, match="apply to a single tool"):
        box.add(module, description="x")


@pytest.mark.parametrize("as_path", [True, False], ids=["Path", "str"])
def test_add_a_file(tools_dir: Path, as_path: bool) -> None:
    file = tools_dir / "tools_mod.py"
    box = Toolbox()
    specs = box.add(file if as_path else str(file))
    assert [s.name for s in specs] == ["add", "negate"]
    assert specs[0].origin == f"{file}:add"
    assert specs[0].function(**specs[0].validate({"a": "2"})) == 3
    assert box.manifests("appbuilder-sdk")[0]["function"]["name"] == "add"


def test_file_errors(tools_dir: Path) -> None:
    with pytest.raises(UsageError, match=r"no such file: .*missing\.py"):
        Toolbox().add(tools_dir / "missing.py")
    with pytest.raises(UsageError, match=r"is not a \.py file"):
        Toolbox().add(str(tools_dir / "notes.txt"))
    with pytest.raises(UsageError) as caught:
        Toolbox().add(tools_dir / "broken_mod.py")
    assert "ModuleNotFoundError: No module named 'nonexistent_dep_xyz'" in str(caught.value)
    with pytest.raises(UsageError, match="SyntaxError"):
        Toolbox().add(tools_dir / "syntax_mod.py")
    with pytest.raises(UsageError, match=r"empty_mod\.py has no @manifest functions"):
        Toolbox().add(tools_dir / "empty_mod.py")


def test_load_tools_from_files_and_modules(tools_dir: Path) -> None:
    box = load_tools([str(tools_dir / "tools_mod.py")])
    assert box.names() == ["add", "negate"]
    box2 = load_tools(["helpers_mod"])
    assert box2.names() == ["shared"]
    same = load_tools("helpers_mod", box)  # one SPEC as a string, into an existing toolbox
    assert same is box and box.names() == ["add", "negate", "shared"]


def test_load_tools_errors(tools_dir: Path) -> None:
    with pytest.raises(UsageError, match=r"no such file: .*nope\.py"):
        load_tools(["nope.py"])
    with pytest.raises(UsageError) as caught:
        load_tools(["no_such_module_xyz"])
    assert "no module named 'no_such_module_xyz'" in str(caught.value)
    assert "not installed or not on sys.path" in str(caught.value)
    with pytest.raises(UsageError) as caught:
        load_tools(["broken_mod"])
    assert str(caught.value) == (
        "cannot import broken_mod: ModuleNotFoundError: No module named 'nonexistent_dep_xyz'"
    )
    with pytest.raises(UsageError, match="module empty_mod has no @manifest functions"):
        load_tools(["empty_mod"])
    with pytest.raises(UsageError, match=r"expected a path to a \.py file or a module name"):
        load_tools(["not a spec!"])


# --- names, duplicates, state -------------------------------------------------------------


def test_duplicate_names_name_both_origins_and_suggest_a_fix() -> None:
    box = Toolbox([get_weather])

    def get_weather_v2(city: str) -> str:
        return city

    with pytest.raises(UsageError) as caught:
        box.add(get_weather_v2, name="get_weather")
    message = str(caught.value)
    assert "duplicate tool name 'get_weather'" in message
    assert f"already registered from {__name__}:get_weather" in message
    assert "test_duplicate_names_name_both_origins_and_suggest_a_fix.<locals>.get_weather_v2" in (
        message
    )
    assert "pass prefix= or name=" in message
    box.add(get_weather_v2, prefix="v2")
    assert box.names() == ["get_weather", "v2_get_weather_v2"]


def test_a_failed_add_registers_nothing() -> None:
    box = Toolbox()
    box.add(WeatherTools().today, name="weather_tools_week")
    with pytest.raises(UsageError, match="duplicate tool name 'weather_tools_week'"):
        box.add(WeatherTools)
    assert box.names() == ["weather_tools_week"]


def test_disable_enable_remove() -> None:
    box = Toolbox([get_weather, plain])
    box.disable("plain")
    assert box.get("plain") is None and "plain" not in box and len(box) == 1
    assert box.names() == ["get_weather"]
    assert box.names(include_disabled=True) == ["get_weather", "plain"]
    assert [m["function"]["name"] for m in box.manifests()] == ["get_weather"]
    # a disabled name is still taken
    with pytest.raises(UsageError, match=r"already registered from .*:plain \(disabled\)"):
        box.add(plain)
    box.enable("plain")
    assert box.names() == ["get_weather", "plain"]
    spec = box.get("plain")
    assert spec is not None and spec.enabled
    removed = box.remove("plain")
    assert removed.name == "plain" and box.names() == ["get_weather"]
    for action in (box.disable, box.enable, box.remove):
        with pytest.raises(UsageError, match="no tool named 'ghost'; tools: get_weather"):
            action("ghost")


def test_add_spec_from_another_source() -> None:
    def call(**kwargs: Any) -> str:
        return json.dumps(kwargs)

    spec = ToolSpec(
        name="http_get",
        description="Fetch a URL.",
        parameters={"type": "object", "properties": {"url": {"type": "string"}}},
        function=call,
        validate=lambda raw: dict(raw),
        origin="openapi:petstore",
    )
    box = Toolbox()
    assert box.add_spec(spec) is spec
    assert box.manifests("mcp")[0]["inputSchema"]["properties"] == {"url": {"type": "string"}}
    assert (
        box.manifests("appbuilder-sdk")[0]["function"]["parameters"]["properties"]["url"]["type"]
        == "str"
    )
    with pytest.raises(UsageError, match=r"duplicate tool name 'http_get'.*openapi:petstore"):
        box.add_spec(spec)
    with pytest.raises(UsageError, match="does not match"):
        box.add_spec(ToolSpec("bad name", "", {}, call, dict))
    with pytest.raises(UsageError, match="add_spec takes a ToolSpec"):
        box.add_spec("http_get")  # type: ignore[arg-type]


def test_manifests_in_every_dialect() -> None:
    box = Toolbox([get_weather, SearchDocs])
    for dialect in DIALECTS:
        names = [
            m["name"] if dialect == "mcp" else m["function"]["name"] for m in box.manifests(dialect)
        ]
        assert names == ["get_weather", "search_docs"]


# --- options ------------------------------------------------------------------------------


def test_add_keywords_override_decorator_options() -> None:
    def shout(result: Any) -> Any:
        return str(result).upper()

    [spec] = Toolbox().add(get_weather, timeout=10, after=shout)
    assert spec.options == ToolOptions(timeout=10, confirm=True, after=shout)
    [kept] = Toolbox().add(get_weather)
    assert kept.options == ToolOptions(timeout=5, confirm=True)
    [off] = Toolbox().add(get_weather, confirm=False, idempotent=True)
    assert off.options == ToolOptions(timeout=5, confirm=False, idempotent=True)
    specs = Toolbox().add(WeatherTools, timeout=1)
    assert [s.options.timeout for s in specs] == [1, 1]
    assert [s.options.idempotent for s in specs] == [False, True]
    with pytest.raises(UsageError, match=r"timeout must be a positive number .*got 0"):
        Toolbox().add(plain, timeout=0)
    with pytest.raises(UsageError, match="before must be a callable"):
        Toolbox().add(plain, before="upper")  # type: ignore[arg-type]


# --- validate(): coercion and every bad-argument case --------------------------------------


class Address(BaseModel):
    street: str
    city: str


def everything(
    count: int,
    ratio: float = 1.0,
    flag: bool = False,
    label: str = "",
    ids: list[int] | None = None,
    labels: dict[str, str] | None = None,
    address: Address | None = None,
    mode: Literal["fast", "safe"] = "fast",
    days: Annotated[int, Field(ge=1, le=7)] = 3,
    since: int | list[int] | None = None,
) -> dict[str, Any]:
    return locals()


SPEC = build_spec(everything)


def problems_of(raw: Any) -> list[str]:
    with pytest.raises(ArgumentError) as caught:
        SPEC.validate(raw)
    assert isinstance(caught.value, ValueError)
    return caught.value.problems


def test_lax_coercion() -> None:
    kwargs = SPEC.validate(
        {
            "count": "3",
            "ratio": "2.5",
            "flag": "true",
            "label": 42,
            "ids": "[1, 2]",
            "labels": '{"a": "b"}',
            "address": '{"street": "1 Road", "city": "Oslo"}',
            "days": "7",
        }
    )
    assert kwargs == {
        "count": 3,
        "ratio": 2.5,
        "flag": True,
        "label": "42",
        "ids": [1, 2],
        "labels": {"a": "b"},
        "address": Address(street="1 Road", city="Oslo"),
        "days": 7,
    }
    # arguments not sent are left out: the function's own defaults apply
    assert SPEC.validate({"count": 1}) == {"count": 1}
    assert everything(**SPEC.validate({"count": 1}))["days"] == 3
    # the whole arguments object may arrive as JSON text
    assert SPEC.validate('{"count": 2}') == {"count": 2}  # type: ignore[arg-type]
    assert build_spec(lambda: None, name="noop").validate("  ") == {}  # type: ignore[arg-type]


def test_missing_required_argument() -> None:
    assert problems_of({}) == ["count: missing required argument (expected an integer)"]


def test_wrong_type() -> None:
    assert problems_of({"count": "abc"}) == [
        'count: should be a valid integer, unable to parse string as an integer (got "abc")'
    ]
    assert problems_of({"count": 1, "flag": "maybe"}) == [
        'flag: should be a valid boolean, unable to interpret input (got "maybe")'
    ]


def test_unknown_arguments_list_the_accepted_names() -> None:
    accepted = "count, ratio, flag, label, ids, labels, address, mode, days, since"
    assert problems_of({"count": 1, "colour": "red"}) == [
        f"unknown argument 'colour': accepted arguments are {accepted}"
    ]
    assert problems_of({"count": 1, "a": 1, "b": 2}) == [
        f"unknown arguments 'a', 'b': accepted arguments are {accepted}"
    ]
    with pytest.raises(ArgumentError, match="unknown argument 'x': this tool takes no arguments"):
        build_spec(lambda: None, name="noop").validate({"x": 1})


def test_constraint_literal_and_nested_problems() -> None:
    assert problems_of({"count": 1, "days": 9}) == [
        "days: should be less than or equal to 7 (got 9)"
    ]
    assert problems_of({"count": 1, "mode": "turbo"}) == [
        "mode: should be 'fast' or 'safe' (got \"turbo\")"
    ]
    assert problems_of({"count": 1, "address": {"street": "1 Road"}}) == [
        "address.city: missing required field"
    ]
    assert problems_of({"count": 1, "ids": [1, "x"]}) == [
        'ids[1]: should be a valid integer, unable to parse string as an integer (got "x")'
    ]
    assert problems_of({"count": 1, "ids": "[1, oops"}) == [
        'ids: should be a valid list (got "[1, oops")'
    ]


def test_union_problem_is_one_line() -> None:
    assert problems_of({"count": 1, "since": {"a": 1}}) == [
        "since: matches none of the allowed types (should be a valid integer; should be a valid "
        'list) (got {"a": 1})'
    ]


def test_every_problem_at_once() -> None:
    problems = problems_of({"count": "x", "days": 0, "extra": 1})
    assert len(problems) == 3
    assert problems[0].startswith("unknown argument 'extra'")


def test_arguments_that_are_not_an_object() -> None:
    keys = "count, ratio, flag, label, ids, labels, address, mode, days, since"
    assert problems_of([1, 2]) == [
        f"arguments must be a JSON object with keys {keys} (got an array)"
    ]
    assert problems_of("[1, 2]") == [
        f"arguments must be a JSON object with keys {keys} (got an array)"
    ]
    [problem] = problems_of("{not json")
    assert problem.startswith("arguments are not valid JSON (Expecting property name")
    assert problem.endswith("send a JSON object")


def test_model_tool_errors_use_the_same_lines() -> None:
    [spec] = Toolbox().add(SearchDocs)
    with pytest.raises(ArgumentError) as caught:
        spec.validate({"limit": 0, "q": "x"})
    assert caught.value.problems == [
        "unknown argument 'q': accepted arguments are query, limit",
        "query: missing required argument (expected a string)",
        "limit: should be greater than or equal to 1 (got 0)",
    ]


# --- toolkits: description, prefix, selection, explicit toolkits ---------------------------


class Intranet:
    """Search and read the company intranet.

    Longer notes that stay out of each tool's description.
    """

    toolkit_description = "Search and read the company intranet."

    def search(self, query: str) -> list[str]:
        """Find pages."""
        return [query]

    def fetch(self, url: str) -> str:
        """Read one page."""
        return url

    @staticmethod
    def version() -> str:
        """The intranet's version."""
        return "1"

    def _token(self) -> str:
        return "secret"


class Weather:
    """Weather service toolkit."""

    description = "Forecasts from the national weather service."

    @manifest
    def today(self, city: str) -> str:
        """Today's weather."""
        return city


class Plain:
    def one(self) -> int:
        """One."""
        return 1

    def two(self) -> int:
        """Two."""
        return 2


def test_toolkit_description_is_kept_and_listed() -> None:
    box = Toolbox([Intranet, Weather, WeatherTools])
    search = box.get("intranet_search")
    assert search is not None
    assert search.toolkit == "intranet"
    assert search.toolkit_description == "Search and read the company intranet."
    assert (
        search.description
        == "Find pages. (part of intranet: Search and read the company intranet.)"
    )
    today = box.get("weather_today")
    assert today is not None and today.toolkit_description == (
        "Forecasts from the national weather service."
    )
    wt = box.get("weather_tools_today")
    assert wt is not None and wt.toolkit_description == "A toolkit: several tools sharing state."
    described = box.manifests("openai")[0]["function"]["description"]
    assert described.endswith("(part of intranet: Search and read the company intranet.)")


def test_an_explicit_toolkit_exposes_its_public_methods() -> None:
    box = Toolbox([Intranet()])
    assert box.names() == ["intranet_search", "intranet_fetch", "intranet_version"]
    spec = box.get("intranet_version")
    assert spec is not None and spec.function() == "1"


def test_toolkit_true_and_false_choose() -> None:
    assert Toolbox().add(Plain, toolkit=True)[0].name == "plain_one"
    assert [s.name for s in Toolbox().add(Plain(), toolkit=True, prefix="")] == ["one", "two"]
    with pytest.raises(UsageError, match="toolkit Plain has no @manifest methods"):
        Toolbox().add(Plain)
    with pytest.raises(UsageError, match="toolkit=True applies to a class or an instance"):
        Toolbox().add(plain, toolkit=True)
    with pytest.raises(UsageError, match="toolkit= must be True, False or None"):
        Toolbox().add(Plain, toolkit="yes")  # type: ignore[arg-type]
    # toolkit=False: a callable toolkit instance is one tool
    [spec] = Toolbox().add(CallableKit(), toolkit=False)
    assert (spec.name, spec.function(x=2)) == ("CallableKit", 2)
    assert Toolbox().add(CallableKit())[0].name == "callable_kit_ping"


class CallableKit:
    @manifest
    def ping(self) -> str:
        return "pong"

    def __call__(self, x: int) -> int:
        return x


def test_prefix_can_be_empty() -> None:
    box = Toolbox()
    assert [s.name for s in box.add(Intranet, prefix="")] == ["search", "fetch", "version"]
    assert [s.name for s in box.add(WeatherTools, prefix="")] == ["today", "week"]
    assert box.add(plain, prefix="")[0].name == "plain"
    with pytest.raises(UsageError, match="prefix= must be a string"):
        box.add(get_weather, prefix=3)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="prefix 'a b' is invalid"):
        box.add(Counted, prefix="a b")
    assert Counted.created == 0  # checked before the toolkit is created


class Counted:
    toolkit_name = "counted"
    created = 0

    def __init__(self) -> None:
        Counted.created += 1

    def one(self) -> int:
        return 1


def test_enable_and_exclude_choose_a_toolkits_methods() -> None:
    box = Toolbox()
    assert [s.name for s in box.add(Intranet, enable=["search", "fetch"])] == [
        "intranet_search",
        "intranet_fetch",
    ]
    assert [s.name for s in Toolbox().add(Intranet, exclude=["version"], prefix="i")] == [
        "i_search",
        "i_fetch",
    ]
    assert [s.name for s in Toolbox().add(Intranet, enable="fetch")] == ["intranet_fetch"]
    with pytest.raises(UsageError) as caught:
        Toolbox().add(Intranet, enable=["search", "serch"])
    assert str(caught.value) == (
        "enable= names 'serch', not a tool of the toolkit Intranet; its tools are: search, "
        "fetch, version"
    )
    with pytest.raises(UsageError, match="enable= takes a list of tool names"):
        Toolbox().add(Intranet, enable=[1])  # type: ignore[list-item]
    assert box.names() == ["intranet_search", "intranet_fetch"]


def test_the_console_api_lists_the_toolkit() -> None:
    from bridge.daemon.routers.tools import tool_info

    [spec, *_] = Toolbox().add(Intranet)
    info = tool_info(spec).model_dump()
    assert info["toolkit"] == "intranet"
    assert info["toolkit_description"] == "Search and read the company intranet."
    assert tool_info(build_spec(plain)).toolkit is None


# --- toolsets and kinds -------------------------------------------------------------------


def test_toolsets_compose() -> None:
    from bridge.tools.toolsets import (
        CombinedToolset,
        FilteredToolset,
        PrefixedToolset,
        RenamedToolset,
        SelectedToolset,
        StaticToolset,
    )

    base = StaticToolset([build_spec(get_weather), build_spec(plain)], label="the pair")
    assert [s.name for s in PrefixedToolset(base, "x").specs()] == ["x_get_weather", "x_plain"]
    assert [s.name for s in PrefixedToolset(base, "").specs()] == ["get_weather", "plain"]
    assert [s.name for s in FilteredToolset(base, lambda s: s.name == "plain").specs()] == ["plain"]
    renamed = RenamedToolset(base, {"plain": "echo"})
    assert [s.name for s in renamed.specs()] == ["get_weather", "echo"]
    with pytest.raises(UsageError, match="cannot rename 'nope': not a tool of the pair"):
        RenamedToolset(base, {"nope": "x"}).specs()
    with pytest.raises(UsageError, match=r"duplicate tool name 'plain' in the both: from "):
        CombinedToolset([base, SelectedToolset(base, enable=["plain"])], label="the both").specs()
    with pytest.raises(UsageError, match="prefix 'a b' is invalid"):
        PrefixedToolset(base, "a b")
    with pytest.raises(UsageError, match="longer than 64 characters"):
        PrefixedToolset(base, "p" * 60).specs()


class Closing:
    def __init__(self) -> None:
        self.closed = 0

    def specs(self) -> list[ToolSpec]:
        return [build_spec(plain, name="from_source")]

    def close(self) -> None:
        self.closed += 1


def test_a_toolset_is_added_and_closed_with_the_toolbox() -> None:
    source = Closing()
    box = Toolbox()
    assert [s.name for s in box.add(source, prefix="s")] == ["s_from_source"]
    other = Closing()
    box.add_toolset(other)
    box.close()
    assert (source.closed, other.closed) == (1, 1)
    with pytest.raises(UsageError, match="add_toolset takes an object with specs"):
        box.add_toolset(42)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="name= and description= apply to a single tool"):
        Toolbox().add(Closing(), name="x")


def test_a_one_tool_kind_that_looks_like_a_toolkit_is_ambiguous(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from bridge.tools import kinds
    from bridge.tools.kinds.base import Kind, Request
    from bridge.tools.toolsets import StaticToolset

    def build(obj: Any, request: Request) -> StaticToolset:
        return StaticToolset([build_spec(obj.run, name=request.name or "runner")])

    runner = Kind("runner", lambda obj: callable(getattr(obj, "run", None)), build, one_tool=True)
    monkeypatch.setattr(kinds, "KINDS", [runner, *kinds.KINDS])

    class Runs:
        def run(self, x: int) -> int:
            return x

    class RunsAndMore(Runs):
        @manifest
        def other(self) -> int:
            return 1

    class Declared(Runs):
        toolkit_name = "declared"

    assert Toolbox().add(Runs())[0].name == "runner"
    with pytest.raises(UsageError) as caught:
        Toolbox().add(RunsAndMore())
    assert "RunsAndMore is ambiguous: one tool (a runner) or a toolkit" in str(caught.value)
    assert "pass toolkit=True" in str(caught.value) and "toolkit=False" in str(caught.value)
    assert Toolbox().add(RunsAndMore(), toolkit=False)[0].name == "runner"
    assert Toolbox().add(RunsAndMore(), toolkit=True)[0].name == "runs_and_more_other"
    assert Toolbox().add(Declared()).pop().name == "declared_run"


# --- direct calls (behaviour tested with the dispatcher; here: what Toolbox passes on) ------


def test_call_and_acall_run_one_tool() -> None:
    box = Toolbox([plain, AsyncLookup])
    run = box.call("plain", {"x": "3"}, call_id="c-7")
    assert (run.call_id, run.output, run.value, run.error) == ("c-7", "3", 3, None)
    run = asyncio.run(box.acall("async_lookup", '{"key": "k"}', call_id="c-8"))
    assert run.output == "k@c-8"
    assert box.call("nope").error == "unknown_tool"
    with pytest.raises(UsageError, match="timeout must be a positive"):
        box.call("plain", {"x": 1}, timeout=-1)


def takes_more(a: int, **extra: Any) -> str:
    """Passes unknown arguments on when not strict."""
    return f"{a} {sorted(extra)}"


def test_strict_is_an_add_keyword_for_every_tool_of_an_object() -> None:
    [spec] = Toolbox().add(takes_more, strict=False)
    assert spec.options.strict is False
    assert Toolbox([spec]).call("takes_more", {"a": 1, "z": 2}).output == "1 ['z']"
    assert Toolbox([takes_more]).call("takes_more", {"a": 1, "z": 2}).error == ("invalid_arguments")


def test_a_ready_spec_is_added_as_it_is() -> None:
    spec = build_spec(get_weather)
    box = Toolbox([spec])
    assert box.get("get_weather") is spec
    [renamed] = box.add(spec, name="weather", description="Weather.")
    assert (renamed.name, renamed.description, renamed.options) == (
        "weather",
        "Weather.",
        spec.options,
    )
    assert box.add(spec, prefix="v2")[0].name == "v2_get_weather"
    with pytest.raises(UsageError, match="confirm=, timeout= cannot change the ready ToolSpec"):
        Toolbox().add(spec, timeout=3, confirm=False)
