"""The small template language of scenario files.

``{name}`` inserts a named regex group (or ``{query}``, the whole query); ``{outputs.ALIAS}``
inserts the output of an earlier tool call (ALIAS is the call's ``as`` or its tool name);
``{outputs.ALIAS.key[0].field}`` parses that output as JSON and walks into it;
``{answers.NAME}`` inserts the person's reply to an earlier ``ask`` step named ``as: NAME``
(plain text, so it takes no path). ``{{`` and ``}}`` are literal braces. A template that is
exactly one placeholder keeps the value's JSON type (a number stays a number), anything else
renders to text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "NAMED_ROOTS",
    "Placeholder",
    "TemplateError",
    "TemplateSyntaxError",
    "parse_template",
    "render",
    "render_value",
]

NAMED_ROOTS = ("outputs", "answers")
"""Placeholder roots followed by a name: ``outputs.TOOL`` and ``answers.NAME``."""

_SEGMENT = re.compile(r"\.([^.\[\]]+)|\[(-?\d+)\]")
_ROOT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*")
_ALIAS = re.compile(r"^\.([A-Za-z0-9_-]+)")


class TemplateSyntaxError(ValueError):
    """A template that cannot be parsed (unbalanced braces, a bad placeholder)."""


class TemplateError(ValueError):
    """A placeholder that cannot be filled at run time (no such output, not JSON, no such key)."""


@dataclass(frozen=True)
class Placeholder:
    """One ``{...}``: its root (`outputs`, `answers` or a value name), alias and JSON path."""

    text: str
    root: str
    alias: str | None
    path: tuple[str | int, ...]


def parse_template(template: str) -> list[str | Placeholder]:
    """Split a template into literal text and placeholders.

    Raises:
        TemplateSyntaxError: unbalanced braces or a placeholder that is not a name or path.
    """
    parts: list[str | Placeholder] = []
    literal = ""
    i = 0
    while i < len(template):
        ch = template[i]
        if template.startswith("{{", i) or template.startswith("}}", i):
            literal += ch
            i += 2
            continue
        if ch == "}":
            raise TemplateSyntaxError(
                f"template {template!r}: '}}' at position {i} closes nothing (write '}}}}')"
            )
        if ch != "{":
            literal += ch
            i += 1
            continue
        end = template.find("}", i + 1)
        if end < 0:
            raise TemplateSyntaxError(
                f"template {template!r}: '{{' at position {i} is never closed (write '{{{{')"
            )
        if literal:
            parts.append(literal)
            literal = ""
        parts.append(_parse_placeholder(template, template[i + 1 : end].strip()))
        i = end + 1
    if literal:
        parts.append(literal)
    return parts


def _parse_placeholder(template: str, text: str) -> Placeholder:
    root_match = _ROOT.match(text)
    if not root_match:
        raise TemplateSyntaxError(
            f"template {template!r}: {{{text}}} is not a placeholder; expected a group name, "
            "query, outputs.TOOL or answers.NAME"
        )
    root, rest = root_match.group(0), text[root_match.end() :]
    alias = None
    if root in NAMED_ROOTS:
        alias_match = _ALIAS.match(rest)
        if not alias_match:
            what = "a tool name or alias" if root == "outputs" else "the name of an ask step"
            raise TemplateSyntaxError(
                f"template {template!r}: {{{text}}} needs {what}: {root}.NAME"
            )
        alias, rest = alias_match.group(1), rest[alias_match.end() :]
    path: list[str | int] = []
    pos = 0
    while pos < len(rest):
        seg = _SEGMENT.match(rest, pos)
        if not seg:
            raise TemplateSyntaxError(
                f"template {template!r}: cannot read the path {rest[pos:]!r} in {{{text}}}; "
                "expected .key or [index]"
            )
        path.append(seg.group(1) if seg.group(1) is not None else int(seg.group(2)))
        pos = seg.end()
    return Placeholder(text=text, root=root, alias=alias, path=tuple(path))


def render_value(
    template: str,
    values: Mapping[str, Any],
    outputs: Mapping[str, str],
    answers: Mapping[str, str] | None = None,
) -> Any:
    """Render `template`; a lone placeholder returns the value itself, not its text.

    Args:
        template: the template text.
        values: named regex groups and ``query``.
        outputs: earlier tool outputs by call name.
        answers: earlier replies to ``ask`` steps by their ``as`` name.
    """
    parts = parse_template(template)
    found = answers or {}
    if len(parts) == 1 and isinstance(parts[0], Placeholder):
        return _resolve(parts[0], values, outputs, found)
    return "".join(
        part if isinstance(part, str) else _as_text(_resolve(part, values, outputs, found))
        for part in parts
    )


def render(
    template: str,
    values: Mapping[str, Any],
    outputs: Mapping[str, str],
    answers: Mapping[str, str] | None = None,
) -> str:
    """Render `template` to text (arguments as for `render_value`)."""
    return _as_text(render_value(template, values, outputs, answers))


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    return json.dumps(value, ensure_ascii=False)


def _resolve(
    ph: Placeholder,
    values: Mapping[str, Any],
    outputs: Mapping[str, str],
    answers: Mapping[str, str],
) -> Any:
    if ph.root == "answers":
        assert ph.alias is not None
        if ph.alias not in answers:
            known = ", ".join(sorted(answers)) or "none yet"
            raise TemplateError(f"{{{ph.text}}}: no answer named {ph.alias!r} (answers: {known})")
        value: Any = answers[ph.alias]
    elif ph.root == "outputs":
        assert ph.alias is not None
        if ph.alias not in outputs:
            known = ", ".join(sorted(outputs)) or "none yet"
            raise TemplateError(f"{{{ph.text}}}: no output named {ph.alias!r} (outputs: {known})")
        value = outputs[ph.alias]
        if ph.path:
            try:
                value = json.loads(value)
            except json.JSONDecodeError:
                raise TemplateError(
                    f"{{{ph.text}}}: the output of {ph.alias!r} is not JSON, so it has no "
                    f"{_path_text(ph.path)} (output: {value[:80]!r})"
                ) from None
    else:
        if ph.root not in values:
            raise TemplateError(f"{{{ph.text}}}: unknown name {ph.root!r}")
        value = values[ph.root]
    return _walk(ph, value)


def _walk(ph: Placeholder, value: Any) -> Any:
    for step in ph.path:
        if isinstance(step, int):
            if not isinstance(value, list) or not -len(value) <= step < len(value):
                raise TemplateError(f"{{{ph.text}}}: [{step}] is not an index of {_show(value)}")
            value = value[step]
        else:
            if not isinstance(value, dict) or step not in value:
                keys = ", ".join(map(str, value)) if isinstance(value, dict) else ""
                raise TemplateError(
                    f"{{{ph.text}}}: key {step!r} not found in {_show(value)}"
                    + (f" (keys: {keys})" if keys else "")
                )
            value = value[step]
    return value


def _path_text(path: tuple[str | int, ...]) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)


def _show(value: Any) -> str:
    text = _as_text(value)
    return f"{type(value).__name__} {text[:60]!r}"
