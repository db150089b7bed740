"""The default planner's rules: pick a tool for a query, fill its arguments, split lists.

Everything is deterministic: ties go to the tool (or parameter) listed first. The text is read
by `bridge.emulator.reading` (words, CJK bigrams, the verb, quoted values, lists).

**Choosing the tool** (`score_tool`, `choose_tool`): name words 3 points, description words
and bigrams 1, enum values mentioned 2, parameter names and descriptions 0.5 each; a tool that
scores at all gets 3 more when the query's verb asks for its kind (open/create/file ->
``create_*``, get/show/find -> ``get_*``, list -> ``list_*``, search/find -> ``search_*``,
delete/remove -> ``delete_*``, update/change -> ``update_*``; 查询/获取 -> get, 创建/新建 ->
create, 删除 -> delete, 列出 -> list). The verb itself is not read as a value ("open a ticket"
is not ``status: open``). A tool must score 1 to be chosen; otherwise the answer is plain.

**Filling the arguments** (`fill_calls`), in this order:

1. text after a colon (``open a ticket: the printer jams``) is the message itself: it goes,
   as written, to the first free-text string parameter; the rules below read only the text
   before the colon (unless a parameter's name stands before it: ``city: Oslo`` is rule 4);
2. quoted values go to the string parameter that fits best: one whose name or description
   words stand right before the quote (``asset "MN-2001"`` -> ``asset_id``), else an id-like
   one (``*_id``, code, key, number) for an id-like value (no space, a digit), else the first;
3. enum values mentioned (the longest wins: "celsius" over "c"), or their usual names
   (华氏度 is fahrenheit); a free string parameter for a temperature unit (``unit``, 温度单位)
   takes celsius/fahrenheit when the query names one (``weather in Beijing in fahrenheit``:
   the unit is no part of the city); quoted choices in a parameter's description count as its
   enum (`bridge.emulator.toolinfo`, which also reads descriptions from a docstring);
4. named values: ``priority high``, ``department: IT``, ``city=Paris`` (the parameter's
   name, then a value);
5. a person after "for", "to", "by", "named" (``for Chloé``, a capitalised name or a quoted
   value) goes to a string parameter about people (assignee, owner, user, name, employee ...,
   by its name first, then its description); when the tool wants the person's id instead
   (``assignee_id``), the planner looks it up first (`bridge.emulator.people.plan_lookup`);
6. numbers: a required number parameter takes the number next to a word of its name or
   description, else the first one left; an optional one only the number next to such a word;
7. booleans named in the query (``recursive``; ``not recursive`` is False);
8. the words left (neither stop words nor the tool's own vocabulary; quoted examples in a
   description, ``例如："北京"``, are values, not vocabulary; the head noun of ``X的Y``, as in
   北京的天气, is what is asked about) go to the first free string parameter, or, for an
   array, become its items.

A list in the query (``Paris and Tokyo``, ``北京和上海``, ``"MN-1" and "MN-2"``, see
`bridge.emulator.reading.split_items`) becomes the items of an array parameter when the tool
has one, else a parallel batch: one call per item, the other arguments shared (also after
"for": ``forecast for Paris and Tokyo`` is two calls, not a person).

Optional parameters with nothing to fill them are left out; a required one is always filled,
as a model fills it: its default, a neutral value (the first enum value, the minimum or 1,
False, ``[]``, ``{}``), or, for a string, celsius for a temperature unit, the first value its
description names (``e.g. "Paris"``, ``例如：河北省``), else ``"unknown"``: a parameter is
never filled with the whole query.

Identifiers keep their shape: ``billing-api``, ``build_42``, ``api.example.com`` and
``ops@example.com`` are one value each, as written. A person named after a value (``order a
monitor for carol``) is not part of it: one word after "for", "to", "by", "named" or "called"
goes to a parameter about people (customer, recipient) when the tool has a free one, else it is
dropped (kept after "to": ``flights to tokyo``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bridge.emulator.people import (
    PERSON_BEFORE,
    Lookup,
    fill_person,
    is_person,
    looked_up_id,
    plan_lookup,
)
from bridge.emulator.reading import (
    CJK_RUN,
    CJK_STOP_PHRASES,
    NUMBER,
    STOP_WORDS,
    TOKEN,
    Quote,
    bigrams,
    blank,
    cjk_chars,
    content_words,
    find_quotes,
    has_cjk,
    is_separator,
    join_spans,
    normalise,
    read_verb,
    split_content,
    split_items,
    tool_verb,
    words,
)
from bridge.emulator.toolinfo import Param, ToolInfo, coerce, tool_info

__all__ = [
    "FilledCall",
    "Lookup",
    "Param",
    "ToolInfo",
    "choose_tool",
    "coerce",
    "fill_arguments",
    "fill_calls",
    "has_cjk",
    "looked_up_id",
    "plan_lookup",
    "score_tool",
    "tool_info",
]

_VERB_BONUS = 3.0
_NEGATIONS = frozenset({"no", "not", "without", "dont", "never"})
_ID_WORDS = frozenset({"id", "code", "key", "number", "no", "sku", "ref", "uuid", "slug"})


@dataclass(frozen=True)
class FilledCall:
    """The arguments of one call, and the listed item it was made for (a parallel batch)."""

    arguments: dict[str, Any]
    item: str | None = None


# --- choosing the tool -----------------------------------------------------------------------


def _mentions(query: str, value: Any) -> bool:
    """Whether an enum value is mentioned in the query."""
    if isinstance(value, bool) or value is None:
        return False
    if isinstance(value, (int, float)):
        return any(float(n) == float(value) for n in NUMBER.findall(query))
    text = str(value).strip()
    if not text:
        return False
    if has_cjk(text):
        return text in query
    return re.search(rf"(?<![^\W_]){re.escape(text)}(?![^\W_])", query, re.IGNORECASE) is not None


def score_tool(query: str, tool: ToolInfo) -> float:
    """How well `tool` fits `query` (the points are in the module docstring)."""
    verb = read_verb(query)
    if verb is not None:
        query = blank(query, verb.start, verb.end)
    q_words = content_words(query)
    q_grams = bigrams(query)
    name_words = content_words(tool.name)
    desc_words = content_words(tool.description) - name_words
    score = 3.0 * len(q_words & name_words) + 1.0 * len(q_words & desc_words)
    score += 3.0 * len(q_grams & bigrams(tool.name))
    tool_grams = bigrams(tool.description) - bigrams(tool.name)
    score += 1.0 * len(q_grams & tool_grams)
    param_words: set[str] = set()
    param_grams: set[str] = set()
    for param in tool.params:
        param_words |= content_words(param.name) | content_words(param.description)
        param_grams |= bigrams(param.description)
        score += 2.0 * sum(1 for value in param.enum if _mentions(query, value))
    score += 0.5 * len(q_words & (param_words - name_words - desc_words))
    score += 0.5 * len(q_grams & (param_grams - tool_grams))
    if score > 0 and verb is not None and tool_verb(tool.name) in verb.kinds:
        score += _VERB_BONUS
    return score


def choose_tool(query: str, tools: Sequence[ToolInfo], minimum: float = 1.0) -> ToolInfo | None:
    """The best-scoring tool, or None when none reaches `minimum` (ties: the first listed)."""
    best, best_score = None, minimum - 1e-9
    for tool in tools:
        value = score_tool(query, tool)
        if value > best_score:
            best, best_score = tool, value
    return best


# --- arguments -------------------------------------------------------------------------------


def fill_arguments(query: str, tool: ToolInfo) -> dict[str, Any]:
    """Arguments for one call of `tool` read from `query` (a listed value: its first item)."""
    return fill_calls(query, tool)[0].arguments


def fill_calls(
    query: str, tool: ToolInfo, given: Mapping[str, Any] | None = None
) -> list[FilledCall]:
    """The calls of `tool` that answer `query`: one, or one per item of a list it names.

    `given` are arguments already known (an id looked up); the query does not override them.
    """
    args: dict[str, Any] = dict(given or {})
    text, content = split_content(query)
    if content and _colon_names_a_param(query, tool):
        text, content = query, ""  # "unit: kelvin" is a named value, not the message
    verb = read_verb(text)
    if verb is not None:
        text = blank(text, verb.start, verb.end)
    listed: tuple[str, list[str]] | None = None  # (parameter, items) of a parallel batch

    quotes = find_quotes(text)
    for quote in quotes:
        text = blank(text, quote.start, quote.end)
    for group in _quote_groups(query, quotes):
        if len(group) > 1:
            array = _array_param(tool, args)
            if array is not None:
                args[array.name] = [q.value for q in group]
                continue
            best = _quote_param(query, group[0], tool, args) if listed is None else None
            if best is not None:
                listed = (best.name, [q.value for q in group])
                args[best.name] = group[0].value
                continue
        for quote in group:
            best = _quote_param(query, quote, tool, args)
            array = _array_param(tool, {}) if best is None else None
            if best is not None:
                args[best.name] = quote.value
            elif array is not None:
                args.setdefault(array.name, []).append(quote.value)

    for param in tool.params:
        if param.enum:
            found = _pick_enum(text, param.enum)
            if found is not None:
                args[param.name] = found[0]
                text = _blank_value(text, found[1])
            elif param.required:
                args[param.name] = param.default if param.has_default else param.enum[0]
        elif param.kind == "string" and param.name not in args and _is_unit(param):
            found = _pick_enum(text, tuple(_ENUM_ALIASES))
            if found is not None:  # "in fahrenheit" names the unit, not the city
                args[param.name] = found[0]
                text = _blank_value(text, found[1])

    text = _named_values(text, tool, args)
    text = fill_person(text, tool, args)

    numbers = list(NUMBER.finditer(text))
    for param in tool.params:
        if param.enum or param.kind not in ("integer", "number") or param.name in args:
            continue
        picked = _take_number(numbers, param, text)
        if picked is not None:
            args[param.name] = picked[0]
            text = blank(text, *picked[1])
        elif param.required:
            args[param.name] = _neutral_number(param)

    description = _unquoted(tool.description)
    vocab_words = content_words(tool.name) | content_words(description)
    vocab_grams = bigrams(tool.name) | bigrams(description)
    for param in tool.params:
        vocab_words |= content_words(param.name)
        if param.name in args:  # the unit words of filled parameters ("5 people", "5个人")
            words_of = _unquoted(param.description)
            vocab_words |= content_words(words_of)
            vocab_grams |= bigrams(words_of) | cjk_chars(words_of)
    spans = _without_heads(text, _remainder(text, vocab_words, vocab_grams))
    spans = _beneficiaries(text, spans, tool, args)
    rest = content if content else join_spans(text, spans)
    items = None if content else split_items(text, spans)

    q_words = set(words(query))
    for param in _free_text_order(tool):
        if param.enum or param.name in args:
            continue
        if param.kind == "string":
            if rest:
                if items and listed is None:
                    listed = (param.name, items)
                    args[param.name] = items[0]
                else:
                    args[param.name] = rest
                rest, items = "", None
            elif param.required:
                args[param.name] = _placeholder(param)
        elif param.kind == "boolean":
            mentioned = _mentioned_flag(query, param, q_words)
            if mentioned is not None:
                args[param.name] = mentioned
            elif param.required:
                args[param.name] = bool(param.default) if param.has_default else False
        elif param.kind == "array":
            values = _array_items(param, items, rest, [m.group(0) for m in numbers])
            if values:
                args[param.name] = values
                rest, items = "", None
            elif param.required:
                args[param.name] = param.default if param.has_default else []
        elif param.kind == "object" and param.required:
            args[param.name] = param.default if param.has_default else {}
    ordered = {p.name: args[p.name] for p in tool.params if p.name in args}
    if listed is None:
        return [FilledCall(ordered)]
    name, values = listed
    return [FilledCall({**ordered, name: coerce(v, tool.param(name))}, v) for v in values]


_BEFORE_COLON = re.compile(r"([A-Za-z_][\w-]*(?:\s+[A-Za-z_][\w-]*)?)\s*(?::\s|：)")


def _colon_names_a_param(query: str, tool: ToolInfo) -> bool:
    """Whether the query's first colon follows a parameter's name (``city: Oslo``)."""
    found = _BEFORE_COLON.search(query)
    if found is None:
        return False
    names = {p.name.lower() for p in tool.params}
    phrase = found.group(1).lower()
    return phrase.split()[-1] in names or re.sub(r"[\s-]+", "_", phrase) in names


def _unquoted(text: str) -> str:
    """`text` without its quoted values: a description's examples (例如："北京") are values a
    query may give, not words of the tool's own vocabulary."""
    for quote in reversed(find_quotes(text)):
        text = text[: quote.start] + " " + text[quote.end :]
    return text


