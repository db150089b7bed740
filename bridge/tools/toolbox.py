"""The registry of tools: functions, modules, files, toolkits, pydantic-model tools, sources.

toolbox = Toolbox()
toolbox.add(get_weather)                 # one function
toolbox.add(my_tools_module)             # every tool defined in it (or its __tools__)
toolbox.add("tools/files.py")            # the same, from a file
toolbox.add(Database(dsn))               # a toolkit: its @manifest methods, "database_<method>"
toolbox.add(Search, prefix="", enable=["web"])  # a toolkit, unprefixed, one of its tools
toolbox.add(SearchDocs)                  # a pydantic-model tool: fields + run()
toolbox.manifests("appbuilder")          # what the platform is sent

Each object becomes a toolset through its kind (`bridge.tools.kinds`), wrapped as the keywords
ask (`bridge.tools.toolsets`); the toolbox only checks names and holds the result.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from bridge.errors import UsageError
from bridge.tools._core import ErrorsMode
from bridge.tools._describe import NAME_RULE
from bridge.tools._direct_call import acall_tool, call_tool
from bridge.tools.approval import Approver
from bridge.tools.context import ConversationScope
from bridge.tools.kinds import Request, build_toolset
from bridge.tools.schema import replace_spec, to_dialect
from bridge.tools.spec import ToolSpec
from bridge.tools.toolsets import PrefixedToolset, SelectedToolset, StaticToolset, Toolset
from bridge.tracing import Tracing
from bridge.types import ToolRun

__all__ = ["ToolSource", "Toolbox"]

_NAME = re.compile(NAME_RULE.strip("^$"))

logger = logging.getLogger(__name__)

ToolSource = Toolset
"""Tools that are not Python functions (HTTP manifest, OpenAPI, MCP server): a toolset."""


class Toolbox:
    """An ordered set of uniquely named tools, each of which can be disabled and re-enabled.

    Iteration, `len`, `in`, `get` and `names()` see enabled tools only. Safe to read from
    several threads while another registers tools.
    """

    def __init__(self, tools: Iterable[Any] = ()) -> None:
        """Create a toolbox and `add` each of `tools`."""
        self._specs: dict[str, ToolSpec] = {}
        self._sources: list[ToolSource] = []
        self._extensions: set[str] = set()
        """Names of the tools a tool source gave (HTTP, OpenAPI, MCP): `tool_type`."""
        self._tracing: Tracing | None = None
        """Where its sources' client spans go (None: the global provider): `use_tracing`."""
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
        enable: Sequence[str] | None = None,
        exclude: Sequence[str] = (),
        toolkit: bool | None = None,
        timeout: float | None = None,
        idempotent: bool | None = None,
        confirm: bool | None = None,
        read_only: bool | None = None,
        before: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
        after: Callable[[Any], Any] | None = None,
        strict: bool | None = None,
    ) -> list[ToolSpec]:
        """Register one or more tools; all of them or, on any problem, none.

        Args:
            obj: A function; a module or a `.py` path (every tool defined in it, or those its
                `__tools__` lists); a toolkit class (instantiated without arguments) or
                instance (its `@manifest` methods, or every public method of an explicit
                toolkit, named `<prefix>_<method>`); a pydantic `BaseModel` subclass with a
                `run` method; a tool source (`specs()` and `close()`); or any other kind in
                `bridge.tools.kinds.KINDS`.
            name: New name (a single tool only).
            description: New description (a single tool only).
            prefix: Prepended as `<prefix>_<name>`; for a toolkit, replaces its default prefix
                (the class attribute `toolkit_name`, else the snake_cased class name); ``""``
                means no prefix.
            enable: Register only these tools (names before prefixing, e.g. a toolkit's
                method names); a name that is not one of them is an error listing them.
            exclude: Register all but these tools (same names).
            toolkit: True: register the methods of a class or instance as tools (its public
                methods when none is `@manifest`); False: never a toolkit, one tool. None
                decides by shape (see `bridge.tools.kinds`).
            timeout: Overrides the tool's `@manifest` option (None keeps it).
            idempotent: Same.
            confirm: Same.
            read_only: Same.
            before: Same.
            after: Same.
            strict: Same.

        Returns:
            The registered specs.

        Raises:
            UsageError: For anything that cannot be registered, including a name clash (the
                message names both origins).
        """
        options: dict[str, Any] = {
            "timeout": timeout,
            "idempotent": idempotent,
            "confirm": confirm,
            "read_only": read_only,
            "before": before,
            "after": after,
        }
        if strict is not None:
            options["strict"] = strict
        if toolkit is not None and not isinstance(toolkit, bool):
            raise UsageError(f"toolkit= must be True, False or None (got {toolkit!r})")
        request = Request(
            name=name, description=description, options=options, toolkit=toolkit, prefix=prefix
        )
        if prefix is not None and not isinstance(prefix, str):
            raise UsageError(f"prefix= must be a string (got {prefix!r})")
        if prefix:
            PrefixedToolset(StaticToolset([]), prefix)  # checked before a toolkit is created
        toolset = build_toolset(obj, request)
        from_source = toolset is obj  # a source is its own toolset; other kinds are built
        if enable is not None or exclude:
            toolset = SelectedToolset(toolset, enable=enable, exclude=exclude)
        chosen = prefix if prefix is not None else getattr(toolset, "default_prefix", None)
        if chosen is not None:
            toolset = PrefixedToolset(toolset, chosen)
        return self._register(toolset, extension=from_source)

    def add_toolset(self, toolset: Toolset) -> list[ToolSpec]:
        """Register every tool of a toolset (all or none); the toolbox closes it on `close()`.

        Raises:
            UsageError: A name is invalid or clashes; the toolset is then left to the caller.
        """
        if isinstance(toolset, type) or not isinstance(toolset, Toolset):
            raise UsageError(
                "add_toolset takes an object with specs() and close() "
                f"(got {type(toolset).__name__})"
            )
        return self._register(toolset)

    def _register(self, toolset: Toolset, *, extension: bool = False) -> list[ToolSpec]:
        specs = list(toolset.specs())
        for spec in specs:
            if not isinstance(spec, ToolSpec):
                raise UsageError(f"{toolset!r}.specs() returned a {type(spec).__name__}")
            if not _NAME.fullmatch(spec.name):
                raise UsageError(
                    f"cannot add {spec.origin or spec.name}: tool name {spec.name!r} does not "
                    f"match {NAME_RULE}"
                )
            if not spec.options.strict and spec.parameters.get("additionalProperties") is not True:
                # Each kind decides what strict=False can mean; one that cannot take
                # undeclared arguments must not quietly stay strict.
                raise UsageError(
                    f"cannot add {spec.origin or spec.name}: strict=False passes undeclared "
                    f"arguments to the function's **kwargs, but tool {spec.name!r} cannot "
                    "receive them; leave strict on"
                )
        typed = getattr(toolset, "tool_type", None)  # a toolset that knows, per tool
        with self._lock:
            self._check_clashes(specs)
            for spec in specs:
                self._specs[spec.name] = spec
                if callable(typed):
                    extension = typed(spec.name) == "extension"
                if extension:
                    self._extensions.add(spec.name)
                else:
                    self._extensions.discard(spec.name)
            self._sources.append(toolset)
        if self._tracing is not None:
            _hand_tracing(toolset, self._tracing)
        return specs

    def use_tracing(self, tracing: Tracing) -> None:
        """Send the client spans of its sources' requests (HTTP, OpenAPI) to `tracing`, now
        and for sources added later; sources that make no requests are left as they are."""
        with self._lock:
            self._tracing = tracing
            sources = list(self._sources)
        for source in sources:
            _hand_tracing(source, tracing)

    def add_spec(self, spec: ToolSpec) -> ToolSpec:
        """Register a ready spec (from another tool source: HTTP, OpenAPI, MCP...)."""
        if not isinstance(spec, ToolSpec):
            raise UsageError(f"add_spec takes a ToolSpec (got {type(spec).__name__})")
        if not _NAME.fullmatch(spec.name):
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
        if isinstance(source, type) or not isinstance(source, Toolset):
            raise UsageError(
                f"add_source takes an object with specs() and close() (got {type(source).__name__})"
            )
        return self._register(source, extension=True)

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

    # --- lookup and state -------------------------------------------------------------------

    def get(self, name: str) -> ToolSpec | None:
        """The enabled tool called `name`, or None."""
        spec = self._specs.get(name)
        return spec if spec is not None and spec.enabled else None

    def tool_type(self, name: str) -> str:
        """The OpenTelemetry ``gen_ai.tool.type`` of a tool: "extension" for one a tool source
        gave (an HTTP service, an OpenAPI operation, an MCP server's tool), else "function"."""
        return "extension" if name in self._extensions else "function"

    def is_idempotent(self, name: str) -> bool:
        """True if the enabled tool called `name` is safe to run twice (`idempotent=True`):
        what the journal's `Ledger.plan` asks of a call a crash interrupted."""
        spec = self.get(name)
        return spec is not None and spec.options.idempotent

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
            self._extensions.discard(name)
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

    # --- direct calls -----------------------------------------------------------------------

    def call(
        self,
        name: str,
        arguments: Mapping[str, Any] | str | None = None,
        *,
        timeout: float | None = None,
        errors: ErrorsMode = "message",
        max_output_chars: int | None = 20_000,
        scope: ConversationScope | None = None,
        call_id: str | None = None,
        approve: Approver | None = None,
    ) -> ToolRun:
        """Run one tool now, as a dispatched call would (validation, hooks, timeout, errors).

        `toolbox.call("add", {"a": 1})`; see `bridge.tools._direct_call.call_tool` for the options.

        A `confirm=True` tool runs only when `approve(call)` (a person's answer) returns True;
        without `approve=` its run is "rejected", as at every other entry point.

        Returns:
            The call's `ToolRun` (`output` as posted to a platform, `value` the raw result); a
            failure of the tool is a run with an `error`, not an exception.
        """
        return call_tool(
            self,
            name,
            arguments,
            timeout=timeout,
            errors=errors,
            max_output_chars=max_output_chars,
            scope=scope,
            call_id=call_id,
            approve=approve,
        )

    async def acall(
        self,
        name: str,
        arguments: Mapping[str, Any] | str | None = None,
        *,
        timeout: float | None = None,
        errors: ErrorsMode = "message",
        max_output_chars: int | None = 20_000,
        scope: ConversationScope | None = None,
        call_id: str | None = None,
        approve: Approver | None = None,
    ) -> ToolRun:
        """`call`, awaited on the running event loop (async tools and hooks run on it)."""
        return await acall_tool(
            self,
            name,
            arguments,
            timeout=timeout,
            errors=errors,
            max_output_chars=max_output_chars,
            scope=scope,
            call_id=call_id,
            approve=approve,
        )


def _hand_tracing(source: object, tracing: Tracing) -> None:
    """Hand `tracing` to a source, through the toolsets that wrap or combine sources."""
    hook = getattr(source, "use_tracing", None)
    if callable(hook):
        hook(tracing)
    wrapped = getattr(source, "wrapped", None)
    if wrapped is not None:
        _hand_tracing(wrapped, tracing)
    for inner in getattr(source, "toolsets", ()):
        _hand_tracing(inner, tracing)
