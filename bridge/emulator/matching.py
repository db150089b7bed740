"""Text heuristics of the default planner: read manifests, pick a tool, fill its arguments.

No model, no dictionary: English is split into words (with a stop list and a crude plural
rule), Chinese and other CJK text into character bigrams, so it works without jieba. Everything
is deterministic: ties go to the tool listed first.

Manifests come in two flavours and both are read: real JSON Schema (``"type": "string"``,
``enum``, ``anyOf``) and the official SDK's Python type strings (``"type": "Optional[int]"``,
``"Literal[fast, slow]"``, a per-property ``required`` flag).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "Param",
    "ToolInfo",
    "choose_tool",
    "coerce",
    "fill_arguments",
    "has_cjk",
    "score_tool",
    "tool_info",
]

_CJK = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3040-\u30ff\uac00-\ud7af"
_CJK_RUN = re.compile(f"[{_CJK}]+")
_TOKEN = re.compile(f"(?P<cjk>[{_CJK}]+)|(?P<word>(?:(?![{_CJK}])[^\\W_])+)")
_NUMBER = re.compile(r"(?<![A-Za-z0-9_.])-?\d+(?:\.\d+)?(?![A-Za-z0-9_])")
_QUOTED = re.compile(r"\"([^\"]+)\"|'([^']+)'|“([^”]+)”|‘([^’]+)’|「([^」]+)」|《([^》]+)》")
_NEGATIONS = frozenset({"no", "not", "without", "dont", "never"})

# Word lists read better as text than as list literals.
_STOP_WORDS = frozenset(
    """
    a an the is are was were be been being am what whats which who whom whose when where why how
    s t d ll re ve m i me my mine you your yours we us our they them their it its this that these
    those there here in on at of for to from by with about into onto over under as than then if
    and or but so not no please can could would should will shall may might must do does did
    done tell give show find get gets set fetch query lookup look up let lets want wants need
    needs know like just also some any all much many more most very really today now current
    currently right tool tools function functions return returns returned given specified using
    use used via per each every one e g eg ie etc has have had make makes go going value
    """.split()  # noqa: SIM905
)
_CJK_STOP_PHRASES = sorted(
    """
    请问 请帮我 帮我 帮忙 麻烦 一下 查询 查一查 查查 查看 告诉我 我想知道 我想 想知道
    怎么样 怎样 如何 是什么 什么 是多少 多少 今天 明天 昨天 后天 现在 目前 当前 给我 看看
    看一下 使用 用
    的 了 吗 呢 吧 啊 呀 在 和 与 请 是 个 把 要 能 可以 我 你
    """.split(),  # noqa: SIM905
    key=len,
    reverse=True,
)
_CJK_STOP_CHARS = frozenset("的了吗呢吧啊呀是在和与一我你请帮个把要能")

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
    if isinstance(props, Mapping):
        for pname, prop in props.items():
            prop = prop if isinstance(prop, Mapping) else {}
            flag = prop.get("required")
            params.append(_param(str(pname), prop, pname in required or flag is True))
    return ToolInfo(name=name, description=description or "", params=tuple(params))


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


# --- scoring ---------------------------------------------------------------------------------


def has_cjk(text: str) -> bool:
    """Whether `text` contains Chinese, Japanese or Korean characters."""
    return bool(_CJK_RUN.search(text))


def _normalise(word: str) -> str:
    word = word.lower()
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
        return word[:-1]
    return word


def _words(text: str) -> list[str]:
    """Normalised non-CJK words; camelCase and snake_case names are split."""
    text = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", text)
    return [_normalise(m.group("word")) for m in _TOKEN.finditer(text) if m.group("word")]


def _content_words(text: str) -> set[str]:
    return {w for w in _words(text) if w not in _STOP_WORDS}


def _bigrams(text: str) -> set[str]:
    grams = set()
    for run in _CJK_RUN.findall(text):
        for i in range(len(run) - 1):
            gram = run[i : i + 2]
            if not (set(gram) & _CJK_STOP_CHARS):
                grams.add(gram)
        if len(run) == 1 and run not in _CJK_STOP_CHARS:
            grams.add(run)
    return grams


def _mentions(query: str, value: Any) -> bool:
    """Whether an enum value is mentioned in the query."""
    if isinstance(value, bool) or value is None:
        return False
    if isinstance(value, (int, float)):
        return any(float(n) == float(value) for n in _NUMBER.findall(query))
    text = str(value).strip()
    if not text:
        return False
    if has_cjk(text):
        return text in query
    return re.search(rf"(?<![^\W_]){re.escape(text)}(?![^\W_])", query, re.IGNORECASE) is not None


def score_tool(query: str, tool: ToolInfo) -> float:
    """How well `tool` fits `query`: name words 3, description words and bigrams 1, enum
    values mentioned 2, parameter names and descriptions 0.5 each."""
    q_words = _content_words(query)
    q_grams = _bigrams(query)
    name_words = _content_words(tool.name)
    desc_words = _content_words(tool.description) - name_words
    score = 3.0 * len(q_words & name_words) + 1.0 * len(q_words & desc_words)
    score += 3.0 * len(q_grams & _bigrams(tool.name))
    tool_grams = _bigrams(tool.description) - _bigrams(tool.name)
    score += 1.0 * len(q_grams & tool_grams)
    param_words: set[str] = set()
    param_grams: set[str] = set()
    for param in tool.params:
        param_words |= _content_words(param.name) | _content_words(param.description)
        param_grams |= _bigrams(param.description)
        score += 2.0 * sum(1 for value in param.enum if _mentions(query, value))
    score += 0.5 * len(q_words & (param_words - name_words - desc_words))
    score += 0.5 * len(q_grams & (param_grams - tool_grams))
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
    """Arguments for `tool` read from `query`.

    In turn: enum values mentioned; numbers (one next to a word of the parameter's name or
    description first, else in order of appearance); quoted text; then the words left over
    for the first free string parameter. Optional parameters with nothing to fill them are
    left out; required ones get their default or a neutral value. Keys follow the schema.
    """
    args: dict[str, Any] = {}
    quoted = [next(g for g in m.groups() if g is not None) for m in _QUOTED.finditer(query)]
    # Consumed text is blanked with spaces of the same length, so spans keep their meaning.
    text = _QUOTED.sub(lambda m: " " * len(m.group(0)), query)

    for param in tool.params:
        if param.enum:
            found = _pick_enum(text, param.enum)
            if found is not None:
                args[param.name] = found
                text = _blank(text, str(found))
            elif param.required:
                args[param.name] = param.default if param.has_default else param.enum[0]

    numbers = list(_NUMBER.finditer(text))
    for param in tool.params:
        if param.enum or param.kind not in ("integer", "number"):
            continue
        picked = _take_number(numbers, param, text)
        if picked is not None:
            args[param.name] = picked[0]
            start, end = picked[1]
            text = text[:start] + " " * (end - start) + text[end:]
        elif param.required:
            args[param.name] = _neutral_number(param)

    vocab_words = _content_words(tool.name) | _content_words(tool.description)
    vocab_grams = _bigrams(tool.name) | _bigrams(tool.description)
    for param in tool.params:
        vocab_words |= _content_words(param.name)
        if param.name in args:  # the unit words of filled parameters ("5 people", "5个人")
            vocab_words |= _content_words(param.description)
            vocab_grams |= _bigrams(param.description) | _cjk_chars(param.description)
    rest = _remainder(text, vocab_words, vocab_grams)

    q_words = set(_words(query))
    for param in tool.params:
        if param.enum or param.name in args:
            continue
        if param.kind == "string":
            if quoted:
                args[param.name] = quoted.pop(0)
            elif rest:
                args[param.name], rest = rest, ""
            elif param.required:
                args[param.name] = param.default if param.has_default else query.strip()
        elif param.kind == "boolean":
            mentioned = _mentioned_flag(query, param, q_words)
            if mentioned is not None:
                args[param.name] = mentioned
            elif param.required:
                args[param.name] = bool(param.default) if param.has_default else False
        elif param.kind == "array":
            items = _array_items(param, quoted, rest, [m.group(0) for m in numbers])
            if items:
                args[param.name] = items
            elif param.required:
                args[param.name] = param.default if param.has_default else []
        elif param.kind == "object" and param.required:
            args[param.name] = param.default if param.has_default else {}
    return {p.name: args[p.name] for p in tool.params if p.name in args}


def _blank(text: str, value: str) -> str:
    """`text` with the first mention of `value` replaced by spaces."""
    found = re.search(re.escape(value), text, re.IGNORECASE)
    if not found:
        return text
    return text[: found.start()] + " " * len(found.group(0)) + text[found.end() :]


def _pick_enum(text: str, values: Sequence[Any]) -> Any:
    mentioned = [v for v in values if _mentions(text, v)]
    if not mentioned:
        return None
    return max(mentioned, key=lambda v: len(str(v)))  # longest wins: "celsius" over "c"


def _cjk_chars(text: str) -> set[str]:
    return {ch for run in _CJK_RUN.findall(text) for ch in run if ch not in _CJK_STOP_CHARS}


def _near(text: str, number: re.Match[str], param: Param) -> bool:
    """Whether a word of the parameter's name or description stands right by the number."""
    hints = _content_words(param.name) | _content_words(param.description)
    before, after = text[max(0, number.start() - 16) : number.start()], text[number.end() :]
    if set(_words(before)[-1:] + _words(after[:16])[:1]) & hints:
        return True
    chars = _cjk_chars(param.name + param.description)
    return bool(chars & (set(before[-2:]) | set(after[:3])))


