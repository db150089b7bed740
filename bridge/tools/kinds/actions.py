"""Actions: a class or instance whose `run` method is the tool (Lagent's `BaseAction` style).

    class Bold:                          # or Bold(BaseAction) with Lagent installed
        '''Make text bold.'''

        def run(self, text: str) -> str:
            return f"**{text}**"

    toolbox.add(Bold)                    # one tool, "bold"; a class is made without arguments
    toolbox.add(Bold(), name="embolden") # or an instance

Name: `Toolbox.add(name=)`, else `@manifest(name=)` on `run`, else a string `name` attribute,
else the class name in snake case. Description: `description=`, else `@manifest(description=)`,
else a `description` attribute (a string, or Lagent's dict with a "description"), else the
docstring text of `run`, else the class's own docstring; `run`'s Returns section follows.
Parameters come from `run` as for any function (`build_spec`).

Named returns, Lagent's `tool_api(explode_return=True)` and `returns_named_value=True`: the
members documented in the Returns section (bullets under the first line, or two or more
``name (type): description`` lines), or Lagent's own `return_data`, give the tool an output
schema (an object with those members) unless its return annotation named members itself (a
model, a TypedDict...), and a tuple returned with as many items becomes an object with those
names. A Lagent `ActionReturn` returned by `run` becomes its text (its `errmsg` a tool error).
An `enable` attribute that is False (Lagent's `BaseAction(enable=False)`) registers the tool
disabled (`Toolbox.enable(name)` offers it).
"""

from __future__ import annotations

import dataclasses
import inspect
import re
from collections.abc import Mapping, Sequence
from typing import Any, get_type_hints

from pydantic import BaseModel
from typing_extensions import is_typeddict

from bridge.errors import UsageError
from bridge.tools._decorators import is_manifest
from bridge.tools.kinds._objects import call_with, has_method, instance_of, method_spec
from bridge.tools.kinds.base import Kind, Request
from bridge.tools.schema import replace_spec
from bridge.tools.spec import ToolError, ToolOptions, ToolSpec
from bridge.tools.toolsets import StaticToolset, Toolset

__all__ = ["ACTION", "action_specs", "is_action", "named_returns"]


def is_action(obj: Any) -> bool:
    """Whether `obj` is an action: a class or instance whose class defines `run`.

    Pydantic models (model tools, ToolMessages) and standard-library classes
    (`threading.Thread`) are not actions.
    """
    return has_method(obj, "run")


def action_specs(
    obj: Any,
    *,
    name: str | None = None,
    description: str | None = None,
    options: ToolOptions | Mapping[str, Any] | None = None,
) -> list[ToolSpec]:
    """The one tool of an action class (made without arguments) or instance.

    Raises:
        UsageError: The class cannot be made without arguments, `run` is not a method,
            `name`/`description` hold something else than text, or `run` cannot be
            described (every problem listed).
    """
    instance = instance_of(obj, "action")
    cls = type(instance)
    run = getattr(instance, "run", None)
    if not callable(run):
        raise UsageError(
            f"{cls.__qualname__}.run must be a method that does the work (got {type(run).__name__})"
        )
    spec = method_spec(instance, run, name=name, description=description, options=options)
    members = []
    if not _returns_a_record(run):
        members = _lagent_members(instance, run) or named_returns(getattr(run, "__doc__", None))
    names = [member["name"] for member in members]
    changes: dict[str, Any] = {
        "function": call_with(spec.function, lambda value: _result(value, names), spec.is_async),
        "origin": f"{cls.__module__}:{cls.__qualname__}",
    }
    if getattr(instance, "enable", True) is False:
        # Lagent's BaseAction(enable=False): registered, but not offered until enabled.
        changes["enabled"] = False
    if members:
        # The documented members say more than `-> tuple[int, int]` or `-> dict`.
        changes["output_schema"] = _members_schema(members)
    return [replace_spec(spec, **changes)]


# --- named returns -----------------------------------------------------------------------------

_JSON_TYPES = {
    "str": "string",
    "string": "string",
    "int": "integer",
    "integer": "integer",
    "number": "number",
    "float": "number",
    "bool": "boolean",
    "boolean": "boolean",
    "list": "array",
    "array": "array",
    "tuple": "array",
    "dict": "object",
    "object": "object",
}
_MEMBER = re.compile(
    r"^(?P<name>[A-Za-z_][A-Za-z0-9_]*)\s*(?:\((?P<type>[^()]*)\))?\s*:\s*(?P<text>.*)$"
)
_NAMED = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\s*\([^()]*\)\s*:")
_SECTION = re.compile(r"^(?P<indent>\s*)Returns?\s*:\s*$")


