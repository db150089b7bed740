"""The pydantic-model kind: a `BaseModel` subclass whose fields are the arguments and whose
`run(self)` does the work."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from bridge.errors import UsageError
from bridge.tools._decorators import is_manifest
from bridge.tools.kinds.base import Kind, Request
from bridge.tools.model_spec import build_model_spec
from bridge.tools.toolsets import StaticToolset, Toolset

__all__ = ["MODEL", "MODEL_INSTANCE"]


def _matches(obj: Any) -> bool:
    return isinstance(obj, type) and issubclass(obj, BaseModel)


def _discover(obj: Any) -> bool:
    # A tools file also defines plain data models (arguments, returns): only those that run.
    return callable(getattr(obj, "run", None)) or is_manifest(obj)


def _build(obj: Any, request: Request) -> Toolset:
    spec = build_model_spec(
        obj, name=request.name, description=request.description, options=request.options
    )
    return StaticToolset([spec], label=f"the model tool {obj.__qualname__}")


def _build_instance(obj: Any, request: Request) -> Toolset:
    raise UsageError(
        f"pass the class {type(obj).__qualname__}, not an instance: a pydantic-model tool is "
        "built from the arguments of each call"
    )


MODEL = Kind("model", _matches, _build, discover=_discover)
MODEL_INSTANCE = Kind("model instance", lambda obj: isinstance(obj, BaseModel), _build_instance)
