"""The `manifest` decorators: they only record metadata on the object and return it unchanged.

Nothing is computed while decorating (`build_spec` reads the records later), so the order of the
decorators does not matter and the function stays callable exactly as before. The records are
frozen and replaced, never mutated: `functools.wraps` may share them between two objects.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar, overload

from bridge.errors import UsageError
from bridge.tools.schema import NO_DEFAULT

__all__ = [
    "ATTRIBUTE",
    "Meta",
    "ParamDecl",
    "is_manifest",
    "manifest",
    "manifest_parameter",
    "manifest_return",
    "meta_of",
    "unwrap_method",
]

ATTRIBUTE = "__toolbridge_manifest__"
"""Where the records live on a decorated function or class."""

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class ParamDecl:
    """What one `@manifest_parameter` said about one parameter."""

    name: str
    description: str | None = None
    type: str | None = None
    required: bool | None = None
    enum: tuple[Any, ...] | None = None
    example: Any = NO_DEFAULT


@dataclass(frozen=True)
class Meta:
    """What the decorators recorded. Frozen: `functools.wraps` may share it between objects."""

    manifests: int = 0
    name: str | None = None
    description: str | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    params: tuple[ParamDecl, ...] = ()
    returns: tuple[tuple[str, Any], ...] = ()
    """(description, type) per `@manifest_return`; the last one counts."""


def unwrap_method(obj: Any) -> Any:
    """The function inside a `staticmethod`/`classmethod` object (decorated in either order)."""
    return obj.__func__ if isinstance(obj, (staticmethod, classmethod)) else obj


def meta_of(obj: Any) -> Meta | None:
    """The decorators' records on `obj` (a function, bound method or class), if any."""
    target = unwrap_method(obj)
    # A class's own dict only: a subclass must not inherit its parent's manifest.
    own = isinstance(target, type)
    found = target.__dict__.get(ATTRIBUTE) if own else getattr(target, ATTRIBUTE, None)
    return found if isinstance(found, Meta) else None


def _record(obj: F, change: Callable[[Meta], Meta]) -> F:
    target = unwrap_method(obj)
    try:
        setattr(target, ATTRIBUTE, change(meta_of(target) or Meta()))
    except (AttributeError, TypeError):
        raise UsageError(
            f"cannot attach a manifest to {obj!r}: it does not accept attributes; "
            "decorate the function itself"
        ) from None
    return obj


def is_manifest(obj: Any) -> bool:
    """Whether `obj` (a function, method or class) carries `@manifest`."""
    meta = meta_of(obj)
    return meta is not None and meta.manifests > 0


@overload
def manifest(name: F, /) -> F: ...


@overload
def manifest(
    name: str | None = None,
    description: str | None = None,
    *,
    timeout: float | None = None,
    idempotent: bool = False,
    confirm: bool = False,
    read_only: bool = False,
    before: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    after: Callable[[Any], Any] | None = None,
    strict: bool = True,
) -> Callable[[F], F]: ...


def manifest(
    name: Any = None,
    description: str | None = None,
    *,
    timeout: float | None = None,
    idempotent: bool = False,
    confirm: bool = False,
    read_only: bool = False,
    before: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    after: Callable[[Any], Any] | None = None,
    strict: bool = True,
) -> Any:
    """Mark a function (or a pydantic-model tool class) as a tool.

    Works with or without parentheses. Problems (a bad name, a bad option) are reported when the
    tool is built, all at once.

    Args:
        name: Tool name; defaults to the function's name. Must match `NAME_RULE`.
        description: Tool description; defaults to the docstring.
        timeout: Seconds before a call is abandoned (None: the dispatcher's default).
        idempotent: The tool is safe to run again after a crash interrupted it.
        confirm: A person must approve each call.
        read_only: The tool changes nothing (MCP hosts are told so with `readOnlyHint`).
        before: Transforms the raw arguments (a dict) before validation; sync or async.
        after: Transforms the result before it is serialised; sync or async.
        strict: Refuse arguments the tool does not declare; False passes them to the
            function's `**kwargs` (which it must have).
    """
    if callable(name) and not isinstance(name, str) and description is None:
        return manifest()(name)
    options = {
        "timeout": timeout,
        "idempotent": idempotent,
        "confirm": confirm,
        "read_only": read_only,
        "before": before,
        "after": after,
        "strict": strict,
    }

    def decorate(obj: F) -> F:
        return _record(
            obj,
            lambda meta: dataclasses.replace(
                meta,
                manifests=meta.manifests + 1,
                name=name,
                description=description,
                options=options,
            ),
        )

    return decorate


def manifest_parameter(
    name: str,
    description: str | None = None,
    type: str | None = None,
    required: bool | None = None,
    enum: list[Any] | tuple[Any, ...] | None = None,
    example: Any = NO_DEFAULT,
) -> Callable[[F], F]:
    """Describe one parameter of a tool function.

    The signature stays the truth for the type and whether the argument is required: `type`
    only fills in for an unannotated parameter, and a `type`/`required` that contradicts the
    signature is logged and ignored (as in the AppBuilder SDK).

    Args:
        name: The parameter's name in the signature.
        description: Wins over `Annotated`/`Field` and the docstring.
        type: JSON Schema or Python type name (`"string"`, `"int"`...) for an unannotated
            parameter.
        required: Kept for SDK compatibility; the default value decides.
        enum: The allowed values (shown to the model and enforced).
        example: One example value.
    """
    decl = ParamDecl(
        name=name,
        description=description,
        type=type,
        required=required,
        enum=tuple(enum) if enum is not None else None,
        example=example,
    )
    return lambda obj: _record(
        obj, lambda meta: dataclasses.replace(meta, params=(*meta.params, decl))
    )


def manifest_return(description: str, type: Any = None) -> Callable[[F], F]:
    """Describe what the tool returns; adds a "Returns: ..." sentence to its description.

    Args:
        description: The sentence after "Returns:".
        type: The returned type, which wins over the return annotation: a Python type (a
            pydantic model, dataclass, TypedDict, `list[str]`...) or a type name as the
            AppBuilder SDK takes it (`"dict"`, `"list[int]"`...). It gives the tool an output
            schema (see `ToolSpec.output_schema`); `str`/`"str"` gives none.
    """
    returned = (description, type)
    return lambda obj: _record(
        obj, lambda meta: dataclasses.replace(meta, returns=(*meta.returns, returned))
    )
