"""Each dialect, and byte parity with the AppBuilder SDK's `Manifest.from_function` (S1-S11).

No `from __future__ import annotations` here: the SDK writes string annotations verbatim, so the
samples must be defined with real annotations, exactly as in docs/wire/appbuilder.md.
"""

# ruff: noqa: UP006, UP007, UP035, UP045

import enum
import json
import sys
from collections.abc import Callable
from typing import Annotated, Any, Dict, List, Literal, Optional, Union

import pytest
from jsonschema import Draft202012Validator
from pydantic import BaseModel, Field

from bridge.errors import UsageError
from bridge.tools import DIALECTS, Manifest, build_spec, manifest, manifest_parameter, to_dialect

# --- the SDK samples ----------------------------------------------------------------------


def get_current_weather(location: str, unit: str) -> str:
    """Get weather.

    Args:
        location (str): City.
    """
    return ""


def add(a, b=2):  # type: ignore[no-untyped-def]
    return a + b


def search(
    query: str,
    top_k: int = 5,
    lang: Optional[str] = None,
    strict: bool = False,
    score: float = 0.5,
) -> list:  # type: ignore[type-arg]
    """Search docs."""
    return []


def stats(
    values: list[int],
    tags: List[str],
    meta: dict,  # type: ignore[type-arg]
    counts: Dict[str, int],
    pair: tuple,  # type: ignore[type-arg]
    uniq: set,  # type: ignore[type-arg]
) -> None:
    return None


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


def paint(
    color: Color,
    mode: Literal["fast", "slow"],
    level: Union[int, str],
    maybe: Union[int, None] = None,
) -> None:
    """Paint."""


def annotated(city: Annotated[str, "city name"], n: "int", *args, **kwargs):  # type: ignore[no-untyped-def]
    return city


def _s7() -> Callable[..., Any]:
    @manifest(description="获取天气")
    @manifest_parameter(name="location", description="城市名，例如：北京。")
    @manifest_parameter(name="unit", description="温度单位", type="string", required=False)
    def get_weather2(location: str, unit: str = "celsius") -> str:
        """This docstring is ignored because the decorator gives a description."""
        return location

    return get_weather2


def _s7_reversed() -> Callable[..., Any]:
    @manifest_parameter(name="location", description="城市名，例如：北京。")
    @manifest_parameter(name="unit", description="温度单位", type="string", required=False)
    @manifest(description="获取天气")
    def get_weather2(location: str, unit: str = "celsius") -> str:
        """This docstring is ignored because the decorator gives a description."""
        return location

    return get_weather2


def _s8() -> Callable[..., Any]:
    @manifest_parameter(name="location", description="城市", type="string", required=True)
    @manifest_parameter(
        name="extra", description="not in signature", type="integer", required=False
    )
    @manifest(name="weather_v3")
    def get_weather3(location, unit: Optional[str] = None):  # type: ignore[no-untyped-def]
        """Weather v3."""
        return location

    return get_weather3


def _s8_reversed() -> Callable[..., Any]:
    @manifest(name="weather_v3")
    @manifest_parameter(name="location", description="城市", type="string", required=True)
    @manifest_parameter(
        name="extra", description="not in signature", type="integer", required=False
    )
    def get_weather3(location, unit: Optional[str] = None):  # type: ignore[no-untyped-def]
        """Weather v3."""
        return location

    return get_weather3


class Lookup:
    def lookup(self, ids: Optional[List[int]], *, verbose: bool):  # type: ignore[no-untyped-def]
        return ids


def _s10() -> Callable[..., Any]:
    @manifest()
    def nodoc(x: int):  # type: ignore[no-untyped-def]
        return x

    return nodoc


def _s11() -> Callable[..., Any]:
    @manifest(description="d")
    @manifest_parameter(name="a", description="A", type="integer", required=False)
    def f(a: int, b):  # type: ignore[no-untyped-def]
        return a

    return f


