"""What a kind of tool object is: how to recognise it and how to turn it into a toolset.

A kind is one `Kind` entry of `bridge.tools.kinds.KINDS`. `Toolbox.add(obj, ...)` takes the
first entry whose `matches(obj)` is true and calls its `build(obj, request)`; module discovery
(`Toolbox.add(module)`, `load_tools(file)`) keeps the members of a module for which an entry's
`discover` is true. A new kind is one module with one `Kind` and one line in `KINDS`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from bridge.errors import UsageError
from bridge.tools.toolsets import Toolset

__all__ = ["Kind", "Request", "snake_case"]


@dataclass(frozen=True)
class Request:
    """What `Toolbox.add` was asked, as far as building the toolset goes.

    Prefix and `enable=`/`exclude=` are applied by `Toolbox.add` around the built toolset (a
    kind with a prefix of its own sets the toolset's `default_prefix`).
    """

    name: str | None = None
    """New name: for a kind that makes one tool; others call `single_only`."""
    description: str | None = None
    """New description, likewise."""
    options: Mapping[str, Any] = field(default_factory=dict)
    """`ToolOptions` overrides for every tool built (None values keep the declared option)."""
    toolkit: bool | None = None
    """`Toolbox.add(toolkit=...)`: True builds a toolkit, False never does, None decides."""
    prefix: str | None = None
    """`Toolbox.add(prefix=...)`, for messages; None when not given."""

    def single_only(self, what: str) -> None:
        """Refuse `name=`/`description=` for `what`, which can hold several tools."""
        if self.name is not None or self.description is not None:
            raise UsageError(
                f"name= and description= apply to a single tool, but {what} can hold several; "
                "use prefix= to rename them all"
            )

    def for_member(self) -> Request:
        """The request for one member of a module: the options, nothing that names a tool."""
        return Request(options=self.options)


@dataclass(frozen=True)
class Kind:
    """One kind of object `Toolbox.add` accepts.

    `matches` must be cheap and must not raise: it is asked of every object added and of every
    member of a module being searched. `build` raises `UsageError` for anything wrong.
    """

    name: str
    """Short name for messages and tests ("function", "toolkit", ...)."""
    matches: Callable[[Any], bool]
    """Whether `obj` is of this kind."""
    build: Callable[[Any, Request], Toolset]
    """The tools of `obj`, as a toolset (names before any prefix)."""
    discover: Callable[[Any], bool] | None = None
    """Whether a module member of this kind, defined in that module, is one of its tools
    (None: never found by discovery, only added explicitly or through `__tools__`)."""
    toolkit: bool = False
    """A kind that makes a toolkit: skipped when `Toolbox.add(toolkit=False)`."""
    one_tool: bool = False
    """Makes one tool of a class or instance (an action's `run`, a BaseTool's `call`): such an
    object that also looks like a toolkit is ambiguous unless `toolkit=` says which."""


def snake_case(name: str) -> str:
    """``SearchDocs`` -> ``search_docs``, ``HTTPClient`` -> ``http_client``."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()
