"""AgentFly's documented examples, ported: `BaseTool` subclasses, `@tool` functions, agent
methods as tools, and stateful tools whose resources come from pools.

AgentFly is never imported: its classes are written here in the shape AgentFly documents
(`src/agentfly/tools/tool_base.py`, `docs/features/tool_system.md`), with `BaseTool` left out
and `@tool` replaced by `@manifest`.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import textwrap
from pathlib import Path
from typing import Any, ClassVar

import pytest

from bridge import Bridge, open_platform
from bridge.errors import UsageError
from bridge.tools import ConversationScope, Dispatcher, Toolbox, ToolContext, manifest
from bridge.types import ToolCall, ToolRun

IDS = itertools.count()


def call(
    toolbox: Toolbox, name: str, arguments: dict[str, Any], scope: ConversationScope | None = None
) -> ToolRun:
    batch = [ToolCall(call_id=f"c{next(IDS)}", name=name, arguments=arguments)]
    [run] = Dispatcher(toolbox).run(batch, scope=scope)
    return run


# --- tool_base.py: api_tool_example ------------------------------------------------------------


class APITool:
    """
    Example of an inheritance-based tool that stores API credentials.
    """

    # Class-level metadata (shared across all instances)
    name = "api_tool"
    description = "A tool that uses an API key to execute queries"

    def __init__(self, api_key: str):
        self.api_key = api_key  # Instance data

    def call(self, query: str) -> str:
        """
        Execute a query using the API key.

        Args:
            query (str): The query to execute.

        Returns:
            str: The result of the query.
        """
        return f"Result for '{query}' using API key: {self.api_key[:5]}..."


def test_a_basetool_instance_is_one_tool_with_its_name_and_description() -> None:
    toolbox = Toolbox([APITool(api_key="secret_key_12345")])
    assert toolbox.names() == ["api_tool"]  # not "api_tool_call"
    assert toolbox.manifests("openai") == [
        {
            "type": "function",
            "function": {
                "name": "api_tool",
                "description": "A tool that uses an API key to execute queries\n\n"
                "Returns: The result of the query.",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "query": {"type": "string", "description": "The query to execute."}
                    },
                    "required": ["query"],
                },
            },
        }
    ]
    assert call(toolbox, "api_tool", {"query": "x"}).output == (
        "Result for 'x' using API key: secre..."
    )


def test_a_basetool_runs_in_a_conversation() -> None:
    tools = [APITool(api_key="secret_key_12345")]
    with open_platform(emulator=True) as platform, Bridge(platform, tools) as bridge:
        result = bridge.ask("execute a query: weather")
    assert [run.output for run in result.tool_runs] == [
        "Result for 'weather' using API key: secre..."
    ]


def test_a_basetool_class_that_needs_arguments_asks_for_an_instance() -> None:
    with pytest.raises(UsageError, match=r"cannot create the tool APITool without arguments.*"):
        Toolbox().add(APITool)


def test_an_async_call_and_a_class_without_a_name_attribute() -> None:
    class WordCount:
        description = "Count the words of a text."

        async def call(self, text: str) -> int:
            await asyncio.sleep(0)
            return len(text.split())

    toolbox = Toolbox([WordCount])
    [spec] = toolbox
    assert (spec.name, spec.is_async) == ("word_count", True)
    assert call(toolbox, "word_count", {"text": "a b c"}).output == "3"


def test_an_observation_dict_posts_its_observation() -> None:
    class Search:
        name = "search"
        description = "Search the web."

        def call(self, query: str) -> dict[str, Any]:
            return {"observation": f"3 pages about {query}", "image": None, "hits": 3}

    assert call(Toolbox([Search()]), "search", {"query": "cats"}).output == "3 pages about cats"


def test_a_schema_attribute_describes_what_the_signature_does_not() -> None:
    class Lookup:
        name = "lookup"
        description = "Look a word up."
        schema: ClassVar[dict[str, Any]] = {
            "type": "function",
            "function": {
                "name": "lookup",
                "parameters": {
                    "type": "object",
                    "properties": {"word": {"type": "string", "description": "The word."}},
                    "required": ["word"],
                },
            },
        }

        def call(self, word: str) -> str:
            return word

    [spec] = Toolbox().add(Lookup)
    assert spec.parameters["properties"]["word"] == {"type": "string", "description": "The word."}


class Weather:
    name = "weather"
    description = "Weather of a city."
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "city": {"type": "string", "description": "City."},
            "unit": {"type": "string", "enum": ["c", "f"]},
            "days": {"type": "integer"},
        },
        "required": ["city"],
    }

    def call(self, **kwargs: Any) -> dict[str, Any]:
        return kwargs


def test_a_call_taking_only_kwargs_is_described_and_checked_by_its_schema() -> None:
    toolbox = Toolbox([Weather])
    [spec] = toolbox
    assert spec.parameters == Weather.parameters
    ran = call(toolbox, "weather", {"city": "Paris", "days": "3"})
    assert json.loads(ran.output) == {"city": "Paris", "days": 3}
    refused = call(toolbox, "weather", {"unit": "k", "colour": 1})
    assert refused.error == "invalid_arguments"
    assert "city: missing required argument" in refused.output
    assert 'unit: must be one of "c", "f"' in refused.output
    assert "unknown argument 'colour'" in refused.output


def test_a_kwargs_call_whose_schema_is_no_object_is_refused() -> None:
    class Odd:
        name = "odd"
        description = "Odd."
        parameters: ClassVar[dict[str, Any]] = {"type": "string"}

        def call(self, **kwargs: Any) -> str:
            return ""

    with pytest.raises(UsageError, match=r"Odd: its schema must describe an object"):
        Toolbox().add(Odd)


# --- tool_base.py: addition_tool_example, and @tool on an agent's method ------------------------


@manifest(name="AdditionTool", description="Adds two numbers.")
def add(a: int, b: int = 1) -> int:
    """
    Adds two numbers.

    Args:
        a (int): The first number.
        b (int): The second number which should be a non-negative integer.

    Returns:
        int: The sum of a and b.
    """
    return a + b


def test_a_tool_decorated_function_is_a_manifest_function() -> None:
    toolbox = Toolbox([add])
    assert toolbox.names() == ["AdditionTool"]
    assert call(toolbox, "AdditionTool", {"a": 2}).output == "3"


class CustomAgent:
    def __init__(self, special_api_key: str) -> None:
        self.special_api_key = special_api_key

    def processing_query(self, query: str) -> str:
        return query

    @manifest(name="specialized_tool")
    async def specialized_tool(self, query: str) -> str:
        query = self.processing_query(query)
        return f"Call query {query} with special api key: {self.special_api_key}"


def test_a_tool_method_of_an_agent_is_a_toolkit_method() -> None:
    toolbox = Toolbox()
    toolbox.add(CustomAgent("k-1"), prefix="")
    assert toolbox.names() == ["specialized_tool"]
    assert call(toolbox, "specialized_tool", {"query": "q"}).output == (
        "Call query q with special api key: k-1"
    )


# --- stateful tools: code/tools.py's code interpreter, a sandbox per conversation --------------


class Sandbox:
    """Stands in for AgentFly's Python sandbox (a container in AgentFly)."""

    made: ClassVar[list[Sandbox]] = []

    def __init__(self) -> None:
        self.variables: dict[str, Any] = {}
        self.closed = False
        Sandbox.made.append(self)

    async def step(self, code: str) -> str:
        name, _, value = code.partition("=")
        if value:
            self.variables[name.strip()] = value.strip()
            return ""
        return str(self.variables.get(code.strip(), f"NameError: {code.strip()}"))

    async def aclose(self) -> None:
        self.closed = True


