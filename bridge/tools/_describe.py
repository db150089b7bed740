"""Reading what a Python object says about itself: name rule, options, docstrings, type hints.

Shared by `build_spec` (functions) and `build_model_spec` (pydantic-model tools). Nothing here
raises for the user's mistakes: problems are appended to a list, reported together by the
caller in one `UsageError` (`describe_error`).
"""

from __future__ import annotations

import functools
import inspect
import logging
import math
import re
import sys
import types
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Annotated, Any, Literal, Union, get_args, get_origin, get_type_hints

import docstring_parser

from bridge.errors import UsageError
from bridge.tools._googledoc import parse_google
from bridge.tools.context import ToolContext
from bridge.tools.spec import ToolOptions

__all__ = [
    "NAME_RULE",
    "OPTION_NAMES",
    "UNRESOLVED",
    "Doc",
    "check_name",
    "describe_error",
    "is_context",
    "merge_options",
    "origin_of",
    "parse_doc",
    "resolve_hints",
    "tool_description",
]

logger = logging.getLogger(__name__)

NAME_RULE = r"^[A-Za-z0-9_-]{1,64}$"
"""Every tool name must match this (AppBuilder's and OpenAI's rule)."""

_NAME_RE = re.compile(NAME_RULE)
_NONE_TYPE = type(None)
OPTION_NAMES = ("timeout", "idempotent", "confirm", "read_only", "before", "after", "strict")
# An annotation that could not be resolved, but reads as ToolContext (imported for type
# checking only under `from __future__ import annotations`).
_CONTEXT_TEXT = re.compile(r"(?:^|[\s\[.|,])ToolContext(?:$|[\s\]|,])")


@dataclass(frozen=True)
class Doc:
    """What a docstring says: description (short + long), parameters, return value."""

    description: str = ""
    params: Mapping[str, str] = field(default_factory=dict)
    returns: str | None = None
    types: Mapping[str, str] = field(default_factory=dict)
    """Type names the docstring gives parameters (`a (int): ...`, `:type a: int`)."""
    returns_type: str | None = None
    """The type name of its Returns section (`dict: ...`, `:rtype: dict`)."""


_STYLE_MARKS = (
    (
        docstring_parser.DocstringStyle.GOOGLE,
        re.compile(
            r"^\s*(Args|Arguments|Parameters|Returns|Yields|Raises|Attributes|Examples?)\s*:\s*$",
            re.M,
        ),
        (":",),
    ),
    (docstring_parser.DocstringStyle.NUMPYDOC, re.compile(r"^\s*-{3,}\s*$", re.M), ("---",)),
    (
        docstring_parser.DocstringStyle.REST,
        re.compile(
            r"^\s*:(param|parameter|arg|argument|key|keyword|type|returns?|rtype|raises?)\b", re.M
        ),
        (":param", ":arg", ":key", ":type", ":return", ":rtype", ":raise"),
    ),
    (
        docstring_parser.DocstringStyle.EPYDOC,
        re.compile(r"^\s*@(param|type|returns?|rtype|raises?)\b", re.M),
        ("@",),
    ),
)
"""Each style's section marks, and texts one of which any mark contains: a docstring with none
of them is not searched (the searches, `^\\s*` at every line, cost more than the parsing)."""


def _style_of(doc: str) -> docstring_parser.DocstringStyle:
    """The one style whose section markers the docstring has, else AUTO.

    AUTO parses with every style and keeps the richest result: right, but about four times
    slower, which shows when a thousand tools are registered.
    """
    found = [
        style
        for style, marks, needed in _STYLE_MARKS
        if any(map(doc.__contains__, needed)) and marks.search(doc)
    ]
    return found[0] if len(found) == 1 else docstring_parser.DocstringStyle.AUTO


