"""Registration is cheap (issue 14, point 4) without changing what it does.

Arguments models are shared by tools of one shape, validators are built on the first call,
docstrings and annotation texts are parsed once, HTTP argument schemas are checked once per
text: none of it may change a schema, a validation, an error or when an error is raised.
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path
from typing import Annotated, Any

import pytest
from pydantic import Field

from bridge.errors import UsageError
from bridge.tools import DIALECTS, ArgumentError, Toolbox, build_spec
from bridge.tools._validate import LazyValidator
from bridge.tools.schema import SHAPES


def _shaped(description: str) -> Any:
    """A new function of one fixed shape, its descriptions differing."""

    def lookup(city: str, days: Annotated[int, Field(ge=1, le=7)] = 1) -> str:
        return f"{city}:{days}"

    lookup.__doc__ = f"Look something up.\n\nArgs:\n    city: {description}\n"
    return lookup


def test_validator_is_built_on_the_first_call_and_reused() -> None:
    spec = build_spec(_shaped("City name."))
    validate = spec.validate
    assert isinstance(validate, LazyValidator)
    assert not validate.is_built
    assert validate({"city": "Oslo", "days": "2"}) == {"city": "Oslo", "days": 2}
    assert validate.is_built
    built = validate.validator()
    with pytest.raises(ArgumentError) as caught:
        validate({"city": "Oslo", "days": 9})
    assert caught.value.problems == ["days: should be less than or equal to 7 (got 9)"]
    assert validate.validator() is built


def test_tools_of_one_shape_share_a_model_but_keep_their_descriptions() -> None:
    first = build_spec(_shaped("First description."))
    builds = SHAPES.builds
    second = build_spec(_shaped("Second description."))
    assert SHAPES.builds == builds, "the second tool of the same shape built a new model"
    props = [spec.parameters["properties"] for spec in (first, second)]
    assert props[0]["city"]["description"] == "First description."
    assert props[1]["city"]["description"] == "Second description."
    assert props[0]["days"] == props[1]["days"]
    # A change to one tool's schema reaches no other tool of the shape.
    first.parameters["properties"]["days"]["maximum"] = 99
    assert second.parameters["properties"]["days"]["maximum"] == 7
    assert build_spec(_shaped("Third.")).parameters["properties"]["days"]["maximum"] == 7
    with pytest.raises(ArgumentError):
        second.validate({"city": "Oslo", "days": 9})


def test_shapes_that_only_compare_equal_are_kept_apart() -> None:
    def one(x: int | str, flag: bool = True, n: int = 1) -> str:
        return "one"

    def other(x: str | int, flag: bool = 1, n: int = True) -> str:  # type: ignore[assignment]
        return "other"

    a, b = build_spec(one).parameters, build_spec(other).parameters
    assert [s["type"] for s in a["properties"]["x"]["anyOf"]] == ["integer", "string"]
    assert [s["type"] for s in b["properties"]["x"]["anyOf"]] == ["string", "integer"]
    assert json.dumps(a["properties"]["flag"]["default"]) == "true"
    assert json.dumps(b["properties"]["flag"]["default"]) == "1"
    assert json.dumps(b["properties"]["n"]["default"]) == "true"


def test_equal_field_constraints_share_a_shape_and_different_ones_do_not() -> None:
    def low(n: Annotated[int, Field(ge=0)]) -> str:
        return ""

    def low_again(n: Annotated[int, Field(ge=0)]) -> str:
        return ""

    def high(n: Annotated[int, Field(ge=5)]) -> str:
        return ""

    build_spec(low)
    builds = SHAPES.builds
    build_spec(low_again)
    assert SHAPES.builds == builds
    spec = build_spec(high)
    assert SHAPES.builds == builds + 1
    assert spec.parameters["properties"]["n"]["minimum"] == 5


class Opaque:
    """A type pydantic cannot describe."""


def test_registration_errors_are_still_raised_at_registration() -> None:
    def good(handle: int, ok: int) -> None:
        pass

    def bad(handle: Opaque, ok: int) -> None:
        pass

    box = Toolbox()
    box.add(good)
    for _ in range(2):  # the failure is not cached as a success
        with pytest.raises(UsageError, match=r"parameter 'handle': type .*Opaque.* not supported"):
            box.add(bad)
    assert box.names() == ["good"]


def test_manifests_rendered_twice_are_equal_and_independent() -> None:
    box = Toolbox([_shaped("City name.")])
    for dialect in DIALECTS:
        first = box.manifests(dialect)
        second = box.manifests(dialect)
        assert first == second
        assert json.dumps(first) == json.dumps(second), "key order changed"
        json.dumps(first)  # plain JSON
        first[0]["changed"] = True
        assert "changed" not in box.manifests(dialect)[0]


def test_a_reloaded_toolbox_sees_a_changed_function(tmp_path: Path) -> None:
    path = tmp_path / "changing_tools.py"
    source = '''
        from __future__ import annotations

        from bridge.tools import manifest


        @manifest
        def lookup(city: {kind}) -> str:
            """{text}

            Args:
                city: {about}
            """
            return str(city)
    '''
    path.write_text(textwrap.dedent(source.format(kind="str", text="Old.", about="A city.")))
    old = Toolbox()
    old.add(str(path))
    path.write_text(textwrap.dedent(source.format(kind="int", text="New.", about="A number.")))
    new = Toolbox()
    new.add(str(path))
    before = old.manifests("openai")[0]["function"]
    after = new.manifests("openai")[0]["function"]
    assert before["description"] == "Old."
    assert before["parameters"]["properties"]["city"] == {
        "description": "A city.",
        "type": "string",
    }
    assert after["description"] == "New."
    assert after["parameters"]["properties"]["city"] == {
        "description": "A number.",
        "type": "integer",
    }
    assert new.call("lookup", {"city": "7"}).output == "7"
    assert new.call("lookup", {"city": "x"}).error is not None


def test_a_docstring_that_cannot_be_parsed_warns_every_time(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def odd(x: int) -> str:
        return ""

    odd.__doc__ = "Odd.\n\nRaises:\n    no colon here\n"
    for _ in range(2):
        caplog.clear()
        spec = build_spec(odd)
        assert spec.description.startswith("Odd.")
        assert "cannot parse the docstring" in caplog.text


def test_invalid_http_schemas_are_refused_every_time() -> None:
    from pydantic import ValidationError

    from bridge.sources._http_manifest import HttpTool

    tool = {"name": "t", "method": "GET", "url": "http://127.0.0.1:9/x"}
    bad = {"type": "object", "properties": {"a": {"type": "nonsense"}}}
    for _ in range(2):
        with pytest.raises(ValidationError, match="is not a valid JSON Schema at properties/a"):
            HttpTool.model_validate({**tool, "parameters": bad})
    good = {"type": "object", "properties": {"a": {"type": "string"}}}
    assert HttpTool.model_validate({**tool, "parameters": good}).parameters == good


GOOGLE_DOCSTRINGS = [
    # (docstring, read by the fast reader)
    ("Look up.\n\nArgs:\n    city: City name.\n    days (int, optional): How many.\n", True),
    (
        "Short.\nLong line\n\nmore.\n\nArgs:\n  *args: Rest.\n  **kw (dict): Options\n"
        "    over two lines.\n\nReturns:\n  dict[str, int]: Counts\n  by key.\n",
        True,
    ),
    ("S.\n\nArgs:\n    x:\n        On the next line.\n    y: \n\nReturns:\n    Nothing", True),
    ("S.\n\nAttributes:\n\tname (str?): Tabbed.\n\nArgs:\n\tq: Query.\n", True),
    ("Args:\n  x: a\nnot indented\nReturns: trailing", True),
    ("S.\n\nArgs:\n    x: One.\n\nArgs:\n    y: Repeated section.\n", False),
    ("S.\n\nArgs:\n    no colon\n", False),
    ("S.\n\nRaises:\n    ValueError: when.\n", False),
    ("S.\n\nReturns:\n    int: a number.\n\nYields:\n    str: words.\n", False),
]


@pytest.mark.parametrize(("doc", "fast_reader"), GOOGLE_DOCSTRINGS)
def test_the_fast_google_reader_reads_like_docstring_parser(doc: str, fast_reader: bool) -> None:
    from bridge.tools._describe import _GOOGLE
    from bridge.tools._googledoc import parse_google

    fast = parse_google(doc)
    assert (fast is not None) == fast_reader
    if fast is None:
        return  # left to docstring_parser
    parsed = _GOOGLE.parse(doc)
    returns = parsed.returns
    assert fast == (
        parsed.short_description,
        parsed.long_description,
        [(p.arg_name, p.type_name, p.description) for p in parsed.params],
        (returns.type_name, returns.description) if returns else None,
    )


@pytest.mark.skipif(sys.version_info < (3, 11), reason="3.10 always asks typing")
def test_plain_hints_resolve_as_typing_resolves_them(tmp_path: Path) -> None:
    import importlib.util
    import typing

    from bridge.tools._describe import _fast_hints

    path = tmp_path / "hinted_tools.py"
    path.write_text(
        textwrap.dedent(
            """
            from __future__ import annotations

            from typing import Annotated, Literal, Optional

            from pydantic import BaseModel, Field


            class Point(BaseModel):
                x: int


            def f(
                a: int,
                b: list[dict[str, float]] | None,
                c: Optional[Point],
                d: Literal["x", 1],
                e: Annotated[int, Field(ge=0), "text"] = 0,
                f: tuple[int, ...] = (),
            ) -> None:
                pass


            def g(a: "list['Point']", b: Undefined) -> int:  # noqa: F821
                return 0
            """
        ),
        encoding="utf-8",
    )
    spec = importlib.util.spec_from_file_location("hinted_tools", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fast = _fast_hints(module.f)
    assert fast is not None
    assert repr(fast) == repr(typing.get_type_hints(module.f, include_extras=True))
    assert _fast_hints(module.g) is None  # left to get_type_hints and its explanations
