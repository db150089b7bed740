"""Typed returns: output schemas per dialect, return members in descriptions, docstring types,
and MCP `structuredContent` checked by the official MCP client (in memory)."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import Any, NamedTuple, Optional, TypedDict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mcp import Client
from pydantic import BaseModel, Field

from bridge.sources.mcp_server import mcp_server
from bridge.tools import Manifest, Toolbox, manifest, manifest_parameter, manifest_return
from bridge.tools._doctypes import type_from_doc
from bridge.tools.function_spec import build_spec
from bridge.tools.model_spec import build_model_spec
from bridge.tools.schema import to_dialect


class Weather(BaseModel):
    city: str = Field(description="The city.")
    temperature: float


class Point(TypedDict):
    x: int
    y: int


@dataclasses.dataclass
class Page:
    items: list[str]
    next: str | None = None


class Pair(NamedTuple):
    left: int
    right: int


WEATHER = {
    "properties": {
        "city": {"description": "The city.", "type": "string"},
        "temperature": {"type": "number"},
    },
    "required": ["city", "temperature"],
    "type": "object",
}
WEATHER_MEMBERS = "an object with fields city (string): The city.; temperature (number)"


def weather(city: str) -> Weather:
    """The weather now."""
    return Weather(city=city, temperature=21.5)


def point() -> Point:
    return {"x": 1, "y": 2}


def page() -> Page:
    return Page(items=["a"])


def pair() -> Pair:
    return Pair(1, 2)


def count() -> int:
    return 3


def names() -> list[str]:
    return ["a"]


def scores() -> dict[str, float]:
    return {"a": 1.0}


def maybe() -> Optional[Weather]:  # noqa: UP045 (the typing spelling is what people bring)
    return None


def many() -> list[Weather]:
    return []


CASES: list[tuple[Any, dict[str, Any], dict[str, Any], str | None]] = [
    # (function, output_schema, MCP outputSchema, members in the description)
    (weather, WEATHER, WEATHER, WEATHER_MEMBERS),
    (
        point,
        {
            "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}},
            "required": ["x", "y"],
            "type": "object",
        },
        {
            "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}},
            "required": ["x", "y"],
            "type": "object",
        },
        "an object with fields x (integer); y (integer)",
    ),
    (
        page,
        {
            "properties": {
                "items": {"items": {"type": "string"}, "type": "array"},
                "next": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None},
            },
            "required": ["items"],
            "type": "object",
        },
        {
            "properties": {
                "items": {"items": {"type": "string"}, "type": "array"},
                "next": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None},
            },
            "required": ["items"],
            "type": "object",
        },
        "an object with fields items (array of string); next (string or null, optional)",
    ),
    (
        pair,
        {
            "maxItems": 2,
            "minItems": 2,
            "prefixItems": [{"type": "integer"}, {"type": "integer"}],
            "type": "array",
        },
        {
            "type": "object",
            "properties": {
                "result": {
                    "maxItems": 2,
                    "minItems": 2,
                    "prefixItems": [{"type": "integer"}, {"type": "integer"}],
                    "type": "array",
                }
            },
            "required": ["result"],
        },
        None,
    ),
    (
        count,
        {"type": "integer"},
        {"type": "object", "properties": {"result": {"type": "integer"}}, "required": ["result"]},
        None,
    ),
    (
        names,
        {"items": {"type": "string"}, "type": "array"},
        {
            "type": "object",
            "properties": {"result": {"items": {"type": "string"}, "type": "array"}},
            "required": ["result"],
        },
        None,
    ),
    (
        scores,
        {"additionalProperties": {"type": "number"}, "type": "object"},
        {"additionalProperties": {"type": "number"}, "type": "object"},
        None,
    ),
    (
        maybe,
        {"$defs": {"Weather": WEATHER}, "anyOf": [{"$ref": "#/$defs/Weather"}, {"type": "null"}]},
        {
            "type": "object",
            "properties": {"result": {"anyOf": [{"$ref": "#/$defs/Weather"}, {"type": "null"}]}},
            "required": ["result"],
            "$defs": {"Weather": WEATHER},
        },
        WEATHER_MEMBERS.replace("an object", "an object (or null)"),
    ),
    (
        many,
        {"$defs": {"Weather": WEATHER}, "items": {"$ref": "#/$defs/Weather"}, "type": "array"},
        {
            "type": "object",
            "properties": {"result": {"items": {"$ref": "#/$defs/Weather"}, "type": "array"}},
            "required": ["result"],
            "$defs": {"Weather": WEATHER},
        },
        WEATHER_MEMBERS.replace("an object with", "a list of objects with"),
    ),
]


@pytest.mark.parametrize(
    ("fn", "schema", "mcp_schema", "members"), CASES, ids=[case[0].__name__ for case in CASES]
)
def test_each_return_kind_in_each_dialect(
    fn: Any, schema: dict[str, Any], mcp_schema: dict[str, Any], members: str | None
) -> None:
    spec = build_spec(fn)
    assert spec.output_schema == schema
    mcp = to_dialect(spec, "mcp")
    assert mcp["outputSchema"] == mcp_schema
    assert mcp["description"] == spec.description  # the schema says it: not repeated
    for dialect in ("appbuilder", "openai", "openai-strict"):
        described = to_dialect(spec, dialect)["function"]["description"]
        if members is None:
            assert described == spec.description, dialect
        else:
            expected = f"Returns: {members}."
            assert described == (
                f"{spec.description}\n\n{expected}" if spec.description else expected
            )
    # The SDK's own shape knows nothing of returns, byte for byte.
    sdk = to_dialect(spec, "appbuilder-sdk")["function"]["description"]
    assert sdk == Manifest.from_function(fn, dialect="appbuilder-sdk")["function"]["description"]
    assert "fields" not in (sdk or "")


def test_members_join_the_docstrings_returns_sentence_once() -> None:
    def forecast(city: str) -> Weather:
        """Forecast for a city.

        Args:
            city: Which city.

        Returns:
            Tomorrow's weather
        """
        return Weather(city=city, temperature=1)

    described = to_dialect(build_spec(forecast), "openai")["function"]["description"]
    assert described == (
        "Forecast for a city.\n\nReturns: Tomorrow's weather. An object with fields "
        "city (string): The city.; temperature (number)."
    )
    assert described.count("Returns:") == 1


@pytest.mark.parametrize("annotation", ["str", "None", "Any", ""])
def test_text_returns_have_no_output_schema(annotation: str) -> None:
    namespace: dict[str, Any] = {"Any": Any}
    arrow = f" -> {annotation}" if annotation else ""
    exec(f'def echo(text: str){arrow}:\n    """Echo."""\n    return text\n', namespace)
    spec = build_spec(namespace["echo"])
    assert spec.output_schema is None
    assert "outputSchema" not in to_dialect(spec, "mcp")
    assert to_dialect(spec, "openai")["function"]["description"] == "Echo."


def test_an_annotation_pydantic_cannot_describe_is_skipped_with_one_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Opaque:
        pass

    def make() -> Opaque:
        """Make one."""
        return Opaque()

    with caplog.at_level(logging.WARNING, logger="bridge.tools.returns"):
        spec = build_spec(make)
    assert spec.output_schema is None
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "make" in warnings[0] and "no output schema" in warnings[0]


def test_manifest_return_type_wins_over_the_annotation() -> None:
    @manifest_return("the weather", type=Weather)
    def typed() -> dict:  # type: ignore[type-arg]
        return {}

    @manifest_return("how many", type="list[int]")
    def named():  # type: ignore[no-untyped-def]
        return [1]

    @manifest_return("text", type="str")
    def text() -> int:
        return 1

    assert build_spec(typed).output_schema == WEATHER
    assert build_spec(named).output_schema == {"items": {"type": "integer"}, "type": "array"}
    assert build_spec(text).output_schema is None


def test_a_model_tool_takes_runs_return_annotation() -> None:
    class LookUp(BaseModel):
        """Look a city up."""

        city: str

        def run(self) -> Weather:
            return Weather(city=self.city, temperature=0)

    spec = build_model_spec(LookUp)
    assert spec.output_schema == WEATHER
    assert WEATHER_MEMBERS in to_dialect(spec, "appbuilder")["function"]["description"]


# Docstring types (Lagent types parameters only in its docstrings).


def google(a, b=None, c=1):  # type: ignore[no-untyped-def]
    """Add.

    Args:
        a (int): The first.
        b (list[str], optional): Names.
        c (Frobnicator): Unknown type.

    Returns:
        dict: The sums.
    """


def numpy(a, b=2.0):  # type: ignore[no-untyped-def]
    """Add.

    Parameters
    ----------
    a : int
        The first.
    b : float, optional
        The second.
    """


def rest(a, b):  # type: ignore[no-untyped-def]
    """Add.

    :param a: The first.
    :type a: int
    :param b: The second.
    :type b: Optional[bool]
    :rtype: list of int
    """


def test_docstring_types_fill_unannotated_parameters() -> None:
    spec = build_spec(google)
    props = spec.parameters["properties"]
    assert props["a"]["type"] == "integer"
    assert props["b"]["items"] == {"type": "string"}
    assert "type" not in props["c"]  # unknown name: left untyped, never an error
    assert spec.output_schema == {"additionalProperties": True, "type": "object"}
    assert spec.validate({"a": "3"})["a"] == 3
    assert spec.validate({"a": 1, "b": None})["b"] is None  # default None: nullable
    assert build_spec(numpy).parameters["properties"]["b"]["type"] == "number"
    rest_spec = build_spec(rest)
    assert rest_spec.parameters["properties"]["a"]["type"] == "integer"
    assert rest_spec.validate({"a": 1, "b": None})["b"] is None
    assert rest_spec.output_schema == {"items": {"type": "integer"}, "type": "array"}


def test_annotations_and_manifest_parameter_win_over_docstring_types() -> None:
    @manifest_parameter("b", type="string")
    def both(a: str, b):  # type: ignore[no-untyped-def]
        """Both.

        Args:
            a (int): Annotated as str.
            b (int): Declared a string.
        """

    props = build_spec(both).parameters["properties"]
    assert props["a"]["type"] == "string"
    assert props["b"]["type"] == "string"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("int", int),
        ("integer", int),
        ("str", str),
        ("list[int]", list[int]),
        ("List[str]", list[str]),
        ("list of str", list[str]),
        ("dict[str, float]", dict[str, float]),
        ("Optional[int]", Optional[int]),  # noqa: UP045
        ("int, optional", int),
        ("int or None", Optional[int]),  # noqa: UP045
        ("str | None", Optional[str]),  # noqa: UP045
        ("Frobnicator", None),
        ("list[", None),
        ("", None),
        ("dict[int, str]", None),
    ],
)
def test_docstring_type_names(text: str, expected: Any) -> None:
    assert type_from_doc(text) == expected


SECTION = st.sampled_from(
    ["Args:", "Returns:", "Parameters\n----------", ":type a:", ":rtype:", "a (", "b : ", "\n"]
)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(SECTION, st.text(max_size=30)), max_size=12))
def test_arbitrary_docstrings_never_raise(parts: list[str]) -> None:
    def tool(a, b=None):  # type: ignore[no-untyped-def]
        return a

    tool.__doc__ = "\n".join(parts)
    spec = build_spec(tool)
    for dialect in ("appbuilder", "openai", "mcp"):
        to_dialect(spec, dialect)


# MCP: the official client validates structuredContent against outputSchema.


def test_mcp_round_trip_with_structured_content() -> None:
    @manifest
    def wrong(n: int) -> int:
        """Says it returns an integer."""
        return "not a number"  # type: ignore[return-value]

    toolbox = Toolbox()
    for fn in (weather, names, scores, wrong):
        toolbox.add(fn)
    toolbox.add(count)

    async def main() -> dict[str, Any]:
        async with Client(mcp_server(toolbox)) as client:
            listed = {tool.name: tool for tool in (await client.list_tools()).tools}
            return {
                "listed": listed,
                "weather": await client.call_tool("weather", {"city": "Oslo"}),
                "names": await client.call_tool("names", {}),
                "scores": await client.call_tool("scores", {}),
                "count": await client.call_tool("count", {}),
                "wrong": await client.call_tool("wrong", {"n": 1}),
            }

    seen = asyncio.run(asyncio.wait_for(main(), 60))
    assert seen["listed"]["weather"].output_schema == WEATHER
    assert seen["listed"]["count"].output_schema["properties"]["result"] == {"type": "integer"}
    assert seen["weather"].structured_content == {"city": "Oslo", "temperature": 21.5}
    assert seen["weather"].content[0].text == '{"city": "Oslo", "temperature": 21.5}'
    assert seen["names"].structured_content == {"result": ["a"]}
    assert seen["scores"].structured_content == {"a": 1.0}
    assert seen["count"].structured_content == {"result": 3}
    assert seen["count"].content[0].text == "3"
    assert seen["wrong"].is_error is True
    assert "does not match its declared return type" in seen["wrong"].content[0].text
