"""Decorators, docstrings, type hints and build_spec: everything that describes one tool.

Real (not postponed) annotations here, so that types defined inside a test resolve; postponed
ones are tested with a module file (FUTURE_MODULE).
"""

import asyncio
import dataclasses
import functools
import logging
import textwrap
from pathlib import Path
from typing import Annotated, Any

import pytest
from pydantic import Field

from bridge.errors import UsageError
from bridge.loading import load_module_file
from bridge.tools import (
    Manifest,
    ToolOptions,
    build_spec,
    manifest,
    manifest_parameter,
    manifest_return,
)


def params_of(fn: Any, dialect: str = "appbuilder") -> dict[str, Any]:
    result: dict[str, Any] = Manifest.from_function(fn, dialect)["function"]["parameters"]
    return result


# --- decorators ---------------------------------------------------------------------------


def test_decorators_return_the_same_callable_object() -> None:
    def double(x: int) -> int:
        return 2 * x

    decorated = manifest_return("Twice x.")(
        manifest_parameter("x", "A number.")(manifest(description="Double it.")(double))
    )
    assert decorated is double
    assert double(4) == 8
    assert double.__name__ == "double"


def test_manifest_without_parentheses() -> None:
    @manifest
    def ping() -> str:
        """Answer pong."""
        return "pong"

    assert ping() == "pong"
    assert Manifest.from_function(ping)["function"]["description"] == "Answer pong."


def test_async_function_stays_a_coroutine_function() -> None:
    @manifest(name="fetch")
    async def fetch(url: str) -> str:
        return url

    spec = build_spec(fetch)
    assert spec.is_async
    assert asyncio.run(fetch("u")) == "u"


def test_all_options_from_the_decorator() -> None:
    def before(args: dict[str, Any]) -> dict[str, Any]:
        return args

    @manifest(timeout=5, idempotent=True, confirm=True, before=before, after=str)
    def rm(path: str) -> None:
        """Delete a file."""

    assert build_spec(rm).options == ToolOptions(
        timeout=5, idempotent=True, confirm=True, before=before, after=str
    )
    # a mapping overrides one option at a time; a ToolOptions replaces them all
    assert build_spec(rm, options={"timeout": 9, "confirm": None}).options.timeout == 9
    assert build_spec(rm, options={"timeout": 9, "confirm": None}).options.confirm is True
    assert build_spec(rm, options=ToolOptions()).options == ToolOptions()


def test_default_options() -> None:
    def plain(x: int) -> int:
        return x

    assert build_spec(plain).options == ToolOptions()


def test_every_problem_in_one_usage_error_naming_the_function() -> None:
    @manifest(name="bad name!", timeout=-1, idempotent="yes")  # type: ignore[arg-type]
    @manifest_parameter("mode", type="strng")
    @manifest_parameter("level", enum=[1, 2])
    def broken(level: str, /, mode) -> None:  # type: ignore[no-untyped-def]
        pass

    with pytest.raises(UsageError) as caught:
        build_spec(broken)
    message = str(caught.value)
    assert "test_every_problem_in_one_usage_error_naming_the_function.<locals>.broken" in message
    assert "tool name 'bad name!' is invalid" in message
    assert "name='bad_name'" in message
    assert "timeout must be a positive number of seconds or None (got -1)" in message
    assert "idempotent must be True or False (got 'yes')" in message
    assert "parameter 'mode': unknown type 'strng'" in message
    assert "parameter 'level' is positional-only" in message
    assert "problems)" in message


def test_enum_values_must_fit_the_type() -> None:
    @manifest_parameter("level", enum=["high", "low"])
    def level_up(level: int) -> None:
        pass

    with pytest.raises(UsageError, match="enum value 'high' does not fit its type int"):
        build_spec(level_up)


def test_enum_and_example_are_shown_and_enforced() -> None:
    @manifest_parameter("size", enum=[1, 2, 4], example=2)
    def grow(size: int = 1) -> int:
        return size

    prop = params_of(grow)["properties"]["size"]
    assert prop["enum"] == [1, 2, 4]
    assert prop["examples"] == [2]
    spec = build_spec(grow)
    assert spec.validate({"size": "4"}) == {"size": 4}
    with pytest.raises(Exception, match=r"size: must be one of 1, 2, 4 \(got 3\)"):
        spec.validate({"size": 3})