def parse_doc(doc: str | None, where: str) -> Doc:
    """Parse a docstring in any style docstring-parser knows; never raises."""
    if not doc or not doc.strip():
        return Doc()
    parsed = _parsed(doc)
    if isinstance(parsed, str):
        logger.warning("%s: cannot parse the docstring (%s); using it verbatim", where, parsed)
        return Doc(description=inspect.cleandoc(doc))
    return parsed


# One parser for the Google style: `docstring_parser.parse` builds a new one (and its
# section regex) for every docstring.
_GOOGLE = docstring_parser.google.GoogleParser()


_NO_ENTRIES: Mapping[str, str] = MappingProxyType({})


@functools.lru_cache(maxsize=4096)
def _parsed(doc: str) -> Doc | str:
    """The Doc of a docstring, or why it cannot be parsed; parsed once per text (a docstring
    is immutable, and the same function is often described again: another toolbox, a
    reloaded one, `Manifest.from_function`)."""
    style = _style_of(doc)
    fast = parse_google(doc) if style is docstring_parser.DocstringStyle.GOOGLE else None
    if fast is not None:
        short, long, entries, returned = fast
        returns_type, returns = returned if returned is not None else (None, None)
    else:
        try:
            if style is docstring_parser.DocstringStyle.GOOGLE:
                parsed = _GOOGLE.parse(doc)
            else:
                parsed = docstring_parser.parse(doc, style=style)
        except Exception as exc:
            return str(exc)
        short, long = parsed.short_description, parsed.long_description
        entries = [
            (item.arg_name, item.type_name, item.description or "") for item in parsed.params
        ]
        returns = parsed.returns.description if parsed.returns else None
        returns_type = parsed.returns.type_name if parsed.returns else None
    description = "\n\n".join(part.strip() for part in (short, long) if part and part.strip())
    params = {
        name.lstrip("*"): text.strip()
        for name, _, text in entries
        if name and text and text.strip()
    }
    types = {
        name.lstrip("*"): type_name.strip()
        for name, type_name, _ in entries
        if name and type_name and type_name.strip()
    }
    return Doc(
        description,
        MappingProxyType(params) if params else _NO_ENTRIES,
        returns.strip() if returns and returns.strip() else None,
        MappingProxyType(types) if types else _NO_ENTRIES,
        returns_type.strip() if returns_type and returns_type.strip() else None,
    )


def tool_description(base: str, returns: str | None) -> str:
    """The tool description: `base`, then a "Returns: ..." sentence when there is one."""
    parts = [base.strip()] if base and base.strip() else []
    if returns:
        parts.append(f"Returns: {returns.strip()}")
    return "\n\n".join(parts)


def check_name(name: Any, problems: list[str]) -> str:
    """`name` if it follows `NAME_RULE`; else records a problem and returns a valid suggestion."""
    if isinstance(name, str) and _NAME_RE.fullmatch(name):
        return name
    text = str(name)
    suggestion = re.sub(r"[^A-Za-z0-9_-]+", "_", text).strip("_")[:64]
    if not suggestion:
        suggestion = f"tool_{zlib.crc32(text.encode()):08x}"
    problems.append(
        f"tool name {text!r} is invalid: names must match {NAME_RULE} (ASCII letters, digits, "
        f"'_' and '-', 1 to 64 characters); pass a valid one, e.g. name={suggestion!r}"
    )
    return suggestion