def _s11_reversed() -> Callable[..., Any]:
    @manifest_parameter(name="a", description="A", type="integer", required=False)
    @manifest(description="d")
    def f(a: int, b):  # type: ignore[no-untyped-def]
        return a

    return f


def _condensed(
    name: str, description: str | None, props: list[tuple[str, str, bool, str | None]]
) -> str:
    """The JSON the SDK prints for the samples §5 lists in condensed form."""
    properties = {
        p: {"name": p, "type": t, "description": d, "required": r} for p, t, r, d in props
    }
    required = [p for p, _, r, _ in props if r]
    tool = {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": properties, "required": required},
        },
    }
    return json.dumps(tool, ensure_ascii=False)


S1 = (
    '{"type": "function", "function": {"name": "get_current_weather", "description": '
    '"Get weather.\\n\\n    Args:\\n        location (str): City.\\n    ", "parameters": '
    '{"type": "object", "properties": {"location": {"name": "location", "type": "str", '
    '"description": null, "required": true}, "unit": {"name": "unit", "type": "str", '
    '"description": null, "required": true}}, "required": ["location", "unit"]}}}'
)
S2 = (
    '{"type": "function", "function": {"name": "add", "description": null, "parameters": '
    '{"type": "object", "properties": {"a": {"name": "a", "type": "Any", "description": null, '
    '"required": true}, "b": {"name": "b", "type": "Any", "description": null, "required": '
    'false}}, "required": ["a"]}}}'
)
S5 = (
    '{"type": "function", "function": {"name": "paint", "description": "Paint.", "parameters": '
    '{"type": "object", "properties": {"color": {"name": "color", "type": "Color", '
    '"description": null, "required": true}, "mode": {"name": "mode", "type": '
    '"Literal[fast, slow]", "description": null, "required": true}, "level": {"name": "level", '
    '"type": "Union[int, str]", "description": null, "required": true}, "maybe": {"name": '
    '"maybe", "type": "Optional[int]", "description": null, "required": false}}, "required": '
    '["color", "mode", "level"]}}}'
)
S7 = (
    '{"type": "function", "function": {"name": "get_weather2", "description": "获取天气", '
    '"parameters": {"type": "object", "properties": {"location": {"name": "location", "type": '
    '"str", "description": "城市名，例如：北京。", "required": true}, "unit": {"name": "unit", '
    '"type": "str", "description": "温度单位", "required": false}}, "required": ["location"]}}}'
)
S8 = (
    '{"type": "function", "function": {"name": "weather_v3", "description": "Weather v3.", '
    '"parameters": {"type": "object", "properties": {"location": {"name": "location", "type": '
    '"string", "description": "城市", "required": true}, "unit": {"name": "unit", "type": '
    '"Optional[str]", "description": null, "required": false}, "extra": {"name": "extra", '
    '"type": "integer", "description": "not in signature", "required": false}}, "required": '
    '["location"]}}}'
)
S11 = (
    '{"type": "function", "function": {"name": "f", "description": "d", "parameters": {"type": '
    '"object", "properties": {"a": {"name": "a", "type": "int", "description": "A", '
    '"required": true}, "b": {"name": "b", "type": "Any", "description": null, "required": '
    'true}}, "required": ["a", "b"]}}}'
)
S3 = _condensed(
    "search",
    "Search docs.",
    [
        ("query", "str", True, None),
        ("top_k", "int", False, None),
        ("lang", "Optional[str]", False, None),
        ("strict", "bool", False, None),
        ("score", "float", False, None),
    ],
)
S4 = _condensed(
    "stats",
    None,
    [
        ("values", "List[int]", True, None),
        ("tags", "List[str]", True, None),
        ("meta", "Dict", True, None),
        ("counts", "Dict[str, int]", True, None),
        ("pair", "Tuple", True, None),
        ("uniq", "Set", True, None),
    ],
)
S6 = _condensed(
    "annotated",
    None,
    [
        ("city", "Annotated[str, city name]", True, "city name"),
        ("n", "int", True, None),
        ("args", "Any", True, None),
        ("kwargs", "Any", True, None),
    ],
)
S9 = _condensed(
    "lookup",
    None,
    [("ids", "Optional[List[int]]", False, None), ("verbose", "bool", True, None)],
)
S10 = _condensed("nodoc", None, [("x", "int", True, None)])