def test_example_must_be_json() -> None:
    @manifest_parameter("when", example=object())
    def at(when: str) -> None:
        pass

    with pytest.raises(UsageError, match=r"example .* is not JSON"):
        build_spec(at)


def test_decorating_twice_is_a_problem() -> None:
    @manifest_parameter("x", "one")
    @manifest_parameter("x", "two")
    @manifest()
    @manifest()
    def twice(x: int) -> None:
        pass

    with pytest.raises(UsageError) as caught:
        build_spec(twice)
    assert "@manifest is applied more than once" in str(caught.value)
    assert "parameter 'x' is described by two @manifest_parameter" in str(caught.value)


def test_decorator_type_fills_in_for_an_unannotated_parameter() -> None:
    @manifest_parameter("count", type="integer")
    def count_up(count):  # type: ignore[no-untyped-def]
        return count

    assert params_of(count_up)["properties"]["count"] == {"type": "integer"}
    assert build_spec(count_up).validate({"count": "7"}) == {"count": 7}


def test_a_contradicting_decorator_type_or_required_is_logged_and_ignored(
    caplog: pytest.LogCaptureFixture,
) -> None:
    @manifest_parameter("n", type="string", required=False)
    def square(n: int) -> int:
        return n * n

    with caplog.at_level(logging.WARNING, logger="bridge.tools.function_spec"):
        parameters = params_of(square)
    assert parameters["properties"]["n"]["type"] == "integer"
    assert parameters["required"] == ["n"]
    text = caplog.text
    assert "@manifest_parameter(type='string') for 'n' contradicts its annotation" in text
    assert "@manifest_parameter(required=False) contradicts the signature" in text


def test_decorator_describing_a_missing_parameter_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    @manifest_parameter("ghost", "Nobody.")
    def solo(x: int) -> int:
        return x

    with caplog.at_level(logging.WARNING, logger="bridge.tools.function_spec"):
        assert list(params_of(solo)["properties"]) == ["x"]
    assert "describes 'ghost', which is not a parameter" in caplog.text


def test_decorators_on_static_methods() -> None:
    class Tools:
        @manifest(name="tools_now")
        @staticmethod
        def now() -> str:
            """The time."""
            return "noon"

    assert Tools.now() == "noon"
    assert build_spec(Tools.now).name == "tools_now"


def test_manifest_return_wins_over_the_docstring_returns() -> None:
    @manifest_return("The converted amount, rounded to cents.")
    def convert(amount: float) -> float:
        """Convert money.

        Returns:
            Something the docstring says.
        """
        return amount

    description = Manifest.from_function(convert)["function"]["description"]
    assert description == "Convert money.\n\nReturns: The converted amount, rounded to cents."


def test_decorator_description_replaces_the_docstring_but_keeps_manifest_return() -> None:
    @manifest(description="Convert.")
    @manifest_return("The amount.")
    def convert(amount: float) -> float:
        """Docstring.

        Returns:
            Not this.
        """
        return amount

    assert Manifest.from_function(convert)["function"]["description"] == (
        "Convert.\n\nReturns: The amount."
    )


# --- docstrings -----------------------------------------------------------------------------


def google(city: str, days: int = 1) -> str:
    """Forecast the weather.

    Uses the national service.

    Args:
        city: The city.
        days: How many days.

    Returns:
        A short text.
    """
    return city


def numpy_style(city: str, days: int = 1) -> str:
    """Forecast the weather.

    Uses the national service.

    Parameters
    ----------
    city : str
        The city.
    days : int
        How many days.

    Returns
    -------
    str
        A short text.
    """
    return city


def rest(city: str, days: int = 1) -> str:
    """Forecast the weather.

    Uses the national service.

    :param city: The city.
    :param days: How many days.
    :returns: A short text.
    """
    return city


