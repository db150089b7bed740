"""Toolsets: sources of tools, and the small wrappers that compose them.

A toolset is anything with `specs()` and `close()` (the `Toolset` protocol; HTTP, OpenAPI and
MCP sources are toolsets). Cross-cutting changes are wrappers, never edits of a source:

    ts = StaticToolset(specs, label="the module tools")
    ts = SelectedToolset(ts, enable=["search"])        # keep some tools (names before prefixing)
    ts = PrefixedToolset(ts, "crm")                    # crm_search
    ts = RenamedToolset(ts, {"crm_search": "find"})    # one tool renamed
    CombinedToolset([ts, other]).specs()               # several toolsets, names checked

`Toolbox.add` builds one toolset per object (see `bridge.tools.kinds`) and wraps it as the
keywords it was given ask.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Protocol, runtime_checkable

from bridge.errors import UsageError
from bridge.tools._dialects import replace_spec
from bridge.tools.spec import ToolSpec

__all__ = [
    "PREFIX_RULE",
    "AbstractToolset",
    "CombinedToolset",
    "FilteredToolset",
    "PrefixedToolset",
    "RenamedToolset",
    "SelectedToolset",
    "StaticToolset",
    "Toolset",
    "WrapperToolset",
]

logger = logging.getLogger(__name__)

PREFIX_RULE = r"[A-Za-z0-9_-]{1,63}"
"""What a prefix may hold: it becomes part of tool names, which platforms restrict."""


@runtime_checkable
class Toolset(Protocol):
    """A source of tools: ready specs, plus resources (sessions, processes) that `close()`
    releases. Tools that are not Python functions (HTTP manifest, OpenAPI, MCP) are toolsets."""

    def specs(self) -> list[ToolSpec]:
        """The tools to register."""
        ...

    def close(self) -> None:
        """Release what the toolset holds; called once by `Toolbox.close()`."""
        ...


class AbstractToolset:
    """Base of the toolsets built here: a label for messages and a no-op `close`.

    `default_prefix` is the prefix a toolset brings itself (a toolkit's `toolkit_name`): used
    when `Toolbox.add` is given no `prefix=`; `prefix=""` drops it.
    """

    label: str = "the toolset"
    default_prefix: str | None = None

    def specs(self) -> list[ToolSpec]:
        """The tools of this toolset."""
        raise NotImplementedError

    def close(self) -> None:
        """Nothing to release by default."""


class StaticToolset(AbstractToolset):
    """Tools already described (built once, at registration)."""

    def __init__(
        self,
        specs: Iterable[ToolSpec],
        *,
        label: str = "the toolset",
        default_prefix: str | None = None,
    ) -> None:
        self._specs = list(specs)
        self.label = label
        self.default_prefix = default_prefix

    def specs(self) -> list[ToolSpec]:
        """The tools, in the order given."""
        return list(self._specs)

    def __repr__(self) -> str:
        return f"StaticToolset({self.label!r}, {[s.name for s in self._specs]!r})"


class WrapperToolset(AbstractToolset):
    """A toolset that changes another one; `close` closes the wrapped toolset."""

    def __init__(self, wrapped: Toolset) -> None:
        self.wrapped = wrapped
        self.label = getattr(wrapped, "label", None) or repr(wrapped)
        self.default_prefix = getattr(wrapped, "default_prefix", None)

    def specs(self) -> list[ToolSpec]:
        """The wrapped toolset's tools, unchanged."""
        return list(self.wrapped.specs())

    def close(self) -> None:
        """Close the wrapped toolset."""
        self.wrapped.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.wrapped!r})"


class PrefixedToolset(WrapperToolset):
    """Every tool named ``<prefix><separator><name>``; an empty prefix changes nothing."""

    def __init__(self, wrapped: Toolset, prefix: str, *, separator: str = "_") -> None:
        super().__init__(wrapped)
        if prefix and not re.fullmatch(PREFIX_RULE, prefix):
            raise UsageError(
                f"prefix {prefix!r} is invalid: use ASCII letters, digits, '_' and '-' only "
                "(1 to 63 of them), or '' for no prefix"
            )
        self.prefix = prefix
        self.separator = separator
        # Applied: the wrapped toolset's own prefix no longer applies.
        self.default_prefix = None

    def specs(self) -> list[ToolSpec]:
        """The wrapped tools, renamed."""
        specs = self.wrapped.specs()
        if not self.prefix:
            return list(specs)
        renamed = []
        for spec in specs:
            name = f"{self.prefix}{self.separator}{spec.name}"
            if len(name) > 64:
                raise UsageError(
                    f"tool name {name!r} is longer than 64 characters; pass a shorter prefix= "
                    "or name="
                )
            renamed.append(replace_spec(spec, name=name))
        return renamed