def named_returns(doc: str | None) -> list[dict[str, str]]:
    """The return members a Google-style docstring documents, as Lagent reads them.

    Either bullets under the first line of the Returns section (``explode_return``)::

        Returns:
            dict: information of inputs
                * x: value of a
                * y (int): value of b

    or one ``name (type): description`` line per member, two or more (``returns_named_value``;
    the parentheses tell a name from a type, as in Lagent; a single one names the return value
    itself). Anything else documents no members.
    """
    block = _returns_block(doc or "")
    if not block:
        return []
    top = min(indent for indent, _ in block)
    heads = [line for indent, line in block if indent == top]
    if len(heads) == 1 and len(block) > 1:
        lines = [line.lstrip(" -+*#.") for indent, line in block[1:]]
    elif len(heads) > 1 and all(_NAMED.match(line) for line in heads) and len(heads) == len(block):
        # One named value is the return value itself, documented: it has no members.
        lines = heads
    else:
        return []
    members = []
    for line in lines:
        found = _MEMBER.match(line)
        if found is None:
            return []
        member = {"name": found["name"], "description": found["text"].strip()}
        kind = _json_type(found["type"] or "")
        if kind:
            member["type"] = kind
        members.append(member)
    return members


def _returns_block(doc: str) -> list[tuple[int, str]]:
    block: list[tuple[int, str]] = []
    section: int | None = None
    for line in inspect.cleandoc(doc).splitlines():
        if section is None:
            found = _SECTION.match(line)
            section = len(found["indent"]) if found else None
            continue
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        if indent <= section:
            break
        block.append((indent, line.strip()))
    return block


def _json_type(text: str) -> str | None:
    word = re.split(r"[\[\s|,]", text.strip(), maxsplit=1)[0].lower()
    return _JSON_TYPES.get(word)


def _returns_a_record(run: Any) -> bool:
    """Whether `run` is annotated to return a model, dataclass or TypedDict (its own members)."""
    try:
        hint = get_type_hints(run).get("return")
    except Exception:
        return False
    return isinstance(hint, type) and (
        is_typeddict(hint) or dataclasses.is_dataclass(hint) or issubclass(hint, BaseModel)
    )


def _lagent_members(instance: Any, run: Any) -> list[dict[str, str]]:
    """Lagent's own `return_data`, when `run` carries a Lagent `api_description`."""
    found: Any = None
    for holder in (getattr(run, "api_description", None), getattr(instance, "description", None)):
        if isinstance(holder, Mapping) and isinstance(holder.get("return_data"), Sequence):
            found = holder["return_data"]
            break
    members = []
    for item in found or ():
        if not isinstance(item, Mapping) or not isinstance(item.get("name"), str):
            return []
        member = {"name": item["name"], "description": str(item.get("description") or "")}
        kind = _json_type(str(item.get("type") or "").replace("FLOAT", "float"))
        if kind:
            member["type"] = kind
        members.append(member)
    # Lagent writes one named value there too: that is the value itself, not a member of it.
    return members if len(members) > 1 else []


def _members_schema(members: list[dict[str, str]]) -> dict[str, Any]:
    properties: dict[str, Any] = {}
    for member in members:
        prop: dict[str, Any] = {}
        if "type" in member:
            prop["type"] = member["type"]
        if member["description"]:
            prop["description"] = member["description"]
        properties[member["name"]] = prop
    return {"type": "object", "properties": properties}


# --- results -----------------------------------------------------------------------------------


def _result(value: Any, names: list[str]) -> Any:
    if isinstance(value, tuple) and names and len(value) == len(names):
        return dict(zip(names, value, strict=True))
    if _is_action_return(value):
        if value.errmsg:
            raise ToolError(str(value.errmsg))
        return _action_text(value.result)
    return value


def _is_action_return(value: Any) -> bool:
    """Lagent's `ActionReturn` dataclass, recognised by shape (Lagent is never imported)."""
    return type(value).__name__ == "ActionReturn" and all(
        hasattr(value, attribute) for attribute in ("result", "errmsg", "state")
    )


def _action_text(result: Any) -> Any:
    items = result if isinstance(result, list) else []
    if not items or not all(isinstance(item, Mapping) and "content" in item for item in items):
        return result
    # As Lagent's ActionReturn.format_result: text as is, other media as a link.
    return "\n".join(
        str(item["content"])
        if item.get("type", "text") == "text"
        else f"[{item.get('type')}]({item['content']})"
        for item in items
    )


# --- the kind ----------------------------------------------------------------------------------


def _discover(obj: Any) -> bool:
    # A tools file may hold helper classes with a run(): only tool-shaped ones are found.
    cls = obj if isinstance(obj, type) else type(obj)
    return (
        is_manifest(getattr(cls, "run", None))
        or any(klass.__name__ == "BaseAction" for klass in cls.__mro__[1:])
        or any(isinstance(vars(cls).get(attribute), str) for attribute in ("name", "description"))
    )


def _build(obj: Any, request: Request) -> Toolset:
    specs = action_specs(
        obj, name=request.name, description=request.description, options=request.options
    )
    return StaticToolset(specs, label=f"the action {specs[0].origin.rpartition(':')[2]}")


ACTION = Kind("action", is_action, _build, discover=_discover, one_tool=True)
"""A class or instance whose `run` method is the tool."""
