"""Find tool calls written as text in a chat model's reply (the text tool protocol's parser).

Models without native tool calls write them in the formats their prompts (or their
fine-tuning) taught them, so every common one is read:

- a JSON object, fenced (```json) or bare: ``{"tool": ..., "arguments": {...}}``, with the
  name under ``tool``/``name``/``function``/``action``/``tool_name`` and the arguments under
  ``arguments``/``parameters``/``args``/``input``/``action_input`` (Lagent's JSON parser writes
  ``name``/``parameters``, LionAGI's action requests ``function``/``arguments``); a list of
  them, or a ``tool_calls``/``action_requests`` list, is several calls;
- Langroid's form: ``{"request": "tool_name", ...fields}``, the fields being the arguments;
- ``<tool_call>{...}</tool_call>`` (Hermes, Qwen) and InternLM's
  ``<|action_start|><|plugin|>{...}<|action_end|>``;
- ReAct's ``Action: name`` then ``Action Input: {...}``;
- a call written as code on its own line: ``get_weather(city="Paris")`` (keywords become the
  arguments object) or ``add(1, 2)`` (positional values are passed on as the text ``(1, 2)``,
  which the tools layer maps onto the parameters in order). Read with `ast`, never evaluated.

Only offered tool names make calls: a JSON object in an answer that names no tool stays text.
What clearly tried to be a call but cannot be used (an unknown tool in a call-shaped object,
JSON beyond repair inside tool-call tags, ``add(1, 2`` unclosed) is reported as a problem, for
the protocol to send one corrective message. Small JSON mistakes (a missing brace, a trailing
comma, single quotes) are repaired with `json-repair`. Nothing here raises on any text.

The reply is hostile input, so the work is bounded (each limit is a module constant):

- a reply over `MAX_REPLY_CHARS` is not scanned: it is the answer as it stands, or, when an
  offered tool's name appears in it, one problem saying the reply is too long to hold calls;
- at most `MAX_CALLS` calls and failed attempts are read from one reply; past that, reading
  stops and one problem says so (the calls read so far still run);
- looking for where calls and objects close (``add(`` or ``{"tool": ...`` never closed, on
  thousands of lines; objects nested past the recursion limit, ``{"a":[`` repeated) may read
  at most `SCAN_BUDGET` characters in all; past that, reading stops with one problem, rather
  than re-reading the rest of the reply for each opening (a reply naming no offered tool
  then stays text);
- a call nested deeper than Python's parsers go (``{"a":`` or ``-`` thousands of times) is a
  problem, not a crash of the reading, and the reply's other calls are still read;
- a fence's opening line holds at most 256 characters after the backticks (```json plus
  any info string); a longer line opens no block, so ``` repeated on one line is read once;
- broken JSON is repaired only up to `MAX_REPAIR_CHARS` characters a text and
  `REPAIR_BUDGET` in all per reply (json-repair's work grows with the square of some
  inputs); past that it is unreadable: a problem when it tried to be a call, else text;
- a problem quotes at most a short snippet of the reply (an unknown tool name too), so the
  corrective message stays small whatever the reply held;
- numbers JSON cannot carry (``1e999999`` read as infinity, ``NaN``) make the call a problem:
  the arguments go on as JSON, and a tool must not get an infinity it never asked for.
"""

from __future__ import annotations

import ast
import bisect
import json
import logging
import math
import re
import sys
from collections.abc import Collection, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import json_repair

__all__ = [
    "MAX_CALLS",
    "MAX_REPAIR_CHARS",
    "MAX_REPLY_CHARS",
    "REPAIR_BUDGET",
    "SCAN_BUDGET",
    "ParsedCall",
    "ParsedReply",
    "parse_reply",
]

logger = logging.getLogger(__name__)

_NAME_KEYS = ("tool", "tool_name", "name", "function", "action", "request", "recipient_name")
_ARGUMENT_KEYS = (
    "arguments",
    "parameters",
    "args",
    "input",
    "action_input",
    "tool_input",
    "kwargs",
    "params",
)
_LIST_KEYS = ("tool_calls", "action_requests", "calls", "tool_uses", "actions")
# Keys that only ever name a tool: an object using one is a call attempt even if the name is
# not offered (a mistyped tool deserves a correction, `{"name": "Ada"}` does not).
_EXPLICIT_NAME_KEYS = frozenset({"tool", "tool_name", "recipient_name"})

