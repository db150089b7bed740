"""Lagent's documented examples, ported: actions with `run`, toolkits, named returns.

Lagent is never imported: its classes are written here in the shape Lagent documents
(`lagent/actions/base_action.py`), as a user's file would hold them, with `BaseAction` and
`tool_api` left out or replaced by `@manifest`.
"""

from __future__ import annotations

import json
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typing_extensions import TypedDict

from bridge import Bridge, load_tools, open_platform
from bridge.errors import UsageError
from bridge.tools import Dispatcher, Toolbox, manifest
from bridge.tools.kinds.actions import named_returns
from bridge.types import ToolCall, ToolRun


def call(toolbox: Toolbox, name: str, arguments: dict[str, Any]) -> ToolRun:
    [run] = Dispatcher(toolbox).run([ToolCall(call_id="c1", name=name, arguments=arguments)])
    return run


# --- BaseAction's docstring example: a simple tool ---------------------------------------------


class Bold:
    """Make text bold"""

    def run(self, text: str) -> str:
        """
        Args:
            text (str): input text

        Returns:
            str: bold text
        """
        return "**" + text + "**"


def test_an_action_class_is_one_tool_named_after_the_class() -> None:
    toolbox = Toolbox([Bold])
    assert toolbox.names() == ["bold"]  # not "bold_run"
    assert toolbox.manifests("openai") == [
        {
            "type": "function",
            "function": {
                "name": "bold",
                "description": "Make text bold\n\nReturns: bold text",
                "parameters": {
                    "type": "object",
                    "properties": {"text": {"type": "string", "description": "input text"}},
                    "required": ["text"],
                },
            },
        }
    ]
    run = call(toolbox, "bold", {"text": "hi"})
    assert (run.output, run.error) == ("**hi**", None)


def test_an_action_runs_in_a_conversation() -> None:
    with open_platform(emulator=True) as platform, Bridge(platform, [Bold()]) as bridge:
        result = bridge.ask("make this bold: hello")
    assert [run.output for run in result.tool_runs] == ["**hello**"]


def test_name_and_description_attributes_win_and_add_keywords_win_over_them() -> None:
    class Shout:
        name = "shout"
        description = "Shout the text."

        def run(self, text: str) -> str:
            """Upper-case the text."""
            return text.upper()

    [spec] = Toolbox().add(Shout())
    assert (spec.name, spec.description) == ("shout", "Shout the text.")
    [spec] = Toolbox().add(Shout, name="yell", description="Yell it.")
    assert (spec.name, spec.description) == ("yell", "Yell it.")


def test_the_docstring_of_run_wins_over_the_class_docstring_as_in_lagent() -> None:
    class Echo:
        """Class text."""

        async def run(self, text: str) -> str:
            """Repeat the text."""
            return text

    [spec] = Toolbox().add(Echo)
    assert (spec.name, spec.description, spec.is_async) == ("echo", "Repeat the text.", True)
    assert call(Toolbox([Echo]), "echo", {"text": "x"}).output == "x"


def test_manifest_on_run_names_the_tool() -> None:
    class Bold2:
        @manifest(name="embolden", description="Bold text.")
        def run(self, text: str) -> str:
            return f"**{text}**"

    [spec] = Toolbox().add(Bold2)
    assert (spec.name, spec.description) == ("embolden", "Bold text.")


# --- a Lagent BaseAction instance, by shape: name property, description dict ------------------


class LagentStyleBase:
    """What Lagent's BaseAction offers a tool: `name` (the class name) and `description` (a
    dict) properties, and `__call__(inputs, name)`, which is not how toolbridge calls it."""

    def __init__(self, description: dict[str, Any] | None = None) -> None:
        self._description = description or {"name": type(self).__name__, "description": ""}

    @property
    def name(self) -> str:
        return str(self._description["name"])

    @property
    def description(self) -> dict[str, Any]:
        return self._description

    def __call__(self, inputs: str, name: str = "run") -> Any:
        raise AssertionError("toolbridge calls run() with keyword arguments")