def merge_options(
    declared: Mapping[str, Any],
    overrides: ToolOptions | Mapping[str, Any] | None,
    problems: list[str],
) -> ToolOptions:
    """The decorator's options (`declared`) with the non-None `overrides` on top, checked."""
    if isinstance(overrides, ToolOptions):
        return overrides
    if not declared and (overrides is None or _all_none(overrides)):
        return _DEFAULT_OPTIONS  # what the checks below give (frozen, so one is shared)
    values: dict[str, Any] = dict.fromkeys(OPTION_NAMES)
    values.update(idempotent=False, confirm=False, read_only=False, strict=True)
    values.update(declared)
    for key, value in (overrides or {}).items():
        if key not in OPTION_NAMES:
            problems.append(f"unknown option {key!r}; options are {', '.join(OPTION_NAMES)}")
        elif value is not None:
            values[key] = value
    timeout = values["timeout"]
    if timeout is not None and (
        isinstance(timeout, bool)
        or not isinstance(timeout, (int, float))
        or not math.isfinite(timeout)
        or timeout <= 0
    ):
        problems.append(f"timeout must be a positive number of seconds or None (got {timeout!r})")
        values["timeout"] = None
    for key in ("idempotent", "confirm", "read_only", "strict"):
        if not isinstance(values[key], bool):
            problems.append(f"{key} must be True or False (got {values[key]!r})")
            values[key] = key == "strict"
    for key in ("before", "after"):
        problem = _hook_problem(key, values[key])
        if problem is not None:
            problems.append(problem)
            values[key] = None
    return ToolOptions(**values)


def _all_none(overrides: Mapping[str, Any]) -> bool:
    return all(value is None and key in OPTION_NAMES for key, value in overrides.items())


_DEFAULT_OPTIONS = ToolOptions(
    timeout=None,
    idempotent=False,
    confirm=False,
    read_only=False,
    before=None,
    after=None,
    strict=True,
)
"""What `merge_options` makes of no options (its defaults, every check passed)."""


_HOOK_SHAPES = {
    "before": "the raw arguments (a dict) and returns them, edited or not",
    "after": "the tool's result and returns what the model should read",
}


def _hook_problem(key: str, hook: Any) -> str | None:
    """Why `hook` cannot be the `before`/`after` hook (None if it can): it must be callable
    with exactly one positional argument; sync, async, or returning an awaitable."""
    if hook is None:
        return None
    expected = f"a callable (sync or async) that takes one argument, {_HOOK_SHAPES[key]}"
    if not callable(hook):
        return f"{key} must be {expected}, or None (got {hook!r})"
    try:
        sig = inspect.signature(hook)
    except (TypeError, ValueError):
        return None  # a builtin without a readable signature (str, len...): trust it
    try:
        sig.bind(None)
    except TypeError:
        return f"{key} must be {expected}; {_callable_name(hook)}{sig} cannot be called so"
    return None


def _callable_name(fn: Any) -> str:
    return str(getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn))


def describe_error(what: str, problems: list[str]) -> UsageError:
    """One error for every problem found while describing `what` (it names the function)."""
    plural = "s" if len(problems) > 1 else ""
    return UsageError(
        f"cannot describe {what} as a tool ({len(problems)} problem{plural}): "
        + "; ".join(problems)
    )


def origin_of(obj: Any) -> str:
    """``module:qualname`` of a function or class, for messages about where a tool came from."""
    module = getattr(obj, "__module__", None) or "?"
    qualname = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None) or repr(obj)
    return f"{module}:{qualname}"


def is_context(hint: Any) -> bool:
    """Whether a type hint asks for the `ToolContext` (also Optional, Annotated, or as text)."""
    if isinstance(hint, str):
        return bool(_CONTEXT_TEXT.search(f" {hint} "))
    if type(hint) is type:  # a plain class, the usual case: no origin to look at
        return issubclass(hint, ToolContext)
    origin = get_origin(hint)
    if origin is Annotated:
        hint = get_args(hint)[0]
        origin = get_origin(hint)
    if isinstance(hint, type):
        return issubclass(hint, ToolContext)
    if origin is Union or origin is types.UnionType:
        rest = [arg for arg in get_args(hint) if arg is not _NONE_TYPE]
        return len(rest) == 1 and is_context(rest[0])
    return False


def _namespace_of(fn: Any) -> dict[str, Any]:
    """The globals that the annotations of `fn` were written in (through wrappers, partials)."""
    seen = 0
    while seen < 20:
        seen += 1
        if isinstance(fn, functools.partial):
            fn = fn.func
        elif inspect.ismethod(fn):
            fn = fn.__func__
        elif hasattr(fn, "__wrapped__"):
            fn = fn.__wrapped__
        else:
            break
    found = getattr(fn, "__globals__", None)
    if found is None and callable(fn):
        found = getattr(type(fn).__call__, "__globals__", None)
    return found if isinstance(found, dict) else {}


