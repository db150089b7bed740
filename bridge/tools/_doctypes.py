"""Type names written in docstrings (`a (int): ...`, `a : int, optional`, `:type a: int`).

Lagent and many hand-written tools type their parameters only in the docstring. This module
turns such a name into a Python type with a tiny parser (never `eval`): builtin names and their
JSON Schema spellings, `list[int]`, `dict[str, float]`, `list of str`, `Optional[int]`,
`int | None`, `int or None`. An unknown name gives None (the parameter stays untyped) and a
debug log: a bad docstring never raises.
"""

from __future__ import annotations

import logging
import re
from typing import Any, Optional, Union

__all__ = ["type_from_doc"]

logger = logging.getLogger(__name__)

_SIMPLE: dict[str, Any] = {
    "str": str,
    "string": str,
    "int": int,
    "integer": int,
    "float": float,
    "number": float,
    "bool": bool,
    "boolean": bool,
    "list": list,
    "array": list,
    "tuple": list,
    "sequence": list,
    "dict": dict,
    "object": dict,
    "mapping": dict,
    "none": type(None),
    "any": Any,
}
_CONTAINERS = {"list": list, "sequence": list, "tuple": list, "set": list, "dict": dict}
_OPTIONAL_TAIL = re.compile(r"\s*,?\s*\(?optional\)?\s*$", re.I)
_MAX_LENGTH = 100


def type_from_doc(text: str | None) -> Any | None:
    """The type a docstring names, or None when it names nothing this parser knows."""
    if not text or len(text) > _MAX_LENGTH:
        return None
    cleaned = _OPTIONAL_TAIL.sub("", text.strip()).strip()
    found = _parse(cleaned.replace("typing.", ""), 0)
    if found is None:
        logger.debug(
            "docstring type %r is not one toolbridge knows; the parameter stays untyped", text
        )
    return found


def _parse(text: str, depth: int) -> Any | None:
    text = text.strip().strip("`").strip()
    if not text or depth > 4:
        return None
    for splitter in (r"\s*\|\s*", r"\s+or\s+"):
        parts = _split_top(text, splitter)
        if len(parts) > 1:
            members = [_parse(part, depth + 1) for part in parts]
            if any(member is None for member in members):
                return None
            return Union[tuple(members)]  # noqa: UP007 (built at run time)
    match = re.fullmatch(r"(\w+)\s+of\s+(.+)", text, re.I)
    if match and match.group(1).lower() in _CONTAINERS:
        inner = _parse(match.group(2), depth + 1)
        if inner is None:
            return None
        return dict[str, inner] if _CONTAINERS[match.group(1).lower()] is dict else list[inner]  # type: ignore[valid-type]
    match = re.fullmatch(r"(\w+)\s*\[(.*)\]", text)
    if match:
        head = match.group(1).lower()
        args = [_parse(part, depth + 1) for part in _split_top(match.group(2), r"\s*,\s*")]
        if any(arg is None for arg in args) or not args:
            return None
        if head == "optional" and len(args) == 1:
            return Optional[args[0]]  # noqa: UP045 (built at run time)
        if head == "union":
            return Union[tuple(args)]  # noqa: UP007
        if head in ("dict", "mapping") and len(args) == 2 and args[0] is str:
            return dict[str, args[1]]  # type: ignore[valid-type]
        if head in _CONTAINERS and _CONTAINERS[head] is list and len(args) == 1:
            return list[args[0]]  # type: ignore[valid-type]
        return None
    return _SIMPLE.get(text.lower())


def _split_top(text: str, pattern: str) -> list[str]:
    """`text` split on `pattern` outside brackets."""
    parts: list[str] = []
    depth = 0
    start = 0
    index = 0
    regex = re.compile(pattern)
    while index < len(text):
        char = text[index]
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        elif depth == 0:
            match = regex.match(text, index)
            if match and match.end() > index:
                parts.append(text[start:index])
                start = index = match.end()
                continue
        index += 1
    parts.append(text[start:])
    return parts