class FilteredToolset(WrapperToolset):
    """Only the tools a predicate keeps."""

    def __init__(self, wrapped: Toolset, keep: Callable[[ToolSpec], bool]) -> None:
        super().__init__(wrapped)
        self.keep = keep

    def specs(self) -> list[ToolSpec]:
        """The wrapped tools the predicate keeps."""
        return [spec for spec in self.wrapped.specs() if self.keep(spec)]


class SelectedToolset(WrapperToolset):
    """The tools named by `enable` (all when None), minus those named by `exclude`.

    Names are checked against the wrapped tools: a name that is none of them is an error that
    lists them, so a typo never silently drops a tool.
    """

    def __init__(
        self,
        wrapped: Toolset,
        *,
        enable: Sequence[str] | None = None,
        exclude: Sequence[str] = (),
    ) -> None:
        super().__init__(wrapped)
        self.enable = _names("enable", enable) if enable is not None else None
        self.exclude = _names("exclude", exclude)

    def specs(self) -> list[ToolSpec]:
        """The selected tools, in their own order."""
        specs = self.wrapped.specs()
        known = [spec.name for spec in specs]
        for keyword, names in (("enable", self.enable or ()), ("exclude", self.exclude)):
            unknown = [name for name in names if name not in known]
            if unknown:
                raise UsageError(
                    f"{keyword}= names {', '.join(map(repr, unknown))}, not a tool of "
                    f"{self.label}; its tools are: {', '.join(known) or 'none'}"
                )
        return [
            spec
            for spec in specs
            if (self.enable is None or spec.name in self.enable) and spec.name not in self.exclude
        ]


class RenamedToolset(WrapperToolset):
    """Some tools renamed (``{old: new}``); a name the wrapped toolset lacks is an error."""

    def __init__(self, wrapped: Toolset, names: Mapping[str, str]) -> None:
        super().__init__(wrapped)
        self.names = dict(names)

    def specs(self) -> list[ToolSpec]:
        """The wrapped tools, some under new names."""
        specs = self.wrapped.specs()
        known = [spec.name for spec in specs]
        unknown = [old for old in self.names if old not in known]
        if unknown:
            raise UsageError(
                f"cannot rename {', '.join(map(repr, unknown))}: not a tool of {self.label}; "
                f"its tools are: {', '.join(known) or 'none'}"
            )
        return [
            replace_spec(spec, name=self.names[spec.name]) if spec.name in self.names else spec
            for spec in specs
        ]


class CombinedToolset(AbstractToolset):
    """Several toolsets as one; two tools with one name are an error naming both origins."""

    def __init__(self, toolsets: Iterable[Toolset], *, label: str = "the toolsets") -> None:
        self.toolsets = list(toolsets)
        self.label = label

    def specs(self) -> list[ToolSpec]:
        """Every toolset's tools, in order."""
        seen: dict[str, ToolSpec] = {}
        for toolset in self.toolsets:
            for spec in toolset.specs():
                previous = seen.get(spec.name)
                if previous is not None:
                    raise UsageError(
                        f"duplicate tool name {spec.name!r} in {self.label}: from "
                        f"{previous.origin or '?'} and from {spec.origin or '?'}; rename one "
                        "(@manifest(name=...)) or list the tools to add in __tools__"
                    )
                seen[spec.name] = spec
        return list(seen.values())

    def close(self) -> None:
        """Close every toolset (newest first), logging failures."""
        for toolset in reversed(self.toolsets):
            try:
                toolset.close()
            except Exception:
                logger.exception("closing the toolset %r failed", toolset)

    def __repr__(self) -> str:
        return f"CombinedToolset({self.label!r}, {self.toolsets!r})"


def _names(keyword: str, names: Sequence[str] | str) -> tuple[str, ...]:
    if isinstance(names, str):
        # A lone string is a common slip: iterating it would name its letters.
        return (names,)
    with contextlib.suppress(TypeError):
        result = tuple(names)
        if all(isinstance(name, str) for name in result):
            return result
    raise UsageError(f"{keyword}= takes a list of tool names (got {names!r})")
