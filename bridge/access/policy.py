"""Rules on tool calls and their arguments, written in Cedar (https://www.cedarpolicy.com).

Every call is one Cedar request:

    principal  Caller::"alice"      in Role::"support" (each of its roles)
    action     Action::"call"
    resource   Tool::"refund"       in Source::"crm" (when the tool has a source), with the
                                    attributes read_only, confirm, idempotent (Bool)
    context    {arguments: {...the call's arguments...}, platform: String,
                conversation: String, end_user: String}

A matching ``forbid`` refuses the call (the model reads the policy's ``@id`` and ``@reason``);
a matching ``permit`` annotated ``@approval("required")`` sends it to a person; another
matching ``permit`` lets it run; when nothing permits it, it is refused (Cedar's default).
A policy that cannot be evaluated never loosens the decision: a ``forbid`` that fails (an
argument of the wrong type, an attribute read without ``has``) refuses the call, and an
``@approval("required")`` permit that fails still asks a person.

Arguments become Cedar values as the tool's JSON Schema types them: ``string`` -> String,
``integer`` -> Long, ``number`` -> decimal (four digits after the point, rounded half to even),
``boolean`` -> Bool, an ``object`` with ``properties`` -> a record, an ``array`` -> a Set.
A value whose type the schema does not pin to one of these (no type, several types,
``anyOf``, a free-form object) reaches the policy as its JSON text, a String (a string as
itself). A string given for an ``integer``, ``number`` or ``boolean`` argument is read as the
tool's validation reads it (``"5000"`` is 5000), so the policy sees what the tool gets. A
``null`` leaves its key out; arguments that are not a JSON object are an empty
record. An argument the schema does not declare is converted by its value (a whole number
is a Long, any other number a decimal). A number Cedar cannot hold (a Long beyond 64 bits,
a decimal beyond about 9.2e14, NaN, infinity) refuses the call.

`policy_schema(tools)` writes the Cedar schema of the loaded tools (every argument of every
tool is an optional attribute of ``context.arguments``), and `check_policy` validates a
policy text against it and against the loaded tool and source names.
"""

from __future__ import annotations

import decimal
import difflib
import functools
import json
import math
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cedarpy

from bridge.access.decision import CallFacts, PolicyDecision
from bridge.access.principal import Principal
from bridge.errors import ConfigurationError
from bridge.tools.spec import ToolSpec

__all__ = ["Policy", "UnrepresentableError", "cedar_arguments", "check_policy", "policy_schema"]

_ACTION = {"type": "Action", "id": "call"}
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1
_DECIMAL_LIMIT = decimal.Decimal(2**63 - 1) / 10_000
_FOUR_DIGITS = decimal.Decimal("0.0001")
_ESCAPES = frozenset({"__entity", "__extn", "__expr"})
"""Keys Cedar's JSON reads as escapes in a one-key object (an entity, an extension value)."""
_MAX_DEPTH = 16
_EVAL_ERROR = re.compile(r"error while evaluating policy `([^`]+)`: (.*)", re.S)


class UnrepresentableError(ValueError):
    """An argument Cedar cannot hold (a number out of range)."""


# --- JSON Schema -> the Cedar type of an argument --------------------------------------------

# A kind: "String", "Long", "decimal", "Bool", "text" (the JSON text, a String),
# ("Set", kind) or ("Record", {name: kind}); None: no schema (converted by value).
Kind = Any


def _resolve(schema: Any, root: Mapping[str, Any], depth: int) -> Any:
    while isinstance(schema, Mapping) and isinstance(schema.get("$ref"), str) and depth < 8:
        ref = schema["$ref"]
        if not ref.startswith("#/"):
            return {}
        target: Any = root
        for part in ref[2:].split("/"):
            target = target.get(part) if isinstance(target, Mapping) else None
        schema, depth = target if isinstance(target, Mapping) else {}, depth + 1
    return schema