def _quote_groups(query: str, quotes: list[Quote]) -> list[list[Quote]]:
    """Quoted values grouped into lists: quotes with only a separator between them."""
    groups: list[list[Quote]] = []
    for quote in quotes:
        if groups:
            last = groups[-1][-1]
            gap = query[last.end : quote.start]
            if gap and (gap.isspace() or is_separator(gap, "", "")):
                groups[-1].append(quote)
                continue
        groups.append([quote])
    return groups


def _array_param(tool: ToolInfo, args: dict[str, Any]) -> Param | None:
    return next(
        (
            p
            for p in tool.params
            if p.kind == "array" and p.item_kind == "string" and p.name not in args
        ),
        None,
    )


def _is_id_like(param: Param) -> bool:
    return bool(set(words(param.name)) & _ID_WORDS)


def _quote_param(query: str, quote: Quote, tool: ToolInfo, args: dict[str, Any]) -> Param | None:
    """The free string parameter a quoted value fits best (see the module docstring)."""
    before = query[max(0, quote.start - 24) : quote.start]
    near = set(words(before)[-2:]) - STOP_WORDS
    near_chars = set(before.rstrip()[-2:]) if has_cjk(before[-3:]) else set()
    value_id_like = " " not in quote.value and any(ch.isdigit() for ch in quote.value)
    best, best_score = None, -1.0
    for param in tool.params:
        if param.kind != "string" or param.enum or param.name in args:
            continue
        score = 0.0
        hints = content_words(param.name) | content_words(param.description)
        if near & hints or near_chars & cjk_chars(param.name + param.description):
            score += 2.0
        if PERSON_BEFORE.search(before) and is_person(param):
            score += 2.0
        if value_id_like and _is_id_like(param):
            score += 1.0
        if score > best_score:
            best, best_score = param, score
    return best


