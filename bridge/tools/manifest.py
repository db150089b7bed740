"""Describe Python functions as tools: the `manifest` decorators and `build_spec`.

The decorators (defined in `bridge.tools._decorators`) only record metadata on the function and
return the very same object, so it stays callable exactly as before; `build_spec` reads that
metadata, the signature, the type hints and the docstring once, and produces the frozen
`ToolSpec`. Because nothing is computed while decorating, the order of the decorators does not
matter.

Precedence for every description: decorator > `Annotated`/`Field` > docstring.
"""

from __future__ import annotations

import functools
import inspect
import logging
import re
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Optional, get_origin

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from bridge.errors import UsageError
from bridge.tools._decorators import (
    Meta,
    ParamDecl,
    is_manifest,
    manifest,
    manifest_parameter,
    manifest_return,
    meta_of,
    unwrap_method,
)
from bridge.tools._describe import (
    NAME_RULE,
    UNRESOLVED,
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
from bridge.tools._dialects import Fresh, render_spec
from bridge.tools._doctypes import type_from_doc
from bridge.tools._sdk import sdk_view
from bridge.tools.returns import output_schema_of, return_hint
from bridge.tools.schema import (
    DIALECTS,
    NO_DEFAULT,
    Param,
    build_arguments,
    model_arguments,
    remember_output,
    to_dialect,
)
from bridge.tools.spec import ToolOptions, ToolSpec

__all__ = [
    "NAME_RULE",
    "Manifest",
    "build_model_spec",
    "build_spec",
    "is_manifest",
    "manifest",
    "manifest_parameter",
    "manifest_return",
]

logger = logging.getLogger(__name__)


# Types accepted by `@manifest_parameter(type=...)` for an unannotated parameter: JSON Schema
# names and the Python names the AppBuilder SDK documents.
_TYPE_NAMES: dict[str, Any] = {
    "string": str,
    "str": str,
    "integer": int,
    "int": int,
    "number": float,
    "float": float,
    "boolean": bool,
    "bool": bool,
    "array": list,
    "list": list,
    "List": list,
    "object": dict,
    "dict": dict,
    "Dict": dict,
    "any": Any,
    "Any": Any,
}
_JSON_NAMES = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    list: "array",
    dict: "object",
}


class Manifest:
    """The AppBuilder SDK's entry point, kept so that a migration only changes an import."""

    @staticmethod
    def from_function(fn: Callable[..., Any], dialect: str = "appbuilder") -> dict[str, Any]:
        """The tool description of `fn` as sent on the wire in `dialect` (see `DIALECTS`).

        `fn` may also be a pydantic-model tool class (see `build_model_spec`).

        Raises:
            UsageError: For an unknown dialect or a function that cannot be described.
        """
        if dialect not in DIALECTS:
            raise UsageError(f"unknown dialect {dialect!r}; valid dialects: {', '.join(DIALECTS)}")
        if isinstance(fn, type) and issubclass(fn, BaseModel):
            spec = build_model_spec(fn)
        else:
            spec = build_spec(fn)
        result: dict[str, Any] = to_dialect(spec, dialect)
        return result


def _bound_names(fn: Callable[..., Any], sig: inspect.Signature) -> set[str]:
    """Parameters already bound (a method's `self`/`cls`, a partial's positional values): a
    keyword of the same name from the model would make the call fail with "multiple values"."""
    if inspect.ismethod(fn):
        inner: Any = fn.__func__
    elif isinstance(fn, functools.partial):
        inner = fn.func
    else:
        return set()
    try:
        names = set(inspect.signature(inner).parameters)
    except (TypeError, ValueError):
        return set()
    return names - set(sig.parameters)