def epydoc(city: str, days: int = 1) -> str:
    """Forecast the weather.

    Uses the national service.

    @param city: The city.
    @param days: How many days.
    @return: A short text.
    """
    return city


@pytest.mark.parametrize("fn", [google, numpy_style, rest, epydoc])
def test_every_docstring_style_gives_the_same_manifest(fn: Any) -> None:
    function = Manifest.from_function(fn)["function"]
    assert function["description"] == (
        "Forecast the weather.\n\nUses the national service.\n\nReturns: A short text."
    )
    props = function["parameters"]["properties"]
    assert props["city"] == {"description": "The city.", "type": "string"}
    assert props["days"] == {"default": 1, "description": "How many days.", "type": "integer"}


def test_malformed_docstrings_never_raise(caplog: pytest.LogCaptureFixture) -> None:
    def odd(x: int) -> int:
        """:param x

        Args:
            x (int: broken
        @param
        Returns
        -------
        """
        return x

    def ghosts(x: int) -> int:
        """Sum.

        Args:
            x: A number.
            y: Not a parameter.
        """
        return x

    Manifest.from_function(odd)
    with caplog.at_level(logging.WARNING, logger="bridge.tools.function_spec"):
        assert list(params_of(ghosts)["properties"]) == ["x"]
    assert "the docstring documents 'y', which is not a parameter; ignored" in caplog.text


def test_documenting_args_and_kwargs_is_not_a_ghost(caplog: pytest.LogCaptureFixture) -> None:
    def spread(x: int, *args: int, **kwargs: str) -> int:
        """Spread.

        Args:
            x: A number.
            *args: Extra numbers.
            **kwargs: Extra labels.
        """
        return x

    with caplog.at_level(logging.WARNING):
        parameters = params_of(spread)
    assert list(parameters["properties"]) == ["x"]
    assert "not a parameter" not in caplog.text


def test_description_precedence_decorator_then_annotated_then_docstring() -> None:
    @manifest_parameter("a", "From the decorator.")
    def ranked(
        a: Annotated[int, Field(description="From Field.")],
        b: Annotated[int, Field(description="From Field.")],
        c: Annotated[int, "From Annotated."],
        d: int,
        e: int = Field(3, description="From a Field default."),
    ) -> None:
        """Ranked.

        Args:
            a: From the docstring.
            b: From the docstring.
            c: From the docstring.
            d: From the docstring.
            e: From the docstring.
        """

    props = params_of(ranked)["properties"]
    assert props["a"]["description"] == "From the decorator."
    assert props["b"]["description"] == "From Field."
    assert props["c"]["description"] == "From Annotated."
    assert props["d"]["description"] == "From the docstring."
    assert props["e"]["description"] == "From a Field default."


# --- signatures and type hints ------------------------------------------------------------


class Shapes:
    @manifest
    def area(self, width: float, height: float) -> float:
        return width * height

    @classmethod
    def unit(cls, name: str) -> str:
        return name


def test_self_and_cls_are_skipped() -> None:
    assert list(params_of(Shapes().area)["properties"]) == ["width", "height"]
    assert list(params_of(Shapes.unit)["properties"]) == ["name"]
    # an unbound function that names its first parameter self is a method: skip it too
    assert list(params_of(Shapes.area)["properties"]) == ["width", "height"]


def test_var_args_are_left_out_and_never_receive_arguments() -> None:
    def collect(first: str, *rest: str, **options: int) -> str:
        return first

    spec = build_spec(collect)
    assert list(spec.parameters["properties"]) == ["first"]
    assert spec.validate({"first": "a", "rest": ["b"], "options": {"x": 1}}) == {"first": "a"}


def test_unannotated_parameters_are_accepted_without_a_type() -> None:
    def anything(value, count=2):  # type: ignore[no-untyped-def]
        return value

    parameters = params_of(anything)
    assert parameters["properties"] == {"value": {}, "count": {"default": 2}}
    assert parameters["required"] == ["value"]
    assert build_spec(anything).validate({"value": [1, {"a": None}]}) == {"value": [1, {"a": None}]}