def _free_text_order(tool: ToolInfo) -> list[Param]:
    """Parameters in schema order, id-like strings after the others (free text is no id)."""
    return sorted(tool.params, key=lambda p: p.kind == "string" and _is_id_like(p))


def _named_values(text: str, tool: ToolInfo, args: dict[str, Any]) -> str:
    """Fill ``NAME VALUE`` / ``NAME: VALUE`` / ``NAME=VALUE`` pairs; returns the text left."""
    for param in tool.params:
        if param.enum or param.name in args or len(param.name) < 2:
            continue
        if param.kind not in ("string", "integer", "number"):
            continue
        name = r"[\s_-]?".join(re.escape(part) for part in re.split(r"[_\s-]+", param.name))
        pattern = re.compile(
            rf"(?<![^\W_]){name}(?![^\W_])\s*(?:[:=]\s*|\s+(?:is\s+|of\s+)?)"
            rf"(?P<value>-?\d+(?:\.\d+)?|[^\W_][\w.@/-]*)",
            re.I,
        )
        for found in pattern.finditer(text):
            value = found.group("value")
            numeric = NUMBER.fullmatch(value) is not None
            if param.kind != "string" and not numeric:
                continue
            # "the city of Paris", not "city of"; but "department IT" is no stop word.
            if param.kind == "string" and value.islower() and normalise(value) in STOP_WORDS:
                continue
            args[param.name] = coerce(value, param)
            text = blank(text, found.start(), found.end())
            break
    return text