class CodeInterpreterTool:
    name = "code_interpreter_tool"
    description = "Run the code in docker container and return the output from stdout or stderr"

    async def call(self, code: str, context: ToolContext) -> str:
        """
        Args:
            code: The code to run.
            context: Injected; gives this conversation's sandbox.
        """
        env = await context.aresource(Sandbox, pool_size=4)
        return await env.step(str(code))


def test_a_stateful_tool_gets_one_resource_per_conversation_from_a_pool() -> None:
    Sandbox.made.clear()
    toolbox = Toolbox([CodeInterpreterTool])
    assert list(toolbox.manifests("openai")[0]["function"]["parameters"]["properties"]) == ["code"]
    first, second = ConversationScope("conv-1"), ConversationScope("conv-2")
    assert call(toolbox, "code_interpreter_tool", {"code": "x = 1"}, first).error is None
    assert call(toolbox, "code_interpreter_tool", {"code": "x"}, first).output == "1"
    assert call(toolbox, "code_interpreter_tool", {"code": "x"}, second).output == "NameError: x"
    assert len(Sandbox.made) == 2
    first.close()
    second.close()
    assert all(sandbox.closed for sandbox in Sandbox.made)


def test_agentflys_own_context_parameter_is_refused_with_the_port() -> None:
    class AgentFlyCode:
        name = "code_interpreter_tool"
        description = "Run code."

        async def call(self, code: str, context):  # type: ignore[no-untyped-def]
            return await context.acquire_resource(spec=None, scope="global")

    with pytest.raises(UsageError, match=r"annotate it `context: ToolContext`.*aresource"):
        Toolbox().add(AgentFlyCode)