SDK_SAMPLES: list[tuple[str, Callable[[], Callable[..., Any]], str]] = [
    ("S1", lambda: get_current_weather, S1),
    ("S2", lambda: add, S2),
    ("S3", lambda: search, S3),
    ("S4", lambda: stats, S4),
    ("S5", lambda: paint, S5),
    ("S6", lambda: annotated, S6),
    ("S7", _s7, S7),
    ("S7-reversed", _s7_reversed, S7),
    ("S8", _s8, S8),
    ("S8-reversed", _s8_reversed, S8),
    ("S9", lambda: Lookup().lookup, S9),
    ("S10", _s10, S10),
    ("S11", _s11, S11),
    ("S11-reversed", _s11_reversed, S11),
]


@pytest.mark.parametrize(
    ("label", "make", "expected"), SDK_SAMPLES, ids=[s[0] for s in SDK_SAMPLES]
)
def test_appbuilder_sdk_dialect_is_byte_identical(
    label: str, make: Callable[[], Callable[..., Any]], expected: str
) -> None:
    if label == "S1" and sys.version_info >= (3, 13):
        pytest.skip("Python 3.13 strips docstring indentation, so __doc__ itself differs")
    tool = Manifest.from_function(make(), dialect="appbuilder-sdk")
    assert json.dumps(tool, ensure_ascii=False) == expected


def test_sdk_quirk_pep604_optional_is_kept() -> None:
    # SDK 1.1.5 maps typing.Union but not types.UnionType, so `int | None` prints oddly there;
    # parity means printing it the same way.
    def pep604(count: int | None = None, name: str | int = "x") -> None:
        return None

    props = Manifest.from_function(pep604, "appbuilder-sdk")["function"]["parameters"]["properties"]
    assert props["count"]["type"] == "UnionType[int]"
    assert props["name"]["type"] == "UnionType[str, int]"


def test_sdk_shape_survives_disable_and_enable() -> None:
    from bridge.tools import Toolbox

    box = Toolbox([search])
    before = box.manifests("appbuilder-sdk")
    box.disable("search")
    box.enable("search")
    assert box.manifests("appbuilder-sdk") == before
    assert json.dumps(before[0], ensure_ascii=False) == S3


def test_sdk_extra_parameters_are_dropped_when_the_model_sends_them() -> None:
    spec = build_spec(_s8())
    # S8's decorator-only "extra" and S6's *args/**kwargs are shown but never passed on
    assert spec.validate({"location": "Paris", "extra": 3}) == {"location": "Paris"}
    six = build_spec(annotated)
    assert six.validate({"city": "x", "n": "2", "args": [1], "kwargs": {}}) == {
        "city": "x",
        "n": 2,
    }


def test_sdk_dialect_keeps_a_toolbox_rename() -> None:
    from bridge.tools import Toolbox

    box = Toolbox()
    box.add(search, name="find_docs", description="Find documents.")
    tool = box.manifests("appbuilder-sdk")[0]
    assert tool["function"]["name"] == "find_docs"
    assert tool["function"]["description"] == "Find documents."


# --- JSON Schema dialects -----------------------------------------------------------------


class Address(BaseModel):
    street: str
    city: str = Field(description="City name.")
    zip_code: Optional[str] = None


class Node(BaseModel):
    label: str
    children: List["Node"] = []


