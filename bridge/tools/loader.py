"""Load tools from SPEC strings, as the command line names them.

A SPEC is a `.py` file path (`tools/weather.py`) or an importable module name
(`mypackage.tools`). Each kind is one entry of `_LOADERS` (a test on the SPEC and a loader);
adding a kind later (an OpenAPI document, an MCP server URL...) means adding one entry.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Sequence
from pathlib import Path

from bridge.errors import UsageError
from bridge.tools.spec import ToolSpec
from bridge.tools.toolbox import Toolbox

__all__ = ["load_tools"]


def _is_file(spec: str) -> bool:
    return spec.endswith(".py") or os.sep in spec or "/" in spec or Path(spec).is_file()


def _is_module(spec: str) -> bool:
    return all(part.isidentifier() for part in spec.split("."))


def _load_file(spec: str, toolbox: Toolbox) -> list[ToolSpec]:
    return toolbox.add(Path(spec))


def _load_module(spec: str, toolbox: Toolbox) -> list[ToolSpec]:
    try:
        module = importlib.import_module(spec)
    except ModuleNotFoundError as exc:
        if exc.name and (spec == exc.name or spec.startswith(exc.name + ".")):
            raise UsageError(
                f"no module named {spec!r}: it is not installed or not on sys.path (for a "
                "file, pass its path ending in .py)"
            ) from None
        raise UsageError(f"cannot import {spec}: {_error_line(exc)}") from None
    except Exception as exc:
        raise UsageError(f"cannot import {spec}: {_error_line(exc)}") from None
    return toolbox.add(module)


_LOADERS: list[tuple[Callable[[str], bool], Callable[[str, Toolbox], list[ToolSpec]]]] = [
    (_is_file, _load_file),
    (_is_module, _load_module),
]


def load_tools(specs: Sequence[str], toolbox: Toolbox | None = None) -> Toolbox:
    """Register the tools of every SPEC in `toolbox` (a new one when None) and return it.

    Args:
        specs: `.py` file paths and module names; a single string is one SPEC.
        toolbox: Where to add the tools.

    Raises:
        UsageError: For a missing file, an import error (with the original error line), a
            module without `@manifest` functions, or a SPEC of no known kind.
    """
    if isinstance(specs, str):
        specs = [specs]
    box = toolbox if toolbox is not None else Toolbox()
    for spec in specs:
        for matches, load in _LOADERS:
            if matches(spec):
                load(spec, box)
                break
        else:
            raise UsageError(
                f"cannot load tools from {spec!r}: expected a path to a .py file or a module "
                "name such as package.module"
            )
    return box


def _error_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
