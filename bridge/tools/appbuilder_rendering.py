"""The AppBuilder renderings of a function tool, remembered on its `ToolSpec` by `build_spec`:
``appbuilder`` from an arguments schema that comes shaped already, and ``appbuilder-sdk`` (the
AppBuilder SDK's own view of the function), made when first asked for."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from bridge.tools._dialects import Fresh, render_spec
from bridge.tools._sdk import sdk_view
from bridge.tools.spec import ToolSpec

__all__ = ["SdkRendering", "appbuilder_rendering"]


class SdkRendering:
    """The appbuilder-sdk rendering of a function, made when first asked for (one object kept
    per tool rather than a partial's three: a thousand of them are walked by the collector)."""

    __slots__ = ("fn", "sig", "view")

    def __init__(self, fn: Any, sig: inspect.Signature, view: dict[str, Any]) -> None:
        self.fn = fn
        self.sig = sig
        self.view = view

    def __call__(self, _: ToolSpec) -> dict[str, Any]:
        return sdk_view(self.fn, self.sig, **self.view)


def appbuilder_rendering(shaped: Callable[[], dict[str, Any]]) -> Fresh:
    """The appbuilder rendering of a tool whose arguments schema comes shaped already (`shaped`
    fills a new copy each time, and the rest is strings)."""
    return Fresh(_render_appbuilder, shaped)


def _render_appbuilder(spec: ToolSpec, shaped: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    output: dict[str, Any] = render_spec(spec, "appbuilder", shaped=shaped())
    return output