UNRESOLVED = object()
"""The hint of a parameter whose annotation could not be resolved (a problem is recorded)."""


@functools.lru_cache(maxsize=4096)
def _compiled(text: str) -> types.CodeType:
    return compile(text, "<annotation>", "eval")


def _plain_hint(hint: Any, depth: int = 0) -> bool:
    """Whether `hint` holds no forward reference that `get_type_hints` would still resolve
    (and nothing its checks would refuse): classes and generics of them, `Literal` and
    `Annotated` (whose values and metadata it leaves alone)."""
    if depth > 20:
        return False
    if isinstance(hint, type) and not isinstance(hint, types.GenericAlias):
        return True
    origin = get_origin(hint)
    if origin is None:
        return False
    if origin is Literal:
        return True
    args = get_args(hint)
    if origin is Annotated:
        return _plain_hint(args[0], depth + 1)
    if not (isinstance(origin, type) or origin is Union):
        return False
    return all(arg is _NONE_TYPE or arg is Ellipsis or _plain_hint(arg, depth + 1) for arg in args)


def _fast_hints(fn: Any) -> dict[str, Any] | None:
    """`get_type_hints(fn, include_extras=True)` for a plain function whose annotations are
    simple, with each annotation text compiled once per process (the typing module compiles
    every string annotation of every function again); None when in any doubt."""
    if (
        sys.version_info < (3, 11)  # 3.10's get_type_hints also adds Optional for a None default
        or not isinstance(fn, types.FunctionType)
        or getattr(fn, "__no_type_check__", None)
    ):
        return None
    annotations = fn.__annotations__
    nsobj: Any = fn
    while hasattr(nsobj, "__wrapped__"):
        nsobj = nsobj.__wrapped__
    namespace = getattr(nsobj, "__globals__", None)
    if not isinstance(namespace, dict):
        return None
    hints: dict[str, Any] = {}
    for name, value in annotations.items():
        if value is None:
            value = _NONE_TYPE
        elif isinstance(value, str):
            try:
                value = eval(_compiled(value), namespace, namespace)  # as typing does
            except Exception:
                return None  # get_type_hints explains it, or the one-by-one path does
            if value is None:
                value = _NONE_TYPE
        if not _plain_hint(value):
            return None
        hints[name] = value
    return hints


def resolve_hints(fn: Any, sig: inspect.Signature, problems: list[str]) -> dict[str, Any]:
    """Resolved type hints by parameter name (`from __future__ import annotations` works)."""
    fast = _fast_hints(fn)
    if fast is not None:
        return fast
    try:
        hints = get_type_hints(fn, include_extras=True)
        if all(not isinstance(hints.get(name), str) for name in sig.parameters):
            return hints
    except Exception:
        logger.debug("get_type_hints failed for %r; resolving one parameter at a time", fn)
    namespace = _namespace_of(fn)
    hints = {}
    for param in sig.parameters.values():
        annotation = param.annotation
        if annotation is inspect.Parameter.empty:
            continue

        def shim() -> None: ...

        shim.__annotations__ = {"value": annotation}
        try:
            hints[param.name] = get_type_hints(shim, globalns=namespace, include_extras=True)[
                "value"
            ]
        except Exception as exc:
            if is_context(str(annotation)):
                hints[param.name] = ToolContext
                continue
            hints[param.name] = UNRESOLVED
            problems.append(
                f"parameter '{param.name}': cannot resolve its annotation {str(annotation)!r} "
                f"({type(exc).__name__}: {exc}); the type must be importable from the "
                "function's module (with `from __future__ import annotations`, a type defined "
                "inside a function cannot be resolved)"
            )
    return hints
