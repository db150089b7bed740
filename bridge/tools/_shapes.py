"""The arguments models of tools that share a shape are built once.

Building a pydantic model and its JSON Schema is most of what registering a function costs
(about 1 ms a tool), yet the tools of one program repeat the same few argument shapes: the same
names with the same types and defaults, differing only in their descriptions. `ShapeCache` keys
a tool's arguments by everything that reaches the model except the description texts, which
the model is built with as placeholders (`placeholder(i)`), so the canonical schema of the next
tool of that shape is a copy of the cached one with its own descriptions filled in (`fill`).

A key holds types and defaults by identity unless they are plain data (str, int, float, bool,
None, and lists, tuples, dicts of them), compared with their type (so `1` and `True` differ),
or pydantic `FieldInfo`s and `annotated_types` constraints, compared by content. Objects keyed
by identity are held by the key or the cache entry, so their ids cannot be reused while the
entry lives. Anything the key builder does not understand is keyed by identity too: a miss,
never a wrong hit.
"""

from __future__ import annotations

import dataclasses
import json
import math
import operator
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal, get_args, get_origin

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from bridge.tools._json import copy_json

__all__ = ["Shape", "ShapeCache", "fill", "placeholder", "placeholders", "shape_key"]

_PLAIN = (str, int, float, bool, type(None))
_MAX_DEPTH = 25
_PREFIX = "\x00toolbridge-description-"
_UNSET = object()
_OBJECT_EQ: Any = object.__eq__
_OBJECT_HASH: Any = object.__hash__
_SLOTS: tuple[str, ...] = tuple(
    name for cls in FieldInfo.__mro__ for name in getattr(cls, "__slots__", ())
)
_GET_SLOTS = operator.attrgetter(*_SLOTS)


def placeholder(index: int) -> str:
    """The description the model of a shape is built with for argument `index`."""
    if 0 <= index < len(_PLACEHOLDERS):
        return _PLACEHOLDERS[index]
    return f"{_PREFIX}{index}\x00"


_PLACEHOLDERS = tuple(f"{_PREFIX}{index}\x00" for index in range(64))


@dataclass(frozen=True)
class Shape:
    """What every tool of one argument shape shares."""

    model: type[BaseModel]
    parameters: dict[str, Any]
    """The canonical schema with `placeholder` descriptions; never handed out (see `fill`)."""
    nullable: frozenset[str]
    """Arguments whose schema admits null."""
    kept: tuple[Any, ...]
    """The objects the key names by identity, alive as long as the entry."""
    slots: tuple[tuple[tuple[Any, ...], str], ...] = ()
    """Where `parameters` holds placeholders (see `placeholders`)."""
    rendered: dict[str, Shape] = dataclasses.field(default_factory=dict, compare=False)
    """The arguments schema as a dialect shows it, by dialect, made when first asked for
    (`model`, `nullable` and `kept` of these are unused)."""
    filler: list[Callable[[dict[str, str]], dict[str, Any]] | None] = dataclasses.field(
        default_factory=list, compare=False, repr=False, init=False
    )
    """`fill`'s constructor of `parameters` (see `_filler`), once made; `[None]`: none."""

    def render(self, dialect: str, make: Callable[[dict[str, Any]], dict[str, Any]]) -> Shape:
        """This shape's schema as `make` renders it for `dialect`, placeholders found again."""
        found = self.rendered.get(dialect)
        if found is None:
            parameters = make(self.parameters)
            found = Shape(
                self.model, parameters, self.nullable, (), tuple(placeholders(parameters))
            )
            self.rendered[dialect] = found
        return found


_CONSTRAINTS: dict[type, tuple[str, ...] | None] = {}


