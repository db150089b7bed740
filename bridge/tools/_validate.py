"""Check a model's raw arguments against a tool's pydantic model: one readable line per problem.

The lines name the argument, what was wrong and what was expected, e.g.
"days: should be less than or equal to 7 (got 9)" or "unknown argument 'colour': accepted
arguments are city, days". Coercion is lax ("3" -> 3) and a JSON string sent for a list or
object argument is parsed, because models often double-encode.

A tool with `strict=False` gets the arguments it does not declare in its `**kwargs`, except
the names the bridge fills or Python binds (its ToolContext parameter, a method's `self` or
`cls`, a partial's bound values): those are "unknown argument" problems as with strict on, so
a model can neither fill the context nor make the call fail with "got multiple values".
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Collection, Mapping
from typing import Any

from pydantic import BaseModel, ValidationError

from bridge.tools.problems import dotted_path, parse_json_arguments, shown_value, tidy_message
from bridge.tools.schema_walk import describe, kinds
from bridge.tools.spec import ArgumentError

__all__ = ["ArgumentValidator", "LazyValidator"]

logger = logging.getLogger(__name__)


class ArgumentValidator:
    """Checks raw arguments against the model; one readable line per problem.

    Called with a dict (or JSON text) of raw arguments, it returns the keyword arguments for the
    tool: only the arguments that were sent (so the function's own defaults apply), plus those
    in `explicit`. It raises `ArgumentError` listing every problem.

    Args:
        model: The pydantic model of the arguments object.
        keys: Model field name -> argument name (the JSON key).
        parameters: The canonical JSON Schema, for "expected ..." hints.
        ignored: Argument names dropped silently (shown by the SDK dialect, never passed on).
        explicit: Arguments always passed, with their default when not sent.
        optional: Arguments whose null means "use the default" (their type rejects null).
        allow_unknown: Pass unknown arguments on (a model with `extra="allow"`).
        pass_unknown: Return unknown arguments as given, besides the validated ones (a tool
            with `strict=False`, whose function takes `**kwargs`).
        reserved: Names the bridge fills or Python binds (the ToolContext parameter, a
            method's `self`/`cls`): refused as unknown even with `pass_unknown`, so the model
            can neither fill them nor make the call fail with "multiple values".
    """

    def __init__(
        self,
        model: type[BaseModel],
        *,
        keys: Mapping[str, str],
        parameters: dict[str, Any],
        ignored: Collection[str],
        explicit: Collection[str],
        optional: Collection[str],
        allow_unknown: bool = False,
        pass_unknown: bool = False,
        reserved: Collection[str] = (),
    ) -> None:
        self._model = model
        self._keys = dict(keys)  # model field name -> argument name
        self._names = list(self._keys.values())
        self._accepted = frozenset(self._names)
        self._ignored = frozenset(ignored)
        self._explicit = frozenset(explicit)
        self._optional = frozenset(optional)
        self._allow_unknown = allow_unknown
        self._pass_unknown = pass_unknown
        self._reserved = frozenset(reserved)
        self._parameters = parameters
        defs = parameters.get("$defs", {})
        props = parameters.get("properties", {})
        self._structured = frozenset(
            name
            for name, prop in props.items()
            if (found := kinds(prop, defs)) & {"object", "array"} and not found & {"string", "any"}
        )
        self._unions = frozenset(
            name for name, prop in props.items() if len(kinds(prop, defs) - {"null"}) > 1
        )

    def __call__(self, raw: Any) -> dict[str, Any]:
        if isinstance(raw, (str, bytes)):
            raw = parse_json_arguments(raw)
        if not isinstance(raw, Mapping):
            raise ArgumentError(
                [f"arguments must be a JSON object{self._keys_hint()} (got {_json_kind(raw)})"]
            )
        problems: list[str] = []
        data: dict[str, Any] = {}
        unknown: list[str] = []
        passed: dict[str, Any] = {}
        for key, value in raw.items():
            if key in self._accepted:
                if value is None and key in self._optional:
                    continue  # null for an optional argument means "use the default"
                if key in self._structured and isinstance(value, str):
                    value = _maybe_json(value)
                data[key] = value
            elif self._pass_unknown and key not in self._reserved:
                passed[str(key)] = value
            elif key in self._ignored:
                logger.debug("dropping argument %r: the tool cannot receive it", key)
            elif self._allow_unknown:
                data[key] = value
            else:
                unknown.append(str(key))
        if unknown:
            plural = "s" if len(unknown) > 1 else ""
            names = ", ".join(repr(name) for name in unknown)
            accepted = (
                f"accepted arguments are {', '.join(self._names)}"
                if self._names
                else "this tool takes no arguments"
            )
            problems.append(f"unknown argument{plural} {names}: {accepted}")
        try:
            instance = self._model.model_validate(data)
        except ValidationError as exc:
            problems.extend(self._format(exc))
            instance = None
        if problems or instance is None:
            raise ArgumentError(problems)
        fields_set = instance.model_fields_set
        kwargs = {
            name: getattr(instance, field)
            for field, name in self._keys.items()
            if field in fields_set or name in self._explicit
        }
        if passed:
            passed.update(kwargs)
            return passed
        return kwargs

    def _keys_hint(self) -> str:
        return f" with keys {', '.join(self._names)}" if self._names else ""

    def _format(self, exc: ValidationError) -> list[str]:
        lines: list[str] = []
        unions: dict[str, list[str]] = {}
        got_of: dict[str, Any] = {}
        for error in exc.errors(include_url=False):
            loc = error["loc"]
            top = str(loc[0]) if loc else ""
            message = tidy_message(error["msg"])
            where = dotted_path(loc) or "arguments"
            if error["type"] == "missing":
                kind = "argument" if len(loc) == 1 else "field"
                expected = self._expected(top) if len(loc) == 1 else ""
                lines.append(f"{where}: missing required {kind}{expected}")
            elif error["type"] == "extra_forbidden":
                lines.append(f"{where}: unknown field")
            elif top in self._unions and len(loc) >= 2:
                unions.setdefault(top, []).append(message)
                got_of[top] = error["input"]
            else:
                lines.append(f"{where}: {message} (got {shown_value(error['input'])})")
        for name, messages in unions.items():
            unique = list(dict.fromkeys(messages))
            lines.append(
                f"{name}: matches none of the allowed types ({'; '.join(unique)}) "
                f"(got {shown_value(got_of[name])})"
            )
        return lines

    def _expected(self, name: str) -> str:
        prop = self._parameters.get("properties", {}).get(name)
        if prop is None:
            return ""
        return f" (expected {describe(prop, self._parameters.get('$defs', {}))})"


class LazyValidator:
    """A tool's `validate` that builds its `ArgumentValidator` on the first call, once.

    Registering a thousand tools then costs no validator for the tools never called.
    """

    def __init__(self, build: Callable[[], ArgumentValidator]) -> None:
        self._build: Callable[[], ArgumentValidator] | None = build
        self._validator: ArgumentValidator | None = None
        self._lock = threading.Lock()

    def __call__(self, raw: Any) -> dict[str, Any]:
        return (self._validator or self.validator())(raw)

    @property
    def is_built(self) -> bool:
        """Whether the validator exists yet (a call or `validator()` built it)."""
        return self._validator is not None

    def validator(self) -> ArgumentValidator:
        """The validator, built now if no call built it yet."""
        with self._lock:
            if self._validator is None:
                assert self._build is not None
                self._validator = self._build()
                self._build = None
            return self._validator


def _maybe_json(value: str) -> Any:
    """A JSON string sent for a list/object argument is parsed (models often double-encode)."""
    text = value.strip()
    if text[:1] in ("[", "{"):
        try:
            parsed = json.loads(text)
        except json.JSONDecodeError:
            return value
        if isinstance(parsed, (list, dict)):
            return parsed
    return value


def _json_kind(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return "an array"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    return type(value).__name__