def test_defaults_are_shown_as_json() -> None:
    import enum

    class Level(enum.Enum):
        LOW = "low"

    sentinel = object()

    def defaults(
        level: Level = Level.LOW,
        pair: tuple[int, int] = (1, 2),
        maybe: str | None = None,
        opaque: Any = sentinel,
    ) -> None:
        pass

    props = params_of(defaults)["properties"]
    assert props["level"]["default"] == "low"
    assert props["pair"]["default"] == [1, 2]
    assert props["maybe"] == {"type": "string"}  # leaving it out already means None
    assert "default" not in props["opaque"]  # not JSON: left out, no crash


def test_none_default_on_a_non_optional_type_accepts_null() -> None:
    def greet(name: str = None) -> str:  # type: ignore[assignment]  # noqa: RUF013
        return name or "you"

    spec = build_spec(greet)
    assert spec.parameters["properties"]["name"] == {"type": "string"}
    assert spec.validate({"name": None}) == {"name": None}
    assert spec.validate({}) == {}


def test_field_default_gives_the_real_default_to_the_function() -> None:
    def page(  # type: ignore[no-untyped-def]
        size: int = Field(20, ge=1, le=100),
        tags: list[str] = Field(default_factory=list),  # noqa: B008
    ):
        return size, tags

    spec = build_spec(page)
    props = spec.parameters["properties"]
    assert props["size"] == {"default": 20, "maximum": 100, "minimum": 1, "type": "integer"}
    kwargs = spec.validate({})
    assert kwargs == {"size": 20, "tags": []}
    assert page(**kwargs) == (20, [])
    with pytest.raises(Exception, match=r"size: should be less than or equal to 100"):
        spec.validate({"size": 101})


def test_functools_wraps_partial_and_callable_objects() -> None:
    def base(city: str, unit: str = "c") -> str:
        """Weather."""
        return city + unit

    @functools.wraps(base)
    def wrapper(*args: Any, **kwargs: Any) -> str:
        return base(*args, **kwargs)

    assert list(params_of(wrapper)["properties"]) == ["city", "unit"]
    partial = functools.partial(base, unit="f")
    assert build_spec(partial, name="weather_f").validate({"city": "X"}) == {"city": "X"}

    class Greeter:
        """Say hello."""

        def __call__(self, who: str) -> str:
            return f"hello {who}"

    spec = build_spec(Greeter(), name="greet")
    assert list(spec.parameters["properties"]) == ["who"]
    assert not spec.is_async

    class AsyncGreeter:
        async def __call__(self, who: str) -> str:
            return who

    assert build_spec(AsyncGreeter(), name="agreet").is_async


def test_positional_only_and_two_contexts_are_problems() -> None:
    from bridge.tools.context import ToolContext

    def two(a: ToolContext, b: ToolContext, x: int) -> None:
        pass

    with pytest.raises(UsageError, match="'a' and 'b' are both ToolContext"):
        build_spec(two)


def test_unsupported_types_name_the_parameter() -> None:
    class Opaque:
        pass

    def uses(handle: Opaque, ok: int) -> None:
        pass

    with pytest.raises(UsageError) as caught:
        build_spec(uses)
    assert "parameter 'handle': type" in str(caught.value)
    assert "Opaque" in str(caught.value)
    assert "is not supported" in str(caught.value)


def test_parameter_names_that_pydantic_reserves_are_fine() -> None:
    def odd_names(
        model_config: int, _private: str, json: bool = False, model_fields: int = 0
    ) -> None:
        pass

    spec = build_spec(odd_names)
    assert list(spec.parameters["properties"]) == [
        "model_config",
        "_private",
        "json",
        "model_fields",
    ]
    assert spec.validate({"model_config": "1", "_private": "p", "json": "true"}) == {
        "model_config": 1,
        "_private": "p",
        "json": True,
    }


def test_from_function_accepts_a_pydantic_model_tool() -> None:
    from pydantic import BaseModel

    class Echo(BaseModel):
        """Say it back."""

        text: str

        def run(self) -> str:
            return self.text

    tool = Manifest.from_function(Echo)
    assert tool["function"]["name"] == "echo"
    assert tool["function"]["description"] == "Say it back."
    assert tool["function"]["parameters"]["properties"] == {"text": {"type": "string"}}