_FOR_WHOM = re.compile(r"\s+(?P<word>for|to|by|named|called)\s+", re.IGNORECASE)
"""A gap between two words that makes the second the person something is for (or by)."""


def _beneficiaries(
    text: str, spans: list[tuple[int, int]], tool: ToolInfo, args: dict[str, Any]
) -> list[tuple[int, int]]:
    """The words left without the person they name: in ``order a monitor for carol``, carol is
    who the order is for, no part of the item. One word after "for", "to", "by", "named" or
    "called" that follows other words left (and ends the phrase: a comma or the end follows)
    fills a free parameter about people (customer, recipient) when the tool has one; when it
    has none, the word is dropped after "for"/"by"/"named"/"called" (a person the tool has no
    place for) and kept after "to" (``flights to tokyo``)."""
    person = next(
        (
            p
            for p in tool.params
            if p.kind == "string" and not p.enum and p.name not in args and is_person(p)
        ),
        None,
    )
    kept = list(spans)
    for index in range(1, len(spans)):
        start, end = spans[index]
        gap = _FOR_WHOM.fullmatch(text[spans[index - 1][1] : start])
        if gap is None:
            continue
        after = text[end : spans[index + 1][0]] if index + 1 < len(spans) else ""
        if after and after.isspace():
            continue  # more words follow: a phrase ("for new york"), not one person
        if person is not None:
            args[person.name] = text[start:end]
            person = None
        elif gap.group("word").lower() == "to":
            continue
        kept.remove((start, end))
    return kept


