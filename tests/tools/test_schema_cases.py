"""The acceptance data (tests/schema_cases.py): every case, both decorator orders, ToolContext."""

from __future__ import annotations

import importlib.util
import sys
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Optional

import pytest
from jsonschema import Draft202012Validator

from bridge.errors import UsageError
from bridge.tools import Manifest, build_spec, manifest, manifest_parameter
from bridge.tools.context import ToolContext

_CASES_PATH = Path(__file__).resolve().parent.parent / "schema_cases.py"


def _load_cases() -> types.ModuleType:
    if "schema_cases" in sys.modules:
        return sys.modules["schema_cases"]
    spec = importlib.util.spec_from_file_location("schema_cases", _CASES_PATH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["schema_cases"] = module  # dataclasses look their module up while defining
    spec.loader.exec_module(module)
    return module


cases = _load_cases()

_SUB_ONE = ("items", "additionalProperties", "not", "if", "then", "else", "contains")
_SUB_LIST = ("anyOf", "allOf", "oneOf", "prefixItems")
_SUB_MAP = ("properties", "patternProperties", "$defs")


def subschemas(node: Any) -> Iterator[dict[str, Any]]:
    """Every schema inside `node` (not the data in default/enum/examples)."""
    if not isinstance(node, dict):
        return
    yield node
    for key, value in node.items():
        if key in _SUB_ONE:
            yield from subschemas(value)
        elif key in _SUB_LIST and isinstance(value, list):
            for item in value:
                yield from subschemas(item)
        elif key in _SUB_MAP and isinstance(value, dict):
            for item in value.values():
                yield from subschemas(item)


def enum_values(node: Any) -> list[Any]:
    found: list[Any] = []
    for schema in subschemas(node):
        found.extend(schema.get("enum", []))
    return found


def check_global_rules(parameters: dict[str, Any]) -> None:
    Draft202012Validator.check_schema(parameters)
    assert parameters["type"] == "object"
    for schema in subschemas(parameters):
        assert "$ref" not in schema and "$defs" not in schema, schema
        assert "title" not in schema, schema
        kinds = schema.get("type")
        kinds = kinds if isinstance(kinds, list) else [kinds]
        if "object" in kinds:
            assert "properties" in schema, schema
        if "array" in kinds:
            assert "items" in schema, schema


def check_expectations(function: dict[str, Any], expect: dict[str, Any]) -> None:
    parameters = function["parameters"]
    props = parameters["properties"]
    if "description" in expect:
        assert function["description"] == expect["description"]
    for text in expect.get("description_has", []):
        assert text in function["description"]
    if "required" in expect:
        assert sorted(parameters.get("required", [])) == sorted(expect["required"])
    for param, values in expect.get("props", {}).items():
        for key, value in values.items():
            assert props[param][key] == value, (param, key, props[param])
    for param, keys in expect.get("props_has", {}).items():
        for key in keys:
            assert key in props[param], (param, key, props[param])
    for param in expect.get("absent", []):
        assert param not in props
    for param, values in expect.get("enum", {}).items():
        assert sorted(enum_values(props[param])) == sorted(values)


PLAIN = [name for name, expect in cases.EXPECT.items() if name not in cases.DECORATED]


@pytest.mark.parametrize("name", PLAIN)
def test_case(name: str) -> None:
    fn = getattr(cases, name)
    expect = cases.EXPECT[name]
    if "error" in expect:
        with pytest.raises(UsageError) as caught:
            Manifest.from_function(fn)
        assert expect["error"] in str(caught.value)
        return
    tool = Manifest.from_function(fn)
    assert tool["type"] == "function"
    assert tool["function"]["name"] == name
    check_global_rules(tool["function"]["parameters"])
    check_expectations(tool["function"], expect)


def _fresh(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A new function object with the same code (decorators record metadata on the object)."""
    assert isinstance(fn, types.FunctionType)
    copy = types.FunctionType(
        fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__
    )
    copy.__doc__ = fn.__doc__
    copy.__annotations__ = dict(fn.__annotations__)
    copy.__kwdefaults__ = fn.__kwdefaults__
    copy.__qualname__ = fn.__qualname__
    copy.__module__ = fn.__module__
    return copy


def _decorate(name: str, manifest_outermost: bool) -> Callable[..., Any]:
    recipe = cases.DECORATED[name]
    fn = _fresh(getattr(cases, name))
    outer = manifest(**recipe["manifest"])
    params = [manifest_parameter(**p) for p in recipe["parameters"]]
    if not manifest_outermost:
        fn = outer(fn)
    for decorate in reversed(params):  # the first listed is the outermost, as when stacked
        fn = decorate(fn)
    if manifest_outermost:
        fn = outer(fn)
    return fn


@pytest.mark.parametrize("name", sorted(cases.DECORATED))
@pytest.mark.parametrize("manifest_outermost", [True, False], ids=["manifest-out", "manifest-in"])
def test_decorated_case_in_both_orders(name: str, manifest_outermost: bool) -> None:
    fn = _decorate(name, manifest_outermost)
    tool = Manifest.from_function(fn)
    check_global_rules(tool["function"]["parameters"])
    check_expectations(tool["function"], cases.EXPECT[name])


def test_both_orders_give_identical_output_in_every_dialect() -> None:
    from bridge.tools import DIALECTS

    first, second = _decorate("unit_convert", True), _decorate("unit_convert", False)
    for dialect in DIALECTS:
        assert Manifest.from_function(first, dialect) == Manifest.from_function(second, dialect)


def test_decorated_function_stays_callable_and_enforces_enum() -> None:
    fn = _decorate("unit_convert", True)
    assert fn(1.0, "f") is None  # the case's body returns None; it must still run as before
    spec = build_spec(fn)
    assert spec.validate({"value": "3.5", "unit": "f"}) == {"value": 3.5, "unit": "f"}
    with pytest.raises(Exception, match=r"unit: must be one of \"c\", \"f\""):
        spec.validate({"value": 1, "unit": "k"})


# --- ToolContext, in any position (the end of schema_cases.py) --------------------------------


def audited(ctx: ToolContext, path: str) -> str:
    """Read a file on behalf of the conversation."""
    return path


def audited2(path: str, ctx: ToolContext) -> str:
    """Read a file on behalf of the conversation."""
    return path


def audited_optional(path: str, ctx: Optional[ToolContext] = None) -> str:  # noqa: UP045
    """Read a file; the context is optional."""
    return path


def audited_union(ctx: ToolContext | None, path: str) -> str:
    """Read a file; the context is written as `ToolContext | None`."""
    return path


@pytest.mark.parametrize("fn", [audited, audited2, audited_optional, audited_union])
def test_tool_context_is_injected_not_described(fn: Callable[..., Any]) -> None:
    spec = build_spec(fn)
    tool = Manifest.from_function(fn)
    parameters = tool["function"]["parameters"]
    check_global_rules(parameters)
    assert parameters["required"] == ["path"]
    assert "ctx" not in parameters["properties"]
    assert spec.context_param == "ctx"
    # the model cannot smuggle a value into the context parameter
    with pytest.raises(Exception, match="unknown argument 'ctx'"):
        spec.validate({"path": "/tmp/x", "ctx": "forged"})
    for dialect in ("openai", "openai-strict", "mcp", "appbuilder-sdk"):
        assert "ctx" not in str(Manifest.from_function(fn, dialect))


def test_non_ascii_name_error_names_the_rule_and_suggests_a_name() -> None:
    with pytest.raises(UsageError) as caught:
        Manifest.from_function(cases.查询订单)
    message = str(caught.value)
    assert "^[A-Za-z0-9_-]{1,64}$" in message
    assert "查询订单" in message  # names the function (its __qualname__)
    assert "name='tool_" in message
    # the suggestion is itself a valid name
    suggested = message.split("name='")[1].split("'")[0]
    assert build_spec(cases.查询订单, name=suggested).name == suggested