def build_spec(
    fn: Callable[..., Any],
    *,
    name: str | None = None,
    description: str | None = None,
    options: ToolOptions | Mapping[str, Any] | None = None,
) -> ToolSpec:
    """Describe a function as a tool, once: schema, validator, context parameter, options.

    Args:
        fn: A function, bound method, `functools.partial` or callable object; sync or async.
        name: Overrides `@manifest(name=...)` and the function's name.
        description: Overrides `@manifest(description=...)` and the docstring.
        options: A `ToolOptions` (used as is) or a mapping whose non-None values override the
            options given to `@manifest`.

    Raises:
        UsageError: Naming `fn.__qualname__` and listing every problem found.
    """
    if isinstance(fn, type):
        raise UsageError(
            f"build_spec takes a function, not the class {fn.__qualname__}; use Toolbox.add "
            "for toolkits and pydantic-model tools"
        )
    if isinstance(fn, classmethod):
        raise UsageError("build_spec cannot call an unbound classmethod; pass Class.method")
    fn = unwrap_method(fn)
    if not callable(fn):
        raise UsageError(f"cannot describe {fn!r} as a tool: it is not callable")
    qualname = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    where = f"{qualname} (in {getattr(fn, '__module__', None) or '?'})"
    meta = meta_of(fn)
    problems: list[str] = []
    if meta is not None and meta.manifests > 1:
        problems.append("@manifest is applied more than once")
    tool_name = check_name(
        name if name is not None else (meta and meta.name) or getattr(fn, "__name__", qualname),
        problems,
    )
    tool_options = merge_options(meta.options if meta else {}, options, problems)
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError) as exc:
        raise describe_error(where, [f"its signature cannot be read ({exc})"]) from None
    hints = resolve_hints(fn, sig, problems)
    doc = parse_doc(getattr(fn, "__doc__", None), where)
    decls: dict[str, ParamDecl] = {}
    for decl in meta.params if meta else ():
        if decl.name in decls:
            problems.append(f"parameter '{decl.name}' is described by two @manifest_parameter")
        decls[decl.name] = decl

    params: list[Param] = []
    ignored: set[str] = set()
    var_keyword: str | None = None
    context_param: str | None = None
    skipped: set[str] = set()
    for index, param in enumerate(sig.parameters.values()):
        kind = param.kind
        if index == 0 and param.name in ("self", "cls") and kind <= param.POSITIONAL_OR_KEYWORD:
            skipped.add(param.name)
            continue
        if kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            ignored.add(param.name)
            var_keyword = param.name if kind is param.VAR_KEYWORD else var_keyword
            continue
        hint = hints.get(param.name, Any)
        if hint is UNRESOLVED:
            continue
        if is_context(hint):
            if context_param is not None:
                problems.append(
                    f"parameters '{context_param}' and '{param.name}' are both ToolContext; "
                    "a tool gets one context"
                )
            context_param = param.name
            if kind is param.POSITIONAL_ONLY:
                problems.append(f"parameter '{param.name}' is positional-only; make it a keyword")
            continue
        if kind is param.POSITIONAL_ONLY:
            problems.append(
                f"parameter '{param.name}' is positional-only, but tools are called with keyword "
                "arguments; remove the '/' from the signature"
            )
            continue
        params.append(
            _param(
                param,
                hint,
                decls.get(param.name),
                doc.params.get(param.name),
                problems,
                doc.types.get(param.name),
            )
        )

    known = {p.name for p in params} | ignored | skipped | {context_param}
    for decl in decls.values():
        if decl.name not in known:
            ignored.add(decl.name)
            logger.warning(
                "%s: @manifest_parameter describes '%s', which is not a parameter; it is shown "
                "only in the appbuilder-sdk dialect and dropped if the model sends it",
                where,
                decl.name,
            )
    for documented in doc.params:
        if documented not in known:
            logger.warning(
                "%s: the docstring documents '%s', which is not a parameter; ignored",
                where,
                documented,
            )

    arguments = build_arguments(
        params,
        model_name=f"{tool_name}_arguments",
        ignored=ignored,
        problems=problems,
        strict=tool_options.strict,
        var_keyword=var_keyword,
        reserved=skipped | _bound_names(fn, sig) | ({context_param} if context_param else set()),
    )
    if problems or arguments is None:
        raise describe_error(where, problems)
    _check_declared_types(arguments.parameters, params, decls, where)

    explicit = description if description is not None else (meta.description if meta else None)
    if explicit is not None:
        returns = meta.returns[-1][0] if meta and meta.returns else None
        text = tool_description(explicit, returns)
    else:
        returns = meta.returns[-1][0] if meta and meta.returns else doc.returns
        text = tool_description(doc.description, returns)
    spec = ToolSpec(
        name=tool_name,
        description=text,
        parameters=arguments.parameters,
        function=fn,
        validate=arguments.validate,
        is_async=_is_async(fn),
        context_param=context_param,
        options=tool_options,
        origin=origin_of(fn),
        output_schema=_output_schema(return_hint(fn, sig, hints), meta, doc, where),
    )
    # Made when first asked for (few programs use this dialect), from what is known now.
    sdk = _SdkRendering(
        fn,
        sig,
        {
            "name": tool_name,
            "description": description,
            "skip": context_param,
            "decorated": meta is not None and meta.manifests > 0,
            "notes": tuple(meta.params) if meta else (),
            "decorator_description": meta.description if meta else None,
            "doc": getattr(fn, "__doc__", None),
        },
    )
    remember_output(spec, "appbuilder-sdk", sdk)
    if arguments.appbuilder is not None:
        remember_output(spec, "appbuilder", _appbuilder(arguments.appbuilder))
    return spec