@dataclass
class ActionReturn:
    """Lagent's `ActionReturn` (lagent/schema.py), recognised by shape."""

    args: dict[str, Any] | None = None
    type: str | None = None
    result: list[dict[str, Any]] | None = None
    errmsg: str | None = None
    state: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


class Translate(LagentStyleBase):
    def run(self, text: str, fail: bool = False) -> ActionReturn:
        """Translate text.

        Args:
            text: what to translate
            fail: report an error instead
        """
        if fail:
            return ActionReturn(errmsg="translation service unavailable", state=-1002)
        return ActionReturn(result=[{"type": "text", "content": text[::-1]}])


def test_a_lagent_style_instance_keeps_its_name_and_its_dict_description() -> None:
    action = Translate({"name": "Translate", "description": "Translate text to Elvish."})
    [spec] = Toolbox().add(action)
    assert (spec.name, spec.description) == ("Translate", "Translate text to Elvish.")


def test_an_action_return_posts_its_text_and_its_errmsg_is_a_tool_error() -> None:
    toolbox = Toolbox([Translate()])
    assert call(toolbox, "Translate", {"text": "abc"}).output == "cba"
    failed = call(toolbox, "Translate", {"text": "abc", "fail": True})
    assert failed.error is not None
    assert "translation service unavailable" in failed.output


# --- named returns: tool_api(explode_return=True) and returns_named_value=True --------------


class Foo:
    def run(self, a: int, b: int) -> dict[str, int]:
        """A simple function

        Args:
            a (int): a
            b (int): b

        Returns:
            dict: information of inputs
                * x: value of a
                * y: value of b
        """
        return {"x": a, "y": b}


class Divide:
    def run(self, a: int, b: int) -> tuple[int, int]:
        """Integer division.

        Returns:
            quotient (int): a // b
            remainder (int): a % b
        """
        return divmod(a, b)


def test_explode_return_members_give_an_output_schema() -> None:
    [spec] = Toolbox().add(Foo)
    assert spec.output_schema == {
        "type": "object",
        "properties": {"x": {"description": "value of a"}, "y": {"description": "value of b"}},
    }
    assert "* x: value of a" in spec.description


def test_named_return_values_name_the_members_of_a_returned_tuple() -> None:
    toolbox = Toolbox([Divide])
    [spec] = toolbox
    assert spec.output_schema == {
        "type": "object",
        "properties": {
            "quotient": {"type": "integer", "description": "a // b"},
            "remainder": {"type": "integer", "description": "a % b"},
        },
    }
    run = call(toolbox, "divide", {"a": 7, "b": 2})
    assert json.loads(run.output) == {"quotient": 3, "remainder": 1}


def test_lagents_own_return_data_is_used_when_present() -> None:
    class Stats(LagentStyleBase):
        def run(self, values: list[float]) -> tuple[float, float]:
            """Mean and spread."""
            return min(values), max(values)

    action = Stats(
        {
            "name": "Stats",
            "description": "Mean and spread.",
            "return_data": [
                {"name": "low", "description": "smallest", "type": "FLOAT"},
                {"name": "high", "description": "largest", "type": "FLOAT"},
            ],
        }
    )
    toolbox = Toolbox([action])
    [spec] = toolbox
    assert spec.output_schema is not None
    assert spec.output_schema["properties"]["low"] == {"type": "number", "description": "smallest"}
    assert json.loads(call(toolbox, "Stats", {"values": [3, 1, 2]}).output) == {"low": 1, "high": 3}


def test_a_plain_returns_section_documents_no_members() -> None:
    [spec] = Toolbox().add(Bold)
    assert spec.output_schema is None


# --- docs/en/tutorials/action.md: named returns, explode_return, enable ----------------------


class BoldNamed:
    def run(self, text: str) -> str:
        """make text bold

        Args:
            text (str): input text

        Returns:
            bold_text (str): bold text
        """
        return "**" + text + "**"


