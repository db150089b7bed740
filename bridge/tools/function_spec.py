"""Describe a Python function as a tool: `build_spec`.

`build_spec` reads what the `manifest` decorators recorded (`bridge.tools._decorators`), the
signature, the type hints and the docstring once, and produces the frozen `ToolSpec`.
Precedence for every description: decorator > `Annotated`/`Field` > docstring.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Optional, get_origin

from pydantic.fields import FieldInfo

from bridge.errors import UsageError
from bridge.tools._decorators import Meta, ParamDecl, meta_of, unwrap_method
from bridge.tools._describe import (
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
from bridge.tools._doctypes import type_from_doc
from bridge.tools.appbuilder_rendering import SdkRendering, appbuilder_rendering
from bridge.tools.returns import output_schema_of, return_hint
from bridge.tools.schema import NO_DEFAULT, Param, build_arguments, remember_output
from bridge.tools.spec import ToolOptions, ToolSpec

__all__ = ["build_spec", "declared_output_schema"]

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
        output_schema=declared_output_schema(return_hint(fn, sig, hints), meta, doc, where),
    )
    # Made when first asked for (few programs use this dialect), from what is known now.
    sdk = SdkRendering(
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
        remember_output(spec, "appbuilder", appbuilder_rendering(arguments.appbuilder))
    return spec


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


def declared_output_schema(
    hint: Any, meta: Meta | None, doc: Doc, where: str
) -> dict[str, Any] | None:
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
