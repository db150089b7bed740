"""The module and file kinds: every tool a module defines, found by discovery.

Discovery keeps the members a module defines itself (not the ones it imports) that some kind
in `KINDS` recognises as tools: `@manifest` functions, toolkits, pydantic-model tools, and the
other kinds' classes and instances. Plain functions and plain classes are helpers, not tools.
A module may instead say what it exports: ``__tools__ = [search, Calculator, ...]`` (objects);
then exactly those are registered, and an entry that is not a tool is an error naming it.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import inspect
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from bridge.errors import UsageError
from bridge.tools._dialects import replace_spec
from bridge.tools.kinds.base import Kind, Request
from bridge.tools.spec import ToolSpec
from bridge.tools.toolsets import CombinedToolset, Toolset, WrapperToolset

__all__ = ["BuildMember", "KindOf", "discover", "load_module_file", "module_kinds"]

KindOf = Callable[[Any], Kind | None]
"""The registry's lookup: the kind of an object, None for an object of no kind."""
BuildMember = Callable[[Any, Request], Toolset]
"""The registry's builder for one member of a module."""


def _defined_in(value: Any, module: ModuleType) -> bool:
    if isinstance(value, ModuleType):
        return False
    if isinstance(value, type) or inspect.isfunction(value):
        return getattr(value, "__module__", None) == module.__name__
    # An instance belongs to the module that defines its class (where it was made is unknown).
    return type(value).__module__ == module.__name__


def discover(module: ModuleType, kind_of: KindOf) -> list[Any]:
    """The tools `module` exports: its `__tools__`, else the tools it defines, in order.

    `kind_of` is the registry's lookup (the registry holds these kinds too, so it is passed in
    rather than imported).

    Raises:
        UsageError: `__tools__` is not a list or tuple, or holds something that is not a tool.
    """
    listed = getattr(module, "__tools__", None)
    if listed is not None:
        return _listed(module, listed, kind_of)
    members: list[Any] = []
    seen: set[int] = set()
    for value in list(vars(module).values()):
        if id(value) not in seen and _defined_in(value, module):
            seen.add(id(value))
            members.append(value)
    kinds = {id(value): kind_of(value) for value in members}

    def wanted(value: Any) -> bool:
        kind = kinds[id(value)]
        return kind is not None and kind.discover is not None and kind.discover(value)

    # A module that made a tool of a class (a toolkit with a DSN) exports that, not the class.
    made = {type(value) for value in members if not isinstance(value, type) and wanted(value)}
    return [
        value
        for value in members
        if not (isinstance(value, type) and value in made) and wanted(value)
    ]


def _listed(module: ModuleType, listed: Any, kind_of: KindOf) -> list[Any]:
    where = f"__tools__ of the module {module.__name__}"
    if not isinstance(listed, (list, tuple)):
        raise UsageError(
            f"{where} is a {type(listed).__name__}; expected a list of the tools to export "
            "(functions, classes, instances), e.g. __tools__ = [search, Calculator]"
        )
    for index, entry in enumerate(listed):
        if isinstance(entry, (str, os.PathLike)):
            raise UsageError(
                f"{where}: entry {index} is the name {str(entry)!r}; list the objects "
                "themselves, e.g. __tools__ = [search], not ['search']"
            )
        if isinstance(entry, ModuleType) or kind_of(entry) is None:
            raise UsageError(
                f"{where}: entry {index} ({entry!r}) is not a tool; expected a function, a "
                "toolkit class or instance, a pydantic model with run(), or another tool object"
            )
    return list(listed)


def _module_toolset(
    module: ModuleType, request: Request, what: str, kind_of: KindOf, build_member: BuildMember
) -> Toolset:
    members = discover(module, kind_of)
    if not members:
        raise UsageError(
            f"{what} has no @manifest functions or other tools; decorate the functions to "
            "expose with @manifest (from bridge.tools import manifest), or list the tools in "
            "__tools__ = [...]"
        )
    label = f"the {what}" if what.startswith("module ") else f"the file {what}"
    built: list[Toolset] = []
    problems: list[str] = []
    for member in members:
        try:
            built.append(build_member(member, request))
        except UsageError as exc:  # every tool that cannot be described, not only the first
            problems.append(str(exc).replace(f"(in {module.__name__})", f"(in {what})"))
    if problems:
        raise UsageError(_all_problems(problems, label))
    return CombinedToolset(built, label=label)