class _SdkRendering:
    """The appbuilder-sdk rendering of a function, made when first asked for (one object kept
    per tool rather than a partial's three: a thousand of them are walked by the collector)."""

    __slots__ = ("fn", "sig", "view")

    def __init__(self, fn: Any, sig: inspect.Signature, view: dict[str, Any]) -> None:
        self.fn = fn
        self.sig = sig
        self.view = view

    def __call__(self, _: ToolSpec) -> dict[str, Any]:
        return sdk_view(self.fn, self.sig, **self.view)


def _appbuilder(shaped: Callable[[], dict[str, Any]]) -> Fresh:
    """The appbuilder rendering of a tool whose arguments schema comes shaped already (`shaped`
    fills a new copy each time, and the rest is strings)."""
    return Fresh(_render_appbuilder, shaped)


def _render_appbuilder(spec: ToolSpec, shaped: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    output: dict[str, Any] = render_spec(spec, "appbuilder", shaped=shaped())
    return output


def _param(
    param: inspect.Parameter,
    hint: Any,
    decl: ParamDecl | None,
    doc: str | None,
    problems: list[str],
    doc_type: str | None = None,
) -> Param:
    annotated = param.annotation is not inspect.Parameter.empty
    if not annotated and decl is not None and decl.type is not None:
        if decl.type in _TYPE_NAMES:
            hint = _TYPE_NAMES[decl.type]
        else:
            problems.append(
                f"parameter '{param.name}': unknown type {decl.type!r} in @manifest_parameter; "
                f"use one of {', '.join(sorted(_TYPE_NAMES, key=str.lower))} or annotate it"
            )
    elif not annotated and doc_type is not None:
        # Lagent-style tools type their parameters only in the docstring.
        typed = type_from_doc(doc_type)
        if typed is not None:
            hint = Optional[typed] if param.default is None else typed  # noqa: UP045
    has_default = param.default is not inspect.Parameter.empty
    if decl is not None and decl.required is not None and decl.required != (not has_default):
        logger.warning(
            "parameter '%s': @manifest_parameter(required=%s) contradicts the signature; the "
            "default value decides (required=%s)",
            param.name,
            decl.required,
            not has_default,
        )
    description = decl.description if decl is not None else None
    if description is None and not _has_field_description(hint, param.default):
        description = _annotated_text(hint) or doc
    return Param(
        name=param.name,
        annotation=hint,
        default=param.default,
        description=description,
        enum=decl.enum if decl is not None else None,
        example=decl.example if decl is not None else NO_DEFAULT,
    )


def _output_schema(hint: Any, meta: Meta | None, doc: Doc, where: str) -> dict[str, Any] | None:
    """The output schema: `@manifest_return(type=...)` > return annotation > docstring type."""
    declared = meta.returns[-1][1] if meta and meta.returns else None
    if declared is not None:
        hint = type_from_doc(declared) if isinstance(declared, str) else declared
        if hint is None:
            logger.warning(
                "%s: @manifest_return(type=%r) names no type toolbridge knows; the tool has no "
                "output schema",
                where,
                declared,
            )
            return None
    elif hint is inspect.Signature.empty and doc.returns_type is not None:
        hint = type_from_doc(doc.returns_type)
    return output_schema_of(hint, where)


def _has_field_description(hint: Any, default: Any) -> bool:
    if isinstance(default, FieldInfo) and default.description:
        return True
    if type(hint) is not type and get_origin(hint) is Annotated:
        return any(isinstance(m, FieldInfo) and m.description for m in hint.__metadata__)
    return False


def _annotated_text(hint: Any) -> str | None:
    if type(hint) is not type and get_origin(hint) is Annotated:
        for item in hint.__metadata__:
            if isinstance(item, str):
                return item
    return None


def _check_declared_types(
    parameters: Mapping[str, Any],
    params: list[Param],
    decls: Mapping[str, ParamDecl],
    where: str,
) -> None:
    props = parameters.get("properties", {})
    for param in params:
        decl = decls.get(param.name)
        if decl is None or decl.type is None or decl.type not in _TYPE_NAMES:
            continue
        declared = _JSON_NAMES.get(_TYPE_NAMES[decl.type])
        actual = props.get(param.name, {}).get("type")
        if declared and isinstance(actual, str) and actual != declared:
            logger.warning(
                "%s: @manifest_parameter(type=%r) for '%s' contradicts its annotation (%s); "
                "the annotation wins",
                where,
                decl.type,
                param.name,
                actual,
            )


def _is_async(fn: Any) -> bool:
    if inspect.iscoroutinefunction(fn):
        return True
    if inspect.isroutine(fn) or not callable(fn):
        return False
    return inspect.iscoroutinefunction(type(fn).__call__)


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
        output_schema=_output_schema(returned, meta, Doc(), where),
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
