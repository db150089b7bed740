"""Describe a pydantic-model tool: `build_model_spec`, and `model_runner`, the tool function of
any model-shaped tool (pydantic-model tools, ToolMessage-style tools)."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel

from bridge.tools._decorators import meta_of
from bridge.tools._describe import (
    Doc,
    check_name,
    describe_error,
    is_context,
    merge_options,
    origin_of,
    parse_doc,
    resolve_hints,
    tool_description,
)
from bridge.tools.function_spec import declared_output_schema
from bridge.tools.returns import return_hint
from bridge.tools.schema import model_arguments
from bridge.tools.spec import ToolOptions, ToolSpec

__all__ = ["build_model_spec", "model_runner"]


def build_model_spec(
    model: type[BaseModel],
    *,
    name: str | None = None,
    description: str | None = None,
    options: ToolOptions | Mapping[str, Any] | None = None,
) -> ToolSpec:
    """Describe a pydantic-model tool: its fields are the arguments, `run(self)` does the work.

    `run` may be sync or async and may take one `ToolContext` parameter. The class docstring is
    the description (its `Attributes:`/`Args:` entries describe fields without a description).

    Raises:
        UsageError: Naming the class and listing every problem found.
    """
    where = f"{model.__qualname__} (in {model.__module__})"
    meta = meta_of(model)
    problems: list[str] = []
    if meta is not None and meta.params:
        problems.append(
            "@manifest_parameter applies to functions; describe model fields with "
            "Field(description=...)"
        )
    default_name = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", model.__name__)
    tool_name = check_name(
        name if name is not None else (meta and meta.name) or default_name.lower(), problems
    )
    tool_options = merge_options(meta.options if meta else {}, options, problems)
    run = getattr(model, "run", None)
    context_param: str | None = None
    returned: Any = inspect.Signature.empty
    if not callable(run):
        problems.append("a pydantic-model tool needs a run(self) method that does the work")
    else:
        sig = inspect.signature(run)
        hints = resolve_hints(run, sig, problems)
        returned = return_hint(run, sig, hints)
        for index, param in enumerate(sig.parameters.values()):
            if index == 0:
                continue
            if is_context(hints.get(param.name, Any)):
                context_param = param.name
            elif param.default is inspect.Parameter.empty:
                problems.append(
                    f"run() parameter '{param.name}' is not a ToolContext; the model's fields "
                    "are the arguments, so run(self) takes nothing else"
                )
    doc = parse_doc(model.__dict__.get("__doc__"), where)
    arguments = model_arguments(model, field_docs=doc.params, problems=problems)
    if arguments is not None and context_param in arguments.parameters.get("properties", {}):
        problems.append(f"field '{context_param}' has the name of run()'s ToolContext parameter")
    if problems or arguments is None:
        raise describe_error(where, problems)
    explicit = description if description is not None else (meta.description if meta else None)
    returns = meta.returns[-1][0] if meta and meta.returns else None
    text = tool_description(
        explicit if explicit is not None else doc.description,
        returns if explicit is not None or returns else doc.returns,
    )
    is_async = inspect.iscoroutinefunction(run)
    function = model_runner(model, context_param, is_async)
    return ToolSpec(
        name=tool_name,
        description=text,
        parameters=arguments.parameters,
        function=function,
        validate=arguments.validate,
        is_async=is_async,
        context_param=context_param,
        options=tool_options,
        origin=origin_of(model),
        output_schema=declared_output_schema(returned, meta, Doc(), where),
    )


def model_runner(
    model: type[BaseModel],
    context_param: str | None,
    is_async: bool,
    *,
    method: str = "run",
    post: Callable[[Any], Any] | None = None,
) -> Callable[..., Any]:
    """The tool function of a model-shaped tool: build the model from the validated arguments,
    call its `method` (with the `ToolContext`, if it takes one) and pass the result to `post`.

    Shared by pydantic-model tools (`run`) and ToolMessage-style tools (`handle`)."""

    def prepare(kwargs: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        extra = {context_param: kwargs.pop(context_param, None)} if context_param else {}
        return model.model_validate(kwargs), extra

    if is_async:

        async def run_async(**kwargs: Any) -> Any:
            instance, extra = prepare(kwargs)
            result = await getattr(instance, method)(**extra)
            return post(result) if post is not None else result

        runner: Callable[..., Any] = run_async
    else:

        def run_sync(**kwargs: Any) -> Any:
            instance, extra = prepare(kwargs)
            result = getattr(instance, method)(**extra)
            return post(result) if post is not None else result

        runner = run_sync
    runner.__name__ = method
    runner.__qualname__ = f"{model.__qualname__}.{method}"
    runner.__module__ = model.__module__
    runner.__doc__ = model.__doc__
    return runner
