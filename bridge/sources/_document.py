"""Read YAML or JSON documents and report their problems by file, line and key.

`read_document` parses a file and remembers where each key and item starts, so that a pydantic
`ValidationError` about the data can be told as ``tools.yaml: line 7: tools[0].method: should
be 'GET', 'POST', ... (got 'FETCH')`` by `describe_errors`.
"""

from __future__ import annotations

import json
import re
import threading
import types
import typing
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from bridge.errors import UsageError
from bridge.tools.problems import dotted_path, tidy_message

__all__ = ["DocumentError", "Positions", "describe_errors", "parse_document", "read_document"]

Positions = Mapping[tuple[int | str, ...], int]
"""Path of a key or item in the data -> its 1-based line in the file."""

_SECRET_KEYS = frozenset(("token", "password", "key", "username", "headers"))
_SECRET_WORDS = frozenset(("token", "password", "secret", "authorization", "api_key", "apikey"))
_MAX_SHOWN = 20


class DocumentError(UsageError, ValueError):
    """A file that cannot be used: unreadable, not YAML/JSON, or not the expected shape."""


def read_document(path: str | Path, *, what: str) -> tuple[Any, Positions]:
    """Parse a YAML or JSON file.

    Args:
        path: The file (`.json` is parsed as JSON, anything else as YAML).
        what: What the file should be, for messages ("HTTP tools manifest").

    Raises:
        DocumentError: Missing file, or a syntax error (with its line and column).
    """
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DocumentError(f"no such file: {file} (expected {_a(what)})") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DocumentError(f"cannot read {file}: {exc}") from None
    return parse_document(text, source=str(file), what=what, json_only=file.suffix == ".json")


def parse_document(
    text: str, *, source: str, what: str, json_only: bool = False
) -> tuple[Any, Positions]:
    """Parse YAML (or strict JSON) text and find the line of every key and item.

    Raises:
        DocumentError: A syntax error, with its line and column.
    """
    if json_only:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise DocumentError(
                f"{source}: line {exc.lineno}, column {exc.colno}: invalid JSON ({exc.msg}); "
                f"expected {_a(what)}"
            ) from None
    else:
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise DocumentError(f"{source}: invalid YAML: {_yaml_problem(exc)}") from None
    return data, _LazyPositions(text)


def _a(what: str) -> str:
    return f"{'an' if what[:1] in 'AEIOUHaeiou' else 'a'} {what}"


