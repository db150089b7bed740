"""`fill` builds a shape's schema from a compiled literal, or copies it when it cannot."""

from __future__ import annotations

import json
import math
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
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


class _Sneaky(str):
    """A str whose repr is code: the literal builder must not trust it."""

    def __repr__(self) -> str:
        return "__import__('os').getpid()"


def test_a_str_subclass_with_its_own_repr_is_copied_not_compiled() -> None:
    for odd in (_Sneaky("x"), {"k": [_Sneaky("y")]}):
        parameters = {"properties": {"a": {"description": placeholder(0), "default": odd}}}
        assert _filler(parameters) is None
    parameters = {"properties": {_Sneaky("a"): {"description": placeholder(0)}}}
    assert _filler(parameters) is None


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None)
@given(_json)
def test_any_json_is_built_exactly_as_a_copy(value: Any) -> None:
    parameters = {"properties": {"a": {"description": placeholder(0), "default": value}}}
    shape = _shape(parameters)
    filled = fill(shape, {placeholder(0): "text"})
    expected = {"properties": {"a": {"description": "text", "default": value}}}
    assert repr(filled) == repr(expected)  # repr: NaN-free floats, -0.0 and key order alike
    if shape.filler[0] is not None:  # infinities are copied
        assert filled["properties"]["a"] is not parameters["properties"]["a"]
