"""ToolMessage-style models (Langroid): a pydantic class whose `request` default names the tool.

    class ProbeTool(BaseModel):          # or ProbeTool(ToolMessage) with Langroid installed
        request: str = "probe"           # the tool's name
        purpose: str = "To find how many numbers in my list are <= the <number> you specify"
        number: int                      # the other fields are the arguments

        @classmethod
        def examples(cls):
            return [cls(number=10), ("To see how many are at most 20", cls(number=20))]

        def handle(self) -> str:         # or async def handle_async(self)
            return str(len([n for n in NUMBERS if n <= self.number]))

    toolbox.add(ProbeTool)               # one tool, "probe", with the argument "number"

`request` and `purpose` (and Langroid's `id`) are not arguments: sent anyway, they are dropped.
The class docstring describes the tool when there is no `purpose` and describes fields without
a description. `handle()` / `handle_async()` (preferred when both exist) run with the
validated fields on `self`; a parameter annotated `ToolContext` receives the call's context
(Langroid's `agent` and `chat_doc` parameters have no equivalent here). A ToolMessage returned
by the handler is posted as its JSON (without `purpose` and `id`), as Langroid's `to_json()`.

`examples()` gives the tool's example argument objects (`ToolSpec.examples` and the JSON
Schema's `examples`); a `(thought, example)` pair adds the thought to the instructions.
`instructions()` gives `ToolSpec.instructions`, also appended to the description. A class with
`_allow_llm_use = False` is one the model may not call: refused, and skipped by discovery.
With `strict=False` (a model with ``extra="allow"``, as Langroid's), undeclared arguments reach
the model and `handle()` finds them in `self.model_extra`.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from bridge.errors import UsageError
from bridge.tools._decorators import meta_of
from bridge.tools._describe import (
    check_name,
    describe_error,
    is_context,
    merge_options,
    origin_of,
    parse_doc,
    resolve_hints,
)
from bridge.tools.kinds._objects import own_doc
from bridge.tools.kinds.base import Kind, Request
from bridge.tools.model_spec import model_runner
from bridge.tools.returns import output_schema_of, return_hint
from bridge.tools.schema import Param, build_arguments
from bridge.tools.spec import ToolOptions, ToolSpec
from bridge.tools.toolsets import StaticToolset, Toolset

__all__ = [
    "NOT_ARGUMENTS",
    "TOOLMESSAGE",
    "is_toolmessage",
    "llm_may_use",
    "toolmessage_specs",
]

NOT_ARGUMENTS = frozenset({"request", "purpose", "id"})
"""Fields of a ToolMessage that describe the message, not the call (Langroid's `id` is the
platform's call id)."""


def is_toolmessage(obj: Any) -> bool:
    """Whether `obj` is a pydantic model class with a `request` field and a `purpose` field or
    a `handle`/`handle_async` method."""
    if not (isinstance(obj, type) and issubclass(obj, BaseModel)):
        return False
    fields = obj.model_fields
    return "request" in fields and (
        "purpose" in fields or any(callable(getattr(obj, m, None)) for m in _HANDLERS)
    )


def llm_may_use(model: type[BaseModel]) -> bool:
    """False when the class sets Langroid's `_allow_llm_use = False`."""
    private = getattr(model, "__private_attributes__", {}).get("_allow_llm_use")
    return getattr(private, "default", True) is not False


_HANDLERS = ("handle_async", "handle")


def toolmessage_specs(
    model: type[BaseModel],
    *,
    name: str | None = None,
    description: str | None = None,
    options: ToolOptions | Mapping[str, Any] | None = None,
) -> list[ToolSpec]:
    """The one tool of a ToolMessage-style class.

    Raises:
        UsageError: Naming the class and listing every problem found: no `request` default,
            a `purpose` that is not text, no handler, a handler parameter that is not a
            `ToolContext`, examples that are not instances of the class...
    """
    where = f"{model.__qualname__} (in {model.__module__})"
    problems: list[str] = []
    if not llm_may_use(model):
        raise UsageError(
            f"{where} sets _allow_llm_use = False: the model may not call it, so it cannot be a "
            "tool; remove that line to offer it"
        )
    meta = meta_of(model)
    request = _text_default(model, "request", problems)
    if request is None and name is None and not (meta and meta.name):
        problems.append(
            "a ToolMessage needs a default for its request field, the tool's name, e.g. "
            'request: str = "probe"'
        )
    tool_name = check_name(name or (meta and meta.name) or request or "tool", problems)
    tool_options = merge_options(meta.options if meta else {}, options, problems)
    doc = parse_doc(own_doc(model), where)
    handler, context_param = _handler(model, problems)
    params = _params(model, doc.params)
    if context_param in {param.name for param in params}:
        problems.append(f"field '{context_param}' has the name of the handler's ToolContext")
    takes_extra = model.model_config.get("extra") == "allow"
    if not tool_options.strict and not takes_extra:
        problems.append(
            "strict=False passes arguments the tool does not declare on, but the model refuses "
            "or drops them; give it model_config = ConfigDict(extra='allow') (as Langroid's "
            "ToolMessage has), or leave strict on"
        )
    arguments = build_arguments(
        params,
        model_name=f"{tool_name}_arguments",
        ignored=NOT_ARGUMENTS,
        problems=problems,
        strict=tool_options.strict or not takes_extra,
        # Undeclared arguments reach the model itself, which keeps them in `model_extra`.
        var_keyword=None if tool_options.strict else "model_extra",
    )
    examples, thoughts = _examples(model, params, problems)
    instructions = _instructions(model, thoughts, problems)
    purpose = _text_default(model, "purpose", problems) or doc.description
    if problems or arguments is None or handler is None:
        raise describe_error(where, problems)
    parameters = dict(arguments.parameters)
    if examples:
        parameters["examples"] = [dict(example) for example in examples]
    text = description if description is not None else (meta and meta.description) or purpose
    if instructions and description is None:
        text = f"{text}\n\n{instructions}" if text else instructions
    is_async = inspect.iscoroutinefunction(handler)
    return [
        ToolSpec(
            output_schema=_output_schema(handler, where),
            name=tool_name,
            description=text or "",
            parameters=parameters,
            function=model_runner(
                model, context_param, is_async, method=handler.__name__, post=_posted
            ),
            validate=arguments.validate,
            is_async=is_async,
            context_param=context_param,
            options=tool_options,
            origin=origin_of(model),
            examples=tuple(examples),
            instructions=instructions,
        )
    ]


def _output_schema(handler: Any, where: str) -> dict[str, Any] | None:
    """The handler's typed return, as for a function; a returned ToolMessage is posted as its
    JSON without `purpose` and `id`, which no schema of the class would say, so it gets none."""
    sig = inspect.signature(handler)
    hint = return_hint(handler, sig, resolve_hints(handler, sig, []))
    if isinstance(hint, type) and issubclass(hint, BaseModel) and "request" in hint.model_fields:
        return None
    return output_schema_of(hint, where)


def _text_default(model: type[BaseModel], field: str, problems: list[str]) -> str | None:
    info = model.model_fields.get(field)
    if info is None or info.default is PydanticUndefined or info.default is None:
        return None
    if not isinstance(info.default, str):
        problems.append(
            f"the default of {field} must be a string (got {type(info.default).__name__} "
            f"{info.default!r:.60})"
        )
        return None
    return info.default.strip() or None


def _handler(model: type[BaseModel], problems: list[str]) -> tuple[Any, str | None]:
    handler = next((found for m in _HANDLERS if callable(found := getattr(model, m, None))), None)
    if handler is None:
        request = _text_default(model, "request", [])
        method = repr(request) if request else "after its request"
        problems.append(
            f"it has no handle() or handle_async() method; in Langroid an agent method named "
            f"{method} may handle it, here the tool's code goes in handle(self), which reads "
            "the arguments from self"
        )
        return None, None
    try:
        sig = inspect.signature(handler)
    except (TypeError, ValueError) as exc:
        problems.append(f"the signature of {handler.__name__}() cannot be read ({exc})")
        return None, None
    hints = resolve_hints(handler, sig, problems)
    context_param: str | None = None
    for index, param in enumerate(sig.parameters.values()):
        if index == 0:
            continue
        if is_context(hints.get(param.name)) and context_param is None:
            context_param = param.name
        elif param.default is inspect.Parameter.empty and param.kind not in (
            param.VAR_POSITIONAL,
            param.VAR_KEYWORD,
        ):
            problems.append(
                f"{handler.__name__}() takes '{param.name}', which toolbridge cannot give (there "
                "is no Langroid agent or chat document here): read the arguments from self, and "
                "annotate a parameter ToolContext for the conversation's state and resources"
            )
    return handler, context_param


def _params(model: type[BaseModel], docs: Mapping[str, str]) -> list[Param]:
    params = []
    for field_name, info in model.model_fields.items():
        if field_name in NOT_ARGUMENTS:
            continue
        key = info.alias or field_name
        described = info.description is not None
        params.append(
            Param(
                name=key,
                annotation=info.annotation,
                # The FieldInfo carries the default, constraints and description along.
                default=info,
                description=None if described else docs.get(field_name) or docs.get(key),
            )
        )
    return params


def _examples(
    model: type[BaseModel], params: list[Param], problems: list[str]
) -> tuple[list[dict[str, Any]], list[str]]:
    method = getattr(model, "examples", None)
    if not callable(method):
        return [], []
    try:
        listed = method()
    except Exception as exc:
        problems.append(f"examples() failed ({type(exc).__name__}: {exc})")
        return [], []
    if not isinstance(listed, (list, tuple)):
        problems.append(f"examples() must return a list (got {type(listed).__name__})")
        return [], []
    keys = {param.name for param in params}
    examples: list[dict[str, Any]] = []
    thoughts: list[str] = []
    for index, entry in enumerate(listed, 1):
        thought = None
        if isinstance(entry, tuple) and len(entry) == 2 and isinstance(entry[0], str):
            thought, entry = entry
        if not isinstance(entry, model):
            problems.append(
                f"examples() entry {index} must be a {model.__name__}(...) or a (thought, "
                f"{model.__name__}(...)) pair (got {type(entry).__name__})"
            )
            continue
        # Only what the example sets: defaults would make every example look alike.
        dumped = entry.model_dump(
            mode="json", by_alias=True, exclude_unset=True, exclude=set(NOT_ARGUMENTS)
        )
        example = {key: value for key, value in dumped.items() if key in keys}
        examples.append(example)
        if thought:
            arguments = json.dumps(example, ensure_ascii=False)
            thought = thought.strip().rstrip(".")
            if thought[:2].istitle():
                thought = thought[0].lower() + thought[1:]
            thoughts.append(f"For example, {thought}: {arguments}")
    return examples, thoughts


def _instructions(model: type[BaseModel], thoughts: list[str], problems: list[str]) -> str | None:
    parts = []
    method = getattr(model, "instructions", None)
    if callable(method):
        try:
            text = method()
        except Exception as exc:
            problems.append(f"instructions() failed ({type(exc).__name__}: {exc})")
            text = None
        if text is not None and not isinstance(text, str):
            problems.append(f"instructions() must return a string (got {type(text).__name__})")
        elif text and text.strip():
            parts.append(inspect.cleandoc(text))
    parts.extend(thoughts)
    return "\n".join(parts) or None


def _posted(value: Any) -> Any:
    """A ToolMessage returned by the handler is posted as Langroid's `to_json()` would."""
    if isinstance(value, BaseModel) and "request" in type(value).model_fields:
        return value.model_dump(mode="json", exclude=set(NOT_ARGUMENTS - {"request"}))
    return value


# --- the kind ----------------------------------------------------------------------------------


def _build(obj: Any, request: Request) -> Toolset:
    specs = toolmessage_specs(
        obj, name=request.name, description=request.description, options=request.options
    )
    return StaticToolset(specs, label=f"the ToolMessage {obj.__qualname__}")


def _discover(model: Any) -> bool:
    # A base class of a file's ToolMessages has no request default: it is no tool itself.
    return llm_may_use(model) and _text_default(model, "request", []) is not None


TOOLMESSAGE = Kind("ToolMessage", is_toolmessage, _build, discover=_discover)
"""A pydantic class with a `request` default (the name), `purpose` and `handle()`."""
