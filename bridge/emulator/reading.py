"""How the default planner reads a query: words, bigrams, its verb, quoted values and lists.

No model, no dictionary: English is split into words (with a stop list and a crude plural
rule), Chinese and other CJK text into character bigrams, so it works without jieba. The
readings here are small, fixed rules so that what the emulator does can be explained:

- **the verb** (`read_verb`): an English imperative at the start of the query, after polite
  words ("please open ...", "can you get ..."), or the first Chinese verb anywhere (查询, 创建,
  删除, 列出 ...); it names the kind of tool wanted (create, get, list, search, delete, update);
- **quoted values** (`find_quotes`): "...", '...', “...”, ‘...’, 「...」, 《...》;
- **lists** (`split_items`): values separated by "and", "or", ",", "、", "和", "与", "及" (CJK
  values also by a space) that are of one kind: all Chinese (at most 8 characters each), all
  capitalised English names (at most 4 words each) or all numbers.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "CJK_RUN",
    "CJK_STOP_CHARS",
    "CJK_STOP_PHRASES",
    "NUMBER",
    "STOP_WORDS",
    "TOKEN",
    "Quote",
    "Verb",
    "bigrams",
    "blank",
    "cjk_chars",
    "content_words",
    "find_quotes",
    "has_cjk",
    "is_separator",
    "join_spans",
    "normalise",
    "read_verb",
    "same_kind",
    "split_content",
    "split_items",
    "tool_verb",
    "words",
]

_CJK = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3040-\u30ff\uac00-\ud7af"
CJK_RUN = re.compile(f"[{_CJK}]+")
TOKEN = re.compile(f"(?P<cjk>[{_CJK}]+)|(?P<word>(?:(?![{_CJK}])[^\\W_])+)")
NUMBER = re.compile(r"(?<![A-Za-z0-9_.])-?\d+(?:\.\d+)?(?![A-Za-z0-9_])")
_QUOTED = re.compile(r"\"([^\"]+)\"|'([^']+)'|“([^”]+)”|‘([^’]+)’|「([^」]+)」|《([^》]+)》")

# Word lists read better as text than as list literals.
STOP_WORDS = frozenset(
    """
    a an the is are was were be been being am what whats which who whom whose when where why how
    s t d ll re ve m i me my mine you your yours we us our they them their it its this that these
    those there here in on at of for to from by with about into onto over under as than then if
    and or but so not no please can could would should will shall may might must do does did
    done tell give show find get gets set fetch query lookup look up let lets want wants need
    needs know like just also some any all much many more most very really today now current
    currently right tool tools function functions return returns returned given specified using
    use used via per each every one e g eg ie etc has have had make makes go going value named
    called
    """.split()  # noqa: SIM905
)
CJK_STOP_PHRASES = sorted(
    """
    请问 请帮我 帮我 帮忙 麻烦 一下 查询 查一查 查查 查看 告诉我 我想知道 我想 想知道
    怎么样 怎样 如何 是什么 什么 是多少 多少 今天 明天 昨天 后天 现在 目前 当前 给我 看看
    看一下 使用 用
    的 了 吗 呢 吧 啊 呀 在 和 与 请 是 个 把 要 能 可以 我 你
    """.split(),  # noqa: SIM905
    key=len,
    reverse=True,
)
CJK_STOP_CHARS = frozenset("的了吗呢吧啊呀是在和与一我你请帮个把要能")

# The kind of tool a verb asks for ("kinds: verbs"). A tool's kind is the first word of its name.
_TOOL_VERB_TABLE = """
create: create add new open make post insert submit book register file raise
get: get show read fetch describe view retrieve display
list: list
search: search find lookup
delete: delete remove cancel drop erase
update: update edit change modify set patch rename assign
"""
_QUERY_VERB_TABLE = """
create: create add new open make submit book register file raise
get: get show read fetch describe view retrieve display
get search: find lookup look
list: list
search list: search
delete: delete remove cancel drop erase
update: update edit change modify set rename assign
create: 创建 新建 新增 添加 提交 预订 预定
get: 查询 查看 获取 显示 查
search get: 搜索 查找 寻找
list: 列出 列举
delete: 删除 移除
update: 修改 更新 编辑
"""


def _verb_table(table: str) -> dict[str, frozenset[str]]:
    verbs: dict[str, frozenset[str]] = {}
    for line in table.strip().splitlines():
        kinds, _, members = line.partition(":")
        for verb in members.split():
            verbs[verb] = frozenset(kinds.split())
    return verbs


_TOOL_VERBS = {verb: min(kinds) for verb, kinds in _verb_table(_TOOL_VERB_TABLE).items()}
_ALL_QUERY_VERBS = _verb_table(_QUERY_VERB_TABLE)
_QUERY_VERBS = {v: k for v, k in _ALL_QUERY_VERBS.items() if not CJK_RUN.search(v)}
# Longest first, so 查询 is found before 查.
_CJK_VERBS = sorted(
    ((v, k) for v, k in _ALL_QUERY_VERBS.items() if CJK_RUN.search(v)),
    key=lambda pair: len(pair[0]),
    reverse=True,
)
_POLITE = frozenset(
    """
    please kindly can could would will you i we d want need like to help me us let lets just
    now then go ahead and ok okay hey
    """.split()  # noqa: SIM905
)
_COLON = re.compile(r":\s+|：\s*")
_SEPARATOR = re.compile(r"\s*(?:(?:,|，|、|&|/|和|与|及|跟|以及|还有|或|\band\b|\bor\b)\s*)+", re.I)


@dataclass(frozen=True)
class Verb:
    """The verb of a query: the kinds of tool it asks for, and where it stands."""

    kinds: frozenset[str]
    start: int
    end: int


@dataclass(frozen=True)
class Quote:
    """A quoted value and the span of its quotes in the query."""

    value: str
    start: int
    end: int


def has_cjk(text: str) -> bool:
    """Whether `text` contains Chinese, Japanese or Korean characters."""
    return bool(CJK_RUN.search(text))


def normalise(word: str) -> str:
    """Lower case, crude singular ("tickets" -> "ticket", "queries" -> "query")."""
    word = word.lower()
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
        return word[:-1]
    return word


def words(text: str) -> list[str]:
    """Normalised non-CJK words; camelCase and snake_case names are split."""
    text = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", text)
    return [normalise(m.group("word")) for m in TOKEN.finditer(text) if m.group("word")]


def content_words(text: str) -> set[str]:
    """The words of `text` that are not stop words."""
    return {w for w in words(text) if w not in STOP_WORDS}


def bigrams(text: str) -> set[str]:
    """CJK character bigrams (a lone character stands for itself), stop characters left out."""
    grams = set()
    for run in CJK_RUN.findall(text):
        for i in range(len(run) - 1):
            gram = run[i : i + 2]
            if not (set(gram) & CJK_STOP_CHARS):
                grams.add(gram)
        if len(run) == 1 and run not in CJK_STOP_CHARS:
            grams.add(run)
    return grams


def cjk_chars(text: str) -> set[str]:
    """The CJK characters of `text`, stop characters left out."""
    return {ch for run in CJK_RUN.findall(text) for ch in run if ch not in CJK_STOP_CHARS}


def blank(text: str, start: int, end: int) -> str:
    """`text` with ``[start, end)`` replaced by spaces, so other spans keep their offsets."""
    return text[:start] + " " * (end - start) + text[end:]


def tool_verb(name: str) -> str | None:
    """The kind of a tool from the first word of its name: ``create_ticket`` -> create."""
    first = words(name)[:1]
    return _TOOL_VERBS.get(first[0]) if first else None


def read_verb(query: str) -> Verb | None:
    """The query's verb: an English imperative at its start, else the first Chinese verb."""
    for match in TOKEN.finditer(query):
        word = match.group("word")
        if word is None:
            break
        lowered = word.lower()
        if lowered in _QUERY_VERBS:
            if lowered == "look" and not re.match(r"\s+up\b", query[match.end() :], re.I):
                return None
            return Verb(_QUERY_VERBS[lowered], match.start(), match.end())
        if lowered not in _POLITE:
            break
    for verb, kinds in _CJK_VERBS:
        at = query.find(verb)
        if at >= 0:
            return Verb(kinds, at, at + len(verb))
    return None