_TAGS = (
    (re.compile(r"<tool_call>", re.I), re.compile(r"</tool_call>", re.I)),
    (re.compile(r"<\|action_start\|>\s*<\|plugin\|>"), re.compile(r"<\|action_end\|>")),
    (re.compile(r"<function_call>", re.I), re.compile(r"</function_call>", re.I)),
)
# The rest of the opening line is bounded: unbounded, each of thousands of ``` on one line
# re-read the line to its end looking for the newline (quadratic).
_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+.-]*)[^\n]{0,256}\n(.*?)(?:```|\Z)", re.S)
# Fenced languages that may hold calls; any other (bash, sql...) is code in the answer.
_CALL_LANGUAGES = frozenset(
    {"", "json", "json5", "jsonc", "tool", "tool_call", "tool_code", "action", "python", "py"}
)
_CALL_KEY = re.compile(
    r"""[{,]\s*["']?(?:tool|tool_name|name|function|action|request)["']?\s*:""", re.I
)
_REACT = re.compile(
    r"^[ \t]*Action[ \t]*:[ \t]*`?([A-Za-z0-9_.-]+)`?[ \t]*\r?\n"
    r"[ \t]*Action[ \t]*Input[ \t]*:[ \t]*",
    re.M,
)
_REACT_END = re.compile(r"\n[ \t]*(?:Observation|Thought|Final Answer)[ \t]*:", re.I)
_SNIPPET = 160
_BLANK_TO_END = re.compile(r"\s*\Z")
# A brace, or a bracket opening a list of objects (a list of calls), where a JSON call may start.
_OPENING = re.compile(r"\{|\[\s{0,62}\{")

MAX_REPLY_CHARS = 256_000
"""Longer replies are not read for calls (a chat model's reply is rarely a tenth of this)."""
MAX_CALLS = 64
"""Calls and failed attempts read from one reply, at most."""
SCAN_BUDGET = 4_000_000
"""Characters read, in all, while looking for where calls and objects close in one reply."""


MAX_REPAIR_CHARS = 8_000
"""Longer broken JSON is not repaired: a call that long must be valid JSON."""
REPAIR_BUDGET = 24_000
"""Characters of broken JSON repaired, in all, in one reply."""
# The budget of the reply being read, for `_repair`, which is reached from too many places
# to take it as an argument (no budget: nothing is repaired).
_BUDGET: ContextVar[_Budget | None] = ContextVar("_BUDGET", default=None)


class _LimitError(Exception):
    """Reading stopped at a limit; the message is the problem reported to the model."""


@dataclass
class _Budget:
    scanned: int = 0
    items: int = 0
    repairs_left: int = REPAIR_BUDGET

    def scan(self, chars: int) -> None:
        self.scanned += chars
        if self.scanned > SCAN_BUDGET:
            raise _LimitError(
                f"the reply has too many unclosed or deeply nested calls and objects to be read "
                f"(over {SCAN_BUDGET} characters re-read); close every call, nest arguments "
                f"less deeply and write at most {MAX_CALLS} calls per reply"
            )

    def count(self, items: int = 1) -> None:
        self.items += items
        if self.items > MAX_CALLS:
            raise _LimitError(
                f"the reply holds more than {MAX_CALLS} tool calls or attempts; only the first "
                f"ones were read; write at most {MAX_CALLS} calls per reply"
            )


@dataclass(frozen=True)
class ParsedCall:
    """One tool call found in a reply."""

    name: str
    arguments: dict[str, Any] | str
    """An object, or the text ``(1, 2)`` of positional arguments."""
    raw: str
    """The text the call was read from."""


@dataclass(frozen=True)
class ParsedReply:
    """What a reply holds: calls of offered tools, the text around them, failed attempts."""

    calls: tuple[ParsedCall, ...]
    text: str
    """The reply without the calls and failed attempts, stripped (the whole reply when there
    are neither)."""
    problems: tuple[str, ...]
    """One sentence per part that looked like a call but could not be used."""


@dataclass(frozen=True)
class _Found:
    start: int
    end: int
    calls: tuple[ParsedCall, ...] = ()
    problems: tuple[str, ...] = ()


def parse_reply(text: str, tool_names: Collection[str]) -> ParsedReply:
    """Read the tool calls in `text`; only names in `tool_names` count as calls.

    Never raises: what cannot be read is text, or a problem when it clearly tried to be a call.
    """
    names = frozenset(n for n in tool_names if isinstance(n, str) and n)
    if not isinstance(text, str) or not names:
        return ParsedReply((), text if isinstance(text, str) else "", ())
    if len(text) > MAX_REPLY_CHARS:
        logger.warning("a reply of %d characters was not read for tool calls", len(text))
        if any(name in text for name in names):
            return ParsedReply(
                (),
                "",
                (
                    f"the reply is {len(text)} characters long, over the limit of "
                    f"{MAX_REPLY_CHARS} for a reply holding tool calls; write the calls in a "
                    "short reply of their own",
                ),
            )
        return ParsedReply((), text, ())
    try:
        found = _scan(text, names)
    except Exception as exc:
        # json-repair and ast are robust but not proven total; a parser bug must not cost the
        # answer, so the reply is then plain text.
        logger.warning("could not scan a reply for tool calls (%s); kept as text", exc)
        return ParsedReply((), text, ())
    found.sort(key=lambda f: f.start)
    calls = tuple(call for f in found for call in f.calls)
    problems = tuple(problem for f in found for problem in f.problems)
    if not found:
        return ParsedReply((), text, ())
    kept, position = [], 0
    for f in found:
        kept.append(text[position : f.start])
        position = max(position, f.end)
    kept.append(text[position:])
    rest = re.sub(r"\n{3,}", "\n\n", "".join(kept)).strip()
    return ParsedReply(calls, rest, problems)


# --- scanning ----------------------------------------------------------------------------------


def _scan(text: str, names: frozenset[str]) -> list[_Found]:
    found: list[_Found] = []
    budget = _Budget()
    token = _BUDGET.set(budget)
    try:
        _scan_into(found, text, names, budget)
    except _LimitError as exc:
        # A reply that names no offered tool holds no call to lose: it stays the answer.
        if any(name in text for name in names):
            found.append(_Found(len(text), len(text), problems=(str(exc),)))
    finally:
        _BUDGET.reset(token)
    return found


def _scan_into(found: list[_Found], text: str, names: frozenset[str], budget: _Budget) -> None:
    # The parts already read, as sorted disjoint [start, end) spans: checking a span is a
    # bisection, not a walk over every part (thousands of fenced blocks).
    starts: list[int] = []
    ends: list[int] = []

    def free(start: int, end: int) -> bool:
        index = bisect.bisect_left(starts, end) - 1
        return index < 0 or ends[index] <= start

    def take(start: int, end: int) -> None:
        low = bisect.bisect_left(ends, start)
        high = bisect.bisect_right(starts, end)
        if low < high:
            start, end = min(start, starts[low]), max(end, ends[high - 1])
        starts[low:high] = [start]
        ends[low:high] = [end]

    def add(item: _Found | None, *, block: bool = False) -> None:
        if item is None:
            return
        if item.calls or item.problems:
            room = MAX_CALLS - budget.items
            if len(item.calls) + len(item.problems) > room:
                calls = item.calls[:room]
                problems = item.problems[: max(0, room - len(calls))]
                found.append(_Found(item.start, item.end, calls, problems))
            else:
                found.append(item)
            budget.count(len(item.calls) + len(item.problems))
        if block or item.calls or item.problems:
            take(item.start, item.end)

    for opening, closing in _TAGS:
        for match in opening.finditer(text):
            if not free(match.start(), match.end()):
                continue
            close = closing.search(text, match.end())
            end = close.end() if close else len(text)
            inner = text[match.end() : close.start() if close else len(text)]
            add(_tagged(match.start(), end, inner, names, budget), block=True)
    for match in _FENCE.finditer(text):
        if not free(match.start(), match.end()):
            continue
        language = match.group(1).lower()
        if language in _CALL_LANGUAGES:
            add(
                _fenced(match.start(), match.end(), language, match.group(2), names, budget),
                block=True,
            )
        else:
            # Code in the answer (bash, sql...): nothing in it is a call, even a name(...) line.
            add(_Found(match.start(), match.end()), block=True)
    for match in _REACT.finditer(text):
        if free(match.start(), match.end()):
            add(_react(match, text, names))
    for item in _bare_json(text, names, free, budget):
        add(item)
    for item in _code_lines(text, 0, names, budget):
        if free(item.start, item.end):
            add(item)


def _tagged(start: int, end: int, inner: str, names: frozenset[str], budget: _Budget) -> _Found:
    body = inner.strip()
    fence = _FENCE.fullmatch(body)
    if fence:
        body = fence.group(2).strip()
    value = _load(body)
    if value is None:
        lines = list(_code_lines(body, 0, names, budget))
        if lines:
            return _Found(start, end, *_merge(lines))
        return _Found(start, end, problems=(_unreadable(body, "a tool-call tag"),))
    calls, problems = _classify(value, names, explicit=True, raw=inner)
    return _Found(start, end, calls, problems)


def _fenced(
    start: int, end: int, language: str, body: str, names: frozenset[str], budget: _Budget
) -> _Found:
    stripped = body.strip()
    if stripped.startswith(("{", "[")):
        value = _load(stripped)
        if value is None:
            if _CALL_KEY.search(stripped) and language not in ("python", "py"):
                return _Found(start, end, problems=(_unreadable(stripped, "a fenced block"),))
            return _Found(start, end)
        # A block that needed repair and uses a tool key was meant as a call: if it still
        # names no tool, the model should hear so.
        repaired = not _is_json(stripped) and bool(_CALL_KEY.search(stripped))
        explicit = repaired or language in ("tool", "tool_call", "tool_code", "action")
        calls, problems = _classify(value, names, explicit=explicit, raw=stripped)
        return _Found(start, end, calls, problems)
    lines = list(_code_lines(body, 0, names, budget))
    # The block is a call only when calls are all it holds (not a script that uses the name).
    position = 0
    for line in body.splitlines(keepends=True):
        content = line.strip()
        covered = any(item.start <= position < item.end for item in lines)
        position += len(line)
        if content and not content.startswith("#") and not covered:
            return _Found(start, end)
    return _Found(start, end, *_merge(lines))


def _react(match: re.Match[str], text: str, names: frozenset[str]) -> _Found | None:
    name = match.group(1)
    # Searched in place: a copy of the rest of the reply for each of thousands of Action
    # lines ("Action: finish" ones are skipped, not counted) was quadratic.
    stop = _REACT_END.search(text, match.end())
    end = stop.start() if stop else len(text)
    body = text[match.end() : end]
    if stop and _BLANK_TO_END.match(text, stop.end()):
        end = len(text)  # an empty "Observation:" left for the tool's result belongs to the call
    payload = body.strip().strip("`").strip()
    if payload.lower().startswith("json"):
        payload = payload[4:].strip()
    if name not in names:
        if name.lower() in {"finish", "final_answer", "finishaction", "none"}:
            return None
        return _Found(match.start(), end, problems=(_unknown(name, names),))
    if not payload:
        arguments: dict[str, Any] | str = {}
    else:
        value = _load(payload)
        if isinstance(value, dict):
            if not _finite(value):
                return _Found(match.start(), end, problems=(_not_finite(name),))
            arguments = value
        elif payload.startswith("("):
            arguments = payload
        else:
            return _Found(
                match.start(), end, problems=(_unreadable(payload, f"the Action Input of {name}"),)
            )
    return _Found(match.start(), end, (ParsedCall(name, arguments, text[match.start() : end]),))


def _bare_json(text: str, names: frozenset[str], free: Any, budget: _Budget) -> Iterator[_Found]:
    decoder = json.JSONDecoder()
    position = 0
    while True:
        start = _next_opening(text, position)
        if start < 0:
            return
        if not free(start, start + 1):
            position = start + 1
            continue
        try:
            value, end = decoder.raw_decode(text, start)
        except RecursionError:
            # The decoder went a recursion limit deep before giving up; thousands of such
            # openings ({"a":[ repeated) would each cost as much, so they draw on the budget.
            budget.scan(2 * sys.getrecursionlimit())
            value, end = None, start
        except ValueError:
            value, end = None, start
        if value is None:
            if text[start] == "{" and _CALL_KEY.match(text, start):
                end = _balanced_end(text, start, budget)
                segment = text[start:end]
                repaired = _repair(segment)
                if repaired is None:
                    yield _Found(start, end, problems=(_unreadable(segment, "a JSON tool call"),))
                else:
                    calls, problems = _classify(repaired, names, explicit=False, raw=segment)
                    yield _Found(start, end, calls, problems)
                position = max(end, start + 1)
            else:
                position = start + 1
            continue
        calls, problems = _classify(value, names, explicit=False, raw=text[start:end])
        if calls or problems:
            yield _Found(start, end, calls, problems)
            position = end
        else:
            # Not a call: look inside it (an answer may wrap a call object in another object).
            position = start + 1


def _next_opening(text: str, position: int) -> int:
    # One regex search: walking every "[" to the next "[{" on each call re-read the reply
    # once per opening (minutes for 60 KB of "[1] {} ").
    match = _OPENING.search(text, position)
    return match.start() if match else -1


def _balanced_end(text: str, start: int, budget: _Budget) -> int:
    """Where the object opened at `start` closes (or the end of its paragraph if never)."""
    close = _depth_zero(text, start, budget, "{[", "}]")
    if close >= 0:
        return close + 1
    paragraph = text.find("\n\n", start)
    return paragraph if paragraph >= 0 else len(text)


def _depth_zero(text: str, start: int, budget: _Budget, opening: str, closing: str) -> int:
    """Where the bracket at `start` is closed: the index of the first of the `closing`
    characters, outside quotes, that brings the depth back to zero; -1 if none does."""
    depth, quote, escaped = 0, "", False
    index = start
    for index in range(start, len(text)):
        char = text[index]
        if quote:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == quote:
                quote = ""
            continue
        if char in "\"'":
            quote = char
        elif char in opening:
            depth += 1
        elif char in closing:
            depth -= 1
            if depth == 0:
                budget.scan(index - start)
                return index
    budget.scan(index - start)
    return -1


# --- name(arguments) ---------------------------------------------------------------------------


def _code_lines(text: str, offset: int, names: frozenset[str], budget: _Budget) -> Iterator[_Found]:
    pattern = _call_pattern(names)
    for match in pattern.finditer(text):
        name = match.group(2)
        open_paren = match.end() - 1
        close = _closing_paren(text, open_paren, budget)
        line_end = text.find("\n", match.end())
        line_end = len(text) if line_end < 0 else line_end
        if close < 0:
            tail = text[open_paren:line_end]
            if not re.search(r"[A-Za-z]{3,}\s+[A-Za-z]{3,}\s+[A-Za-z]{3,}", tail):
                # Prose rarely opens a parenthesis it never closes; a truncated call does.
                end = offset + line_end
                problem = f"the call {_snip(text[match.start(1) : line_end])} is never closed"
                yield _Found(offset + match.start(), end, problems=(problem,))
            continue
        after = text[close + 1 : line_end]
        if not re.fullmatch(r"[\s`;.]*", after):
            continue  # prose that mentions the call, e.g. "use add(1, 2) to sum"
        source = text[match.start(2) : close + 1]
        raw = text[match.start() : close + 1 + len(after)]
        start, end = offset + match.start(), offset + close + 1 + len(after)
        arguments, trouble = _call_arguments(source, name)
        if trouble is not None:
            yield _Found(start, end, problems=(trouble,))
        else:
            yield _Found(start, end, (ParsedCall(name, arguments, raw.strip()),))


_PATTERNS: dict[frozenset[str], re.Pattern[str]] = {}


def _call_pattern(names: frozenset[str]) -> re.Pattern[str]:
    pattern = _PATTERNS.get(names)
    if pattern is None:
        alternatives = "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))
        pattern = re.compile(rf"^([ \t]*`?)({alternatives})[ \t]*\(", re.M)
        if len(_PATTERNS) > 64:
            _PATTERNS.clear()
        _PATTERNS[names] = pattern
    return pattern


def _closing_paren(text: str, open_paren: int, budget: _Budget) -> int:
    close = _depth_zero(text, open_paren, budget, "([{", ")]}")
    return close if close >= 0 and text[close] == ")" else -1


_JSON_NAMES = {"true": True, "false": False, "null": None, "none": None}


def _literal(node: ast.expr) -> Any:
    """A literal's value; JSON's true/false/null are accepted as well as Python's."""
    if isinstance(node, ast.Name) and node.id.lower() in _JSON_NAMES:
        return _JSON_NAMES[node.id.lower()]
    if isinstance(node, ast.List):
        return [_literal(item) for item in node.elts]
    if isinstance(node, ast.Tuple):
        return [_literal(item) for item in node.elts]
    if isinstance(node, ast.Dict):
        if any(key is None for key in node.keys):
            raise ValueError("** in a dict")
        return {_literal(k): _literal(v) for k, v in zip(node.keys, node.values, strict=True)}  # type: ignore[arg-type]
    return ast.literal_eval(node)


def _call_arguments(source: str, name: str) -> tuple[dict[str, Any] | str, str | None]:
    try:
        tree = ast.parse(source.strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        # RecursionError and MemoryError: nesting too deep for the parser (thousands of "-"
        # or brackets); a problem for this call, not the loss of the reply's other calls.
        return {}, f"the call {_snip(source)} is not valid call syntax"
    call = tree.body
    if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Name):
        return {}, f"the call {_snip(source)} is not of the form {name}(...)"
    try:
        positional = [_literal(arg) for arg in call.args]
        keywords = {}
        for keyword in call.keywords:
            if keyword.arg is None:
                raise ValueError("**")
            keywords[keyword.arg] = _literal(keyword.value)
    except (ValueError, TypeError, SyntaxError, RecursionError):
        return {}, (
            f"the arguments of {_snip(source)} must be literal values (strings, numbers, "
            "true/false/null, lists, objects), not expressions or variables"
        )
    if not _finite(positional) or not _finite(keywords):
        return {}, _not_finite(name)
    if not positional:
        return keywords, None
    if keywords:
        # A mixed call goes on as written; the tools layer maps it or says what it expected.
        return source[source.index("(") :].strip(), None
    try:
        text = "(" + ", ".join(json.dumps(v, ensure_ascii=False) for v in positional)
    except (TypeError, ValueError):
        return {}, f"the arguments of {_snip(source)} cannot be written as JSON values"
    return text + ("," if len(positional) == 1 else "") + ")", None


# --- JSON values -> calls ------------------------------------------------------------------------


def _classify(
    value: Any, names: frozenset[str], *, explicit: bool, raw: str
) -> tuple[tuple[ParsedCall, ...], tuple[str, ...]]:
    calls: list[ParsedCall] = []
    problems: list[str] = []
    if isinstance(value, list):
        shaped = [item for item in value if isinstance(item, dict) and _name_of(item)[0]]
        if not shaped and not explicit:
            return (), ()
        # Members of a bare list are attempts only by their own shape (a list of people with
        # "name" keys is data); inside tags or a tool_calls list every member must be a call.
        offered = explicit or any(_name_of(item)[0] in names for item in shaped)
        for item in value:
            c, p = _classify_one(item, names, explicit=explicit and offered, raw=raw)
            calls += c
            problems += p
        return tuple(calls), tuple(problems)
    return _classify_one(value, names, explicit=explicit, raw=raw)


def _classify_one(
    value: Any, names: frozenset[str], *, explicit: bool, raw: str
) -> tuple[tuple[ParsedCall, ...], tuple[str, ...]]:
    if isinstance(value, dict):
        for key in _LIST_KEYS:
            inner = value.get(key)
            if isinstance(inner, list) and inner:
                return _classify(inner, names, explicit=True, raw=raw)
    if not isinstance(value, dict):
        if explicit:
            return (), (_unreadable(raw, "a tool call"),)
        return (), ()
    name, name_key, nested = _name_of(value)
    if name is None:
        if explicit:
            return (), (
                f"{_snip(raw)} names no tool: expected "
                '{"tool": "<tool name>", "arguments": {...}}',
            )
        return (), ()
    source = nested if nested is not None else value
    argument_key = next((k for k in _ARGUMENT_KEYS if k in source), None)
    attempt = explicit or name_key in _EXPLICIT_NAME_KEYS or argument_key is not None
    if name not in names:
        return ((), (_unknown(name, names),)) if attempt else ((), ())
    if argument_key is None:
        arguments: Any = {k: v for k, v in source.items() if k != name_key}
    else:
        arguments = source[argument_key]
    parsed = _arguments(arguments)
    if parsed is not None and not _finite(parsed):
        return (), (_not_finite(name),)
    if parsed is None:
        return (), (
            f"the arguments of {name} must be a JSON object of parameter values, got "
            f"{_snip(json.dumps(arguments, ensure_ascii=False, default=str))}",
        )
    return (ParsedCall(name, parsed, raw.strip()),), ()


def _name_of(value: dict[str, Any]) -> tuple[str | None, str, dict[str, Any] | None]:
    """The tool name, the key it was under, and the nested object holding it (OpenAI shape)."""
    for key in _NAME_KEYS:
        candidate = value.get(key)
        if isinstance(candidate, str) and candidate.strip():
            return candidate.strip(), key, None
        if key == "function" and isinstance(candidate, dict):
            inner = candidate.get("name")
            if isinstance(inner, str) and inner.strip():
                return inner.strip(), "name", candidate
    return None, "", None


def _arguments(value: Any) -> dict[str, Any] | str | None:
    if value is None:
        return {}
    if isinstance(value, dict):
        return value
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return {}
        if text.startswith("("):
            return text
        loaded = _load(text)
        return loaded if isinstance(loaded, dict) else None
    return None


def _load(text: str) -> Any:
    """A JSON value from `text`, repaired if need be; None when nothing sensible comes out."""
    text = text.strip()
    if not text:
        return None
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        pass
    if not text.startswith(("{", "[")):
        return None
    return _repair(text)


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except (ValueError, RecursionError):
        return False
    return True


def _repair(text: str) -> Any:
    # json-repair's work grows with the square of some inputs ("{Action: x\n" repeated: 6 s
    # for 32 KB), so only short texts are repaired, and only so many characters per reply.
    budget = _BUDGET.get()
    if budget is None or len(text) > min(MAX_REPAIR_CHARS, budget.repairs_left):
        logger.debug("not repairing %d characters of JSON (limits reached)", len(text))
        return None
    budget.repairs_left -= len(text)
    try:
        value = json_repair.loads(text)
    except Exception:  # a third-party repair must never end the run
        logger.debug("json-repair failed on %.80r", text, exc_info=True)
        return None
    if isinstance(value, dict | list) and value:
        return value
    return None


def _finite(value: Any) -> bool:
    """Whether no float in `value` is infinite or NaN (walked without recursion)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return False
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return True


def _not_finite(name: str) -> str:
    return (
        f"the arguments of {name} hold a number JSON cannot carry (infinite or NaN, e.g. "
        "1e999999); write numbers within the range of a double"
    )


def _merge(items: list[_Found]) -> tuple[tuple[ParsedCall, ...], tuple[str, ...]]:
    return (
        tuple(call for item in items for call in item.calls),
        tuple(problem for item in items for problem in item.problems),
    )


def _unknown(name: str, names: frozenset[str]) -> str:
    # Snipped: the name is the model's text, and the problem goes back to it in a message.
    return f"{_snip(name)} is not a tool you can call; the tools are: {', '.join(sorted(names))}"


def _unreadable(text: str, where: str) -> str:
    return (
        f"{where} could not be read as a call: {_snip(text)} (expected "
        '{"tool": "<tool name>", "arguments": {...}} as valid JSON)'
    )


def _snip(text: str) -> str:
    text = " ".join(text.split())
    return repr(text if len(text) <= _SNIPPET else text[: _SNIPPET - 3] + "...")