def register(
    name: Annotated[str, Field(min_length=2, description="Full name.")],
    address: Address,
    days: Annotated[int, Field(ge=1, le=7)] = 3,
    tags: Optional[List[str]] = None,
) -> str:
    """Register a customer.

    Args:
        tags: Free labels.
    """
    return name


def test_appbuilder_dialect_whole_schema() -> None:
    tool = Manifest.from_function(register)
    assert tool == {
        "type": "function",
        "function": {
            "name": "register",
            "description": "Register a customer.",
            "parameters": {
                "type": "object",
                "properties": {
                    "name": {"description": "Full name.", "minLength": 2, "type": "string"},
                    "address": {
                        "properties": {
                            "street": {"type": "string"},
                            "city": {"description": "City name.", "type": "string"},
                            "zip_code": {
                                "anyOf": [{"type": "string"}, {"type": "null"}],
                                "default": None,
                            },
                        },
                        "required": ["street", "city"],
                        "type": "object",
                    },
                    "days": {"default": 3, "maximum": 7, "minimum": 1, "type": "integer"},
                    "tags": {
                        "description": "Free labels.",
                        "items": {"type": "string"},
                        "type": "array",
                    },
                },
                "required": ["name", "address"],
            },
        },
    }


def test_openai_dialect_keeps_defs_and_is_the_chat_completions_shape() -> None:
    tool = Manifest.from_function(register, "openai")
    assert set(tool) == {"type", "function"}
    assert tool["type"] == "function"
    function = tool["function"]
    assert set(function) == {"name", "description", "parameters"}
    parameters = function["parameters"]
    Draft202012Validator.check_schema(parameters)
    assert parameters["properties"]["address"] == {"$ref": "#/$defs/Address"}
    assert "Address" in parameters["$defs"]
    assert "title" not in json.dumps(parameters)


def test_openai_strict_dialect() -> None:
    tool = Manifest.from_function(register, "openai-strict")
    function = tool["function"]
    assert function["strict"] is True
    parameters = function["parameters"]
    Draft202012Validator.check_schema(parameters)
    text = json.dumps(parameters)
    assert "$ref" not in text and "$defs" not in text and '"default"' not in text
    assert parameters["additionalProperties"] is False
    assert parameters["required"] == ["name", "address", "days", "tags"]
    props = parameters["properties"]
    # optional arguments become nullable, required ones do not
    assert props["days"]["type"] == ["integer", "null"]
    assert props["name"]["type"] == "string"
    assert props["tags"] == {
        "anyOf": [{"items": {"type": "string"}, "type": "array"}, {"type": "null"}],
        "description": "Free labels.",
    }
    # unsupported keywords are dropped but still told to the model
    assert "minLength" not in props["name"]
    assert props["name"]["description"] == "Full name. (minLength: 2)"
    assert props["days"]["description"] == "(default: 3)"
    address = props["address"]
    assert address["additionalProperties"] is False
    assert address["required"] == ["street", "city", "zip_code"]
    assert address["properties"]["zip_code"]["anyOf"] == [{"type": "string"}, {"type": "null"}]


def test_openai_strict_null_for_an_optional_argument_means_its_default() -> None:
    spec = build_spec(register)
    kwargs = spec.validate(
        {"name": "Li Lei", "address": {"street": "1 Road", "city": "X"}, "days": None, "tags": None}
    )
    assert "days" not in kwargs  # the function's default (3) applies
    assert kwargs["tags"] is None


def free_form(labels: Dict[str, str], blob) -> None:  # type: ignore[no-untyped-def]
    """Takes a free-form mapping and an untyped value."""


def test_openai_strict_refuses_what_it_cannot_express() -> None:
    with pytest.raises(UsageError) as caught:
        Manifest.from_function(free_form, "openai-strict")
    message = str(caught.value)
    assert "tool 'free_form'" in message
    assert "arguments.labels: a free-form object (a dict) cannot be expressed" in message
    assert "arguments.blob: openai-strict needs a type" in message
    # the other dialects describe it fine
    assert Manifest.from_function(free_form, "openai")["function"]["name"] == "free_form"


