"""`fill` builds a shape's schema from a compiled literal, or copies it when it cannot."""

from __future__ import annotations

import json
import math
from typing import Any

from pydantic import BaseModel

from bridge.tools._shapes import Shape, _filler, fill, placeholder, placeholders


class _Model(BaseModel):
    pass


def _shape(parameters: dict[str, Any]) -> Shape:
    return Shape(_Model, parameters, frozenset(), (), tuple(placeholders(parameters)))


SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "a": {"type": "integer", "description": placeholder(0), "maximum": 10, "minimum": -0.0},
        "b": {
            "anyOf": [{"type": "string"}, {"type": "null"}],
            "default": None,
            "examples": ["x'\"\\\n\x00é", 1.5e300, True, False, 2**80],
        },
        "c": {"items": {"$ref": "#/$defs/Item"}, "description": placeholder(1), "type": "array"},
    },
    "required": ["a", "c"],
    "$defs": {"Item": {"properties": {"description": {"type": "string"}}, "type": "object"}},
}


def test_literal_fill_equals_the_copy_and_shares_nothing() -> None:
    shape = _shape(SCHEMA)
    texts = {placeholder(0): "first", placeholder(1): "second"}
    first = fill(shape, texts)
    assert shape.filler and shape.filler[0] is not None  # the compiled path was taken
    expected = json.loads(json.dumps(SCHEMA))
    expected["properties"]["a"]["description"] = "first"
    expected["properties"]["c"]["description"] = "second"
    assert json.dumps(first) == json.dumps(expected)
    assert math.copysign(1, first["properties"]["a"]["minimum"]) == -1
    first["properties"]["b"]["examples"].append("changed")
    first["$defs"]["Item"]["type"] = "changed"
    second = fill(shape, texts)
    assert json.dumps(second) == json.dumps(expected)
    assert json.dumps(shape.parameters) == json.dumps(SCHEMA)


def test_data_that_is_not_plain_json_is_copied_instead() -> None:
    for odd in (float("nan"), float("inf"), (1, 2), {1: "int key"}, object()):
        parameters = {"properties": {"a": {"description": placeholder(0), "default": odd}}}
        assert _filler(parameters) is None
    shape = _shape({"properties": {"a": {"description": placeholder(0), "default": (1, 2)}}})
    filled = fill(shape, {placeholder(0): "text"})
    assert shape.filler == [None]
    assert filled == {"properties": {"a": {"description": "text", "default": (1, 2)}}}