def _placeholder(param: Param) -> Any:
    """A value for a required string parameter the query gives nothing for, as a model would
    fill it: its default, a temperature unit's usual one, the first value its description
    names (``e.g. "Paris"``, ``例如：河北省``), else a placeholder that says so."""
    if param.has_default:
        return param.default
    if _is_unit(param):
        return "celsius"
    named = find_quotes(param.description)
    if named:
        return named[0].value
    example = _EXAMPLE.search(param.description)
    if example is not None:
        return example.group("value")
    return "unknown"


_EXAMPLE = re.compile(
    r"(?:例如|比如|如|e\.g\.|for example|such as)\s*[:：,，]?\s*(?P<value>[^\s,，。;；)）]+)", re.I
)


def _blank_value(text: str, value: str) -> str:
    """`text` with the first mention of `value` replaced by spaces."""
    found = re.search(re.escape(value), text, re.IGNORECASE)
    return blank(text, found.start(), found.end()) if found else text


_ENUM_ALIASES: dict[str, tuple[str, ...]] = {
    "celsius": ("摄氏度", "摄氏", "°C", "℃"),
    "fahrenheit": ("华氏度", "华氏", "°F", "℉"),
}
"""Other names of common enum values, as a model knows them (华氏度 is fahrenheit)."""


_UNIT_WORDS = frozenset({"unit", "units", "scale", "temperature", "temp"})


def _is_unit(param: Param) -> bool:
    """A free string parameter for a temperature unit (``unit: str``, 温度单位)."""
    hints = set(words(param.name)) | content_words(param.description)
    return bool(hints & _UNIT_WORDS) or "单位" in param.description


def _enum_mention(text: str, value: Any) -> str | None:
    """The words of `text` that name enum `value` (itself or an alias), if any."""
    if _mentions(text, value):
        return str(value)
    for alias in _ENUM_ALIASES.get(str(value).lower(), ()):
        if alias in text:
            return alias
    return None


def _pick_enum(text: str, values: Sequence[Any]) -> tuple[Any, str] | None:
    """The enum value `text` names and the words naming it; the longest wins ("celsius" over
    "c")."""
    mentioned = [(v, m) for v in values if (m := _enum_mention(text, v)) is not None]
    if not mentioned:
        return None
    return max(mentioned, key=lambda pair: len(pair[1]))


def _near(text: str, number: re.Match[str], param: Param) -> bool:
    """Whether a word of the parameter's name or description stands right by the number."""
    hints = content_words(param.name) | content_words(param.description)
    before, after = text[max(0, number.start() - 16) : number.start()], text[number.end() :]
    if set(words(before)[-1:] + words(after[:16])[:1]) & hints:
        return True
    chars = cjk_chars(param.name + param.description)
    return bool(chars & (set(before[-2:]) | set(after[:3])))


