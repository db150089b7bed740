"""LionAGI's documented examples, ported: Tool with pre/post processors, FunctionCalling,
ActionManager, strict matching.

LionAGI is never imported. Its examples (`docs/modules/action.rst`,
`tests/operatives/test_action/test_function_calling.py` and `test_action_manager.py`) are
rewritten with toolbridge's public API:

    Tool(func_callable=f, preprocessor=p, postprocessor=q)  -> toolbox.add(f, before=p, after=q)
    Tool(..., preprocessor_kwargs={...})                     -> before=functools.partial(p, ...)
    Tool(..., strict_func_call=False) on f(**kwargs)         -> toolbox.add(f, strict=False)
    await FunctionCalling(func_tool=t, arguments=a).invoke() -> await toolbox.acall(name, a)
    ActionManager(...).invoke(ActionRequest(function, args)) -> toolbox.call(function, args)
    execution.response / .error / .status / .duration        -> run.value / .output / .error /
                                                                .duration_ms
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any

import pytest

from bridge import Bridge, open_platform
from bridge.errors import UsageError
from bridge.tools import Toolbox
from bridge.types import ToolRun


async def helper_async_func(x: int = 0, y: str = "default") -> str:
    """Test async function."""
    await asyncio.sleep(0.01)
    return f"{x}-{y}"


def helper_sync_func(x: int = 0, y: str = "default") -> str:
    """Test sync function."""
    return f"{x}-{y}"


async def helper_preprocessor(value: Any, **kwargs: Any) -> Any:
    """Test preprocessor (LionAGI passes it the arguments dict)."""
    if isinstance(value, int):
        return value + 1
    return value


async def helper_postprocessor(result: Any, **kwargs: Any) -> str:
    """Test postprocessor."""
    return f"processed-{result}"


def multiply(x: int | float, y: int | float) -> int | float:
    """Multiply two numbers."""
    return x * y


def acall(toolbox: Toolbox, name: str, arguments: dict[str, Any] | None = None) -> ToolRun:
    return asyncio.run(toolbox.acall(name, arguments))


# --- FunctionCalling --------------------------------------------------------------------------


def test_the_documented_function_calling_example() -> None:
    # >>> tool = Tool(func_callable=multiply)
    # >>> func_call = FunctionCalling(func_tool=tool, arguments={"x": 3, "y": 4})
    # >>> await func_call.invoke(); print(func_call.execution.response)  # 12
    toolbox = Toolbox([multiply])
    run = acall(toolbox, "multiply", {"x": 3, "y": 4})
    assert (run.error, run.value, run.output) == (None, 12, "12")


@pytest.mark.parametrize("function", [helper_sync_func, helper_async_func])
def test_function_calling_with_sync_and_async_functions(function: Any) -> None:
    toolbox = Toolbox([function])
    run = acall(toolbox, function.__name__, {"x": 1, "y": "test"})
    assert (run.error, run.value) == (None, "1-test")
    assert run.duration_ms >= 0
    same = toolbox.call(function.__name__, {"x": 1, "y": "test"})
    assert (same.error, same.value) == (None, "1-test")


def test_function_calling_with_processors() -> None:
    # Tool(func_callable=helper_sync_func, preprocessor=helper_preprocessor,
    #      postprocessor=helper_postprocessor): both processors are coroutine functions.
    toolbox = Toolbox()
    toolbox.add(helper_sync_func, before=helper_preprocessor, after=helper_postprocessor)
    for run in (
        acall(toolbox, "helper_sync_func", {"x": 1, "y": "test"}),
        toolbox.call("helper_sync_func", {"x": 1, "y": "test"}),
    ):
        assert (run.error, run.value, run.output) == (None, "processed-1-test", "processed-1-test")


def test_processor_kwargs_are_a_partial() -> None:
    # Tool(..., preprocessor=scale, preprocessor_kwargs={"factor": 10},
    #      postprocessor=label, postprocessor_kwargs={"unit": "m"})
    async def scale(arguments: dict[str, Any], factor: int = 1) -> dict[str, Any]:
        return {key: value * factor for key, value in arguments.items()}

    def label(result: Any, unit: str = "") -> str:
        return f"{result} {unit}"

    toolbox = Toolbox()
    toolbox.add(
        multiply,
        before=functools.partial(scale, factor=10),
        after=functools.partial(label, unit="m2"),
    )
    assert toolbox.call("multiply", {"x": 2, "y": 3}).output == "600 m2"


def test_function_calling_with_empty_arguments_uses_the_defaults() -> None:
    toolbox = Toolbox([helper_sync_func])
    assert acall(toolbox, "helper_sync_func", {}).value == "0-default"


def test_function_calling_error_handling() -> None:
    # async def error_func(**kwargs): raise ValueError("Test error")
    # -> execution.status FAILED, "Test error" in execution.error
    async def error_func(**kwargs: Any) -> None:
        """Always fails."""
        raise ValueError("Test error")

    toolbox = Toolbox()
    toolbox.add(error_func, strict=False)
    run = acall(toolbox, "error_func", {"anything": 1})
    assert run.error == "tool_error"
    assert "Test error" in run.output
    assert run.value is None


# --- strict matching ----------------------------------------------------------------------------


def test_strict_func_call_off_lets_extra_arguments_reach_kwargs() -> None:
    # Tool(func_callable=f, strict_func_call=False): only the parameters without defaults
    # (minimum_acceptable_fields) must be present; the rest goes to **kwargs.
    def create_user(name: str, role: str = "user", **profile: Any) -> dict[str, Any]:
        """Create a user."""
        return {"name": name, "role": role, **profile}

    toolbox = Toolbox()
    toolbox.add(create_user, strict=False)
    run = toolbox.call("create_user", {"name": "Ada", "team": "math", "age": 36})
    assert run.value == {"name": "Ada", "role": "user", "team": "math", "age": 36}
    assert toolbox.call("create_user", {"team": "math"}).error == "invalid_arguments"

    strict = Toolbox([create_user])  # the default: arguments must match the schema
    refused = strict.call("create_user", {"name": "Ada", "team": "math"})
    assert refused.error == "invalid_arguments"
    assert "unknown argument 'team'" in refused.output


def test_strict_off_needs_kwargs() -> None:
    with pytest.raises(UsageError, match=r"\*\*kwargs"):
        Toolbox().add(multiply, strict=False)


# --- ActionManager ------------------------------------------------------------------------------


def test_action_manager_registers_and_invokes_requests() -> None:
    # manager = ActionManager(); manager.register_tools([multiply, helper_sync_func])
    # await manager.invoke(ActionRequestModel(function="multiply", arguments={"x": 3, "y": 4}))
    toolbox = Toolbox([multiply, helper_sync_func])
    requests = [
        {"function": "multiply", "arguments": {"x": 3, "y": 4}},
        {"function": "helper_sync_func", "arguments": {"x": 2}},
    ]
    runs = [toolbox.call(r["function"], r["arguments"]) for r in requests]
    assert [run.value for run in runs] == [12, "2-default"]
    # The schemas an ActionManager lists (`schema_list`) are the toolbox's manifests.
    assert [m["function"]["name"] for m in toolbox.manifests("openai")] == [
        "multiply",
        "helper_sync_func",
    ]


def test_action_manager_duplicate_and_unknown_tools() -> None:
    toolbox = Toolbox([multiply])
    # register_tool(multiply) again without update=True raises ValueError in LionAGI.
    with pytest.raises(UsageError, match="duplicate tool name 'multiply'"):
        toolbox.add(multiply)
    # match_tool for a function that is not registered raises there; here the call is
    # answered as a dispatched one would be, so a model can read it.
    run = toolbox.call("divide", {"x": 1, "y": 2})
    assert run.error == "unknown_tool"
    assert "Available tools: multiply." in run.output


def test_the_same_tools_through_a_bridge() -> None:
    # Where LionAGI's Branch runs the tools its model asked for, a Bridge does: the hooks and
    # strict switch travel with the tool.
    toolbox = Toolbox()
    toolbox.add(helper_sync_func, before=helper_preprocessor, after=helper_postprocessor)
    scenario = {
        "rules": [
            {
                "name": "numbers",
                "match": "number",
                "steps": [{"tool": "helper_sync_func", "arguments": {"x": 5}}],
                "answer": "{outputs.helper_sync_func}",
            }
        ]
    }
    with (
        open_platform(emulator=True, scenario=scenario) as platform,
        Bridge(platform, tools=toolbox) as bridge,
    ):
        result = bridge.ask("a number please")
    [run] = result.tool_runs
    assert (run.error, run.output) == (None, "processed-5-default")
    assert result.answer == "processed-5-default"
