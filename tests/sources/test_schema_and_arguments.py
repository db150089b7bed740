"""The building blocks of every source: canonical schemas (references inlined, cycles cut,
OpenAPI 3.0 translated), argument checks for plain JSON Schemas, and Toolbox.add_source/close."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from bridge.errors import UsageError
from bridge.sources._arguments import SchemaArguments
from bridge.sources._schema import canonical_schema
from bridge.tools import Toolbox, ToolSpec
from bridge.tools.spec import ArgumentError
from tests.sources.schema_rules import appbuilder_problems


def test_references_of_every_local_kind_are_inlined() -> None:
    schema = {
        "type": "object",
        "title": "Arguments",
        "x-internal": True,
        "properties": {
            "a": {"$ref": "#/$defs/A"},
            "b": {"$ref": "#/definitions/B", "description": "the b"},
            "free": {"type": "object"},
            "list": {"type": "array"},
        },
        "$defs": {"A": {"type": "string", "title": "A"}},
        "definitions": {"B": {"type": "integer", "description": "ignored", "example": 3}},
    }
    out = canonical_schema(schema)
    assert out == {
        "type": "object",
        "properties": {
            "a": {"type": "string"},
            "b": {"type": "integer", "description": "the b", "examples": [3]},
            "free": {"type": "object", "properties": {}},
            "list": {"type": "array", "items": {}},
        },
    }
    assert schema["properties"]["a"] == {"$ref": "#/$defs/A"}, "the input is never changed"
    assert appbuilder_problems(out) == []


def test_cycles_external_and_dangling_references_are_noted() -> None:
    notes: list[str] = []
    schema = {
        "type": "object",
        "properties": {
            "tree": {"$ref": "#/$defs/Tree"},
            "other": {"$ref": "other.json#/X"},
            "gone": {"$ref": "#/$defs/Missing"},
        },
        "$defs": {
            "Tree": {
                "type": "object",
                "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/Tree"}}},
            }
        },
    }
    out = canonical_schema(schema, notes=notes)
    assert notes == [
        "the recursive reference to 'Tree' was cut",
        "the external reference 'other.json#/X' was not followed",
        "the reference '#/$defs/Missing' points to nothing in the document",
    ]
    kids = out["properties"]["tree"]["properties"]["kids"]["items"]
    assert kids["type"] == "object"
    assert kids["description"].startswith("(recursive: the same shape as Tree, cut here")
    assert out["properties"]["other"]["description"].startswith("(the external reference")
    Draft202012Validator.check_schema(out)
    assert appbuilder_problems(out) == []


def test_openapi_30_keywords() -> None:
    schema = {
        "type": "object",
        "properties": {
            "n": {"type": "integer", "minimum": 0, "exclusiveMinimum": True, "nullable": True},
            "color": {"type": "string", "enum": ["red"], "nullable": True},
            "ref": {"allOf": [{"type": "string"}], "nullable": True},
            "plain": {"type": "number", "maximum": 5, "exclusiveMaximum": False},
        },
    }
    out = canonical_schema(schema, openapi30=True)
    assert out["properties"] == {
        "n": {"type": ["integer", "null"], "exclusiveMinimum": 0},
        "color": {"type": ["string", "null"], "enum": ["red", None]},
        "ref": {"anyOf": [{"allOf": [{"type": "string"}]}, {"type": "null"}]},
        "plain": {"type": "number", "maximum": 5},
    }
    Draft202012Validator.check_schema(out)


def test_a_huge_expansion_is_cut() -> None:
    # Each level refers to the next twice: 2**20 nodes if fully inlined.
    defs = {
        f"L{i}": {"type": "object", "properties": {"a": {"$ref": f"#/$defs/L{i + 1}"},
                                                   "b": {"$ref": f"#/$defs/L{i + 1}"}}}
        for i in range(20)
    }  # fmt: skip
    defs["L20"] = {"type": "string"}
    notes: list[str] = []
    canonical_schema({"$ref": "#/$defs/L0", "$defs": defs}, notes=notes)
    assert any("the schema grew too large" in note for note in notes)


PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "n": {"type": "integer", "maximum": 10},
        "ratio": {"type": "number"},
        "on": {"type": "boolean"},
        "name": {"type": "string"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "maybe": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
    },
    "required": ["n"],
}


def test_lax_coercion_where_the_schema_is_clear() -> None:
    check = SchemaArguments(PARAMETERS)
    assert check(
        {"n": "7", "ratio": "2.5", "on": "true", "name": 42, "tags": '["a"]', "maybe": None}
    ) == {"n": 7, "ratio": 2.5, "on": True, "name": "42", "tags": ["a"], "maybe": None}
    assert check('{"n": 1}') == {"n": 1}
    assert check({"n": 1, "name": None}) == {"n": 1}, "null for an optional argument: not sent"


def test_problems_are_readable() -> None:
    check = SchemaArguments(PARAMETERS)
    with pytest.raises(ArgumentError) as info:
        check({"n": 11, "tags": [1], "colour": "red"})
    assert info.value.problems == [
        "unknown argument 'colour': accepted arguments are n, ratio, on, name, tags, maybe",
        "n: 11 is greater than the maximum of 10",
        "tags[0]: should be a string (got 1)",
    ]
    with pytest.raises(ArgumentError, match=r"n: missing required argument \(expected an integer"):
        check({})
    with pytest.raises(ArgumentError, match="arguments must be a JSON object with keys n, ratio"):
        check([1])
    with pytest.raises(ArgumentError, match="arguments are not valid JSON"):
        check("{nope")
    assert SchemaArguments({"type": "object"}, allow_unknown=True)({"x": 1}) == {"x": 1}


class _Source:
    def __init__(self, *names: str, log: list[str] | None = None, fail: bool = False) -> None:
        self.names = names
        self.log = log if log is not None else []
        self.fail = fail

    def specs(self) -> list[ToolSpec]:
        return [
            ToolSpec(
                name=name,
                description=name,
                parameters={"type": "object", "properties": {}},
                function=lambda name=name: name,
                validate=lambda raw: dict(raw),
                origin=f"test:{name}",
            )
            for name in self.names
        ]

    def close(self) -> None:
        self.log.append(",".join(self.names))
        if self.fail:
            raise RuntimeError("cannot close")


def test_toolbox_add_source_and_close(caplog: pytest.LogCaptureFixture) -> None:
    log: list[str] = []
    box = Toolbox()
    assert [spec.name for spec in box.add_source(_Source("a", "b", log=log))] == ["a", "b"]
    box.add_source(_Source("c", log=log, fail=True))
    clash = _Source("b", log=log)
    with pytest.raises(UsageError, match="duplicate tool name 'b': already registered from test:b"):
        box.add_source(clash)
    with pytest.raises(UsageError, match="add_source takes an object with specs"):
        box.add_source(object())  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="tool name 'bad name' does not match"):
        box.add_source(_Source("bad name"))
    assert box.names() == ["a", "b", "c"]
    with caplog.at_level(logging.ERROR):
        box.close()
    assert log == ["c", "a,b"], "newest first; a failing close does not stop the others"
    assert "closing the tool source" in caplog.text
    box.close()
    assert log == ["c", "a,b"], "closing twice closes nothing again"