def find_quotes(text: str) -> list[Quote]:
    """Every quoted value of `text`, in order."""
    return [
        Quote(next(g for g in m.groups() if g is not None), m.start(), m.end())
        for m in _QUOTED.finditer(text)
    ]


def is_separator(gap: str, left: str, right: str) -> bool:
    """Whether the text between two values separates list items ("and", "、", a space in CJK)."""
    if not gap.strip():
        return bool(left and right and has_cjk(left[-1]) and has_cjk(right[0]))
    return _SEPARATOR.fullmatch(gap) is not None


def join_spans(text: str, spans: Sequence[tuple[int, int]]) -> str:
    """The pieces of `text` at `spans`: touching ones joined as they are ("3楼"), others with a
    space."""
    out, last_end = "", -1
    for start, end in spans:
        if out and start != last_end:
            out += " "
        out += text[start:end]
        last_end = end
    return out.strip()


def split_items(text: str, spans: Sequence[tuple[int, int]]) -> list[str] | None:
    """The list the pieces at `spans` make, or None when they are one value.

    Pieces are split where only a separator stands between them; the list counts when it
    has two items or more, all of one kind (see the module docstring).
    """
    if len(spans) < 2:
        return None
    groups: list[list[tuple[int, int]]] = [[spans[0]]]
    for prev, cur in itertools.pairwise(spans):
        left, right = text[prev[0] : prev[1]], text[cur[0] : cur[1]]
        if is_separator(text[prev[1] : cur[0]], left, right):
            groups.append([cur])
        else:
            groups[-1].append(cur)
    items = [join_spans(text, group) for group in groups]
    return items if len(items) >= 2 and same_kind(items) else None


def same_kind(items: Sequence[str]) -> bool:
    """Whether list items look alike: all CJK, all capitalised names, or all numbers."""
    if all(CJK_RUN.fullmatch(item) and len(item) <= 8 for item in items):
        return True
    if all(NUMBER.fullmatch(item) for item in items):
        return True
    return all(_is_name(item) for item in items)


def _is_name(item: str) -> bool:
    parts = item.split()
    return 0 < len(parts) <= 4 and all(p[0].isupper() and not has_cjk(p) for p in parts)


def split_content(query: str) -> tuple[str, str]:
    """The query before a colon, and the message after it (stripped), if any.

    A colon inside a quoted value (``find ": "``) is part of the value, not the message's.
    """
    quotes = [(q.start, q.end) for q in find_quotes(query)]
    found = next(
        (m for m in _COLON.finditer(query) if not any(a < m.start() < b for a, b in quotes)),
        None,
    )
    if found is None:
        return query, ""
    content = query[found.end() :].strip().rstrip("?？.。!！").strip()
    if not content:
        return query, ""
    # Blanked, not cut, so spans of the head keep their offsets in the query.
    return query[: found.start()] + " " * (len(query) - found.start()), content
