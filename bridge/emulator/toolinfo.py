"""The tools sent with a run, reduced to what the default planner needs.

Manifests come in two flavours and both are read: real JSON Schema (``"type": "string"``,
``enum``, ``anyOf``) and the official SDK's Python type strings (``"type": "Optional[int]"``,
``"Literal[fast, slow]"``, a per-property ``required`` flag).

The SDK's ``Manifest.from_function`` leaves every property's description empty and puts the
whole docstring in the tool's description, so, as a model would, a parameter without a
description takes its line of the docstring's argument section (``Args:``, ``Parameters:``,
``参数:`` with ``name (type): text`` lines, or Sphinx ``:param name: text``). A string parameter
without an ``enum`` whose description offers quoted choices (``可选 "celsius" 或 "fahrenheit"``,
``one of "a", "b"``, ``支持 "celsius" 或 "fahrenheit"``, ``supports "json" or "csv"``) is read
as if those were its enum.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from bridge.emulator.reading import find_quotes

__all__ = ["Param", "ToolInfo", "coerce", "tool_info"]

_PY_SCALARS = {
    "str": "string",
    "string": "string",
    "int": "integer",
    "integer": "integer",
    "float": "number",
    "number": "number",
    "bool": "boolean",
    "boolean": "boolean",
    "list": "array",
    "tuple": "array",
    "set": "array",
    "array": "array",
    "sequence": "array",
    "iterable": "array",
    "dict": "object",
    "mapping": "object",
    "object": "object",
}


@dataclass(frozen=True)
class Param:
    """One parameter of a tool, reduced to what the planner needs."""

    name: str
    kind: str
    """One of string, integer, number, boolean, array, object."""
    description: str = ""
    required: bool = False
    enum: tuple[Any, ...] = ()
    item_kind: str = "string"
    has_default: bool = False
    default: Any = None
    minimum: float | None = None


@dataclass(frozen=True)
class ToolInfo:
    """A tool as sent with a run: its name, description and parameters."""

    name: str
    description: str = ""
    params: tuple[Param, ...] = field(default_factory=tuple)

    def param(self, name: str) -> Param | None:
        """The parameter called `name`, if any."""
        return next((p for p in self.params if p.name == name), None)


def tool_info(name: str, description: str | None, parameters: Mapping[str, Any]) -> ToolInfo:
    """Read one tool's manifest (JSON Schema or SDK type strings) into a `ToolInfo`."""
    props = parameters.get("properties")
    required_list = parameters.get("required")
    required = set(required_list) if isinstance(required_list, list) else set()
    params = []
    documented = _docstring_params(description or "")
    if isinstance(props, Mapping):
        for pname, prop in props.items():
            prop = prop if isinstance(prop, Mapping) else {}
            flag = prop.get("required")
            param = _param(str(pname), prop, pname in required or flag is True)
            params.append(_with_docstring(param, documented.get(param.name, "")))
    return ToolInfo(name=name, description=description or "", params=tuple(params))


_SECTION = re.compile(
    r"^\s*(?:args|arguments|parameters|params|参数|入参)\s*[:：]\s*$", re.IGNORECASE
)
_OTHER_SECTION = re.compile(r"^\s*[^\s:：()]+(?:\s+[^\s:：()]+)?\s*[:：]\s*$")
_DOC_LINE = re.compile(r"^\s*(?P<name>[A-Za-z_]\w*)\s*(?:\([^)]*\))?\s*[:：]\s*(?P<text>\S.*)$")
_SPHINX = re.compile(r":param\s+(?:[\w\[\], ]+\s+)?(?P<name>[A-Za-z_]\w*)\s*:\s*(?P<text>[^\n]+)")
_CHOICE_WORDS = re.compile(
    r"可选|取值|之一|支持|one of|either|options?\b|choices?\b|allowed|possible values|"
    r"valid values|supports?\b|supported|accepts?\b",
    re.IGNORECASE,
)


def _docstring_params(description: str) -> dict[str, str]:
    """Parameter descriptions from a docstring's argument section (Google style or Sphinx)."""
    found = {m.group("name"): m.group("text").strip() for m in _SPHINX.finditer(description)}
    inside, last = False, None
    for line in description.splitlines():
        if _SECTION.match(line):
            inside, last = True, None
            continue
        if not inside:
            continue
        entry = _DOC_LINE.match(line)
        if entry is not None:
            last = entry.group("name")
            found.setdefault(last, entry.group("text").strip())
        elif _OTHER_SECTION.match(line):
            inside = False  # Returns:, Raises:, 返回: ...
        elif line.strip() and last is not None:
            found[last] = f"{found[last]} {line.strip()}"  # a wrapped line
    return found