def _take_number(
    numbers: list[re.Match[str]], param: Param, text: str
) -> tuple[int | float, tuple[int, int]] | None:
    integral = param.kind == "integer"
    usable = [m for m in numbers if not (integral and not float(m.group(0)).is_integer())]
    if not usable:
        return None
    chosen = next((m for m in usable if _near(text, m, param)), usable[0])
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
    name_words = [w for w in _words(param.name) if w not in _STOP_WORDS]
    if not name_words or not all(w in q_words for w in name_words):
        return None
    before = query.lower().split(param.name.split("_")[0].lower(), 1)[0].split()
    return not (before and before[-1].strip(",.") in _NEGATIONS)


def _array_items(param: Param, quoted: list[str], rest: str, numbers: list[str]) -> list[Any]:
    if param.item_kind in ("integer", "number"):
        values = [float(n) for n in numbers]
        if param.item_kind == "integer":
            return [int(v) for v in values if v.is_integer()]
        return [int(v) if v.is_integer() else v for v in values]
    if quoted:
        items, quoted[:] = list(quoted), []
        return items
    return [rest] if rest else []


def _remainder(text: str, vocab_words: set[str], vocab_grams: set[str]) -> str:
    """The words of `text` that are neither stop words nor the tool's own vocabulary.

    Pieces that touched in the text are joined without a space ("3楼"), others with one.
    """
    pieces: list[tuple[int, int]] = []
    for match in _TOKEN.finditer(text):
        if match.group("word"):
            norm = _normalise(match.group("word"))
            if norm not in _STOP_WORDS and norm not in vocab_words:
                pieces.append(match.span())
        else:
            offset = match.start()
            pieces += [(offset + a, offset + b) for a, b in _cjk_left(match.group(0), vocab_grams)]
    out = ""
    last_end = -1
    for start, end in pieces:
        if out and start != last_end:
            out += " "
        out += text[start:end]
        last_end = end
    return out.strip()


def _cjk_left(run: str, vocab_grams: set[str]) -> list[tuple[int, int]]:
    """Spans of `run` left after removing stop phrases and the tool's own bigrams/chars."""
    removed = [ch in vocab_grams for ch in run]
    for i in range(len(run) - 1):
        if run[i : i + 2] in vocab_grams:
            removed[i] = removed[i + 1] = True
    for phrase in _CJK_STOP_PHRASES:
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