def test_mcp_dialect() -> None:
    tool = Manifest.from_function(register, "mcp")
    assert set(tool) == {"name", "description", "inputSchema"}
    assert tool["name"] == "register"
    assert tool["inputSchema"]["type"] == "object"
    Draft202012Validator.check_schema(tool["inputSchema"])


def grow(root: Node, shape: tuple[int, str], uniq: set[int], anything: list) -> None:  # type: ignore[type-arg]
    """Recursive model, tuple, set, bare list."""


@pytest.mark.parametrize("dialect", [d for d in DIALECTS if d != "appbuilder-sdk"])
def test_every_dialect_is_valid_json_schema(dialect: str) -> None:
    fns: list[Callable[..., Any]] = [register, paint, search, stats, grow]
    if dialect == "openai-strict":
        fns = [register, paint, search]
    for fn in fns:
        tool = Manifest.from_function(fn, dialect)
        parameters = tool["inputSchema"] if dialect == "mcp" else tool["function"]["parameters"]
        Draft202012Validator.check_schema(parameters)


def test_appbuilder_inlines_recursion_and_gives_every_array_items() -> None:
    parameters = Manifest.from_function(grow)["function"]["parameters"]
    props = parameters["properties"]
    children = props["root"]["properties"]["children"]
    assert children["type"] == "array"
    assert children["items"]["type"] == "object"
    assert "recursive" in children["items"]["description"]
    assert props["shape"]["items"] == {"anyOf": [{"type": "integer"}, {"type": "string"}]}
    assert props["shape"]["prefixItems"] == [{"type": "integer"}, {"type": "string"}]
    assert props["uniq"] == {"items": {"type": "integer"}, "type": "array", "uniqueItems": True}
    assert props["anything"] == {"items": {}, "type": "array"}
    # validation still checks the whole recursive shape
    spec = build_spec(grow)
    with pytest.raises(Exception, match=r"root.children\[0\].children\[0\].label"):
        spec.validate(
            {
                "root": {"label": "a", "children": [{"label": "b", "children": [{}]}]},
                "shape": [1, "x"],
                "uniq": [1],
                "anything": [],
            }
        )


def test_unknown_dialect_lists_the_valid_ones() -> None:
    with pytest.raises(UsageError) as caught:
        Manifest.from_function(register, "gemini")
    assert "unknown dialect 'gemini'" in str(caught.value)
    for dialect in DIALECTS:
        assert dialect in str(caught.value)
    with pytest.raises(UsageError, match="valid dialects"):
        to_dialect(build_spec(register), "gemini")


def test_to_dialect_from_parts() -> None:
    parts = {
        "name": "http_get",
        "description": "Fetch a URL.",
        "parameters": {
            "type": "object",
            "properties": {"url": {"type": "string", "description": "The URL."}},
            "required": ["url"],
        },
    }
    assert to_dialect(parts, "mcp") == {
        "name": "http_get",
        "description": "Fetch a URL.",
        "inputSchema": parts["parameters"],
    }
    appbuilder = to_dialect(parts)
    assert appbuilder["function"]["parameters"]["properties"]["url"]["type"] == "string"
    sdk = to_dialect(parts, "appbuilder-sdk")
    assert sdk["function"]["parameters"]["properties"]["url"] == {
        "name": "url",
        "type": "str",
        "description": "The URL.",
        "required": True,
    }
    with pytest.raises(UsageError, match=r"missing: name"):
        to_dialect({"parameters": {}}, "openai")


def test_outputs_are_cached_but_callers_get_their_own_copy() -> None:
    spec = build_spec(register)
    first = to_dialect(spec, "appbuilder")
    first["function"]["parameters"]["properties"].clear()
    second = to_dialect(spec, "appbuilder")
    assert "address" in second["function"]["parameters"]["properties"]
    assert first is not second