def _constraint_fields(kind: type) -> tuple[str, ...] | None:
    """The field names of an `annotated_types` constraint class (`Ge`, `MaxLen`...), else None;
    found once per class (`dataclasses.fields` costs more than the rest of a key)."""
    try:
        return _CONSTRAINTS[kind]
    except KeyError:
        pass
    names = None
    if kind.__module__ == "annotated_types" and dataclasses.is_dataclass(kind):
        names = tuple(field.name for field in dataclasses.fields(kind))
    _CONSTRAINTS[kind] = names
    return names


class _UncachableError(Exception):
    pass


class _KeyBuilder:
    def __init__(self) -> None:
        self.kept: list[Any] = []

    def ident(self, obj: Any) -> Hashable:
        kind: Any = type(obj)
        if kind.__eq__ is _OBJECT_EQ and kind.__hash__ is _OBJECT_HASH:
            key: Hashable = obj  # compared by identity already, and kept alive by the key
            return key
        self.kept.append(obj)
        return ("id", id(obj))

    def value(self, obj: Any, depth: int = 0) -> Hashable:
        kind = type(obj)
        if kind in _PLAIN:
            return (kind, obj)
        if depth > _MAX_DEPTH:
            raise _UncachableError
        if kind is list or kind is tuple:
            return (kind, tuple(self.value(item, depth + 1) for item in obj))
        if kind is dict:
            return (
                dict,
                tuple((self.value(k, depth + 1), self.value(v, depth + 1)) for k, v in obj.items()),
            )
        if kind is set or kind is frozenset:
            return (kind, frozenset(self.value(item, depth + 1) for item in obj))
        if kind is FieldInfo:
            # Each `Annotated[int, Field(ge=0)]` written in a signature is a new FieldInfo:
            # keyed by what it holds, so equal ones share a model.
            parts: list[Any] = [kind]
            try:
                items = _GET_SLOTS(obj)  # all of them at once
            except AttributeError:  # an unset slot
                items = tuple(getattr(obj, name, _UNSET) for name in _SLOTS)
            for item in items:
                if type(item) in _PLAIN:  # most slots hold None, a bool or a string
                    parts.append((type(item), item))
                else:
                    parts.append(self.value(item, depth + 1))
            return tuple(parts)
        names = _constraint_fields(kind)
        if names is not None:
            return (kind, tuple(self.value(getattr(obj, name), depth + 1) for name in names))
        return self.ident(obj)

    def json(self, obj: Any) -> Hashable:
        try:
            json.dumps(obj)
        except (TypeError, ValueError):
            raise _UncachableError from None  # reported as a problem by the builder
        return self.value(obj)  # a tuple and a list write the same JSON, yet differ

    def type(self, hint: Any, depth: int = 0) -> Hashable:
        if type(hint) is type:  # a plain class, the usual case
            return hint
        if depth > _MAX_DEPTH:
            raise _UncachableError
        origin = get_origin(hint)
        if origin is None:
            if isinstance(hint, list):  # Callable[[int], str] has a list among its args
                return (list, tuple(self.type(item, depth + 1) for item in hint))
            return self.value(hint)
        if origin is Literal:
            return ("literal", tuple(self.value(arg) for arg in get_args(hint)))
        if origin is Annotated:
            return (
                "annotated",
                self.type(get_args(hint)[0], depth + 1),
                tuple(self.value(item, depth + 1) for item in hint.__metadata__),
            )
        args = get_args(hint)
        return ("generic", self.ident(origin), tuple(self.type(a, depth + 1) for a in args))


def shape_key(params: Sequence[Any], no_default: Any) -> tuple[Hashable, tuple[Any, ...]] | None:
    """The cache key of a list of `schema.Param`s and the objects it names by identity, or
    None when they cannot share a model (a default that is a pydantic `Field`, whose options
    belong to the function, or an example that is not JSON)."""
    builder = _KeyBuilder()
    parts: list[Hashable] = []
    try:
        for param in params:
            if isinstance(param.default, FieldInfo):
                return None
            parts.append(
                (
                    param.name,
                    builder.type(param.annotation),
                    "required" if param.default is no_default else builder.value(param.default),
                    param.description is not None,
                    None if param.example is no_default else builder.json(param.example),
                    None if param.enum is None else builder.json(tuple(param.enum)),
                )
            )
    except _UncachableError:
        return None
    return tuple(parts), tuple(builder.kept)