def _with_docstring(param: Param, documented: str) -> Param:
    """`param` with its docstring line as description, and quoted choices as its enum."""
    description = param.description or documented
    enum = param.enum
    if not enum and param.kind == "string" and _CHOICE_WORDS.search(description):
        choices = tuple(dict.fromkeys(q.value for q in find_quotes(description)))
        if len(choices) >= 2:
            enum = choices
    if description == param.description and enum == param.enum:
        return param
    return replace(param, description=description, enum=enum)


def _param(name: str, prop: Mapping[str, Any], required: bool) -> Param:
    kind, enum, item_kind = _schema_kind(prop)
    minimum = prop.get("minimum")
    return Param(
        name=name,
        kind=kind,
        description=str(prop.get("description") or prop.get("title") or ""),
        required=required,
        enum=enum,
        item_kind=item_kind,
        has_default="default" in prop,
        default=prop.get("default"),
        minimum=float(minimum) if isinstance(minimum, (int, float)) else None,
    )


def _schema_kind(prop: Mapping[str, Any]) -> tuple[str, tuple[Any, ...], str]:
    """(kind, enum values, item kind) of a JSON Schema or SDK-style property."""
    for key in ("anyOf", "oneOf"):
        options = prop.get(key)
        if isinstance(options, list):
            for option in options:
                if isinstance(option, Mapping) and option.get("type") != "null":
                    return _schema_kind(option)
    enum = tuple(prop["enum"]) if isinstance(prop.get("enum"), list) else ()
    if "const" in prop and not enum:
        enum = (prop["const"],)
    kind_value = prop.get("type")
    if isinstance(kind_value, list):
        kind_value = next((k for k in kind_value if k != "null"), "string")
    if isinstance(kind_value, str) and kind_value in (
        "string",
        "integer",
        "number",
        "boolean",
        "array",
        "object",
    ):
        item_kind = "string"
        items = prop.get("items")
        if isinstance(items, Mapping):
            item_kind = _schema_kind(items)[0]
        return kind_value, enum, item_kind
    if isinstance(kind_value, str):
        kind, py_enum, item_kind = _python_kind(kind_value)
        return kind, enum or py_enum, item_kind
    if enum:
        return _kind_of_values(enum), enum, "string"
    if "properties" in prop:
        return "object", (), "string"
    if "items" in prop:
        items = prop["items"]
        return "array", (), _schema_kind(items)[0] if isinstance(items, Mapping) else "string"
    return "string", (), "string"


def _python_kind(text: str) -> tuple[str, tuple[Any, ...], str]:
    """Read an SDK type string such as ``Optional[List[int]]`` or ``Literal[fast, slow]``."""
    text = text.strip()
    match = re.fullmatch(r"([\w.]+)\[(.*)\]", text, re.DOTALL)
    if not match:
        return _PY_SCALARS.get(text.lower(), "string"), (), "string"
    origin, inner = match.group(1).split(".")[-1], match.group(2)
    members = _split_top(inner)
    if origin in ("Optional", "Annotated") and members:
        return _python_kind(members[0])
    if origin == "Union":
        real = [m for m in members if m not in ("None", "NoneType")]
        return _python_kind(real[0]) if real else ("string", (), "string")
    if origin == "Literal":
        values = tuple(_literal(m) for m in members)
        return _kind_of_values(values), values, "string"
    kind = _PY_SCALARS.get(origin.lower(), "string")
    if kind == "array" and members:
        return "array", (), _python_kind(members[0])[0]
    return kind, (), "string"


def _split_top(text: str) -> list[str]:
    """Split on commas that are not inside brackets."""
    parts, depth, current = [], 0, ""
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += ch
    if current.strip():
        parts.append(current.strip())
    return parts


def _literal(text: str) -> Any:
    text = text.strip().strip("'\"")
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    return text


def _kind_of_values(values: Iterable[Any]) -> str:
    values = list(values)
    if values and all(isinstance(v, bool) for v in values):
        return "boolean"
    if values and all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return "integer"
    if values and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        return "number"
    return "string"


def coerce(value: Any, param: Param | None) -> Any:
    """Bring a templated value to the parameter's JSON type when that is lossless."""
    if param is None:
        return value
    if isinstance(value, str):
        text = value.strip()
        if param.kind == "integer" and re.fullmatch(r"-?\d+", text):
            return int(text)
        if param.kind == "number" and re.fullmatch(r"-?\d+(?:\.\d+)?", text):
            number = float(text)
            return int(number) if number.is_integer() and "." not in text else number
        if param.kind == "boolean" and text.lower() in ("true", "false"):
            return text.lower() == "true"
        return value
    if param.kind == "string" and isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    return value
