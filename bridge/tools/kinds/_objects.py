"""Helpers for the kinds that read a tool from an object: actions, BaseTools, ToolMessages."""

from __future__ import annotations

import inspect
import re
import sys
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any

from bridge.errors import UsageError
from bridge.tools._decorators import meta_of
from bridge.tools._describe import parse_doc, tool_description
from bridge.tools.function_spec import build_spec
from bridge.tools.spec import ToolOptions, ToolSpec

__all__ = [
    "call_with",
    "has_method",
    "instance_of",
    "method_spec",
    "snake",
    "text_attribute",
]


def is_plain_object(obj: Any) -> bool:
    """A class or an instance that could hold a tool: not a function, method or module."""
    if isinstance(obj, type):
        return True
    return not (inspect.isroutine(obj) or isinstance(obj, (ModuleType, str, bytes)))


def has_method(obj: Any, method: str) -> bool:
    """Whether `obj` (a class or instance) is a tool object whose class defines `method`.

    Not when `method` comes from the standard library (`threading.Thread.run`), nor for
    pydantic models (their own kinds). One with `@manifest` methods besides `method` also looks
    like a toolkit: `bridge.tools.kinds` asks which one is meant.
    """
    if not is_plain_object(obj):
        return False
    cls = obj if isinstance(obj, type) else type(obj)
    owner = defining_class(cls, method)
    return owner is not None and not from_stdlib(owner) and not is_pydantic(cls)


def is_pydantic(cls: type) -> bool:
    """Whether `cls` is a pydantic model (a model tool or a ToolMessage, not this kind)."""
    return any(
        klass.__module__.startswith("pydantic.") and klass.__name__ == "BaseModel"
        for klass in cls.__mro__
    )


def snake(name: str) -> str:
    """``SearchDocs`` -> ``search_docs``, ``HTTPClient`` -> ``http_client``."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()


def method_spec(
    instance: Any,
    method: Callable[..., Any],
    *,
    name: str | None,
    description: str | None,
    options: ToolOptions | Mapping[str, Any] | None,
) -> ToolSpec:
    """The tool of an object whose one method does the work (an action's `run`, a `call`).

    Name: `name`, else `@manifest(name=)` on the method, else a string `name` attribute, else
    the class name in snake case. Description: `description`, else `@manifest(description=)`,
    else a `description` attribute (a string, or a dict with a "description" as Lagent's),
    else the method's docstring text, else the class's own docstring; the method's Returns
    section follows.
    """
    cls = type(instance)
    where = cls.__qualname__
    meta = meta_of(method)
    tool_name = name
    if tool_name is None and not (meta and meta.name):
        tool_name = text_attribute(instance, "name", where) or snake(cls.__name__)
    text = description
    if text is None and not (meta and meta.description):
        doc = parse_doc(getattr(method, "__doc__", None), f"{where}.{method.__name__}")
        base = (
            _description_attribute(instance, where)
            or doc.description
            or parse_doc(own_doc(cls), where).description
        )
        # build_spec appends @manifest_return itself, after an explicit description.
        text = base if meta and meta.returns else tool_description(base, doc.returns)
    return build_spec(method, name=tool_name, description=text, options=options)


def _description_attribute(instance: Any, where: str) -> str | None:
    value = getattr(instance, "description", None)
    if isinstance(value, Mapping):
        # Lagent's BaseAction.description is the whole tool description as a dict.
        value = value.get("description")
    if value is None:
        return None
    if not isinstance(value, str):
        raise UsageError(
            f"{where}.description must be a string (got {type(value).__name__} {value!r:.80})"
        )
    return value.strip() or None


def defining_class(cls: type, attribute: str) -> type | None:
    """The class of `cls`'s MRO whose own dict defines `attribute`, if any."""
    for klass in cls.__mro__:
        if attribute in vars(klass):
            return klass
    return None


def from_stdlib(klass: type) -> bool:
    """Whether `klass` comes from the standard library (`threading.Thread.run` is no tool)."""
    module = (klass.__module__ or "").partition(".")[0]
    return module == "builtins" or module in sys.stdlib_module_names


def instance_of(obj: Any, what: str) -> Any:
    """`obj` itself, or for a class an instance made without arguments."""
    if not isinstance(obj, type):
        return obj
    try:
        return obj()
    except Exception as exc:
        raise UsageError(
            f"cannot create the {what} {obj.__qualname__} without arguments "
            f"({type(exc).__name__}: {exc}); pass an instance instead, e.g. "
            f"Toolbox.add({obj.__name__}(...))"
        ) from None


def text_attribute(obj: Any, attribute: str, where: str) -> str | None:
    """The string in `obj.<attribute>`, None when absent, None-valued or blank.

    Raises:
        UsageError: The attribute holds something other than a string.
    """
    value = getattr(obj, attribute, None)
    if value is None:
        return None
    if not isinstance(value, str):
        raise UsageError(
            f"{where}.{attribute} must be a string (got {type(value).__name__} {value!r:.80})"
        )
    return value.strip() or None


def own_doc(cls: type) -> str | None:
    """The docstring written on `cls` itself (not one inherited from a library's base class)."""
    doc = vars(cls).get("__doc__")
    return doc if isinstance(doc, str) else None


def call_with(fn: Callable[..., Any], convert: Callable[[Any], Any], is_async: bool) -> Any:
    """`fn` with `convert` applied to what it returns (awaited first when `is_async`)."""
    if is_async:

        async def run_async(**kwargs: Any) -> Any:
            return convert(await fn(**kwargs))

        wrapper: Callable[..., Any] = run_async
    else:

        def run_sync(**kwargs: Any) -> Any:
            return convert(fn(**kwargs))

        wrapper = run_sync
    for attribute in ("__name__", "__qualname__", "__module__", "__doc__"):
        value = getattr(fn, attribute, None)
        if value is not None:
            setattr(wrapper, attribute, value)
    return wrapper