def _take_number(
    numbers: list[re.Match[str]], param: Param, text: str
) -> tuple[int | float, tuple[int, int]] | None:
    integral = param.kind == "integer"
    usable = [m for m in numbers if not (integral and not float(m.group(0)).is_integer())]
    if not usable:
        return None
    chosen = next((m for m in usable if _near(text, m, param)), None)
    if chosen is None:
        if not param.required:  # "floor 2" is no assignee id
            return None
        chosen = usable[0]
    numbers.remove(chosen)
    raw = chosen.group(0)
    value = float(raw)
    if integral or (value.is_integer() and "." not in raw):
        return int(value), chosen.span()
    return value, chosen.span()


def _neutral_number(param: Param) -> int | float:
    if param.has_default and isinstance(param.default, (int, float)):
        return param.default
    base = param.minimum if param.minimum is not None else 1
    return int(base) if param.kind == "integer" else float(base)


def _mentioned_flag(query: str, param: Param, q_words: set[str]) -> bool | None:
    name_words = [w for w in words(param.name) if w not in STOP_WORDS]
    if not name_words or not all(w in q_words for w in name_words):
        return None
    before = query.lower().split(param.name.split("_")[0].lower(), 1)[0].split()
    return not (before and before[-1].strip(",.") in _NEGATIONS)


def _array_items(param: Param, items: list[str] | None, rest: str, numbers: list[str]) -> list[Any]:
    if param.item_kind in ("integer", "number"):
        values = [float(n) for n in numbers]
        if param.item_kind == "integer":
            return [int(v) for v in values if v.is_integer()]
        return [int(v) if v.is_integer() else v for v in values]
    if items:
        return list(items)
    return [rest] if rest else []


_COMPOUND_OR_TOKEN = re.compile(
    r"(?P<compound>(?<![\w.@-])[^\W_\d][^\W_]*(?:[-_.@][^\W_]+)+(?![\w-]))|" + TOKEN.pattern
)
"""A word joined to others by hyphens, underscores, dots or ``@`` (an identifier, an e-mail
address), else a `TOKEN`."""


def _remainder(text: str, vocab_words: set[str], vocab_grams: set[str]) -> list[tuple[int, int]]:
    """Spans of the words of `text` that are neither stop words nor the tool's vocabulary."""
    pieces: list[tuple[int, int]] = []
    for match in _COMPOUND_OR_TOKEN.finditer(text):
        if match.group("compound"):
            # An identifier (billing-api, build_42) is one value, kept as written, when any
            # of its parts is more than a stop word or the tool's own vocabulary.
            parts = {normalise(w) for w in words(match.group("compound"))}
            if parts - STOP_WORDS - vocab_words:
                pieces.append(match.span())
        elif match.group("word"):
            norm = normalise(match.group("word"))
            if norm not in STOP_WORDS and norm not in vocab_words:
                pieces.append(match.span())
        else:
            offset = match.start()
            pieces += [(offset + a, offset + b) for a, b in _cjk_left(match.group(0), vocab_grams)]
    return pieces


def _without_heads(text: str, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Drop the head noun of ``X的Y`` ("北京的天气"): Y is what is asked about (the tool's
    subject, even when the tool describes it in another language), X the value."""
    kept: list[tuple[int, int]] = []
    for start, end in spans:
        head = kept and text[start - 1 : start] == "的" and CJK_RUN.fullmatch(text[start:end])
        rest = text[end:].strip(" \t?？.。!！,，")
        if head and (not rest or not CJK_RUN.match(rest)):
            continue
        kept.append((start, end))
    return kept


def _cjk_left(run: str, vocab_grams: set[str]) -> list[tuple[int, int]]:
    """Spans of `run` left after removing stop phrases and the tool's own bigrams/chars."""
    removed = [ch in vocab_grams for ch in run]
    for i in range(len(run) - 1):
        if run[i : i + 2] in vocab_grams:
            removed[i] = removed[i + 1] = True
    for phrase in CJK_STOP_PHRASES:
        start = run.find(phrase)
        while start >= 0:
            for j in range(start, start + len(phrase)):
                removed[j] = True
            start = run.find(phrase, start + 1)
    spans, begin = [], None
    for i, gone in enumerate([*removed, True]):
        if gone and begin is not None:
            spans.append((begin, i))
            begin = None
        elif not gone and begin is None:
            begin = i
    return spans
