"""The registry of tools: functions, modules, files, toolkits and pydantic-model tools.

toolbox = Toolbox()
toolbox.add(get_weather)                 # one function
toolbox.add(my_tools_module)             # every @manifest function defined in it
toolbox.add("tools/files.py")            # the same, from a file
toolbox.add(Database(dsn))               # a toolkit: its @manifest methods, "database_<method>"
toolbox.add(SearchDocs)                  # a pydantic-model tool: fields + run()
toolbox.manifests("appbuilder")          # what the platform is sent
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import inspect
import logging
import os
import re
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel

from bridge.errors import UsageError
from bridge.tools.manifest import NAME_RULE, build_model_spec, build_spec, is_manifest
from bridge.tools.schema import replace_spec, to_dialect
from bridge.tools.spec import ToolSpec

__all__ = ["ToolSource", "Toolbox", "load_module_file", "manifest_functions"]

logger = logging.getLogger(__name__)

_OPTION_KEYS = ("timeout", "idempotent", "confirm", "read_only", "before", "after")


@runtime_checkable
class ToolSource(Protocol):
    """Tools that are not Python functions (HTTP manifest, OpenAPI, MCP server): a set of
    ready specs plus resources (sessions, processes) released by `close()`."""

    def specs(self) -> list[ToolSpec]:
        """The tools to register."""
        ...

    def close(self) -> None:
        """Release what the source holds; called once by `Toolbox.close()`."""
        ...


class Toolbox:
    """An ordered set of uniquely named tools, each of which can be disabled and re-enabled.

    Iteration, `len`, `in`, `get` and `names()` see enabled tools only. Safe to read from
    several threads while another registers tools.
    """

    def __init__(self, tools: Iterable[Any] = ()) -> None:
        """Create a toolbox and `add` each of `tools`."""
        self._specs: dict[str, ToolSpec] = {}
        self._sources: list[ToolSource] = []
        self._lock = threading.RLock()
        for tool in tools:
            self.add(tool)

    # --- registration -----------------------------------------------------------------------

    def add(
        self,
        obj: Any,
        *,
        name: str | None = None,
        description: str | None = None,
        prefix: str | None = None,
        timeout: float | None = None,
        idempotent: bool | None = None,
        confirm: bool | None = None,
        read_only: bool | None = None,
        before: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
        after: Callable[[Any], Any] | None = None,
    ) -> list[ToolSpec]:
        """Register one or more tools; all of them or, on any problem, none.

        Args:
            obj: A function; a module or a `.py` path (every `@manifest` function defined in
                it); a toolkit class (instantiated without arguments) or instance (every
                `@manifest` method, named `<prefix>_<method>`); or a pydantic `BaseModel`
                subclass with a `run` method.
            name: New name (a single tool only).
            description: New description (a single tool only).
            prefix: Prepended as `<prefix>_<name>`; for a toolkit, replaces its default prefix
                (the class attribute `toolkit_name`, else the snake_cased class name).
            timeout: Overrides the tool's `@manifest` option (None keeps it).
            idempotent: Same.
            confirm: Same.
            read_only: Same.
            before: Same.
            after: Same.

        Returns:
            The registered specs.

        Raises:
            UsageError: For anything that cannot be registered, including a name clash (the
                message names both origins).
        """
        options = {
            "timeout": timeout,
            "idempotent": idempotent,
            "confirm": confirm,
            "read_only": read_only,
            "before": before,
            "after": after,
        }
        specs = self._build(obj, name=name, description=description, prefix=prefix, options=options)
        with self._lock:
            self._check_clashes(specs)
            for spec in specs:
                self._specs[spec.name] = spec
        return specs

    def add_spec(self, spec: ToolSpec) -> ToolSpec:
        """Register a ready spec (from another tool source: HTTP, OpenAPI, MCP...)."""
        if not isinstance(spec, ToolSpec):
            raise UsageError(f"add_spec takes a ToolSpec (got {type(spec).__name__})")
        if not re.fullmatch(NAME_RULE.strip("^$"), spec.name):
            raise UsageError(
                f"cannot add {spec.origin or spec.name}: tool name {spec.name!r} does not match "
                f"{NAME_RULE}"
            )
        with self._lock:
            self._check_clashes([spec])
            self._specs[spec.name] = spec
        return spec

    def add_source(self, source: ToolSource) -> list[ToolSpec]:
        """Register every tool of a source (all or none) and close the source with the toolbox.

        Raises:
            UsageError: A name is invalid or clashes; the source is then left to the caller.
        """
        if not isinstance(source, ToolSource):
            raise UsageError(
                f"add_source takes an object with specs() and close() (got {type(source).__name__})"
            )
        specs = list(source.specs())
        for spec in specs:
            if not isinstance(spec, ToolSpec):
                raise UsageError(f"{source!r}.specs() returned a {type(spec).__name__}")
            if not re.fullmatch(NAME_RULE.strip("^$"), spec.name):
                raise UsageError(
                    f"cannot add {spec.origin or spec.name}: tool name {spec.name!r} does not "
                    f"match {NAME_RULE}"
                )
        with self._lock:
            self._check_clashes(specs)
            for spec in specs:
                self._specs[spec.name] = spec
            self._sources.append(source)
        return specs

    def close(self) -> None:
        """Close every added source (newest first): MCP servers stop, HTTP sessions close.

        The tools stay registered; calling them after `close` fails or reconnects, as each
        source decides. Safe to call more than once.
        """
        with self._lock:
            sources, self._sources = self._sources[::-1], []
        for source in sources:
            try:
                source.close()
            except Exception:
                logger.exception("closing the tool source %r failed", source)

    def __enter__(self) -> Toolbox:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _check_clashes(self, specs: list[ToolSpec]) -> None:
        seen: dict[str, ToolSpec] = {}
        for spec in specs:
            previous = self._specs.get(spec.name) or seen.get(spec.name)
            if previous is not None:
                state = "" if previous.enabled else " (disabled)"
                raise UsageError(
                    f"duplicate tool name {spec.name!r}: already registered from "
                    f"{previous.origin or '?'}{state}, now also from {spec.origin or '?'}; "
                    "pass prefix= or name= to Toolbox.add to rename one"
                )
            seen[spec.name] = spec

    def _build(
        self,
        obj: Any,
        *,
        name: str | None,
        description: str | None,
        prefix: str | None,
        options: Mapping[str, Any],
    ) -> list[ToolSpec]:
        if prefix is not None and not re.fullmatch(r"[A-Za-z0-9_-]{1,63}", prefix):
            raise UsageError(
                f"prefix {prefix!r} is invalid: use ASCII letters, digits, '_' and '-' only"
            )
        single = name is not None or description is not None
        if isinstance(obj, (str, os.PathLike)):
            path = Path(obj)
            self._single_only(single, f"the file {path}")
            module = load_module_file(path)
            found = manifest_functions(module)
            if not found:
                raise UsageError(
                    f"{path} has no @manifest functions; decorate the functions to expose "
                    "with @manifest (from bridge.tools import manifest)"
                )
            return [
                replace_spec(spec, origin=f"{path}:{spec.origin.partition(':')[2]}")
                for spec in self._many(found, prefix=prefix, options=options)
            ]
        if isinstance(obj, ModuleType):
            self._single_only(single, f"the module {obj.__name__}")
            found = manifest_functions(obj)
            if not found:
                raise UsageError(
                    f"module {obj.__name__} has no @manifest functions; decorate the functions "
                    "to expose with @manifest (from bridge.tools import manifest)"
                )
            return self._many(found, prefix=prefix, options=options)
        if isinstance(obj, type) and issubclass(obj, BaseModel):
            spec = build_model_spec(obj, name=name, description=description, options=options)
            return [_prefixed(spec, prefix)]
        if isinstance(obj, BaseModel):
            raise UsageError(
                f"pass the class {type(obj).__qualname__}, not an instance: a pydantic-model "
                "tool is built from the arguments of each call"
            )
        if isinstance(obj, type):
            self._single_only(single, f"the toolkit {obj.__qualname__}")
            if is_manifest(obj):
                raise UsageError(
                    f"@manifest on the class {obj.__qualname__} applies only to pydantic-model "
                    "tools; for a toolkit decorate its methods, and set toolkit_name or pass "
                    "prefix= to name it"
                )
            try:
                instance = obj()
            except Exception as exc:
                raise UsageError(
                    f"cannot create the toolkit {obj.__qualname__} without arguments "
                    f"({type(exc).__name__}: {exc}); pass an instance instead"
                ) from None
            return self._toolkit(instance, prefix=prefix, options=options)
        if inspect.isroutine(obj) or not _manifest_methods(obj):
            if not callable(obj):
                raise UsageError(
                    f"cannot register {obj!r}: expected a function, a module, a .py path, a "
                    "toolkit class or instance, or a pydantic model class with run()"
                )
            spec = build_spec(obj, name=name, description=description, options=options)
            return [_prefixed(spec, prefix)]
        self._single_only(single, f"the toolkit {type(obj).__qualname__}")
        return self._toolkit(obj, prefix=prefix, options=options)

    @staticmethod
    def _single_only(single: bool, what: str) -> None:
        if single:
            raise UsageError(
                f"name= and description= apply to a single tool, but {what} can hold several; "
                "use prefix= to rename them all"
            )

    @staticmethod
    def _many(
        functions: list[Callable[..., Any]], *, prefix: str | None, options: Mapping[str, Any]
    ) -> list[ToolSpec]:
        return [_prefixed(build_spec(fn, options=options), prefix) for fn in functions]

    @staticmethod
    def _toolkit(
        instance: Any, *, prefix: str | None, options: Mapping[str, Any]
    ) -> list[ToolSpec]:
        cls = type(instance)
        methods = _manifest_methods(instance)
        if not methods:
            raise UsageError(
                f"toolkit {cls.__qualname__} has no @manifest methods; decorate the methods "
                "to expose with @manifest"
            )
        if prefix is None:
            prefix = getattr(cls, "toolkit_name", None) or _snake(cls.__name__)
            if not isinstance(prefix, str) or not re.fullmatch(r"[A-Za-z0-9_-]{1,63}", prefix):
                raise UsageError(
                    f"toolkit_name {prefix!r} of {cls.__qualname__} is invalid: use ASCII "
                    "letters, digits, '_' and '-' only"
                )
        specs = []
        for attribute, method in methods:
            spec = build_spec(method, options=options)
            base = spec.name if spec.name != method.__name__ else attribute
            origin = f"{cls.__module__}:{cls.__qualname__}.{attribute}"
            specs.append(replace_spec(_prefixed(spec, prefix, base), origin=origin))
        return specs

    # --- lookup and state -------------------------------------------------------------------

    def get(self, name: str) -> ToolSpec | None:
        """The enabled tool called `name`, or None."""
        spec = self._specs.get(name)
        return spec if spec is not None and spec.enabled else None

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.get(name) is not None

    def __iter__(self) -> Iterator[ToolSpec]:
        with self._lock:
            specs = list(self._specs.values())
        return iter([spec for spec in specs if spec.enabled])

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __repr__(self) -> str:
        return f"Toolbox({self.names()!r})"

    def names(self, *, include_disabled: bool = False) -> list[str]:
        """Tool names in registration order (enabled ones unless `include_disabled`)."""
        with self._lock:
            return [s.name for s in self._specs.values() if include_disabled or s.enabled]

    def disable(self, name: str) -> None:
        """Hide a tool from manifests and lookups until `enable`d."""
        self._set_enabled(name, False)

    def enable(self, name: str) -> None:
        """Make a disabled tool available again."""
        self._set_enabled(name, True)

    def remove(self, name: str) -> ToolSpec:
        """Unregister a tool (enabled or not) and return it."""
        with self._lock:
            self._known(name)
            return self._specs.pop(name)

    def _set_enabled(self, name: str, enabled: bool) -> None:
        with self._lock:
            spec = self._known(name)
            if spec.enabled != enabled:
                self._specs[name] = replace_spec(spec, enabled=enabled)

    def _known(self, name: str) -> ToolSpec:
        spec = self._specs.get(name)
        if spec is None:
            known = ", ".join(self._specs) or "none registered"
            raise UsageError(f"no tool named {name!r}; tools: {known}")
        return spec

    def manifests(self, dialect: str = "appbuilder") -> list[dict[str, Any]]:
        """The description of every enabled tool in `dialect` (see `bridge.tools.DIALECTS`)."""
        return [to_dialect(spec, dialect) for spec in self]


def _prefixed(spec: ToolSpec, prefix: str | None, base: str | None = None) -> ToolSpec:
    base = base or spec.name
    if prefix is None:
        return spec if base == spec.name else replace_spec(spec, name=base)
    name = f"{prefix}_{base}"
    if len(name) > 64:
        raise UsageError(
            f"tool name {name!r} is longer than 64 characters; pass a shorter prefix= or name="
        )
    return replace_spec(spec, name=name)


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()


def _manifest_methods(instance: Any) -> list[tuple[str, Callable[..., Any]]]:
    """The `@manifest` methods of an object, bound, in definition order (base classes first)."""
    if isinstance(instance, type) or inspect.isroutine(instance):
        return []
    found: dict[str, None] = {}
    for klass in reversed(type(instance).__mro__):
        for attribute, value in vars(klass).items():
            if is_manifest(value):
                found[attribute] = None
    return [(attribute, getattr(instance, attribute)) for attribute in found]


def manifest_functions(module: ModuleType) -> list[Callable[..., Any]]:
    """The `@manifest` functions defined in `module` (not the ones it imports), in order."""
    found: list[Callable[..., Any]] = []
    for value in list(vars(module).values()):
        if inspect.isfunction(value) and value.__module__ == module.__name__ and is_manifest(value):
            found.append(value)
    return found


def load_module_file(path: str | os.PathLike[str]) -> ModuleType:
    """Execute a `.py` file as a fresh module under a unique name and return it.

    Its directory is on `sys.path` while it runs, so it can import modules next to it.

    Raises:
        UsageError: The file is missing, is not a `.py` file, or fails to import (the message
            carries the original error).
    """
    file = Path(path)
    if file.suffix != ".py":
        raise UsageError(
            f"{file} is not a .py file (module names are loaded with bridge.tools.load_tools)"
        )
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
        raise UsageError(f"cannot import {file}: {_error_line(exc)}") from None
    finally:
        if added:
            with contextlib.suppress(ValueError):
                sys.path.remove(folder)
    return module


def _error_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
