"""Turn what a caller passes to `AppBuilderClient` into wire values, or a clear `UsageError`.

The official SDK re-validates tool dicts into a fixed key order and wraps MCP tools; these
helpers do the same so that the bytes on the wire match, and name the offending argument when
something does not fit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pydantic

from bridge.errors import UsageError
from bridge.platforms.appbuilder.models import Action, ToolOutput, WireToolChoice

__all__ = [
    "ToolLike",
    "check_conversation_id",
    "describe_validation_error",
    "wire_action",
    "wire_tool",
    "wire_tool_choice",
    "wire_tool_outputs",
]

ToolLike = Mapping[str, Any] | pydantic.BaseModel | Any
"""A tool dict, a pydantic model of one (SDK `Manifest`), or an MCP tool with `inputSchema`."""


def check_conversation_id(conversation_id: str) -> None:
    """Reject an empty conversation id the way the SDK does, with a hint."""
    if not isinstance(conversation_id, str) or not conversation_id:
        raise UsageError(
            "conversation_id is empty; create one with create_conversation() "
            f"(got {conversation_id!r})"
        )


def wire_tool(tool: ToolLike, index: int) -> tuple[dict[str, Any], bool]:
    """A tool as the SDK puts it on the wire, and whether it was an MCP tool.

    `index` is the tool's position in `tools`, for error messages.
    """
    if isinstance(tool, pydantic.BaseModel):
        tool = tool.model_dump(mode="json")
    elif not isinstance(tool, Mapping) and hasattr(tool, "inputSchema"):
        tool = {
            "name": getattr(tool, "name", None),
            "description": getattr(tool, "description", None),
            "inputSchema": tool.inputSchema,
        }
    if not isinstance(tool, Mapping):
        raise UsageError(
            f"tools[{index}] must be a dict like {{'type': 'function', 'function': {{...}}}} "
            f"(got {type(tool).__name__})"
        )
    if "inputSchema" in tool and "function" not in tool:
        wrapped = {
            "name": tool.get("name"),
            "description": tool.get("description"),
            "parameters": tool["inputSchema"],
        }
        _check_function(wrapped, index)
        return {"type": "function", "function": wrapped}, True
    function = tool.get("function")
    if tool.get("type", "function") == "function" or function is not None:
        if not isinstance(function, Mapping):
            raise UsageError(
                f"tools[{index}] has no 'function' object; expected "
                "{'type': 'function', 'function': {'name', 'description', 'parameters'}}"
            )
        _check_function(function, index)
        # The SDK re-validates dicts into this key order; keep any extra keys after it.
        ordered = {
            key: function[key] for key in ("name", "description", "parameters") if key in function
        }
        ordered.update({key: value for key, value in function.items() if key not in ordered})
        wire = {"type": tool.get("type", "function"), "function": ordered}
        wire.update({key: value for key, value in tool.items() if key not in wire})
        return wire, False
    return dict(tool), False  # file_retrieval, code_interpreter...: sent as given


def _check_function(function: Mapping[str, Any], index: int) -> None:
    name = function.get("name")
    if not isinstance(name, str) or not name:
        raise UsageError(f"tools[{index}].function.name must be a non-empty string (got {name!r})")


def wire_tool_outputs(
    outputs: Sequence[ToolOutput | Mapping[str, Any]] | None,
) -> list[ToolOutput] | None:
    """`ToolOutput`s from models or `{"tool_call_id", "output"}` dicts; None when empty."""
    if not outputs:
        return None
    result = []
    for index, item in enumerate(outputs):
        if isinstance(item, ToolOutput):
            result.append(item)
            continue
        try:
            result.append(ToolOutput.model_validate(item))
        except pydantic.ValidationError as exc:
            raise UsageError(
                f"tool_outputs[{index}] must be {{'tool_call_id': str, 'output': str}} "
                f"(JSON-encode structured outputs): {describe_validation_error(exc)}"
            ) from None
    return result


def wire_tool_choice(
    choice: WireToolChoice | Mapping[str, Any] | str | None,
) -> WireToolChoice | None:
    """A `WireToolChoice` from a model, its dict form, "auto" or a tool name to force."""
    if choice is None or isinstance(choice, WireToolChoice):
        return choice
    if isinstance(choice, str):
        if not choice:
            raise UsageError("tool_choice is an empty string; expected a tool name or 'auto'")
        if choice == "auto":
            return WireToolChoice(type="auto")
        return WireToolChoice.for_function(choice)
    try:
        return WireToolChoice.model_validate(choice)
    except pydantic.ValidationError as exc:
        raise UsageError(
            "tool_choice must be a tool name, 'auto', or {'type': 'auto' | 'function', "
            f"'function': {{'name': ..., 'input': {{...}}}}}}: {describe_validation_error(exc)}"
        ) from None


def wire_action(action: Action | Mapping[str, Any] | None) -> Action | None:
    """An `Action` from a model or its dict form."""
    if action is None or isinstance(action, Action):
        return action
    try:
        return Action.model_validate(action)
    except pydantic.ValidationError as exc:
        raise UsageError(
            "action must be Action.resume(interrupt_event_id) or its dict form "
            "{'action_type': 'resume', 'parameters': {'interrupt_event': {'id', 'type'}}}: "
            f"{describe_validation_error(exc)}"
        ) from None


def describe_validation_error(exc: pydantic.ValidationError) -> str:
    """One `location: message` per problem, joined by `; `."""
    parts = []
    for error in exc.errors():
        where = ".".join(str(part) for part in error["loc"]) or "value"
        parts.append(f"{where}: {error['msg']}")
    return "; ".join(parts)