class ListArgs:
    def run(self, a: str, b: int, c: float = 0.0) -> dict[str, Any]:
        """Return arguments in dict format

        Args:
            a (str): a
            b (int): b
            c (float): c

        Returns:
            dict: input arguments
                - a (str): a
                - b (int): b
                - c: c
        """
        return {"a": a, "b": b, "c": c}


def test_the_tutorials_named_value_is_the_return_value_itself() -> None:
    toolbox = Toolbox([BoldNamed])
    [spec] = toolbox
    assert spec.output_schema is None  # one named value: no members
    assert spec.description == "make text bold\n\nReturns: bold_text (str): bold text"
    assert call(toolbox, "bold_named", {"text": "x"}).output == "**x**"


def test_the_tutorials_exploded_return_lists_its_members() -> None:
    toolbox = Toolbox([ListArgs])
    [spec] = toolbox
    assert spec.output_schema == {
        "type": "object",
        "properties": {
            "a": {"type": "string", "description": "a"},
            "b": {"type": "integer", "description": "b"},
            "c": {"description": "c"},
        },
    }
    output = call(toolbox, "list_args", {"a": "x", "b": "2"}).output
    assert json.loads(output) == {"a": "x", "b": 2, "c": 0.0}


def test_an_action_with_enable_false_is_registered_disabled() -> None:
    class Hidden:
        enable = False

        def run(self, text: str) -> str:
            return text

    toolbox = Toolbox([Hidden])
    assert (toolbox.names(), toolbox.names(include_disabled=True)) == ([], ["hidden"])
    toolbox.enable("hidden")
    assert toolbox.names() == ["hidden"]


class PhraseEmphasis:
    """a toolkit which provides different styles of text emphasis"""

    @manifest  # Lagent: @tool_api
    def bold(self, text: str) -> str:
        """make text bold

        Args:
            text (str): input text

        Returns:
            str: bold text
        """
        return "**" + text + "**"

    @manifest
    def italic(self, text: str) -> str:
        """make text italic

        Args:
            text (str): input text

        Returns:
            str: italic text
        """
        return "*" + text + "*"


def test_the_tutorials_toolkit_and_action_side_by_side() -> None:
    toolbox = Toolbox([Bold])
    toolbox.add(PhraseEmphasis, prefix="emphasis")
    assert toolbox.names() == ["bold", "emphasis_bold", "emphasis_italic"]
    italic = toolbox.get("emphasis_italic")
    assert italic is not None
    assert italic.toolkit_description == (
        "a toolkit which provides different styles of text emphasis"
    )
    assert "different styles of text emphasis" in italic.description
    assert call(toolbox, "emphasis_italic", {"text": "x"}).output == "*x*"


# --- BaseAction's docstring example: a toolkit with several APIs ------------------------------


class Calculator:
    """Calculator"""

    @manifest
    def add(self, a: int, b: int) -> int:
        """Add operation

        Args:
            a (int): augend
            b (int): addend

        Returns:
            int: sum
        """
        return a + b

    @manifest
    def sub(self, a: int, b: int) -> int:
        """Subtraction operation

        Args:
            a (int): minuend
            b (int): subtrahend

        Returns:
            int: difference
        """
        return a - b


def test_the_toolkit_example_keeps_its_description_and_takes_an_empty_prefix() -> None:
    toolbox = Toolbox()
    specs = toolbox.add(Calculator)
    assert [spec.name for spec in specs] == ["calculator_add", "calculator_sub"]
    assert {spec.toolkit_description for spec in specs} == {"Calculator"}
    assert call(toolbox, "calculator_sub", {"a": 5, "b": 3}).output == "2"
    assert [spec.name for spec in Toolbox().add(Calculator(), prefix="")] == ["add", "sub"]


# --- load_tools(file) finds actions ------------------------------------------------------------