# --- mistakes ------------------------------------------------------------------------------


def test_a_call_that_is_not_callable_is_refused() -> None:
    class Broken:
        name = "broken"
        description = "Broken."

        def __init__(self) -> None:
            self.call = "not a method"

    with pytest.raises(UsageError, match=r"Broken\.call must be a method .* but it is a str"):
        Toolbox().add(Broken())


@pytest.mark.parametrize(
    ("attribute", "value", "expected"),
    [
        ("name", 42, r"\.name must be a string \(got int 42\)"),
        ("description", 1.5, r"\.description must be a string \(got float 1\.5\)"),
        ("schema", "oops", r"\.schema must be a JSON Schema object \(a dict\), got str"),
    ],
)
def test_attributes_of_the_wrong_type_are_refused(
    attribute: str, value: Any, expected: str
) -> None:
    class Odd:
        name = "odd"
        description = "Odd."

        def call(self, text: str) -> str:
            return text

    setattr(Odd, attribute, value)
    with pytest.raises(UsageError, match=expected):
        Toolbox().add(Odd)


def test_the_cli_calls_a_basetool_and_an_action_from_a_file(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from bridge.cli import app

    path = tmp_path / "agent_tools.py"
    path.write_text(
        textwrap.dedent(
            """
            class Echo:
                name = "echo"
                description = "Repeat the text."

                async def call(self, text: str) -> str:
                    return text * 2

            class Shout:
                name = "shout"

                def run(self, text: str) -> str:
                    return text.upper()
            """
        ),
        encoding="utf-8",
    )
    runner = CliRunner()
    echoed = runner.invoke(app, ["call", str(path), "echo", '{"text": "ab"}'])
    assert (echoed.exit_code, echoed.stdout) == (0, "abab\n"), echoed.stderr
    shouted = runner.invoke(app, ["call", str(path), "shout", '{"text": "ab"}'])
    assert (shouted.exit_code, shouted.stdout) == (0, "AB\n"), shouted.stderr


def test_strict_off_passes_undeclared_arguments_to_a_kwargs_call() -> None:
    toolbox = Toolbox()
    [spec] = toolbox.add(Weather, strict=False)
    assert spec.parameters["additionalProperties"] is True
    ran = call(toolbox, "weather", {"city": "Oslo", "colour": "red"})
    assert json.loads(ran.output) == {"city": "Oslo", "colour": "red"}
