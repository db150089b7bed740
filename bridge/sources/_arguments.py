"""Check a model's raw arguments against a plain JSON Schema (tools that have no Python signature).

The problems read like those of Python tools ("limit: 500 is greater than the maximum of 100",
"unknown argument 'colour': accepted arguments are city, days"). Coercion is lax where the
schema leaves no doubt: "3" for an integer argument becomes 3, "true" for a boolean True, 42
for a string argument "42", and a JSON string sent for an object or array argument is parsed
(models often double-encode).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError

from bridge.tools.problems import dotted_path, parse_json_arguments, shown_value, trim
from bridge.tools.schema_walk import describe, kinds
from bridge.tools.spec import ArgumentError

__all__ = ["SchemaArguments"]

_MAX_PROBLEMS = 10


class SchemaArguments:
    """A `ToolSpec.validate` for a JSON Schema: returns the arguments that were sent, coerced.

    Args:
        parameters: The canonical schema of the arguments object (no `$ref`).
        allow_unknown: Pass arguments the schema does not name on (else they are a problem).
    """

    def __init__(self, parameters: Mapping[str, Any], *, allow_unknown: bool = False) -> None:
        self._parameters = dict(parameters)
        self._validator = Draft202012Validator(self._parameters)
        props = self._parameters.get("properties")
        self._props: dict[str, Any] = dict(props) if isinstance(props, Mapping) else {}
        required = self._parameters.get("required")
        self._required = set(required) if isinstance(required, list) else set()
        self._allow_unknown = allow_unknown

    def __call__(self, raw: Any) -> dict[str, Any]:
        if isinstance(raw, (str, bytes)):
            raw = parse_json_arguments(raw)
        if not isinstance(raw, Mapping):
            raise ArgumentError([f"arguments must be a JSON object{self._hint()}"])
        data: dict[str, Any] = {}
        unknown: list[str] = []
        for key, value in raw.items():
            prop = self._props.get(key)
            if prop is None:
                if self._allow_unknown:
                    data[key] = value
                else:
                    unknown.append(str(key))
                continue
            allowed = kinds(prop, {})
            if value is None and key not in self._required and "null" not in allowed:
                continue  # null for an optional argument means "not sent"
            data[key] = _coerce(value, allowed)
        problems: list[str] = []
        if unknown:
            names = ", ".join(repr(name) for name in unknown)
            accepted = (
                f"accepted arguments are {', '.join(self._props)}"
                if self._props
                else "this tool takes no arguments"
            )
            problems.append(
                f"unknown argument{'s' if len(unknown) > 1 else ''} {names}: {accepted}"
            )
        errors = sorted(self._validator.iter_errors(data), key=lambda e: list(map(str, e.path)))
        problems.extend(self._line(error) for error in errors[:_MAX_PROBLEMS])
        if len(errors) > _MAX_PROBLEMS:
            problems.append(f"... and {len(errors) - _MAX_PROBLEMS} more problems")
        if problems:
            raise ArgumentError(problems)
        return data

    def _hint(self) -> str:
        return f" with keys {', '.join(self._props)}" if self._props else ""

    def _line(self, error: ValidationError) -> str:
        path = dotted_path(error.absolute_path) or "arguments"
        if error.validator == "required" and isinstance(error.instance, Mapping):
            wanted = error.validator_value if isinstance(error.validator_value, list) else []
            missing = [name for name in wanted if name not in error.instance]
            name = str(missing[0]) if missing else "?"
            where = f"{path}.{name}" if error.absolute_path else name
            kind = "field" if error.absolute_path else "argument"
            schema = error.schema if isinstance(error.schema, Mapping) else {}
            prop = schema.get("properties", {}).get(name)
            expected = f" (expected {describe(prop, {})})" if isinstance(prop, Mapping) else ""
            return f"{where}: missing required {kind}{expected}"
        if error.validator in ("type", "enum"):
            got = shown_value(error.instance)
            return f"{path}: should be {describe(error.schema, {})} (got {got})"
        if error.validator == "additionalProperties":
            return f"{path}: {error.message}"
        return f"{path}: {trim(error.message)}"


def _coerce(value: Any, allowed: set[str]) -> Any:
    """Lax coercion of a top-level argument, only where the schema admits one kind of value."""
    if (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and "string" in allowed
        and not allowed & {"integer", "number", "any"}
    ):
        return str(value)  # an id sent as a number where the API wants text
    if not isinstance(value, str) or "string" in allowed or "any" in allowed:
        return value
    text = value.strip()
    if allowed & {"object", "array"} and text[:1] in ("[", "{"):
        try:
            parsed = json.loads(text)
        except json.JSONDecodeError:
            return value
        return parsed if isinstance(parsed, (list, dict)) else value
    if "integer" in allowed:
        try:
            return int(text)
        except ValueError:
            pass
    if "number" in allowed:
        try:
            number = float(text)
        except ValueError:
            pass
        else:
            return int(number) if number.is_integer() and "." not in text else number
    if "boolean" in allowed and text.lower() in ("true", "false"):
        return text.lower() == "true"
    return value