def _kind(schema: Any, root: Mapping[str, Any], depth: int = 0) -> Kind:
    """The Cedar kind of a value described by `schema` (a JSON Schema fragment)."""
    schema = _resolve(schema, root, depth)
    if not isinstance(schema, Mapping) or depth > _MAX_DEPTH:
        return "text"
    for union in ("anyOf", "oneOf"):
        options = schema.get(union)
        if isinstance(options, list):
            kept = [o for o in options if _resolve(o, root, depth).get("type") != "null"]
            return _kind(kept[0], root, depth + 1) if len(kept) == 1 else "text"
    if "allOf" in schema:
        parts = schema["allOf"]
        return (
            _kind(parts[0], root, depth + 1)
            if isinstance(parts, list) and len(parts) == 1
            else "text"
        )
    kind = schema.get("type")
    if isinstance(kind, list):
        kept = [k for k in kind if k != "null"]
        kind = kept[0] if len(kept) == 1 else None
    if kind is None and isinstance(schema.get("enum"), list):
        values = [v for v in schema["enum"] if v is not None]
        if values and all(isinstance(v, str) for v in values):
            kind = "string"
    if kind == "string":
        return "String"
    if kind == "integer":
        return "Long"
    if kind == "number":
        return "decimal"
    if kind == "boolean":
        return "Bool"
    if kind == "array":
        items = schema.get("items")
        return ("Set", _kind(items, root, depth + 1) if isinstance(items, Mapping) else "text")
    if kind == "object" and isinstance(schema.get("properties"), Mapping):
        properties = schema["properties"]
        return ("Record", {str(k): _kind(v, root, depth + 1) for k, v in properties.items()})
    return "text"


def _argument_kinds(parameters: Mapping[str, Any] | None) -> dict[str, Kind] | None:
    """Each declared argument's kind (None: no schema to go by)."""
    if not isinstance(parameters, Mapping):
        return None
    kind = _kind(parameters, parameters)
    return kind[1] if isinstance(kind, tuple) and kind[0] == "Record" else {}


# --- JSON values -> Cedar JSON values ----------------------------------------------------------

_OMIT = object()


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def _long(value: int, path: str) -> int:
    if not _LONG_MIN <= value <= _LONG_MAX:
        raise UnrepresentableError(f"argument {path}: {value} is beyond a Cedar Long (64 bits)")
    return value


def _decimal(value: float | int | str, path: str) -> dict[str, Any]:
    if isinstance(value, float) and not math.isfinite(value):
        raise UnrepresentableError(f"argument {path}: {value} is not a number a policy can compare")
    exact = decimal.Decimal(repr(value) if isinstance(value, float) else value)
    if abs(exact) > _DECIMAL_LIMIT:
        raise UnrepresentableError(
            f"argument {path}: {value} is beyond a Cedar decimal (about ±9.2e14)"
        )
    rounded = exact.quantize(_FOUR_DIGITS, rounding=decimal.ROUND_HALF_EVEN)
    if abs(rounded) > _DECIMAL_LIMIT:  # rounded up past the limit
        raise UnrepresentableError(
            f"argument {path}: {value} is beyond a Cedar decimal (about ±9.2e14)"
        )
    if rounded == 0:
        rounded = decimal.Decimal("0.0000")  # not "-0.0000"
    return {"__extn": {"fn": "decimal", "arg": f"{rounded:f}"}}


def _record(value: Mapping[str, Any], kinds: Mapping[str, Kind] | None, path: str) -> Any:
    if len(value) == 1 and next(iter(value)) in _ESCAPES:
        return _text(value)  # would be read as an entity or extension value: as text instead
    out: dict[str, Any] = {}
    for key, item in value.items():
        kind = kinds.get(key) if kinds is not None else None
        converted = _value(item, kind, f"{path}.{key}" if path else str(key))
        if converted is not _OMIT:
            out[str(key)] = converted
    return out


def _value(value: Any, kind: Kind, path: str) -> Any:
    """`value` as Cedar JSON: as `kind` says when it fits, else by the value itself."""
    if value is None:
        return _OMIT
    if kind == "text":
        return _text(value)
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        if kind == "decimal":
            return _decimal(value, path)
        if isinstance(value, int):
            return _long(value, path)
        if kind == "Long" and value.is_integer():
            return _long(int(value), path)
        return _decimal(value, path)
    if isinstance(value, str):
        return _from_text(value, kind, path)
    if isinstance(value, Mapping):
        record = kind[1] if isinstance(kind, tuple) and kind[0] == "Record" else None
        return _record(value, record, path)
    if isinstance(value, list | tuple):
        item = kind[1] if isinstance(kind, tuple) and kind[0] == "Set" else None
        items = (_value(v, item, f"{path}[]") for v in value)
        return [v for v in items if v is not _OMIT]
    return _text(str(value))


