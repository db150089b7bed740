"""Pieces the schema builder, the dialects, the shapes and the typed returns all use.

A leaf of the tools package (it imports nothing from it): deep copies of JSON-shaped data, and
annotations made describable by pydantic on every supported Python.
"""

from __future__ import annotations

import marshal
import sys
import types
from typing import Annotated, Any, Union, get_args, get_origin, get_type_hints

import typing_extensions

__all__ = ["compat_annotation", "copy_json"]


def copy_json(value: Any) -> Any:
    """A deep copy of JSON-shaped data (dicts and lists; other values are shared)."""
    try:
        # Several times faster than walking in Python; format 2 has no back-references, so an
        # object shared twice in `value` becomes two copies, as below.
        return marshal.loads(marshal.dumps(value, 2))
    except ValueError:  # not plain data (a dict subclass, an object): copied the slow way
        return _copy(value)


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


_COMPAT: dict[Any, Any] = {}


def compat_annotation(annotation: Any) -> Any:
    """Replace `typing.TypedDict`s, which pydantic refuses before Python 3.12, by equivalents."""
    if sys.version_info >= (3, 12) or not _has_typing_typeddict(annotation, 0):
        return annotation
    return _convert(annotation)


def _has_typing_typeddict(annotation: Any, depth: int) -> bool:
    if depth > 20:
        return False
    if typing_extensions.is_typeddict(annotation):
        return type(annotation).__module__ == "typing" or any(
            _has_typing_typeddict(hint, depth + 1)
            for hint in get_type_hints(annotation, include_extras=True).values()
        )
    return any(_has_typing_typeddict(arg, depth + 1) for arg in get_args(annotation))


def _convert(annotation: Any) -> Any:
    if typing_extensions.is_typeddict(annotation):
        converted = _COMPAT.get(annotation)
        if converted is None:
            hints = get_type_hints(annotation, include_extras=True)
            required = getattr(annotation, "__required_keys__", frozenset(hints))
            fields = {
                key: _convert(hint) if key in required else typing_extensions.NotRequired[hint]
                for key, hint in hints.items()
            }
            make: Any = typing_extensions.TypedDict  # the functional form, with a runtime name
            converted = make(annotation.__name__, fields)
            converted.__doc__ = annotation.__doc__
            converted.__module__ = annotation.__module__
            _COMPAT[annotation] = converted
        return converted
    origin, args = get_origin(annotation), get_args(annotation)
    if not args:
        return annotation
    if origin is Annotated:
        return Annotated.__class_getitem__((_convert(args[0]), *annotation.__metadata__))
    new_args = tuple(_convert(arg) for arg in args)
    if origin is Union or origin is types.UnionType:
        return Union[new_args]  # noqa: UP007
    try:
        return annotation.copy_with(new_args)
    except AttributeError:
        return origin[new_args[0] if len(new_args) == 1 else new_args]
