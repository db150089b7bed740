"""People in a query: a name after "for"/"to"/"by", the parameters it fits, ids looked up.

``for Chloé`` goes to a string parameter about people (assignee, owner, user, name, employee
..., by its name first, then its description). When the tool wants a person's *id* instead
(``assignee_id``, "Employee id of the assignee"), `plan_lookup` finds another tool sent with
the run that searches, lists or gets people by name, and the planner calls it first.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bridge.emulator.reading import blank, content_words, split_content, tool_verb, words
from bridge.emulator.toolinfo import Param, ToolInfo

__all__ = [
    "PERSON_BEFORE",
    "Lookup",
    "fill_person",
    "find_person",
    "is_person",
    "is_person_id",
    "looked_up_id",
    "plan_lookup",
]

_PERSON_WORDS = frozenset(
    """
    assignee owner user username person name employee member recipient customer who author
    reporter contact colleague people assignees
    """.split()  # noqa: SIM905
)
_PERSON_CJK = ("负责人", "姓名", "名字", "员工", "用户", "处理人", "联系人", "人员")
PERSON_BEFORE = re.compile(r"(?:\bfor|\bto|\bby|\bnamed|\bcalled)\s+$", re.I)
_PERSON = re.compile(
    r"(?<![^\W_])(?:for|to|by|named|called)\s+"
    r"(?P<who>[^\W\d_][\w'.-]*(?:\s+[^\W\d_][\w'.-]*){0,2})",
    re.I,
)


_LIST_AFTER = re.compile(r"\s*(?:,|，|、|&|\band\b|\bor\b)\s*[^\W\d_]", re.I)


def is_person(param: Param) -> bool:
    if set(words(param.name)) & _PERSON_WORDS:
        return True
    return bool(
        set(words(param.description)) & _PERSON_WORDS
        or any(w in param.description for w in _PERSON_CJK)
    )


def find_person(text: str) -> tuple[str, int, int] | None:
    """The person named after "for", "to", "by" ... (capitalised words), and the phrase's span."""
    for found in _PERSON.finditer(text):
        names = []
        for part in found.group("who").split():
            if not part[0].isupper():
                break
            names.append(part)
        who = " ".join(names).rstrip(".'-")
        if who:
            return who, found.start(), found.start("who") + len(who)
    return None


def fill_person(text: str, tool: ToolInfo, args: dict[str, Any]) -> str:
    """Fill a people parameter from ``for Chloé``; returns the text left."""
    free = [p for p in tool.params if p.kind == "string" and not p.enum and p.name not in args]
    # By name first (assignee, owner), then by description ("Part of a name").
    ranked = [p for p in free if set(words(p.name)) & _PERSON_WORDS]
    ranked += [p for p in free if p not in ranked and is_person(p)]
    found = find_person(text)
    if found is None or _LIST_AFTER.match(text, found[2]):
        # "for Paris and Tokyo": a list, which makes one call per item (fill_calls).
        return text
    if ranked:
        args[ranked[0].name] = found[0]
    elif not any(is_person_id(p) for p in tool.params):
        return text  # nobody to give the name to: it stays part of the text
    return blank(text, found[1], found[2])


def is_person_id(param: Param) -> bool:
    return param.kind == "integer" and "id" in words(param.name) and is_person(param)


@dataclass(frozen=True)
class Lookup:
    """An id to find by name first: call `tool` with `arguments`, then fill `param` from it."""

    tool: str
    arguments: dict[str, Any]
    param: str


def plan_lookup(query: str, tool: ToolInfo, tools: Sequence[ToolInfo]) -> Lookup | None:
    """How to turn the person a query names into the id `tool` wants, if it must be looked up.

    It must when `tool` has no string parameter for people but an integer ``*_id`` one about
    people (``assignee_id``: "Employee id of the assignee"), and another tool sent with the
    run searches, lists or gets by a name (``search_employees(q: "Part of a name")``); the
    one sharing the most words with the id's name and description wins (ties: the first).
    """
    if any(p.kind == "string" and not p.enum and is_person(p) for p in tool.params):
        return None
    id_param = next((p for p in tool.params if is_person_id(p)), None)
    if id_param is None:
        return None
    head, _ = split_content(query)
    found = find_person(head)
    if found is None:
        return None
    entity = content_words(id_param.name) | content_words(id_param.description)
    best, best_score = None, -1
    for other in tools:
        if other is tool or tool_verb(other.name) not in ("search", "list", "get"):
            continue
        by_name = next(
            (p for p in other.params if p.kind == "string" and not p.enum and is_person(p)), None
        )
        shared = len(entity & content_words(other.name))
        if by_name is not None and shared > best_score:
            best, best_score = (other, by_name), shared
    if best is None:
        return None
    return Lookup(best[0].name, {best[1].name: found[0]}, id_param.name)


def looked_up_id(output: str) -> int | str | None:
    """The ``id`` of the first record a lookup returned (a JSON list, or an object holding
    one), or None when it found nothing."""
    try:
        data = json.loads(output)
    except ValueError:
        return None
    if isinstance(data, dict):
        data = next((v for v in data.values() if isinstance(v, list)), [data])
    if isinstance(data, list) and data and isinstance(data[0], dict):
        value = data[0].get("id")
        if isinstance(value, (int, str)) and not isinstance(value, bool):
            return value
    return None