def test_classes_and_non_callables_are_refused() -> None:
    with pytest.raises(UsageError, match=r"use Toolbox\.add"):
        build_spec(Shapes)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="not callable"):
        build_spec(42)  # type: ignore[arg-type]


# --- `from __future__ import annotations` modules -----------------------------------------

FUTURE_MODULE = '''
from __future__ import annotations

import dataclasses
from typing import Annotated, Literal

from pydantic import BaseModel, Field

from bridge.tools import manifest, manifest_parameter
from bridge.tools.context import ToolContext


class Address(BaseModel):
    street: str
    city: str = Field(description="City name.")


@dataclasses.dataclass
class Point:
    x: float
    y: float


@manifest
def ship(
    ctx: ToolContext,
    to: Address,
    where: Point,
    speed: Literal["slow", "fast"] = "slow",
    note: str | None = None,
    weight: Annotated[float, Field(gt=0, description="Kilograms.")] = 1.0,
) -> str:
    """Ship a parcel.

    Args:
        to: Destination.
    """
    return to.city


def helper():
    class Local(BaseModel):
        x: int

    @manifest
    def inner(value: Local) -> None:
        pass

    return inner
'''


def test_future_annotations_module(tmp_path: Path) -> None:
    path = tmp_path / "future_tools.py"
    path.write_text(textwrap.dedent(FUTURE_MODULE), encoding="utf-8")
    module = load_module_file(path)

    spec = build_spec(module.ship)
    assert spec.context_param == "ctx"
    props = spec.parameters["properties"]
    assert list(props) == ["to", "where", "speed", "note", "weight"]
    function = Manifest.from_function(module.ship)["function"]
    inlined = function["parameters"]["properties"]
    assert inlined["to"]["description"] == "Destination."
    assert inlined["to"]["properties"]["city"] == {"description": "City name.", "type": "string"}
    assert inlined["where"]["required"] == ["x", "y"]
    assert inlined["speed"] == {"default": "slow", "enum": ["slow", "fast"], "type": "string"}
    assert inlined["note"] == {"type": "string"}
    assert inlined["weight"]["exclusiveMinimum"] == 0
    kwargs = spec.validate(
        {"to": '{"street": "1 Road", "city": "Oslo"}', "where": {"x": 1, "y": "2"}, "speed": "fast"}
    )
    assert kwargs["to"] == module.Address(street="1 Road", city="Oslo")
    assert kwargs["where"] == module.Point(1.0, 2.0)
    assert kwargs["speed"] == "fast"
    assert module.ship(None, **kwargs) == "Oslo"


LATE_MODULE = '''
from __future__ import annotations

from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from bridge.tools.context import ToolContext


def late(path: str, ctx: Optional[ToolContext] = None) -> str:
    """The context type is imported for type checking only."""
    return path
'''


def test_future_annotations_unresolvable_type_is_explained(tmp_path: Path) -> None:
    path = tmp_path / "future_local.py"
    path.write_text(textwrap.dedent(FUTURE_MODULE), encoding="utf-8")
    module = load_module_file(path)
    late_path = tmp_path / "future_late.py"
    late_path.write_text(LATE_MODULE, encoding="utf-8")
    spec = build_spec(load_module_file(late_path).late)
    assert spec.context_param == "ctx"
    assert list(spec.parameters["properties"]) == ["path"]
    with pytest.raises(UsageError) as caught:
        build_spec(module.helper())
    message = str(caught.value)
    assert "parameter 'value': cannot resolve its annotation 'Local'" in message
    assert "defined inside a function" in message


def test_dataclass_instances_reach_the_function() -> None:
    @dataclasses.dataclass
    class Size:
        w: int
        h: int

    def area(size: Size) -> int:
        return size.w * size.h

    spec = build_spec(area)
    kwargs = spec.validate({"size": {"w": "2", "h": 3}})
    assert kwargs == {"size": Size(2, 3)}
    assert area(**kwargs) == 6
