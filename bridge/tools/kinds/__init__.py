"""The registry of kinds of tool objects `Toolbox.add` accepts: one `Kind` entry each.

Order matters: the first entry whose `matches(obj)` is true builds the tools. More specific
kinds come first (a ToolMessage is a pydantic model; a toolkit may be callable). To add a kind,
write a module here with one `Kind` (see `bridge.tools.kinds.base`) and put it in `KINDS`.

A class or instance with a `toolkit_name` or `toolkit_description` attribute is a toolkit. One
that is one tool by its own kind (an action with `run`, a BaseTool with `call`) but has
`@manifest` methods besides `run`/`call`/... is ambiguous: `Toolbox.add(obj, toolkit=True)` or
`toolkit=False` chooses.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from bridge.errors import UsageError
from bridge.tools.kinds.actions import ACTION
from bridge.tools.kinds.base import Kind, Request
from bridge.tools.kinds.basetool import BASETOOL
from bridge.tools.kinds.functions import FUNCTION
from bridge.tools.kinds.models import MODEL, MODEL_INSTANCE
from bridge.tools.kinds.modules import discover as discover_members
from bridge.tools.kinds.modules import load_module_file, module_kinds
from bridge.tools.kinds.sources import SOURCE
from bridge.tools.kinds.specs import SPEC
from bridge.tools.kinds.toolkits import TOOLKIT, build_toolkit, is_explicit, looks_like_toolkit
from bridge.tools.kinds.toolmessage import TOOLMESSAGE
from bridge.tools.toolsets import PrefixedToolset, Toolset

__all__ = [
    "KINDS",
    "Kind",
    "Request",
    "build_member",
    "build_toolset",
    "discover",
    "kind_of",
    "load_module_file",
]


def _kind_or_none(obj: Any) -> Kind | None:
    return kind_of(obj, strict=False)


def _build_member(obj: Any, request: Request) -> Toolset:
    return build_member(obj, request)


MODULE, FILE = module_kinds(_kind_or_none, _build_member)

KINDS: list[Kind] = [
    FILE,
    MODULE,
    SOURCE,
    SPEC,
    TOOLMESSAGE,  # before MODEL: ToolMessages are pydantic models too
    MODEL,
    MODEL_INSTANCE,
    BASETOOL,  # single-tool objects before TOOLKIT
    ACTION,
    TOOLKIT,
    FUNCTION,
]
"""Every kind, most specific first."""

EXPECTED = (
    "expected a function, a module, a .py path, a toolkit class or instance, a pydantic model "
    "class with run(), an action with run(), an object with name/description and call(), a "
    "ToolMessage-style model (request, purpose, handle()), a ToolSpec, or a tool source"
)


def kind_of(obj: Any, *, toolkit: bool | None = None, strict: bool = True) -> Kind | None:
    """The kind that builds `obj`'s tools.

    Args:
        obj: What `Toolbox.add` was given.
        toolkit: True: a toolkit, whatever else it looks like; False: never a toolkit.
        strict: Raise for an object of no kind (else return None).

    Raises:
        UsageError: No kind matches (with `strict`), or the object is ambiguous.
    """
    if toolkit is True or (toolkit is None and is_explicit(obj)):
        return TOOLKIT
    for kind in KINDS:
        if toolkit is False and kind.toolkit:
            continue
        if not _matches(kind, obj):
            continue
        if toolkit is None and kind.one_tool and looks_like_toolkit(obj):
            name = getattr(obj, "__qualname__", None) or type(obj).__qualname__
            raise UsageError(
                f"{name} is ambiguous: one tool (a {kind.name}) or a toolkit (it has @manifest "
                "methods besides run/call); pass toolkit=True (or give the class a "
                "toolkit_name attribute) to register its methods as tools, or toolkit=False "
                "for one tool"
            )
        return kind
    if strict:
        raise UsageError(f"cannot register {obj!r}: {EXPECTED}")
    return None


def _matches(kind: Kind, obj: Any) -> bool:
    try:
        return kind.matches(obj)
    except Exception:
        # A hostile or odd object (a proxy whose attribute access raises) is simply not this kind.
        return False


def build_toolset(obj: Any, request: Request) -> Toolset:
    """The toolset of `obj`, built by its kind (names before any prefix)."""
    if request.toolkit is True:
        return build_toolkit(obj, request, forced=True)
    kind = kind_of(obj, toolkit=request.toolkit)
    assert kind is not None  # strict: raised otherwise
    return kind.build(obj, request)


def discover(module: ModuleType) -> list[Any]:
    """The tools `module` exports: its `__tools__`, else the tools it defines, in order.

    Raises:
        UsageError: `__tools__` is not a list or tuple, or holds something that is not a tool.
    """
    return discover_members(module, _kind_or_none)


def build_member(obj: Any, request: Request) -> Toolset:
    """The toolset of one member of a module: the module's options, the member's own prefix."""
    toolset = build_toolset(obj, request.for_member())
    prefix = getattr(toolset, "default_prefix", None)
    return PrefixedToolset(toolset, prefix) if prefix else toolset
