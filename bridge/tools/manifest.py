"""Describe Python functions as tools: the `manifest` decorators and `Manifest`.

The decorators (defined in `bridge.tools._decorators`) only record metadata on the function and
return the very same object, so it stays callable exactly as before; `build_spec`
(`bridge.tools.function_spec`) reads that metadata, the signature, the type hints and the
docstring once, and produces the frozen `ToolSpec` (`build_model_spec` in
`bridge.tools.model_spec` for pydantic-model tools). Because nothing is computed while
decorating, the order of the decorators does not matter.

Precedence for every description: decorator > `Annotated`/`Field` > docstring.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from bridge.errors import UsageError
from bridge.tools._decorators import manifest, manifest_parameter, manifest_return
from bridge.tools.function_spec import build_spec
from bridge.tools.model_spec import build_model_spec
from bridge.tools.schema import DIALECTS, to_dialect

__all__ = ["Manifest", "manifest", "manifest_parameter", "manifest_return"]


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
