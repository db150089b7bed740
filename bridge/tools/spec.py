"""The frozen description of one registered tool, built once at registration.

Everything the dispatcher needs to run a call (the function, how to validate its arguments,
where to inject the `ToolContext`) and everything a platform needs to describe it (name,
description, JSON Schema) lives here, apart from execution.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ArgumentError", "ToolError", "ToolOptions", "ToolSpec"]


class ArgumentError(ValueError):
    """The agent's arguments do not fit the tool's schema.

    `problems` holds one readable line per problem, e.g. "days: must be <= 7 (got 9)".
    """

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


class ToolError(Exception):
    """A failure a tool reports on purpose: the message is what the model reads.

    Raise it (or a subclass, as HTTP and MCP tools do) for expected outcomes such as "no such
    employee" or an HTTP 404: the call gets a `tool_error` output like any exception, but the
    log gets one warning line instead of a traceback meant for a bug.
    """


@dataclass(frozen=True)
class ToolOptions:
    """Per-tool behaviour that is not part of the schema."""

    timeout: float | None = None
    """Seconds before the call is abandoned; None uses the dispatcher's default."""
    idempotent: bool = False
    """Safe to run again after a crash interrupted it."""
    confirm: bool = False
    """A person must approve each call (see `bridge.tools.approval`)."""
    read_only: bool = False
    """Known to change nothing (an HTTP GET, or declared so); MCP hosts see `readOnlyHint`."""
    before: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    """Transforms the raw arguments before validation."""
    after: Callable[[Any], Any] | None = None
    """Transforms the result before it is serialised."""
    strict: bool = True
    """Unknown arguments are refused; False passes them to a `**kwargs` parameter."""


@dataclass(frozen=True)
class ToolSpec:
    """One tool, ready to describe and to run."""

    name: str
    description: str
    parameters: dict[str, Any]
    """Canonical JSON Schema of the arguments object (may hold `$defs`; dialects transform it)."""
    function: Callable[..., Any]
    """Called with the validated arguments as keyword arguments (plus the context, if any)."""
    validate: Callable[[dict[str, Any]], dict[str, Any]]
    """Validates and coerces raw arguments into keyword arguments; raises `ArgumentError`."""
    is_async: bool = False
    context_param: str | None = None
    """Name of the parameter that receives the `ToolContext`, if the function has one."""
    options: ToolOptions = field(default_factory=ToolOptions)
    origin: str = ""
    """Where the tool came from (``module:qualname``, a file, a source), for error messages."""
    enabled: bool = True
    title: str | None = None
    """A human-readable display name, when the source has one (an imported MCP tool's title)."""
    output_schema: dict[str, Any] | None = None
    """JSON Schema of what the tool returns (from a typed return annotation), when known."""
    examples: tuple[dict[str, Any], ...] = ()
    """Example argument objects (JSON Schema `examples`; shown by the text tool protocol)."""
    instructions: str | None = None
    """Extra text on when and how to call the tool (a ToolMessage's instructions)."""
    toolkit: str | None = None
    """The name of the toolkit (class) this tool is one API of, if any."""
    toolkit_description: str | None = None
    """That toolkit's own description, kept for manifests and the console."""
    source: str = ""
    """The name of the tool source it was loaded from (a `--tools` SPEC's ``source=NAME``, else
    derived from the SPEC); empty for a Python function registered directly. Callers' tool
    lists (``source:NAME``) and policies (`Source::"NAME"`) name tools by it."""
