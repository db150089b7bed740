"""The spec kind: a `ToolSpec` already built (by `build_spec`, a source, another toolbox)."""

from __future__ import annotations

from typing import Any

from bridge.errors import UsageError
from bridge.tools._dialects import replace_spec
from bridge.tools.kinds.base import Kind, Request
from bridge.tools.spec import ToolSpec
from bridge.tools.toolsets import StaticToolset, Toolset

__all__ = ["SPEC"]


def _build(obj: Any, request: Request) -> Toolset:
    spec: ToolSpec = obj
    given = sorted(key for key, value in request.options.items() if value is not None)
    if given:
        # Its validator and schema were made with its options: changing them here would lie.
        keywords = ", ".join(f"{key}=" for key in given)
        raise UsageError(
            f"{keywords} cannot change the ready ToolSpec {spec.name!r}: its options were fixed "
            "when it was built; pass them to build_spec(..., options=...) instead"
        )
    changes = {
        key: value
        for key, value in (("name", request.name), ("description", request.description))
        if value is not None
    }
    return StaticToolset(
        [replace_spec(spec, **changes) if changes else spec], label=f"the tool {spec.name}"
    )


SPEC = Kind("spec", lambda obj: isinstance(obj, ToolSpec), _build)
