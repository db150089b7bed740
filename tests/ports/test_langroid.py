"""Langroid's documented `ToolMessage` examples, ported.

Langroid is never imported: `ToolMessage` below is written in the shape of
`langroid/agent/tool_message.py` (a pydantic model with `request`, `purpose` and `id` fields,
`_allow_llm_use`, `examples()` and `instructions()` classmethods), and the tools are those of
Langroid's quick start (`docs/quick-start/chat-agent-tool.md`) and its notes on handlers
(`docs/notes/tool-message-handler.md`).
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any, ClassVar

import pytest
from pydantic import BaseModel, ConfigDict, Field

from bridge import Bridge, load_tools, open_platform
from bridge.errors import UsageError
from bridge.platforms.openai_chat.text_tools import tools_prompt
from bridge.tools import ConversationScope, Dispatcher, Toolbox, ToolContext
from bridge.types import ToolCall, ToolRun


def call(
    toolbox: Toolbox, name: str, arguments: Any, scope: ConversationScope | None = None
) -> ToolRun:
    [run] = Dispatcher(toolbox).run(
        [ToolCall(call_id="c1", name=name, arguments=arguments)], scope=scope
    )
    return run


class ToolMessage(BaseModel):
    """Langroid's base class, as far as its shape goes.

    Attributes:
        request (str): name of agent method to map to.
        purpose (str): purpose of agent method, expressed in general terms.
    """

    request: str
    purpose: str
    id: str = ""

    _allow_llm_use: bool = True

    model_config = ConfigDict(extra="allow", validate_default=True)

    @classmethod
    def examples(cls) -> list[Any]:
        return []

    @classmethod
    def instructions(cls) -> str:
        return ""


# --- the quick start's ProbeTool, its agent method moved into handle() ----------------------


NUMBERS = [3, 4, 8, 11, 15, 25, 40, 80, 90]


class ProbeTool(ToolMessage):
    request: str = "probe"
    purpose: str = """
        To find which number in my list is closest to the <number> you specify
        """
    number: int

    @classmethod
    def examples(cls) -> list[Any]:
        # Compiled to few-shot examples sent along with the tool instructions.
        return [
            cls(number=10),
            (
                "To find which number is closest to 20",
                cls(number=20),
            ),
        ]

    def handle(self) -> str:
        # return how many values in NUMBERS are less or equal to self.number
        return str(len([n for n in NUMBERS if n <= self.number]))


def test_request_names_the_tool_purpose_describes_it_the_fields_are_its_arguments() -> None:
    toolbox = Toolbox([ProbeTool])
    [spec] = toolbox
    assert spec.name == "probe"
    assert spec.description == (
        "To find which number in my list is closest to the <number> you specify\n\n"
        'For example, to find which number is closest to 20: {"number": 20}'
    )
    assert spec.parameters == {
        "type": "object",
        "properties": {"number": {"type": "integer"}},
        "required": ["number"],
        "examples": [{"number": 10}, {"number": 20}],
    }
    assert spec.examples == ({"number": 10}, {"number": 20})
    assert call(toolbox, "probe", {"number": 10}).output == "3"


def test_request_and_purpose_sent_by_the_model_are_dropped() -> None:
    arguments = {"request": "probe", "purpose": "x", "id": "", "number": "25"}
    assert call(Toolbox([ProbeTool]), "probe", arguments).output == "6"


def test_the_text_protocol_shows_the_examples() -> None:
    prompt = tools_prompt(Toolbox([ProbeTool]).manifests("openai"))
    assert 'Example: {"tool": "probe", "arguments": {"number": 10}}' in prompt
    assert 'Example: {"tool": "probe", "arguments": {"number": 20}}' in prompt


def test_a_toolmessage_runs_in_a_conversation() -> None:
    with open_platform(emulator=True) as platform, Bridge(platform, [ProbeTool]) as bridge:
        result = bridge.ask("probe the number 10")
    assert [run.output for run in result.tool_runs] == ["3"]


# --- tool-message-handler.md: stateless handlers, async ones, instructions -------------------


class MyTool(ToolMessage):
    request: str = "my_tool"
    purpose: str = "To handle a <param>."
    param: str

    def handle(self) -> str:
        return f"Handled: {self.param}"


class Square(ToolMessage):
    """Square a number.

    Attributes:
        num: the number to square
    """

    request: str = "square"
    purpose: str = "To compute the square of <num>."
    num: float = Field(ge=0)

    @classmethod
    def instructions(cls) -> str:
        return "Use this tool for every square, never compute it yourself."

    async def handle_async(self) -> str:
        return str(self.num**2)


def test_a_stateless_handler() -> None:
    assert call(Toolbox([MyTool]), "my_tool", {"param": "x"}).output == "Handled: x"


def test_an_async_handler_field_descriptions_and_instructions() -> None:
    toolbox = Toolbox([Square])
    [spec] = toolbox
    assert spec.is_async
    assert spec.parameters["properties"]["num"] == {
        "type": "number",
        "minimum": 0,
        "description": "the number to square",
    }
    assert spec.instructions == "Use this tool for every square, never compute it yourself."
    assert spec.description.endswith(spec.instructions)
    assert call(toolbox, "square", {"num": 3}).output == "9.0"
    refused = call(toolbox, "square", {"num": -1})
    assert refused.error is not None
    assert "num" in refused.output


def test_a_handler_may_take_the_tool_context() -> None:
    class Counter(ToolMessage):
        request: str = "count"
        purpose: str = "To count the calls of this conversation."

        def handle(self, ctx: ToolContext) -> str:
            ctx.state["n"] = ctx.state.get("n", 0) + 1
            return str(ctx.state["n"])

    toolbox = Toolbox([Counter])
    assert toolbox.manifests("openai")[0]["function"]["parameters"]["properties"] == {}
    scope = ConversationScope("conv-1")
    assert [call(toolbox, "count", {}, scope).output for _ in range(2)] == ["1", "2"]


def test_a_toolmessage_returned_by_the_handler_is_posted_as_its_json() -> None:
    class Answer(ToolMessage):
        request: str = "answer"
        purpose: str = "To give the final answer."
        text: str

    class Ask(ToolMessage):
        request: str = "ask"
        purpose: str = "To ask a question."
        question: str

        def handle(self) -> Answer:
            return Answer(text=self.question.upper())

    output = call(Toolbox([Ask]), "ask", {"question": "why"}).output
    assert json.loads(output) == {"request": "answer", "text": "WHY"}


def test_add_keywords_rename_and_describe() -> None:
    [spec] = Toolbox().add(MyTool, name="handle_it", description="Handle it.")
    assert (spec.name, spec.description) == ("handle_it", "Handle it.")


# --- load_tools(file) --------------------------------------------------------------------------


def test_load_tools_finds_toolmessages_but_not_tools_the_model_may_not_use(tmp_path: Path) -> None:
    path = tmp_path / "langroid_tools.py"
    path.write_text(
        textwrap.dedent(
            '''
            from pydantic import BaseModel

            class ToolMessage(BaseModel):
                request: str
                purpose: str
                _allow_llm_use: bool = True

            class Probe(ToolMessage):
                request: str = "probe"
                purpose: str = "To probe a <number>."
                number: int

                def handle(self) -> str:
                    return str(self.number)

            class Internal(ToolMessage):
                request: str = "internal"
                purpose: str = "Only the agent sends this."
                _allow_llm_use: bool = False

                def handle(self) -> str:
                    return "internal"

            class Record(BaseModel):
                """A plain data model: not a tool."""
                request: str
            '''
        ),
        encoding="utf-8",
    )
    assert load_tools(str(path)).names() == ["probe"]


# --- mistakes ------------------------------------------------------------------------------


def test_no_request_default_is_refused() -> None:
    class Nameless(ToolMessage):
        purpose: str = "To do something."

        def handle(self) -> str:
            return ""

    with pytest.raises(
        UsageError, match=r'needs a default for its request field.*request: str = "probe"'
    ):
        Toolbox().add(Nameless)


def test_a_request_default_that_is_not_text_is_refused() -> None:
    class Numbered(BaseModel):
        request: int = 3
        purpose: str = "To do something."

        def handle(self) -> str:
            return ""

    with pytest.raises(UsageError, match=r"the default of request must be a string \(got int 3\)"):
        Toolbox().add(Numbered)


def test_no_handler_says_where_the_agent_method_goes() -> None:
    class Unhandled(ToolMessage):
        request: str = "unhandled"
        purpose: str = "To do something."

    with pytest.raises(UsageError, match=r"no handle\(\) or handle_async\(\).*'unhandled'"):
        Toolbox().add(Unhandled)


def test_a_handler_that_wants_the_agent_is_refused() -> None:
    class NeedsAgent(ToolMessage):
        request: str = "needs_agent"
        purpose: str = "To do something."

        def handle(self, agent: Any) -> str:
            return str(agent)

    with pytest.raises(UsageError, match=r"handle\(\) takes 'agent'.*no Langroid agent"):
        Toolbox().add(NeedsAgent)


def test_a_tool_the_model_may_not_use_is_refused() -> None:
    class Internal(ToolMessage):
        request: str = "internal"
        purpose: str = "Only the agent sends this."
        _allow_llm_use: bool = False

        def handle(self) -> str:
            return ""

    with pytest.raises(UsageError, match=r"_allow_llm_use = False"):
        Toolbox().add(Internal)


def test_examples_that_are_not_instances_are_refused() -> None:
    class BadExamples(ToolMessage):
        request: str = "bad_examples"
        purpose: str = "To do something."
        n: int

        examples_given: ClassVar[list[Any]] = [{"n": 1}]

        @classmethod
        def examples(cls) -> list[Any]:
            return cls.examples_given

        def handle(self) -> str:
            return ""

    with pytest.raises(UsageError, match=r"examples\(\) entry 1 must be a BadExamples\(\.\.\.\)"):
        Toolbox().add(BadExamples)


def test_an_instance_is_refused_with_a_hint() -> None:
    with pytest.raises(UsageError, match="pass the class ProbeTool, not an instance"):
        Toolbox().add(ProbeTool(number=1))


# --- Langroid's native JSON tools: a chat model without function calls ------------------------


def test_a_model_writing_langroid_json_tools_drives_the_tool() -> None:
    from bridge.platforms.openai_chat import OpenAIChatPlatform
    from tests.platforms.openai_fakes import FAST_RETRIES, Reply, ScriptedServer, completion

    with ScriptedServer().running() as server:
        server.script(
            Reply(json=completion('{"request": "probe", "number": 25}')),
            Reply(json=completion("6 of my numbers are at most 25.")),
        )
        platform = OpenAIChatPlatform(
            server.base_url, "m", retry_policy=FAST_RETRIES, tool_protocol="text"
        )
        with platform:
            result = Bridge(platform, tools=[ProbeTool]).ask("How many are at most 25?")
        system = server.bodies[0]["messages"][0]["content"]
    assert [(run.name, run.arguments, run.output) for run in result.tool_runs] == [
        ("probe", {"number": 25}, "6")
    ]
    assert result.answer.endswith("6 of my numbers are at most 25.")
    assert "## probe" in system
    assert 'Example: {"tool": "probe", "arguments": {"number": 10}}' in system


def test_the_cli_calls_a_toolmessage_from_a_file(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from bridge.cli import app

    path = tmp_path / "probe_tools.py"
    path.write_text(
        textwrap.dedent(
            """
            from pydantic import BaseModel

            class ProbeTool(BaseModel):
                request: str = "probe"
                purpose: str = "To count my numbers up to the <number> you specify."
                number: int

                def handle(self) -> str:
                    return str(len([n for n in [3, 4, 8, 11] if n <= self.number]))
            """
        ),
        encoding="utf-8",
    )
    result = CliRunner().invoke(app, ["call", str(path), "probe", '{"number": 9}'])
    assert (result.exit_code, result.stdout) == (0, "3\n"), result.stderr


def test_strict_off_hands_undeclared_arguments_to_the_message() -> None:
    class Note(ToolMessage):  # Langroid's ToolMessage has extra="allow"
        request: str = "note"
        purpose: str = "To note a <text>, with any tags."
        text: str

        def handle(self) -> str:
            return json.dumps({"text": self.text, "tags": self.model_extra})

    toolbox = Toolbox()
    [spec] = toolbox.add(Note, strict=False)
    assert spec.parameters["additionalProperties"] is True
    output = call(toolbox, "note", {"request": "note", "text": "hi", "colour": "red"}).output
    assert json.loads(output) == {"text": "hi", "tags": {"colour": "red"}}


def test_strict_off_for_a_model_that_drops_extras_is_refused() -> None:
    class Closed(BaseModel):
        request: str = "closed"
        purpose: str = "To do something."

        def handle(self) -> str:
            return ""

    with pytest.raises(UsageError, match=r"strict=False .*ConfigDict\(extra='allow'\)"):
        Toolbox().add(Closed, strict=False)


class Count(BaseModel):
    count: int


class CountTool(BaseModel):
    request: str = "count_numbers"
    purpose: str = "Count the numbers at most <number>"
    number: int

    def handle(self) -> Count:
        return Count(count=self.number)


class EchoTool(BaseModel):
    request: str = "echo"
    purpose: str = "Say <text> back"
    text: str

    def handle(self) -> EchoTool:
        return self


def test_a_typed_handler_gives_the_tool_an_output_schema_but_a_returned_toolmessage_none() -> None:
    toolbox = Toolbox([CountTool, EchoTool])
    count = toolbox.get("count_numbers")
    assert count is not None and count.output_schema is not None
    assert count.output_schema["properties"] == {"count": {"type": "integer"}}
    mcp = {tool["name"]: tool for tool in toolbox.manifests("mcp")}
    assert mcp["count_numbers"]["outputSchema"]["required"] == ["count"]
    assert "outputSchema" not in mcp["echo"]
    assert toolbox.call("count_numbers", {"number": 3}).value == Count(count=3)