class ShapeCache:
    """A bounded map from `shape_key` to `Shape`, safe to use from several threads."""

    def __init__(self, size: int = 2048) -> None:
        self._size = size
        self._entries: OrderedDict[Hashable, Shape] = OrderedDict()
        self._lock = threading.Lock()
        self.builds = 0
        """How many shapes were stored (a miss that built a model), for tests."""

    def get(self, key: Hashable) -> Shape | None:
        with self._lock:
            found = self._entries.get(key)
            if found is not None:
                self._entries.move_to_end(key)
            return found

    def put(self, key: Hashable, shape: Shape) -> None:
        with self._lock:
            self.builds += 1
            self._entries[key] = shape
            while len(self._entries) > self._size:
                self._entries.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


def placeholders(node: Any, path: tuple[Any, ...] = ()) -> list[tuple[tuple[Any, ...], str]]:
    """Where a schema holds placeholder descriptions: (path to the description, placeholder)."""
    found: list[tuple[tuple[Any, ...], str]] = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "description" and type(value) is str and value.startswith(_PREFIX):
                found.append(((*path, key), value))
            else:
                found.extend(placeholders(value, (*path, key)))
    elif isinstance(node, list):
        for index, item in enumerate(node):
            found.extend(placeholders(item, (*path, index)))
    return found


def fill(shape: Shape, texts: dict[str, str]) -> dict[str, Any]:
    """A deep copy of the shape's schema with its placeholder descriptions replaced by `texts`."""
    if not shape.filler:
        shape.filler.append(_filler(shape.parameters))
    filler = shape.filler[0]
    if filler is not None:
        return filler(texts)
    parameters: dict[str, Any] = copy_json(shape.parameters)
    for path, key in shape.slots:
        node: Any = parameters
        for step in path[:-1]:
            node = node[step]
        node[path[-1]] = texts[key]
    return parameters


def _filler(parameters: dict[str, Any]) -> Callable[[dict[str, str]], dict[str, Any]] | None:
    """A function that builds `parameters` anew as one nested literal, placeholders read from
    its argument: five times faster than copying, which shows when a thousand tools are
    registered and listed. None when the schema holds anything but plain JSON (then `fill`
    copies it).

    The source is made of `repr`s of strings, ints, finite floats, booleans and None only, so
    it evaluates to exactly these values and nothing else runs.
    """
    source = _literal(parameters, 0)
    if source is None:
        return None
    built: Callable[[dict[str, str]], dict[str, Any]] = eval(  # only literals: see above
        compile(f"lambda t: {source}", "<shape>", "eval"), {"__builtins__": {}}
    )
    return built


def _literal(node: Any, depth: int) -> str | None:
    kind = type(node)
    if kind is str or kind is int or kind is bool or node is None:
        return repr(node)
    if kind is float:
        return repr(node) if math.isfinite(node) else None
    if depth > _MAX_DEPTH:  # the compiler's nesting limit is far above
        return None
    parts: list[str] = []
    if kind is dict:
        for key, value in node.items():
            if type(key) is not str:
                return None
            if key == "description" and type(value) is str and value.startswith(_PREFIX):
                item: str | None = f"t[{value!r}]"  # as `placeholders` finds them
            else:
                item = _literal(value, depth + 1)
            if item is None:
                return None
            parts.append(f"{key!r}: {item}")
        return "{" + ", ".join(parts) + "}"
    if kind is list:
        for value in node:
            item = _literal(value, depth + 1)
            if item is None:
                return None
            parts.append(item)
        return "[" + ", ".join(parts) + "]"
    return None
