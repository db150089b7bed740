"""The function kind: a function, bound method, `functools.partial` or callable object."""

from __future__ import annotations

import inspect
from types import ModuleType
from typing import Any

from bridge.tools._decorators import is_manifest
from bridge.tools.function_spec import build_spec
from bridge.tools.kinds.base import Kind, Request
from bridge.tools.toolsets import StaticToolset, Toolset

__all__ = ["FUNCTION"]


def _matches(obj: Any) -> bool:
    return callable(obj) and not isinstance(obj, (type, ModuleType))


def _discover(obj: Any) -> bool:
    # Only what the author marked: a tools file also holds helpers that are not tools.
    return inspect.isfunction(obj) and is_manifest(obj)


def _build(obj: Any, request: Request) -> Toolset:
    spec = build_spec(
        obj, name=request.name, description=request.description, options=request.options
    )
    return StaticToolset([spec], label=f"the function {spec.name}")


FUNCTION = Kind("function", _matches, _build, discover=_discover)
