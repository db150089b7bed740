"""BaseTool-style objects: `name` and `description` attributes and a `call` method (AgentFly).

    class APITool:                       # or APITool(BaseTool) with AgentFly installed
        name = "api_tool"
        description = "A tool that uses an API key to execute queries"

        def __init__(self, api_key: str):
            self.api_key = api_key

        async def call(self, query: str) -> str:     # sync or async
            ...

    toolbox.add(APITool(api_key="..."))  # one tool, "api_tool"

Name and description as for actions (`bridge.tools.kinds.actions`): `Toolbox.add(name=)`, the
attribute, else the snake-cased class name / the docstring of `call` or of the class.
Parameters come from `call`'s signature, type hints and docstring; a `parameters` JSON Schema
attribute, or a `schema` one (plain, or an OpenAI function tool as AgentFly builds), adds
descriptions the signature lacks, and is the whole description of a `call(self, **kwargs)`.

AgentFly injects a `context` parameter to reach rollout resources
(`await context.acquire_resource(spec=...)`, pooled by its resource engine). Here annotate it
`ToolContext` and ask it for the conversation's resource: `await context.aresource(factory,
pool_size=...)` gives each conversation its own object from a bounded pool, closed when the
conversation ends. An unannotated `context` parameter is refused with that advice. A result
dict with an ``observation`` text (AgentFly's result shape) posts that text.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Mapping
from typing import Any

from bridge.errors import UsageError
from bridge.tools._describe import describe_error, is_context
from bridge.tools.kinds._objects import (
    call_with,
    defining_class,
    has_method,
    instance_of,
    is_plain_object,
    is_pydantic,
    method_spec,
)
from bridge.tools.kinds.base import Kind, Request
from bridge.tools.schema import NO_DEFAULT, Param, build_arguments, replace_spec
from bridge.tools.schema_walk import strip_titles
from bridge.tools.spec import ToolOptions, ToolSpec
from bridge.tools.toolsets import StaticToolset, Toolset

__all__ = ["BASETOOL", "basetool_specs", "is_basetool"]


def is_basetool(obj: Any) -> bool:
    """Whether `obj` (class or instance) has a `call` attribute and a `name` or `description`.

    A `call` that is not a method still matches, so that `basetool_specs` can say what is wrong.
    """
    if not is_plain_object(obj) or not any(
        hasattr(obj, attribute) for attribute in ("name", "description")
    ):
        return False
    cls = obj if isinstance(obj, type) else type(obj)
    if defining_class(cls, "call") is None:
        return (
            not isinstance(obj, type)
            and "call" in getattr(obj, "__dict__", {})
            and not is_pydantic(cls)
        )
    return has_method(obj, "call")


def basetool_specs(
    obj: Any,
    *,
    name: str | None = None,
    description: str | None = None,
    options: ToolOptions | Mapping[str, Any] | None = None,
) -> list[ToolSpec]:
    """The one tool of a BaseTool-style class (made without arguments) or instance.

    Raises:
        UsageError: The class cannot be made without arguments, `call` is not callable,
            `name`/`description` hold something else than text, `call` takes an unannotated
            `context`, or `call` cannot be described (every problem listed).
    """
    instance = instance_of(obj, "tool")
    cls = type(instance)
    where = cls.__qualname__
    call = getattr(instance, "call", None)
    if not callable(call):
        raise UsageError(
            f"{where}.call must be a method (sync or async) that runs the tool, but it is a "
            f"{type(call).__name__}"
        )
    _check_context(call, where)
    spec = method_spec(instance, call, name=name, description=description, options=options)
    changes: dict[str, Any] = {
        "function": call_with(spec.function, _observation, spec.is_async),
        "origin": f"{cls.__module__}:{cls.__qualname__}",
    }
    declared = _declared_schema(instance, where)
    if declared is not None and _takes_only_kwargs(call):
        changes.update(
            _from_schema(
                declared,
                spec.name,
                where,
                strict=spec.options.strict,
                reserved={"self", *([spec.context_param] if spec.context_param else [])},
            )
        )
    else:
        described = _with_descriptions(spec.parameters, declared)
        if described is not None:
            changes["parameters"] = described
    return [replace_spec(spec, **changes)]


def _takes_only_kwargs(call: Any) -> bool:
    """`call(self, **kwargs)` (maybe with a context): the arguments are only in the schema."""
    try:
        params = list(inspect.signature(call).parameters.values())
    except (TypeError, ValueError):
        return False
    named = [p for p in params if p.kind is not p.VAR_KEYWORD and not is_context(p.annotation)]
    return len(named) < len(params) and all(p.kind is p.VAR_POSITIONAL for p in named)


_PYTHON_TYPES: dict[str, Any] = {
    "string": str,
    "integer": int,
    "number": float,
    "boolean": bool,
    "array": list,
    "object": dict,
}


def _from_schema(
    declared: Mapping[str, Any], name: str, where: str, *, strict: bool, reserved: set[str]
) -> dict[str, Any]:
    """Parameters and validator for a `call(**kwargs)` described only by its JSON Schema.

    The schema is shown as declared; validation checks each property's top-level type, its
    enum and the required ones (the tool itself checks anything finer).
    """
    props = declared.get("properties")
    if declared.get("type", "object") != "object" or not isinstance(props, Mapping):
        raise UsageError(
            f"{where}: its schema must describe an object with properties (call takes only "
            "**kwargs, so the schema is all there is to say what the arguments are)"
        )
    required = declared.get("required")
    required = set(required) if isinstance(required, list) else set()
    params = []
    for key, prop in props.items():
        prop = prop if isinstance(prop, Mapping) else {}
        kind = prop.get("type")
        enum = prop.get("enum")
        default = prop.get("default", None) if key not in required else NO_DEFAULT
        params.append(
            Param(
                name=str(key),
                annotation=_PYTHON_TYPES.get(kind, Any) if isinstance(kind, str) else Any,
                default=default,
                description=prop.get("description") if isinstance(prop, Mapping) else None,
                enum=tuple(enum) if isinstance(enum, list) and enum else None,
            )
        )
    problems: list[str] = []
    arguments = build_arguments(
        params,
        model_name=f"{name}_arguments",
        problems=problems,
        strict=strict,
        var_keyword=None if strict else "kwargs",
        reserved=reserved,
    )
    if arguments is None:
        raise describe_error(where, problems)
    parameters = strip_titles(copy.deepcopy(dict(declared)))
    parameters.setdefault("type", "object")
    if not strict:
        parameters["additionalProperties"] = True
    return {"parameters": parameters, "validate": arguments.validate}


def _check_context(call: Any, where: str) -> None:
    try:
        parameter = inspect.signature(call).parameters.get("context")
    except (TypeError, ValueError):
        return
    if parameter is None:
        return
    annotation = parameter.annotation
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", "")
    if is_context(annotation) or not (
        annotation is inspect.Parameter.empty or str(text).rpartition(".")[2] == "Context"
    ):
        return
    raise UsageError(
        f"{where}.call takes a 'context' parameter without the ToolContext annotation; AgentFly "
        "injects its own Context there, toolbridge injects a ToolContext: annotate it "
        "`context: ToolContext` (from bridge.tools import ToolContext) and get per-conversation "
        "resources with `await context.aresource(factory, pool_size=...)` instead of "
        "`context.acquire_resource(spec=...)`"
    )


def _declared_schema(instance: Any, where: str) -> Mapping[str, Any] | None:
    for attribute in ("parameters", "schema"):
        value = getattr(instance, attribute, None)
        if value is None or callable(value):
            continue
        if not isinstance(value, Mapping):
            raise UsageError(
                f"{where}.{attribute} must be a JSON Schema object (a dict), got "
                f"{type(value).__name__}"
            )
        function = value.get("function")
        if value.get("type") == "function" and isinstance(function, Mapping):
            value = function.get("parameters") or {}
        if not isinstance(value, Mapping):
            raise UsageError(f"{where}.{attribute}: its parameters must be a JSON Schema object")
        return value
    return None


def _with_descriptions(
    parameters: dict[str, Any], declared: Mapping[str, Any] | None
) -> dict[str, Any] | None:
    """`parameters` with the descriptions of `declared` where the signature gave none."""
    declared_props = declared.get("properties") if declared else None
    props = parameters.get("properties")
    if not isinstance(declared_props, Mapping) or not isinstance(props, dict):
        return None
    changed = dict(props)
    for key, prop in props.items():
        source = declared_props.get(key)
        text = source.get("description") if isinstance(source, Mapping) else None
        if isinstance(prop, dict) and "description" not in prop and isinstance(text, str) and text:
            changed[key] = {**prop, "description": text}
    if changed == props:
        return None
    return {**parameters, "properties": changed}


def _observation(value: Any) -> Any:
    # AgentFly's result shape: the model reads "observation"; the other keys are for the trainer.
    if isinstance(value, Mapping) and isinstance(value.get("observation"), str):
        return value["observation"]
    return value


# --- the kind ----------------------------------------------------------------------------------


def _build(obj: Any, request: Request) -> Toolset:
    specs = basetool_specs(
        obj, name=request.name, description=request.description, options=request.options
    )
    return StaticToolset(specs, label=f"the tool {specs[0].origin.rpartition(':')[2]}")


BASETOOL = Kind("BaseTool", is_basetool, _build, discover=lambda obj: True, one_tool=True)
"""A class or instance with `name`/`description` attributes and a `call` method."""
