"""Load tools from SPEC strings, as the command line names them, and Python files as modules.

This module sits above both `bridge.tools` (Python tools) and `bridge.sources` (HTTP, OpenAPI,
MCP), so neither has to know the other: the tools layer never imports a source.

A SPEC is one of (each kind is one entry of `_LOADERS`: a test on the SPEC and a loader):

    tools/weather.py                      a Python file (its tools, or its __tools__)
    mypackage.tools                       an importable module
    manifests/intranet.yaml               declarative HTTP tools (.yaml, .yml or .json)
    "openapi:api.json --include tickets"  an OpenAPI 3.x document (path or URL), with options
    "mcp:uvx mcp-server-time"             an MCP server started over stdio (split like a shell)
    mcp+http://127.0.0.1:8000/mcp         an MCP server over streamable HTTP

Any SPEC may end in `` prefix=NAME`` (one argument with the SPEC: ``"tools.yaml prefix=crm_"``):
its tools are then registered as NAME + their own name (``crm_search``), so two sources with
the same tool names can be loaded together.

Every tool a SPEC loads is of one source (`ToolSpec.source`: what caller tool lists match with
``source:NAME`` and Cedar policies with ``resource in Source::"NAME"``). A SPEC may name it with
`` source=NAME`` at its end (with or without ``prefix=``); by default (`source_name`) it is a
file's stem (``tools/weather.py`` -> ``weather``, ``intranet.yaml`` -> ``intranet``,
``openapi:api/crm.json`` -> ``crm``), a module's last component, an MCP command's program
after any runner (``mcp:uvx mcp-server-time`` -> ``mcp-server-time``) or an MCP URL's host.
"""

from __future__ import annotations

import importlib
import os
import re
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from bridge.errors import UsageError
from bridge.tools.kinds import discover, load_module_file
from bridge.tools.kinds.modules import error_line
from bridge.tools.schema import replace_spec
from bridge.tools.spec import ToolSpec
from bridge.tools.toolbox import Toolbox

__all__ = ["discover", "load_module_file", "load_tools", "source_name"]


@dataclass(frozen=True)
class _Options:
    allow_hosts: tuple[str, ...] = ()


def _is_source(spec: str) -> bool:
    # Imported when used: sources pull in HTTP and YAML libraries a Python tools file never needs.
    from bridge.sources import is_source_spec

    return is_source_spec(spec)


def _load_source(spec: str, toolbox: Toolbox, options: _Options) -> list[ToolSpec]:
    from bridge.sources import open_source

    source = open_source(spec, allow_hosts=options.allow_hosts)
    try:
        return toolbox.add_source(source)
    except BaseException:
        source.close()
        raise


def _is_file(spec: str) -> bool:
    return spec.endswith(".py") or os.sep in spec or "/" in spec or Path(spec).is_file()


def _is_module(spec: str) -> bool:
    return all(part.isidentifier() for part in spec.split("."))


def _load_file(spec: str, toolbox: Toolbox, options: _Options) -> list[ToolSpec]:
    return toolbox.add(Path(spec))


def _load_module(spec: str, toolbox: Toolbox, options: _Options) -> list[ToolSpec]:
    try:
        module = importlib.import_module(spec)
    except ModuleNotFoundError as exc:
        if exc.name and (spec == exc.name or spec.startswith(exc.name + ".")):
            raise UsageError(
                f"no module named {spec!r}: it is not installed or not on sys.path (for a "
                "file, pass its path ending in .py)"
            ) from None
        raise UsageError(f"cannot import {spec}: {error_line(exc)}") from None
    except Exception as exc:
        raise UsageError(f"cannot import {spec}: {error_line(exc)}") from None
    return toolbox.add(module)


_LOADERS: list[tuple[Callable[[str], bool], Callable[[str, Toolbox, _Options], list[ToolSpec]]]] = [
    (_is_source, _load_source),
    (_is_file, _load_file),
    (_is_module, _load_module),
]