def _all_problems(problems: list[str], label: str) -> str:
    """One message for the tools of a module or file that cannot be described (each named
    once, the supported parameter types said once)."""
    from bridge.tools.schema import SUPPORTED_TYPES

    if len(problems) == 1:
        return problems[0]
    hint = f" ({SUPPORTED_TYPES})"
    said = [
        _DESCRIBED.sub(r"\1: ", problem).replace(hint, "").replace(f"({SUPPORTED_TYPES}, ", "(")
        for problem in problems
    ]
    ending = hint if any(SUPPORTED_TYPES in problem for problem in problems) else ""
    return f"{len(problems)} tools of {label} cannot be described: " + "; ".join(said) + ending


_DESCRIBED = re.compile(r"^cannot describe (\S+) \(in [^)]*\) as a tool \(\d+ problems?\): ")
"""The start of `describe_error`'s message, shortened to the tool's name in a list of them."""


class _FromFile(WrapperToolset):
    """A file's tools, their origins naming the file rather than its generated module name."""

    def __init__(self, wrapped: Toolset, path: Path) -> None:
        super().__init__(wrapped)
        self.path = path
        self.label = f"the file {path}"

    def specs(self) -> list[ToolSpec]:
        return [
            replace_spec(spec, origin=f"{self.path}:{spec.origin.partition(':')[2]}")
            for spec in self.wrapped.specs()
        ]


def load_module_file(path: str | os.PathLike[str]) -> ModuleType:
    """Execute a `.py` file as a fresh module under a unique name and return it.

    Its directory is on `sys.path` while it runs, so it can import modules next to it.

    Raises:
        UsageError: The file is missing, is not a `.py` file, or fails to import (the message
            carries the original error).
    """
    file = Path(path)
    if file.suffix != ".py":
        raise UsageError(f"{file} is not a .py file (module names are loaded with load_tools)")
    if not file.is_file():
        raise UsageError(f"no such file: {file}")
    resolved = file.resolve()
    digest = hashlib.sha1(str(resolved).encode()).hexdigest()[:10]
    stem = re.sub(r"\W", "_", resolved.stem)
    module_name = f"_toolbridge_file_{stem}_{digest}"
    spec = importlib.util.spec_from_file_location(module_name, resolved)
    if spec is None or spec.loader is None:
        raise UsageError(f"cannot load {file} as a Python module")
    module = importlib.util.module_from_spec(spec)
    # Registered before running: dataclasses and pydantic look their module up in sys.modules.
    sys.modules[module_name] = module
    folder = str(resolved.parent)
    added = folder not in sys.path
    if added:
        sys.path.insert(0, folder)
    try:
        spec.loader.exec_module(module)
    except BaseException as exc:
        sys.modules.pop(module_name, None)
        if not isinstance(exc, Exception):
            raise
        raise UsageError(f"cannot import {file}: {error_line(exc)}") from None
    finally:
        if added:
            with contextlib.suppress(ValueError):
                sys.path.remove(folder)
    return module


def error_line(exc: BaseException) -> str:
    """``Type: first line of the message``, for errors that carry another one."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def module_kinds(kind_of: KindOf, build_member: BuildMember) -> tuple[Kind, Kind]:
    """The module kind and the file kind, searching members with the registry's lookups.

    The registry (`bridge.tools.kinds`) lists these two kinds among the others, and a module's
    members are of any kind: the registry hands its lookups in here instead of this module
    importing the registry back.
    """

    def build_module(obj: Any, request: Request) -> Toolset:
        module: ModuleType = obj
        request.single_only(f"the module {module.__name__}")
        what = f"module {module.__name__}"
        return _module_toolset(module, request, what, kind_of, build_member)

    def build_file(obj: Any, request: Request) -> Toolset:
        path = Path(obj)
        request.single_only(f"the file {path}")
        module = load_module_file(path)
        toolset = _module_toolset(module, request, str(path), kind_of, build_member)
        return _FromFile(toolset, path)

    return (
        Kind("module", lambda obj: isinstance(obj, ModuleType), build_module),
        Kind("file", lambda obj: isinstance(obj, (str, os.PathLike)), build_file),
    )