_INTEGER = re.compile(r"[+-]?[0-9]+")
_NUMBER = re.compile(r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?")
_TRUE = frozenset({"true", "t", "yes", "y", "on", "1"})
_FALSE = frozenset({"false", "f", "no", "n", "off", "0"})


def _from_text(value: str, kind: Kind, path: str) -> Any:
    """A string given for a number or boolean argument, read as the tool's validation reads it
    (``"5000"`` for an integer is 5000): the policy sees what the tool will get."""
    text = value.strip()
    if kind == "Long" and _INTEGER.fullmatch(text):
        return _long(int(text), path)
    if kind == "decimal" and _NUMBER.fullmatch(text):
        return _decimal(text, path)
    if kind == "Bool" and text.lower() in _TRUE | _FALSE:
        return text.lower() in _TRUE
    return value


def cedar_arguments(
    arguments: Mapping[str, Any] | Any, parameters: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """A call's arguments as a Cedar record (Cedar's JSON form), typed by the tool's JSON
    Schema `parameters` (see the module docstring).

    Raises:
        UnrepresentableError: a number Cedar cannot hold.
    """
    if not isinstance(arguments, Mapping):
        return {}
    converted = _record(arguments, _argument_kinds(parameters), "")
    return converted if isinstance(converted, dict) else {}


# --- the policy text ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Statement:
    text: str
    line: int
    """The line (1-based) where it starts: its first annotation or keyword."""


def _statements(text: str) -> list[_Statement]:
    """The text cut at each ``;`` outside strings and comments (Cedar numbers policies in this
    order: ``policy0``, ``policy1``...)."""
    found: list[_Statement] = []
    start = 0
    first: int | None = None
    line = 1
    first_line = 1
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "\n":
            line += 1
        elif c == "/" and text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end < 0 else end
            continue
        elif c == '"':
            if first is None:
                first, first_line = i, line
            i += 1
            while i < n and text[i] != '"':
                if text[i] == "\\":
                    i += 1
                elif text[i] == "\n":
                    line += 1
                i += 1
        elif c == ";":
            if first is not None:
                found.append(_Statement(text[start : i + 1], first_line))
            start, first = i + 1, None
        elif not c.isspace() and first is None:
            first, first_line = i, line
        i += 1
    if first is not None:
        found.append(_Statement(text[start:], first_line))
    return found


def _parse_error(text: str, source: str, exc: ValueError) -> ConfigurationError:
    """The parse error of `text`, naming the line of the policy it is in."""
    for statement in _statements(text):
        try:
            cedarpy.PolicySet.from_str(statement.text)
        except ValueError as one:
            return ConfigurationError(
                f"{source}:{statement.line}: cannot parse the policy starting on line "
                f"{statement.line}: {one}; expected Cedar policies such as "
                '`forbid (principal, action, resource == Tool::"refund") when { ... };`'
            )
    return ConfigurationError(f"{source}: cannot parse the policies: {exc}")


@dataclass(frozen=True)
class _Rule:
    """What the decision needs of one policy."""

    name: str
    """``@id``, or Cedar's ``policyN``."""
    effect: str
    reason: str
    approval: bool
    line: int | None


def _rules(text: str, source: str) -> dict[str, _Rule]:
    """Each policy's id -> its name, effect and annotations (from Cedar's JSON form)."""
    est = json.loads(cedarpy.policies_to_json_str(text))
    statements = _statements(text)
    rules: dict[str, _Rule] = {}
    for group in ("staticPolicies", "templates"):
        for cedar_id, body in (est.get(group) or {}).items():
            annotations = body.get("annotations") or {}
            number = cedar_id[len("policy") :] if cedar_id.startswith("policy") else ""
            index = int(number) if number.isdigit() else -1
            line = statements[index].line if 0 <= index < len(statements) else None
            rules[cedar_id] = _Rule(
                name=str(annotations.get("id") or cedar_id),
                effect=str(body.get("effect", "")),
                reason=str(annotations.get("reason") or ""),
                approval=str(annotations.get("approval", "")).strip().lower() == "required",
                line=line,
            )
    return rules


class Policy:
    """A set of Cedar policies that decides each tool call (implements `Decides`).

    Build it with `Policy.from_file` or `Policy.from_text`; `decide` is safe to call from
    several threads at once.
    """

    def __init__(self, text: str, *, source: str = "<policy>") -> None:
        self.source = source
        self.text = text
        try:
            self._set = cedarpy.PolicySet.from_str(text)
        except ValueError as exc:
            raise _parse_error(text, source, exc) from None
        self._rules = _rules(text, source)
        self._reads = _context_fields_read(text)
        self._all_arguments = bool(_WHOLE_CONTEXT.search(text) or _WHOLE_ARGUMENTS.search(text))
        self._decided: dict[tuple[Any, ...], PolicyDecision] = {}

    @classmethod
    def from_text(cls, text: str, *, source: str = "<policy>") -> Policy:
        """Policies from Cedar text; `source` names it in errors.

        Raises:
            ConfigurationError: the text is not Cedar policies (the message names the line).
        """
        return cls(text, source=source)

    @classmethod
    def from_file(cls, path: str | Path) -> Policy:
        """Policies from a ``.cedar`` file.

        Raises:
            ConfigurationError: the file cannot be read, or is not Cedar policies.
        """
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigurationError(f"cannot read the policy file {path}: {exc}") from None
        return cls(text, source=str(path))

    @property
    def names(self) -> list[str]:
        """Every policy's name (``@id``, or Cedar's ``policyN``), in the text's order."""
        return [rule.name for rule in self._rules.values()]

    def __len__(self) -> int:
        return len(self._rules)

    def __repr__(self) -> str:
        return f"Policy({self.source!r}, {len(self)} policies)"

    def decide(self, principal: Principal, call: CallFacts) -> PolicyDecision:
        """The decision on `call` made by `principal` (see the module docstring)."""
        given = call.arguments
        if not self._all_arguments:
            # Only what the policies can read reaches Cedar (its request building is most of
            # a decision's time) and the key below: an argument whose name the text never
            # holds cannot change the decision.
            given = {name: value for name, value in given.items() if name in self.text}
        try:
            arguments = cedar_arguments(given, call.parameters)
        except UnrepresentableError as exc:
            return PolicyDecision("refuse", (), f"the call cannot be evaluated: {exc}")
        context: dict[str, Any] = {"arguments": arguments}
        for name in self._reads:
            context[name] = getattr(call, name)
        request = {
            "principal": {"type": "Caller", "id": principal.name},
            "action": _ACTION,
            "resource": {"type": "Tool", "id": call.tool},
            "context": context,
        }
        roles = tuple(sorted(principal.roles))
        flags = (call.read_only, call.confirm, call.idempotent)
        # Cedar has no clock and no randomness: the same request always gets the same answer.
        # The key holds everything the policies can read (the context fields their text never
        # names cannot change it), so a repeated call is decided once.
        key = (
            principal.name,
            roles,
            call.tool,
            call.source,
            flags,
            json.dumps(arguments, sort_keys=True, separators=(",", ":"), default=str),
            tuple(context[name] for name in self._reads),
        )
        known = self._decided.get(key)
        if known is not None:
            return known
        entities = _entities(principal.name, roles, call.tool, call.source, flags)
        allowed, reasons, errors = _authorize(request, self._set, entities)
        decision = self._decision(allowed, reasons, errors)
        if len(self._decided) >= _DECIDED_MAX:
            self._decided.clear()  # a bound, not an eviction policy: refilled by what recurs
        self._decided[key] = decision
        return decision

    def _decision(self, allowed: bool, reasons: set[str], errors: list[str]) -> PolicyDecision:
        failed: dict[str, str] = {}
        for error in errors:
            found = _EVAL_ERROR.match(error)
            if found is None:  # the request itself (never expected): refuse, saying why
                return PolicyDecision("refuse", (), f"the call cannot be evaluated: {error}")
            failed[found[1]] = found[2]
        # In the text's order (Cedar's are a set's), so a decision names its policies alike.
        matched = [rule for cedar_id, rule in self._rules.items() if cedar_id in reasons]
        broken = {cedar_id: rule for cedar_id, rule in self._rules.items() if cedar_id in failed}
        forbids = [] if allowed else [r for r in matched if r.effect == "forbid"]
        if forbids:
            reason = "; ".join(r.reason for r in forbids if r.reason)
            return PolicyDecision("refuse", tuple(r.name for r in forbids), reason)
        failing = {i: r for i, r in broken.items() if r.effect == "forbid"}
        if failing:  # it might have matched: never a yes
            details = "; ".join(
                f"{r.name} could not be evaluated ({failed[i]})" for i, r in failing.items()
            )
            return PolicyDecision("refuse", tuple(r.name for r in failing.values()), details)
        if not allowed:
            return PolicyDecision("refuse")
        approvals = [r for r in matched if r.approval]
        approvals += [r for r in broken.values() if r.approval]
        if approvals:
            reason = "; ".join(r.reason for r in approvals if r.reason)
            return PolicyDecision("approval", tuple(r.name for r in approvals), reason)
        return PolicyDecision("allow", tuple(r.name for r in matched))


_DECIDED_MAX = 4096
"""Decisions remembered per policy (each a few hundred bytes)."""
_CONTEXT_FIELDS = ("platform", "conversation", "end_user")
_WHOLE_CONTEXT = re.compile(r"\bcontext\b(?!\s*(?:\.\s*\w|has\b))")
"""``context`` used as a whole value (or indexed with ``[...]``): it may read anything."""
_WHOLE_ARGUMENTS = re.compile(r"\barguments\b(?!\s*(?:\.\s*\w|has\b))")
"""``arguments`` used other than to read one of them by name (``.name``, ``has name``)."""


def _context_fields_read(text: str) -> tuple[str, ...]:
    """The context fields (besides the arguments) the policies may read: those their text
    names anywhere, or all of them when the text uses ``context`` as a whole value."""
    if _WHOLE_CONTEXT.search(text):
        return _CONTEXT_FIELDS
    return tuple(name for name in _CONTEXT_FIELDS if re.search(rf"\b{name}\b", text))


def _authorize(
    request: dict[str, Any], policies: cedarpy.PolicySet, entities: cedarpy.Entities
) -> tuple[bool, set[str], list[str]]:
    """Cedar's answer: allowed, the deciding policies' ids, the evaluation errors.

    The extension is called directly (as `cedarpy.is_authorized` does, without building its
    result objects): half the time of a decision went to that wrapper, and a decision runs
    before every tool call.
    """
    inner = getattr(cedarpy, "_internal", None)
    if inner is None:  # pragma: no cover - a cedarpy without its extension module's name
        result = cedarpy.is_authorized(request, policies, entities)
        return result.allowed, set(result.diagnostics.reasons), list(result.diagnostics.errors)
    native = {**request, "context": json.dumps(request["context"])}
    answer = json.loads(
        inner.is_authorized_batch([native], policies, entities._inner, None, False)[0]
    )
    diagnostics = answer.get("diagnostics") or {}
    return (
        answer.get("decision") == "Allow",
        set(diagnostics.get("reason") or ()),
        [str(e) for e in diagnostics.get("errors") or ()],
    )


@functools.lru_cache(maxsize=4096)
def _entities(
    caller: str,
    roles: tuple[str, ...],
    tool: str,
    source: str,
    flags: tuple[bool, bool, bool],
) -> cedarpy.Entities:
    """The entities of one request (a caller and its roles, a tool and its source), parsed once
    per distinct caller and tool."""
    read_only, confirm, idempotent = flags
    items: list[dict[str, Any]] = [
        {
            "uid": {"type": "Caller", "id": caller},
            "attrs": {},
            "parents": [{"type": "Role", "id": role} for role in roles],
        },
        *({"uid": {"type": "Role", "id": role}, "attrs": {}, "parents": []} for role in roles),
        {
            "uid": {"type": "Tool", "id": tool},
            "attrs": {"read_only": read_only, "confirm": confirm, "idempotent": idempotent},
            "parents": [{"type": "Source", "id": source}] if source else [],
        },
    ]
    if source:
        items.append({"uid": {"type": "Source", "id": source}, "attrs": {}, "parents": []})
    return cedarpy.Entities.from_json_str(json.dumps(items))


# --- the schema, and checking a policy against the loaded tools -----------------------------


def _merge(
    into: dict[str, Kind], name: str, kind: Kind, tool: str, notes: list[str], path: str
) -> None:
    if name not in into:
        into[name] = kind
        return
    have = into[name]
    if isinstance(have, tuple) and isinstance(kind, tuple) and have[0] == kind[0] == "Record":
        for key, sub in kind[1].items():
            _merge(have[1], key, sub, tool, notes, f"{path}.{key}")
    elif isinstance(have, tuple) and isinstance(kind, tuple) and have[0] == kind[0] == "Set":
        inner: dict[str, Kind] = {"": have[1]}
        _merge(inner, "", kind[1], tool, notes, f"{path}[]")
        into[name] = ("Set", inner[""])
    elif have != kind:
        notes.append(
            f"argument {path}: {tool} gives it type {_cedar_type(kind, 0)}, declared as "
            f"{_cedar_type(have, 0)} (the first tool's type)"
        )


def _quoted(name: str) -> str:
    return json.dumps(name, ensure_ascii=False)


def _cedar_type(kind: Kind, indent: int) -> str:
    if kind == "text":
        return "String"
    if isinstance(kind, str):
        return kind
    if kind[0] == "Set":
        return f"Set<{_cedar_type(kind[1], indent)}>"
    attributes: dict[str, Kind] = kind[1]
    if not attributes:
        return "{}"
    pad = "  " * (indent + 1)
    lines = [
        f"{pad}{_quoted(k)}?: {_cedar_type(v, indent + 1)}" for k, v in sorted(attributes.items())
    ]
    return "{\n" + ",\n".join(lines) + "\n" + "  " * indent + "}"


def _specs(tools: Iterable[ToolSpec]) -> list[ToolSpec]:
    return [spec for spec in tools if isinstance(spec, ToolSpec)]


def policy_schema(tools: Iterable[ToolSpec]) -> str:
    """The Cedar schema (Cedar's schema syntax) of calls to `tools`: what `check_policy`
    validates against. ``context.arguments`` declares every argument of every tool as an
    optional attribute; a name two tools type differently keeps the first tool's type (a
    comment in the schema says so)."""
    arguments: dict[str, Kind] = {}
    notes: list[str] = []
    specs = _specs(tools)
    for spec in specs:
        for name, kind in (_argument_kinds(spec.parameters) or {}).items():
            _merge(arguments, name, kind, spec.name, notes, name)
    head = [
        "// The Cedar schema of toolbridge tool calls (written by `toolbridge policy schema`).",
        f"// Tools: {', '.join(spec.name for spec in specs) or '(none)'}.",
        *(f"// Note: {note}." for note in notes),
    ]
    context = (
        _cedar_type(("Record", {}), 2) if not arguments else _cedar_type(("Record", arguments), 2)
    )
    # The record above is all optional; the context's own attributes are always there.
    return "\n".join(
        [
            *head,
            "entity Role;",
            "entity Caller in [Role];",
            "entity Source;",
            "entity Tool in [Source] = {",
            "  read_only: Bool,",
            "  confirm: Bool,",
            "  idempotent: Bool",
            "};",
            "action call appliesTo {",
            "  principal: [Caller],",
            "  resource: [Tool],",
            "  context: {",
            f"    arguments: {context},",
            "    platform: String,",
            "    conversation: String,",
            "    end_user: String",
            "  }",
            "};",
            "",
        ]
    )


def _entity_refs(node: Any) -> Iterator[tuple[str, str]]:
    """Every entity a policy's JSON form names: (type, id)."""
    if isinstance(node, Mapping):
        if isinstance(node.get("type"), str) and isinstance(node.get("id"), str):
            yield node["type"], node["id"]
        for value in node.values():
            yield from _entity_refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _entity_refs(value)


def _context_path(node: Any) -> list[str] | None:
    """``context.a.b`` as ``["a", "b"]`` (None: not a path from ``context``)."""
    if node == {"Var": "context"}:
        return []
    if isinstance(node, Mapping) and len(node) == 1 and "." in node:
        inner = node["."]
        left = _context_path(inner.get("left")) if isinstance(inner, Mapping) else None
        if left is not None and isinstance(inner.get("attr"), str):
            return [*left, inner["attr"]]
    return None


def _context_reads(node: Any) -> Iterator[list[str]]:
    """Every ``context.x.y`` a policy reads or tests with ``has``."""
    if isinstance(node, Mapping):
        for op in (".", "has"):
            inner = node.get(op)
            if isinstance(inner, Mapping) and isinstance(inner.get("attr"), str):
                left = _context_path(inner.get("left"))
                if left is not None:
                    yield [*left, inner["attr"]]
        for value in node.values():
            yield from _context_reads(value)
    elif isinstance(node, list):
        for value in node:
            yield from _context_reads(value)


_CONTEXT = {"platform": "String", "conversation": "String", "end_user": "String"}


def _unknown_read(path: list[str], arguments: dict[str, Kind]) -> str | None:
    """Why `path` (under ``context``) names nothing a call has, or None."""
    kinds: Any = ("Record", {**_CONTEXT, "arguments": ("Record", arguments)})
    for depth, name in enumerate(path):
        if not (isinstance(kinds, tuple) and kinds[0] == "Record"):
            return None  # below a String or a Set: the validator's business
        if name not in kinds[1]:
            where = ".".join(["context", *path[:depth]])
            known = sorted(kinds[1])
            close = difflib.get_close_matches(name, known, n=1, cutoff=0.75)
            hint = f"; did you mean {close[0]}?" if close else ""
            what = "no loaded tool has an argument" if path[:1] == ["arguments"] else "no attribute"
            return (
                f"{where}.{name}: {what} {name!r} in {where} "
                f"(known: {', '.join(known) or '(none)'}){hint}"
            )
        kinds = kinds[1][name]
    return None


def check_policy(text: str, tools: Iterable[ToolSpec], *, source: str = "<policy>") -> list[str]:
    """What is wrong with the policies in `text` for `tools`, one line per problem naming its
    line: a parse error, Cedar's validation against `policy_schema(tools)` (a misspelled
    argument, a comparison of the wrong type, an optional argument read without ``has``), a
    ``Tool::"..."`` or ``Source::"..."`` no loaded tool has, an ``@approval`` other than
    ``"required"``, or an ``@id`` given twice. Empty when the policies are fine."""
    specs = _specs(tools)
    try:
        Policy.from_text(text, source=source)
    except ConfigurationError as exc:
        return [str(exc)]
    rules = _rules(text, source)

    def where(cedar_id: str) -> str:
        rule = rules.get(cedar_id)
        if rule is None:
            return source
        line = f":{rule.line}" if rule.line is not None else ""
        named = f" (policy {rule.name})" if rule.name != cedar_id else ""
        return f"{source}{line}{named}"

    errors: list[str] = []
    result = cedarpy.validate_policies(text, policy_schema(specs))
    for error in result.errors:
        message = re.sub(r"^for policy `[^`]+`, ", "", error.error)
        errors.append(f"{where(error.policy_id)}: {message}")
    arguments: dict[str, Kind] = {}
    for spec in specs:
        for name, kind in (_argument_kinds(spec.parameters) or {}).items():
            _merge(arguments, name, kind, spec.name, [], name)
    said = {(e.policy_id, e.error) for e in result.errors}
    names = {spec.name for spec in specs}
    sources = {spec.source for spec in specs if spec.source}
    est = json.loads(cedarpy.policies_to_json_str(text))
    seen: dict[str, str] = {}
    for group in ("staticPolicies", "templates"):
        for cedar_id, body in (est.get(group) or {}).items():
            for kind, ident in sorted(set(_entity_refs(body))):
                if kind == "Tool" and ident not in names:
                    loaded = ", ".join(sorted(names)) or "(none)"
                    errors.append(
                        f'{where(cedar_id)}: Tool::"{ident}" is not a loaded tool; loaded tools: '
                        f"{loaded}"
                    )
                elif kind == "Source" and ident not in sources:
                    known = ", ".join(sorted(sources)) or "(none)"
                    errors.append(
                        f'{where(cedar_id)}: Source::"{ident}" is not the source of a loaded '
                        f"tool; sources: {known}"
                    )
            for path in _context_reads(body):
                problem = _unknown_read(path, arguments)
                dotted = f"`{'.'.join(path)}`"
                if problem and not any(p == cedar_id and dotted in e for p, e in said):
                    errors.append(f"{where(cedar_id)}: {problem}")
            annotations = body.get("annotations") or {}
            approval = annotations.get("approval")
            if approval is not None and str(approval).strip().lower() != "required":
                errors.append(
                    f"{where(cedar_id)}: @approval({_quoted(str(approval))}): expected "
                    '@approval("required")'
                )
            if approval is not None and body.get("effect") == "forbid":
                errors.append(f"{where(cedar_id)}: @approval on a forbid has no effect")
            given = str(annotations.get("id") or "")
            if given:
                if given in seen:
                    errors.append(f'{where(cedar_id)}: @id("{given}") is also {seen[given]}')
                else:
                    seen[given] = where(cedar_id)
    return sorted(set(errors), key=_line_order)


def _line_order(error: str) -> tuple[int, str]:
    found = re.match(r"^[^:]*:(\d+)", error)
    return (int(found[1]) if found else 0, error)