def load_tools(
    specs: Sequence[str],
    toolbox: Toolbox | None = None,
    *,
    allow_hosts: Sequence[str] = (),
) -> Toolbox:
    """Register the tools of every SPEC in `toolbox` (a new one when None) and return it.

    Sources that hold resources (HTTP sessions, MCP server processes) are closed by
    `Toolbox.close()` (or `with load_tools(...) as toolbox:`); on an error, a toolbox this call
    created is closed before it raises.

    Args:
        specs: SPEC strings (see the module docstring); a single string is one SPEC.
        toolbox: Where to add the tools.
        allow_hosts: Hosts HTTP and OpenAPI tools may reach besides those their manifest names
            (``host``, ``host:port`` or ``*.domain``).

    Raises:
        UsageError: For a missing file, an import error (with the original error line), a
            module without tools (or with a bad `__tools__`), an invalid manifest or document,
            an MCP server that cannot be started, a SPEC of no known kind, or a tool name that
            two SPECs share (the message says how to add a prefix).
    """
    if isinstance(specs, str):
        specs = [specs]
    options = _Options(allow_hosts=tuple(allow_hosts))
    box = toolbox if toolbox is not None else Toolbox()
    origins: dict[str, str] = {name: "" for name in box.names()}
    try:
        for given in specs:
            spec, prefix, source = _split_options(given)
            for matches, load in _LOADERS:
                if matches(spec):
                    part = Toolbox()
                    try:
                        load(spec, part, options)
                        loaded = _Loaded(part, prefix, source or source_name(spec))
                        _check_clashes(loaded.specs(), given, origins)
                        box.add_source(loaded)  # box.close() now closes what `part` opened
                    except BaseException:
                        part.close()
                        raise
                    break
            else:
                raise UsageError(
                    f"cannot load tools from {spec!r}: expected a path to a .py file or a module "
                    "name such as package.module, a .yaml/.yml/.json HTTP tools manifest, "
                    "openapi:PATH_OR_URL, mcp:COMMAND or mcp+http://HOST:PORT/PATH (optionally "
                    "followed by prefix=NAME and/or source=NAME)"
                )
    except BaseException:
        if toolbox is None:
            box.close()
        raise
    return box


_TRAILING = re.compile(r"^(?P<spec>.*\S)\s+(?P<name>prefix|source)=(?P<value>\S*)$", re.S)
_NAME = re.compile(r"[A-Za-z0-9_-]{1,63}")
_SOURCE = re.compile(r"[A-Za-z0-9_.-]{1,63}")


def _split_options(given: str) -> tuple[str, str, str]:
    """``"tools.yaml prefix=crm_ source=crm"`` -> ``("tools.yaml", "crm_", "crm")``; an option
    not given is ``""``."""
    spec, found = given, {}
    while (match := _TRAILING.match(spec)) is not None and match["name"] not in found:
        found[match["name"]] = match["value"]
        spec = match["spec"]
    _check_options(spec)
    prefix, source = found.get("prefix", ""), found.get("source")
    if "prefix" in found and not _NAME.fullmatch(prefix):
        raise UsageError(
            f"prefix={prefix!r} in {given!r}: expected 1 to 63 ASCII letters, digits, '_' or "
            "'-', e.g. prefix=crm_"
        )
    if source is not None and not _SOURCE.fullmatch(source):
        raise UsageError(
            f"source={source!r} in {given!r}: expected 1 to 63 ASCII letters, digits, '_', '-' "
            "or '.', e.g. source=crm"
        )
    return spec, prefix, source or ""


_RUNNERS = {"uvx", "npx", "bunx", "pipx", "uv", "pnpm", "node", "deno", "bun", "docker"}
"""Programs that run another (``uvx mcp-server-time``): the source is named after that one."""
_RUNNER_WORDS = {"run", "tool", "dlx", "exec", "x"}
_VALUED_FLAGS = {"--from", "--with", "--python", "-p", "--package"}