def _yaml_problem(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    context = getattr(exc, "context", None)
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    return f"{where}{problem}" + (f" ({context})" if context else "")


class _LazyPositions(Mapping[tuple[int | str, ...], int]):
    """The positions of a document, found on first use: only error messages need them, and
    composing the YAML node tree costs several times the parse itself (seconds for a
    thousand-operation OpenAPI document)."""

    def __init__(self, text: str) -> None:
        self._text: str | None = text
        self._found: dict[tuple[int | str, ...], int] = {}
        self._lock = threading.Lock()

    def _positions(self) -> dict[tuple[int | str, ...], int]:
        with self._lock:
            if self._text is not None:
                self._found, self._text = _positions(self._text), None
            return self._found

    def __getitem__(self, key: tuple[int | str, ...]) -> int:
        return self._positions()[key]

    def __iter__(self) -> Iterator[tuple[int | str, ...]]:
        return iter(self._positions())

    def __len__(self) -> int:
        return len(self._positions())


def _positions(text: str) -> dict[tuple[int | str, ...], int]:
    """Lines of keys and items; JSON is YAML for this purpose. Empty when it cannot tell."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return {}
    found: dict[tuple[int | str, ...], int] = {}

    def visit(node: yaml.Node, path: tuple[int | str, ...]) -> None:
        found.setdefault(path, node.start_mark.line + 1)
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                child = (*path, str(key.value))
                found[child] = key.start_mark.line + 1
                visit(value, child)
        elif isinstance(node, yaml.SequenceNode):
            for index, item in enumerate(node.value):
                visit(item, (*path, index))

    if root is not None:
        visit(root, ())
    return found


def describe_errors(
    exc: ValidationError,
    positions: Positions,
    *,
    source: str,
    what: str,
    model: type[BaseModel],
) -> str:
    """One message for every problem of `exc`: file, line, key path, what was expected."""
    lines = []
    errors = exc.errors(include_url=False)
    for error in errors[:_MAX_SHOWN]:
        loc = tuple(error["loc"])
        line_path: tuple[int | str, ...] | None = None
        path = _real_path(loc, positions)
        kind = error["type"]
        message = tidy_message(error["msg"])
        if kind == "missing":
            name = path[-1] if path else "?"
            message = f"missing required key {name!r}"
            path = path[:-1]
        elif kind == "extra_forbidden":
            allowed = _allowed_keys(model, loc[:-1])
            message = f"unknown key {path[-1]!r}" + (
                f"; expected one of: {', '.join(allowed)}" if allowed else ""
            )
            line_path = path  # the line of the unknown key itself, shown under its parent
            path = path[:-1]
        elif kind not in ("value_error", "assertion_error") and not (
            set(map(str, loc)) & _SECRET_KEYS
        ):
            message += f" (got {_got(error.get('input'))})"
        if kind == "value_error":
            line_path = _named_in_message(path, message, positions)
        line = _line(line_path or path, positions)
        where = f"line {line}: " if line else ""
        shown = dotted_path(path) or "top level"
        if path and str(path[-1]).lower() in _SECRET_WORDS:
            shown += " value"  # "token: x" reads as a secret to `redact`, which would mask x
        lines.append(f"  {where}{shown}: {message}")
    if len(errors) > _MAX_SHOWN:
        lines.append(f"  ... and {len(errors) - _MAX_SHOWN} more problems")
    count = f"{len(errors)} problem{'s' if len(errors) > 1 else ''}"
    return f"{source}: invalid {what} ({count}):\n" + "\n".join(lines)


def _named_in_message(
    path: tuple[int | str, ...], message: str, positions: Positions
) -> tuple[int | str, ...] | None:
    """The key a model-level message starts with (``locations.x: ...``), if the file has it.

    A check across several fields reports on the whole tool; the line of the key it names is
    where the reader has to look.
    """
    match = re.match(r"([A-Za-z0-9_\-]+(?:\.[A-Za-z0-9_\-]+)+):", message)
    if match is None:
        return None
    named = (*path, *match.group(1).split("."))
    return named if named in positions else None


def _real_path(loc: tuple[Any, ...], positions: Positions) -> tuple[int | str, ...]:
    """The error's location without pydantic's extra parts (union tags, 'function-after')."""
    if not positions:
        return tuple(part for part in loc if isinstance(part, (str, int)))
    path: tuple[int | str, ...] = ()
    for index, part in enumerate(loc):
        candidate = (*path, part)
        if candidate in positions or (index == len(loc) - 1 and isinstance(part, (str, int))):
            path = candidate
    return path


def _line(path: tuple[int | str, ...], positions: Positions) -> int | None:
    for end in range(len(path), -1, -1):
        line = positions.get(path[:end])
        if line is not None:
            return line
    return None


def _got(value: Any) -> str:
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def _allowed_keys(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """The keys the model expects at `loc` (empty when it cannot tell)."""
    current: Any = model
    for part in loc:
        found = _step(current, part)
        if found is None:
            return []
        current = found
    target = _models_in(current)
    if len(target) != 1:
        return []
    fields = target[0].model_fields
    return [info.alias or name for name, info in fields.items()]


def _step(annotation: Any, part: Any) -> Any:
    models = _models_in(annotation)
    if isinstance(part, str):
        for candidate in models:
            info = candidate.model_fields.get(part) or next(
                (f for f in candidate.model_fields.values() if f.alias == part), None
            )
            if info is not None:
                return info.annotation
        for candidate in models:  # a tag of a discriminated union
            tag = candidate.model_fields.get("type")
            if tag is not None and part in typing.get_args(tag.annotation):
                return candidate
    origin = typing.get_origin(annotation)
    if origin in (list, dict):
        return typing.get_args(annotation)[-1]
    for arg in typing.get_args(annotation):
        if typing.get_origin(arg) in (list, dict):
            return typing.get_args(arg)[-1]
    return None


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _models_in(typing.get_args(annotation)[0])
    if origin is typing.Union or origin is types.UnionType:
        return [m for arg in typing.get_args(annotation) for m in _models_in(arg)]
    return []
