"""The source kind: an object that is already a toolset (`specs()` and `close()`), such as an
HTTP, OpenAPI or MCP tool source. `Toolbox.close()` closes it."""

from __future__ import annotations

from typing import Any

from bridge.tools.kinds.base import Kind, Request
from bridge.tools.toolsets import Toolset

__all__ = ["SOURCE"]


def _matches(obj: Any) -> bool:
    # A Protocol isinstance check is slow; without both methods it is False anyway.
    if not (hasattr(obj, "specs") and hasattr(obj, "close")):
        return False
    return not isinstance(obj, type) and isinstance(obj, Toolset)


def _build(obj: Any, request: Request) -> Toolset:
    request.single_only(f"the tool source {obj!r}")
    toolset: Toolset = obj
    return toolset


SOURCE = Kind("source", _matches, _build)