def _program(words: list[str]) -> str:
    """The program an MCP command line runs, past runners and their options."""
    i = 0
    while i < len(words):
        word = words[i]
        base = os.path.basename(word)
        if base in _RUNNERS or base in _RUNNER_WORDS:
            i += 1
        elif re.fullmatch(r"python[0-9.]*(\.exe)?", base):
            if words[i + 1 : i + 2] == ["-m"] and i + 2 < len(words):
                return words[i + 2]
            i += 1
        elif word in _VALUED_FLAGS:
            i += 2
        elif word.startswith("-"):
            i += 1
        else:
            return base
    return ""


def source_name(spec: str) -> str:
    """The default source name of the tools a SPEC loads (see the module docstring)."""
    if spec.startswith(("mcp+http://", "mcp+https://")):
        return urlsplit(spec[len("mcp+") :]).hostname or "mcp"
    if spec.startswith("mcp:"):
        try:
            words = shlex.split(spec[len("mcp:") :])
        except ValueError:
            words = spec[len("mcp:") :].split()
        name = _program(words)
        for suffix in (".py", ".js", ".mjs", ".ts", ".exe"):
            name = name.removesuffix(suffix)
        return name.rsplit("/", 1)[-1] or "mcp"
    if spec.startswith("openapi:"):
        words = spec[len("openapi:") :].split()
        location = words[0] if words else ""
        path = urlsplit(location).path if "://" in location else location
        return Path(path).stem or urlsplit(location).hostname or "openapi"
    if _is_file(spec) or _is_source(spec):
        return Path(spec).stem
    return spec.rsplit(".", 1)[-1]


_OPTION = re.compile(r"\s([A-Za-z_][\w-]*)=\S*")


def _check_options(given: str) -> None:
    """A SPEC with a ``word=value`` after it that is not a trailing ``prefix=`` or ``source=``:
    say so, rather than report the whole text as a file or module that does not exist."""
    option = _OPTION.search(given)
    if option is None or ":" in given.split()[0] or Path(given).exists():
        return  # "mcp:CMD ARGS" and other source kinds carry arguments of their own
    name = option[1]
    what = (
        f"{name}= must come last, once"
        if name in ("prefix", "source")
        else f"unknown option {name!r}"
    )
    raise UsageError(
        f"{given!r}: {what}; a tool SPEC takes its options at its end: "
        '"SPEC prefix=NAME source=NAME" (e.g. --tools "tools.yaml prefix=crm_ source=crm")'
    )


def _check_clashes(specs: list[ToolSpec], given: str, origins: dict[str, str]) -> None:
    """A name clash between SPECs, said in command-line terms (with the way out)."""
    for spec in specs:
        if spec.name in origins:
            earlier = origins[spec.name]
            where = f"by --tools {earlier!r}" if earlier else "already"
            raise UsageError(
                f"duplicate tool name {spec.name!r}: registered {where} and again by --tools "
                f"{given!r}; rename one source's tools with a prefix in the same argument, "
                f'e.g. --tools "{given} prefix=other_" (tools become other_{spec.name}, ...)'
            )
    for spec in specs:
        origins[spec.name] = given


class _Loaded:
    """The tools one SPEC loaded (into a toolbox of their own), renamed with its prefix, as a
    tool source: the target toolbox closes them with its other sources."""

    def __init__(self, part: Toolbox, prefix: str, source: str) -> None:
        self._part = part
        self._specs = [
            replace_spec(spec, name=prefix + spec.name, source=source)
            if prefix
            else replace_spec(spec, source=source)
            for spec in part
        ]
        self._types = {prefix + spec.name: part.tool_type(spec.name) for spec in part}
        too_long = [spec.name for spec in self._specs if len(spec.name) > 64]
        if too_long:
            raise UsageError(
                f"prefix={prefix!r} makes tool names longer than 64 characters "
                f"({', '.join(too_long)}); choose a shorter prefix"
            )

    def specs(self) -> list[ToolSpec]:
        return list(self._specs)

    def tool_type(self, name: str) -> str:
        """What the SPEC's own toolbox says a tool is: a Python "function", or an
        "extension" from a source (HTTP, OpenAPI, MCP)."""
        return self._types.get(name, "function")

    def close(self) -> None:
        self._part.close()
