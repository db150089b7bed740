"""The toolkit kind: a class or instance whose methods are several tools sharing state.

Which methods: its `@manifest` methods when it has any; otherwise, when it is explicitly a
toolkit (a `toolkit_name` or `toolkit_description` attribute, or `Toolbox.add(obj,
toolkit=True)`), every public method (not starting with ``_``, defined by the class or a base
other than `object`). A class is instantiated without arguments.

Each tool keeps the toolkit: `ToolSpec.toolkit` (the `toolkit_name` attribute, else the class
name in snake case, also the default prefix) and `ToolSpec.toolkit_description` (the
`toolkit_description` or `description` attribute, else the class docstring's first paragraph),
which is also appended to the tool's description so the model sees what the toolkit is for.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from types import ModuleType
from typing import Any

from bridge.errors import UsageError
from bridge.tools._decorators import is_manifest
from bridge.tools._dialects import replace_spec
from bridge.tools.function_spec import build_spec
from bridge.tools.kinds.base import Kind, Request, snake_case
from bridge.tools.spec import ToolSpec
from bridge.tools.toolsets import PREFIX_RULE, StaticToolset, Toolset

__all__ = ["SINGLE_TOOL_METHODS", "TOOLKIT", "looks_like_toolkit"]

SINGLE_TOOL_METHODS = frozenset(
    {"run", "arun", "call", "acall", "handle", "handle_async", "__call__"}
)
"""Methods that make one tool of an object (an action's `run`, a BaseTool's `call`...): a
`@manifest` on one of them alone does not make the object a toolkit."""

_MARKERS = ("toolkit_name", "toolkit_description")


def _class_of(obj: Any) -> type | None:
    if isinstance(obj, ModuleType) or inspect.isroutine(obj) or isinstance(obj, str):
        return None
    return obj if isinstance(obj, type) else type(obj)


def manifest_methods(cls: type) -> list[str]:
    """Names of the `@manifest` methods of `cls`, in definition order (base classes first)."""
    found: dict[str, None] = {}
    for klass in reversed(cls.__mro__):
        for attribute, value in vars(klass).items():
            if is_manifest(value):
                found[attribute] = None
    return list(found)


def public_methods(cls: type) -> list[str]:
    """Names of the public methods of `cls` (base classes first), `object`'s left out."""
    found: dict[str, None] = {}
    for klass in reversed(cls.__mro__):
        if klass is object:
            continue
        for attribute, value in vars(klass).items():
            if attribute.startswith("_") or attribute in _MARKERS:
                continue
            if inspect.isfunction(value) or isinstance(value, (staticmethod, classmethod)):
                found[attribute] = None
    return list(found)


def is_explicit(obj: Any) -> bool:
    """Declared a toolkit by a `toolkit_name` or `toolkit_description` attribute."""
    cls = _class_of(obj)
    # Strings only: a dataclass (a ToolSpec) may have fields of these names, None by default.
    return cls is not None and any(
        isinstance(getattr(cls, marker, None), str) for marker in _MARKERS
    )


def looks_like_toolkit(obj: Any) -> bool:
    """A class or instance declared a toolkit, or with `@manifest` methods besides the ones
    that make a single tool (`SINGLE_TOOL_METHODS`)."""
    cls = _class_of(obj)
    if cls is None:
        return False
    return is_explicit(obj) or any(
        name not in SINGLE_TOOL_METHODS for name in manifest_methods(cls)
    )


def _matches(obj: Any) -> bool:
    # Any class reaches here (it then needs methods to expose); an instance only in shape.
    cls = _class_of(obj)
    if cls is None:
        return False
    return isinstance(obj, type) or looks_like_toolkit(obj)


def _discover(obj: Any) -> bool:
    return looks_like_toolkit(obj)


def _instance(cls: type) -> Any:
    if is_manifest(cls):
        raise UsageError(
            f"@manifest on the class {cls.__qualname__} applies only to pydantic-model tools; "
            "for a toolkit decorate its methods, and set toolkit_name or pass prefix= to name it"
        )
    try:
        return cls()
    except Exception as exc:
        raise UsageError(
            f"cannot create the toolkit {cls.__qualname__} without arguments "
            f"({type(exc).__name__}: {exc}); pass an instance instead"
        ) from None


def _text(value: Any) -> str | None:
    return value.strip() or None if isinstance(value, str) else None


def toolkit_description(instance: Any) -> str | None:
    """The toolkit's own description: attribute, else the class docstring's first paragraph."""
    for attribute in ("toolkit_description", "description"):
        text = _text(getattr(instance, attribute, None))
        if text is not None:
            return text
    doc = _text(type(instance).__dict__.get("__doc__"))
    return re.split(r"\n\s*\n", inspect.cleandoc(doc))[0] if doc else None


def build_toolkit(obj: Any, request: Request, *, forced: bool = False) -> Toolset:
    """The tools of a toolkit class (instantiated without arguments) or instance."""
    given = _class_of(obj)
    if given is None:
        raise UsageError(
            f"toolkit=True applies to a class or an instance (its methods become the tools), "
            f"not {obj!r}"
        )
    request.single_only(f"the toolkit {given.__qualname__}")
    instance = _instance(obj) if isinstance(obj, type) else obj
    cls = type(instance)
    names = manifest_methods(cls)
    if not names and (forced or is_explicit(instance)):
        names = public_methods(cls)
    if not names:
        raise UsageError(
            f"toolkit {cls.__qualname__} has no @manifest methods; decorate the methods to expose "
            "with @manifest, or mark it a toolkit (a toolkit_description attribute, or "
            "Toolbox.add(..., toolkit=True)) to expose its public methods"
        )
    kit = getattr(cls, "toolkit_name", None) or snake_case(cls.__name__)
    if not isinstance(kit, str) or not re.fullmatch(PREFIX_RULE, kit):
        raise UsageError(
            f"toolkit_name {kit!r} of {cls.__qualname__} is invalid: use ASCII letters, digits, "
            "'_' and '-' only"
        )
    about = toolkit_description(instance)
    specs = [_api(instance, attribute, kit, about, request) for attribute in names]
    return StaticToolset(specs, label=f"the toolkit {cls.__qualname__}", default_prefix=kit)


def _api(instance: Any, attribute: str, kit: str, about: str | None, request: Request) -> ToolSpec:
    cls = type(instance)
    method: Callable[..., Any] = getattr(instance, attribute)
    spec = build_spec(method, options=request.options)
    base = spec.name if spec.name != getattr(method, "__name__", attribute) else attribute
    description = spec.description
    if about:
        # In every tool's description: the platforms have no notion of a toolkit.
        part = f"part of {kit}: {about}"
        description = f"{description} ({part})" if description else part[0].upper() + part[1:]
    return replace_spec(
        spec,
        name=base,
        description=description,
        origin=f"{cls.__module__}:{cls.__qualname__}.{attribute}",
        toolkit=kit,
        toolkit_description=about,
    )


def _build(obj: Any, request: Request) -> Toolset:
    return build_toolkit(obj, request, forced=request.toolkit is True)


TOOLKIT = Kind("toolkit", _matches, _build, discover=_discover, toolkit=True)