def test_load_tools_finds_the_actions_of_a_file(tmp_path: Path) -> None:
    path = tmp_path / "lagent_tools.py"
    path.write_text(
        textwrap.dedent(
            '''
            class BaseAction:
                """A stand-in for lagent.actions.BaseAction."""

            class Bold(BaseAction):
                """Make text bold"""

                def run(self, text: str) -> str:
                    return "**" + text + "**"

            class Runner:
                """A helper with a run() method, not a tool."""

                def run(self) -> None: ...
            '''
        ),
        encoding="utf-8",
    )
    assert load_tools(str(path)).names() == ["bold"]


# --- mistakes ------------------------------------------------------------------------------


def test_an_action_class_that_needs_arguments_asks_for_an_instance() -> None:
    class Search:
        def __init__(self, api_key: str) -> None:
            self.api_key = api_key

        def run(self, query: str) -> str:
            return query

    with pytest.raises(UsageError, match=r"cannot create the action .*Search without arguments"):
        Toolbox().add(Search)
    assert Toolbox().add(Search("k"))[0].name == "search"


@pytest.mark.parametrize(
    ("attribute", "value", "expected"),
    [
        ("name", 3, r"\.name must be a string \(got int 3\)"),
        ("description", ["x"], r"\.description must be a string \(got list"),
    ],
)
def test_a_name_or_description_that_is_not_text_is_refused(
    attribute: str, value: Any, expected: str
) -> None:
    class Odd:
        def run(self, text: str) -> str:
            return text

    setattr(Odd, attribute, value)
    with pytest.raises(UsageError, match=expected):
        Toolbox().add(Odd)


def test_a_run_that_cannot_be_described_names_the_problem() -> None:
    class Positional:
        def run(self, text: str, /) -> str:
            return text

    with pytest.raises(UsageError, match="positional-only"):
        Toolbox().add(Positional)


def test_a_thread_is_not_an_action() -> None:
    import threading

    with pytest.raises(UsageError):
        Toolbox().add(threading.Thread)


def test_run_and_tool_apis_together_are_ambiguous_until_toolkit_says() -> None:
    # Lagent refuses a class with both; here toolkit= says which is meant.
    class Both:
        def run(self, text: str) -> str:
            return text

        @manifest
        def other(self, text: str) -> str:
            return text

    with pytest.raises(UsageError, match="ambiguous"):
        Toolbox().add(Both)
    assert [spec.name for spec in Toolbox().add(Both, toolkit=False)] == ["both"]
    assert [spec.name for spec in Toolbox().add(Both, toolkit=True, prefix="")] == ["other"]


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        (None, []),
        ("Sum.\n\nReturns:\n    int: sum\n", []),
        ("Sum.\n\nReturns:\n    x (int): a\n    y: b\n", []),
        (
            "Pair.\n\nReturns:\n    dict: a pair\n        - x (int): first\n        - y: second\n"
            "\nRaises:\n    ValueError: never\n",
            [
                {"name": "x", "description": "first", "type": "integer"},
                {"name": "y", "description": "second"},
            ],
        ),
        (
            "Pair.\n\nReturns:\n    x (list[str]): names\n    y (Foo): other\n",
            [
                {"name": "x", "description": "names", "type": "array"},
                {"name": "y", "description": "other"},
            ],
        ),
        ("Pair.\n\nReturns\n-------\nint\n    sum\n", []),
    ],
)
def test_which_returns_sections_document_members(
    doc: str | None, expected: list[dict[str, str]]
) -> None:
    assert named_returns(doc) == expected


class Pair(TypedDict):
    first: int


def test_an_annotation_with_members_wins_over_documented_ones() -> None:
    class Annotated:
        def run(self, a: int) -> Pair:
            """Pair.

            Returns:
                dict: the pair
                    * x: first
            """
            return {"first": a}

    [spec] = Toolbox().add(Annotated)
    assert spec.output_schema is None or "first" in spec.output_schema.get("properties", {})


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.sampled_from(["Returns:", "    dict: x", "        * a: b", "    a (int): b", ""]),
            st.text(max_size=30),
        ),
        max_size=8,
    )
)
def test_reading_returns_never_fails(lines: list[str]) -> None:
    members = named_returns("\n".join(lines))
    assert all(set(member) <= {"name", "description", "type"} for member in members)
