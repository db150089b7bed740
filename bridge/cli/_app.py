"""The typer application every command module registers on."""

from __future__ import annotations

import importlib
import logging
import os
import sys
import types
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer.core import TyperCommand, TyperGroup, TyperOption

if TYPE_CHECKING:
    from typer import _click  # click itself with typer < 0.2x: only named in annotations
    from typer.models import CommandFunctionType

__all__ = ["Command", "Typer", "app", "flush_spans", "state"]

logger = logging.getLogger(__name__)

_DEFERRED = {"rich.markdown": "Markdown", "rich.traceback": "Traceback"}
"""Modules typer's help renderer imports at its top but only uses for markdown help text and
pretty tracebacks, neither of which this CLI turns on; together they cost more (markdown_it,
pygments, attrs) than the rest of `toolbridge --help`."""


class _Forwarding(type):
    """A stand-in class that behaves as the real one (calls, class attributes, isinstance),
    importing its module on first use."""

    _module: str

    def _real(cls) -> Any:
        return getattr(importlib.import_module(cls._module), cls.__name__)

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        return cls._real()(*args, **kwargs)

    def __getattr__(cls, name: str) -> Any:
        return getattr(cls._real(), name)

    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, cls._real())


def _import_help_renderer() -> None:
    """Import `typer.rich_utils` without loading `_DEFERRED` (unless already loaded).

    The stand-ins sit in `sys.modules` only while typer's module runs, so any later
    `import rich.markdown` (including the stand-ins' own) gets the real module.
    """
    if "typer.rich_utils" in sys.modules:
        return
    placeholders: dict[str, types.ModuleType] = {}
    for module, name in _DEFERRED.items():
        if module not in sys.modules:
            placeholder = types.ModuleType(module)
            setattr(placeholder, name, _Forwarding(name, (), {"_module": module}))
            placeholders[module] = placeholder
    sys.modules.update(placeholders)
    try:
        importlib.import_module("typer.rich_utils")
    except Exception:  # a typer that wants more of them: (it is gone again) imported as usual
        logger.debug("typer.rich_utils needs the modules deferred; importing them", exc_info=True)
    finally:
        for module, placeholder in placeholders.items():
            if sys.modules.get(module) is placeholder:
                del sys.modules[module]
    importlib.import_module("typer.rich_utils")


class _Group(TyperGroup):
    def parse_args(self, ctx: _click.Context, args: list[str]) -> list[str]:
        if ctx.parent is None:
            args = _verbose_first(args)
        return super().parse_args(ctx, args)

    def format_help(self, ctx: _click.Context, formatter: _click.HelpFormatter) -> None:
        _import_help_renderer()
        super().format_help(ctx, formatter)

    def get_help_option(self, ctx: _click.Context) -> TyperOption | None:
        option = super().get_help_option(ctx)
        if option is not None and type(option) is TyperOption:
            # Typer coerces an absent --help (None) through a pydantic adapter built for the
            # purpose, importing pydantic in every `toolbridge COMMAND` (60-90 ms of
            # `toolbridge run --help`) only to get None back.
            option.__class__ = _HelpOption
        return option


_VERBOSE = ("-v", "--verbose")


def _verbose_first(args: list[str]) -> list[str]:
    """`args` with ``-v``/``--verbose`` given after the command (``toolbridge run -v ...``)
    moved before it, where the option is defined; nothing after ``--`` moves (no command has
    a ``-v`` of its own)."""
    end = args.index("--") if "--" in args else len(args)
    if not any(arg in _VERBOSE for arg in args[1:end]):
        return args
    moved = [arg for arg in args[:end] if arg in _VERBOSE]
    return [*moved[:1], *(arg for arg in args[:end] if arg not in _VERBOSE), *args[end:]]


class _HelpOption(TyperOption):
    def process_value(self, ctx: _click.Context, value: Any) -> Any:
        return super().process_value(ctx, False if value is None else value)


class Command(TyperCommand):
    """A command whose help renders without `_DEFERRED` (subclass it for a command of its own)."""

    def format_help(self, ctx: _click.Context, formatter: _click.HelpFormatter) -> None:
        _import_help_renderer()
        super().format_help(ctx, formatter)


class Typer(typer.Typer):
    """`typer.Typer` whose help renders without the imports it does not need (`_DEFERRED`,
    pydantic); every group and command of the CLI is made with it."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(cls=_Group, **kwargs)

    def command(
        self, *args: Any, **kwargs: Any
    ) -> Callable[[CommandFunctionType], CommandFunctionType]:
        kwargs.setdefault("cls", Command)  # or a subclass of it
        return super().command(*args, **kwargs)


app = Typer(
    name="toolbridge",
    help="Run a cloud agent's tool calls on local functions.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)

state: dict[str, bool] = {"verbose": False}


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        typer.echo(f"toolbridge {version('toolbridge')}")
        raise typer.Exit()


@app.callback()
def main(
    ctx: typer.Context,
    verbose: Annotated[
        bool,
        typer.Option(
            "--verbose",
            "-v",
            help="Show details of errors and debug logs (also after the command).",
        ),
    ] = False,
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version."),
    ] = False,
) -> None:
    """Run a cloud agent's tool calls on local functions."""
    state["verbose"] = verbose
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    # basicConfig leaves an already configured root alone (an embedding app, a test runner):
    # -v must still bring the library's debug records, tracebacks included. Both settings
    # last as long as the command, so that the process embedding it gets its logging back.
    library = logging.getLogger("bridge")
    level = library.level
    library.setLevel(logging.DEBUG if verbose else level)
    ctx.call_on_close(lambda: library.setLevel(level))
    if ctx.invoked_subcommand in _TRACED:
        _start_tracing(ctx)
    if not verbose and ctx.invoked_subcommand in _TOOL_LINES:
        dispatch = logging.getLogger("bridge.tools.dispatch")
        shown = _ShownElsewhere()
        dispatch.addFilter(shown)
        ctx.call_on_close(lambda: dispatch.removeFilter(shown))


_TRACED = frozenset({"run", "chat", "call", "serve", "mcp-serve"})
"""Commands whose spans go where the standard ``OTEL_*`` variables say."""


def _start_tracing(ctx: typer.Context) -> None:
    """Export spans as the ``OTEL_*`` variables ask (`bridge.tracing.configure_from_environment`),
    flushed when the command ends: a short command's spans must not be lost at exit."""
    if not any(name.startswith("OTEL_") for name in os.environ):
        return  # nothing asks for traces: the command does not even load the SDK
    from bridge.tracing import configure_from_environment

    if configure_from_environment(service_name="toolbridge"):
        ctx.call_on_close(flush_spans)


def flush_spans(timeout_millis: int = 10_000) -> None:
    """Send the spans still batched by the global provider (an SDK's), if there is one."""
    from opentelemetry import trace

    flush = getattr(trace.get_tracer_provider(), "force_flush", None)
    if callable(flush):
        try:
            flush(timeout_millis)
        except Exception:  # a collector out of reach must not turn into the command's error
            logger.debug("the spans could not be flushed", exc_info=True)


_TOOL_LINES = frozenset({"run", "chat", "demo", "call"})
"""Commands that print a line per tool call; `serve` logs failures instead."""


class _ShownElsewhere(logging.Filter):
    """Drops log records the commands already show in their own words: a tool's failure is
    its `✗` line (the dispatcher's warning and traceback come back with `-v`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not getattr(record, "tool_failure", False)
