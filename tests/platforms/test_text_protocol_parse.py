"""The text tool protocol's parser: every call format, what stays text, what is a problem."""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bridge.platforms.openai_chat.text_parse import (
    MAX_CALLS,
    MAX_REPAIR_CHARS,
    MAX_REPLY_CHARS,
    SCAN_BUDGET,
    ParsedReply,
    parse_reply,
)

NAMES = frozenset({"get_weather", "add", "search"})


def calls(text: str) -> list[tuple[str, Any]]:
    reply = parse_reply(text, NAMES)
    assert reply.problems == (), reply.problems
    return [(call.name, call.arguments) for call in reply.calls]


PARIS = [("get_weather", {"city": "Paris"})]
ADD = [("add", {"a": 1, "b": 2})]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # fenced and bare JSON, with the key names each library writes
        ('```json\n{"tool": "get_weather", "arguments": {"city": "Paris"}}\n```', PARIS),
        ('{"tool": "get_weather", "arguments": {"city": "Paris"}}', PARIS),
        ('```\n{"name": "add", "parameters": {"a": 1, "b": 2}}\n```', ADD),  # Lagent
        ('{"function": "add", "arguments": {"a": 1, "b": 2}}', ADD),  # LionAGI
        ('{"name": "add", "args": {"a": 1, "b": 2}}', ADD),
        ('{"action": "get_weather", "action_input": {"city": "Paris"}}', PARIS),
        ('{"tool": "get_weather", "arguments": "{\\"city\\": \\"Paris\\"}"}', PARIS),
        ('{"request": "get_weather", "city": "Paris"}', PARIS),  # Langroid
        ('{"action_requests": [{"function": "add", "arguments": {"a": 1, "b": 2}}]}', ADD),
        (
            '{"tool_calls": [{"type": "function", "function": '
            '{"name": "add", "arguments": "{\\"a\\": 1, \\"b\\": 2}"}}]}',
            ADD,
        ),
        # tags
        (
            '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
            PARIS,
        ),
        ('<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}', PARIS),  # unclosed
        (
            '<|action_start|><|plugin|>\n{"name": "add", "parameters": {"a": 1, "b": 2}}'
            "<|action_end|>",
            ADD,
        ),
        # ReAct
        ('Thought: weather\nAction: get_weather\nAction Input: {"city": "Paris"}', PARIS),
        # name(arguments)
        ('get_weather(city="Paris")', PARIS),
        ("`get_weather(city='Paris')`", PARIS),
        ("```python\nget_weather(city='Paris')\n```", PARIS),
        ("add(1, 2)", [("add", "(1, 2)")]),
        ('search("x")', [("search", '("x",)')]),
        ('search("q", limit=3)', [("search", '("q", limit=3)')]),
        (
            "get_weather(city='Paris', unit=null, days=None)",
            [("get_weather", {"city": "Paris", "unit": None, "days": None})],
        ),
        ("add()", [("add", {})]),
        # small JSON mistakes are repaired
        ('{"tool": "add", "arguments": {"a": 1, "b": 2}', ADD),
        ("{'tool': 'add', 'arguments': {'a': 1, 'b': 2,},}", ADD),
        ('```json\n{"tool": "add", "arguments": {"a": 1, "b": 2,}}\n```', ADD),
    ],
)
def test_every_format_is_read(text: str, expected: list[tuple[str, Any]]) -> None:
    assert calls(text) == expected


def test_several_calls_in_one_reply_keep_their_order() -> None:
    text = (
        "I will look both up.\n"
        '```json\n{"tool": "get_weather", "arguments": {"city": "Paris"}}\n```\n'
        '<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>\n'
        'search(query="x")\n'
        '[{"tool": "add", "arguments": {"a": 3, "b": 4}}, {"tool": "search", "arguments": {}}]'
    )
    reply = parse_reply(text, NAMES)
    assert [(c.name, c.arguments) for c in reply.calls] == [
        ("get_weather", {"city": "Paris"}),
        ("add", {"a": 1, "b": 2}),
        ("search", {"query": "x"}),
        ("add", {"a": 3, "b": 4}),
        ("search", {}),
    ]
    assert reply.text == "I will look both up."
    assert reply.problems == ()


def test_react_keeps_the_thought_and_drops_the_empty_observation() -> None:
    text = 'Thought: I need the weather.\nAction: get_weather\nAction Input: {"city": "Oslo"}\n'
    reply = parse_reply(text + "Observation:", NAMES)
    assert [(c.name, c.arguments) for c in reply.calls] == [("get_weather", {"city": "Oslo"})]
    assert reply.text == "Thought: I need the weather."


def test_text_around_calls_is_kept() -> None:
    reply = parse_reply('Let me check.\n\nget_weather(city="Oslo")\n\nOne moment.', NAMES)
    assert [c.name for c in reply.calls] == ["get_weather"]
    assert reply.text == "Let me check.\n\nOne moment."
    assert reply.calls[0].raw == 'get_weather(city="Oslo")'


@pytest.mark.parametrize(
    "text",
    [
        "The weather in Paris is sunny.",
        'Here is the data: {"name": "Ada", "age": 36}',
        '```json\n{"city": "Paris", "temperature": 21}\n```',
        '[{"name": "Ada"}, {"name": "Bob"}]',
        "You can use add(1, 2) to sum two numbers.",
        "```bash\nadd(1, 2)\n```",
        "```python\nx = 3\nadd(x, 2)\n```",
        '{"request": "a refund", "reason": "broken"}',
        "Action: Finish\nAction Input: done",
        "multiply(2, 3)",
        "",
    ],
)
def test_answers_stay_text(text: str) -> None:
    reply = parse_reply(text, NAMES)
    assert reply.calls == ()
    assert reply.problems == ()
    assert reply.text == text


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ('{"tool": "get_wether", "arguments": {"city": "Paris"}}', "'get_wether' is not a tool"),
        ('{"name": "weather", "arguments": {"city": "Paris"}}', "the tools are: add, get_weather"),
        ("<tool_call>let me think</tool_call>", "a tool-call tag could not be read"),
        ('<tool_call>{"arguments": {"a": 1}}</tool_call>', "names no tool"),
        ("add(1, 2", "is never closed"),
        ("add(a=x)", "must be literal values"),
        ("add(**kw)", "must be literal values"),
        ('{"tool": "add", "arguments": [1, 2]}', "must be a JSON object"),
        ("Action: weather\nAction Input: {}", "'weather' is not a tool"),
        ("Action: add\nAction Input: one and two", "Action Input of add"),
        ('```json\n{"tool": }}}\n```', "names no tool"),
    ],
)
def test_failed_attempts_are_problems(text: str, needle: str) -> None:
    reply = parse_reply(text, NAMES)
    assert reply.calls == ()
    assert len(reply.problems) == 1
    assert needle in reply.problems[0]


def test_a_good_call_and_a_bad_one() -> None:
    reply = parse_reply(
        '{"tool": "add", "arguments": {"a": 1, "b": 2}}\n\n{"tool": "nope", "arguments": {}}', NAMES
    )
    assert [c.name for c in reply.calls] == ["add"]
    assert reply.problems == (
        "'nope' is not a tool you can call; the tools are: add, get_weather, search",
    )


def test_without_offered_tools_nothing_is_a_call() -> None:
    text = '{"tool": "add", "arguments": {"a": 1}}'
    assert parse_reply(text, ()) == parse_reply(text, frozenset())
    assert parse_reply(text, ()).calls == ()
    assert parse_reply(text, ()).text == text


# --- properties ----------------------------------------------------------------------------------

FRAGMENTS = st.sampled_from(
    [
        "{",
        "}",
        "[",
        "]",
        "(",
        ")",
        '"',
        "'",
        "\n",
        "```",
        "```json\n",
        "<tool_call>",
        "</tool_call>",
        "<|action_start|><|plugin|>",
        "Action: ",
        "Action Input: ",
        '"tool": ',
        '"name": ',
        '"request": ',
        '"arguments": ',
        "add",
        "get_weather",
        "other",
        "add(",
        "1, 2",
        "city=",
        ": ",
        ", ",
        "\\",
        "null",
    ]
)
TEXTS = st.one_of(st.text(max_size=300), st.lists(FRAGMENTS, max_size=40).map("".join))


@settings(max_examples=300, deadline=None)
@given(text=TEXTS, names=st.sets(st.sampled_from(["add", "get_weather", "x", "a.b"]), max_size=3))
def test_any_text_never_raises_and_only_offered_names_are_called(
    text: str, names: set[str]
) -> None:
    reply = parse_reply(text, names)
    assert all(call.name in names for call in reply.calls)
    assert all(isinstance(call.arguments, dict | str) for call in reply.calls)
    assert all(isinstance(problem, str) and problem for problem in reply.problems)
    if not reply.calls and not reply.problems:
        assert reply.text == text


@settings(max_examples=150, deadline=None)
@given(
    arguments=st.dictionaries(
        st.text(alphabet="abcdefghij_", min_size=1, max_size=8),
        st.one_of(st.integers(), st.text(max_size=20), st.booleans(), st.none()),
        max_size=4,
    ),
    before=st.sampled_from(["", "Sure.\n", "Let me check.\n\n"]),
    form=st.sampled_from(["fenced", "bare", "tag", "request"]),
)
def test_a_written_call_round_trips(arguments: dict[str, Any], before: str, form: str) -> None:
    if form == "request" and "request" in arguments:
        return
    call = {"tool": "add", "arguments": arguments}
    body = json.dumps(call)
    text = {
        "fenced": f"{before}```json\n{body}\n```",
        "bare": f"{before}{body}",
        "tag": f"{before}<tool_call>{json.dumps({'name': 'add', 'arguments': arguments})}"
        "</tool_call>",
        "request": f"{before}{json.dumps({'request': 'add', **arguments})}",
    }[form]
    reply = parse_reply(text, {"add"})
    assert [(c.name, c.arguments) for c in reply.calls] == [("add", arguments)]
    assert reply.text == before.strip()


# --- hostile replies: the work is bounded, every limit is a problem the model can read ----------
# (A parser that re-read the rest of the reply for each opening took minutes on these; the
# tests assert the bounded behaviour, and the suite's timeout catches a return of the rescans.)

ONE_CALL = '```json\n{"tool": "add", "arguments": {"a": 1}}\n```\n'
CALL_UNITS = {
    "fenced": ONE_CALL,
    "tagged": '<tool_call>{"name": "add", "arguments": {}}</tool_call>\n',
    "bare": '{"tool": "add", "arguments": {}}\n',
    "code line": "add(1, 2)\n",
    "react": 'Action: add\nAction Input: {"a": 1}\nObservation:\n',
    "unclosed call": "add(\n",
    "unreadable call": '{"tool": "add\n\n',
}


@pytest.mark.parametrize("unit", CALL_UNITS.values(), ids=list(CALL_UNITS))
def test_past_max_calls_reading_stops_with_a_problem(unit: str) -> None:
    text = unit * (MAX_CALLS * 3)
    assert len(text) < MAX_REPLY_CHARS
    reply = parse_reply(text, NAMES)
    assert len(reply.calls) + len(reply.problems) <= MAX_CALLS + 1
    assert any(f"more than {MAX_CALLS} tool calls" in p or "re-read" in p for p in reply.problems)


def test_a_list_of_thousands_of_calls_keeps_the_first_max_calls() -> None:
    body = json.dumps([{"tool": "add", "arguments": {"a": i}} for i in range(3000)])
    reply = parse_reply(f"```json\n{body}\n```", NAMES)
    assert [call.arguments for call in reply.calls] == [{"a": i} for i in range(MAX_CALLS)]
    assert len(reply.problems) == 1 and f"at most {MAX_CALLS} calls" in reply.problems[0]


def test_a_reply_over_the_size_limit_is_not_read() -> None:
    padding = "x" * MAX_REPLY_CHARS
    reply = parse_reply(ONE_CALL + padding, NAMES)
    assert reply.calls == ()
    assert len(reply.problems) == 1 and f"limit of {MAX_REPLY_CHARS}" in reply.problems[0]
    # Without an offered name there is no call to miss: a long answer stays the answer.
    assert parse_reply(padding + "{}", NAMES) == ParsedReply((), padding + "{}", ())


@pytest.mark.parametrize(
    "text",
    [
        "[1] {} " * 30_000,  # many "[" with no "[{": each opening rescanned the rest
        "```bash\nls\n```\n" * 10_000,  # thousands of blocks: each checked against all
        "add(see the three words here\n" * 8_000,  # unclosed prose, each scanned to the end
        '{"a":[' * 40_000,  # each opening decoded to the recursion limit
        "```" * 80_000,  # each fence opening read the line to its end for a newline
        "Action: finish\nAction Input: x\nObservation: y\n" * 5_000,  # rest copied each time
    ],
    ids=["brackets", "code blocks", "unclosed prose", "deep nesting", "fence marks", "react"],
)
def test_answers_of_hostile_shape_are_read_in_bounded_work(text: str) -> None:
    assert len(text) <= MAX_REPLY_CHARS
    reply = parse_reply(text, {"get_weather"})  # the text names no offered tool
    assert reply == ParsedReply((), text, ())


def test_many_unclosed_calls_end_with_the_scan_limit() -> None:
    reply = parse_reply("add(see the three words here\n" * 8_000, NAMES)
    assert reply.calls == ()
    assert len(reply.problems) == 1 and f"over {SCAN_BUDGET} characters" in reply.problems[0]


@pytest.mark.parametrize(
    "bad",
    [
        "add(" + "-" * 5_000 + "1)",  # deeper than the ast parser goes
        "add(" + "[" * 300 + "]" * 300 + ")",  # deeper than the tokenizer allows
        '<tool_call>{"name": "add", "arguments": ' + '{"a":' * 3_000 + "}</tool_call>",
    ],
    ids=["unary chain", "brackets", "json in tags"],
)
def test_a_too_deep_call_is_a_problem_and_other_calls_are_still_read(bad: str) -> None:
    reply = parse_reply(f"add(a=1)\n{bad}\n", NAMES)
    assert [(c.name, c.arguments) for c in reply.calls] == [("add", {"a": 1})]
    assert len(reply.problems) == 1


def test_a_call_inside_objects_nested_past_the_recursion_limit_is_still_found() -> None:
    def nested(depth: int) -> str:
        return '{"a":' * depth + '{"tool": "add", "arguments": {}}' + "}" * depth

    depth = sys.getrecursionlimit() + 500
    reply = parse_reply(nested(depth), NAMES)
    assert [(c.name, c.arguments) for c in reply.calls] == [("add", {})]
    # Far deeper, the decoding of each opening exhausts the budget: a problem, not minutes.
    reply = parse_reply(nested(depth * 5), NAMES)
    assert reply.calls == ()
    assert len(reply.problems) == 1 and f"over {SCAN_BUDGET} characters" in reply.problems[0]


@pytest.mark.parametrize(
    "text",
    [
        '{"tool": "add", "arguments": {"a": 1e999999}}',
        '```json\n{"tool": "add", "arguments": {"a": [NaN]}}\n```',
        '<tool_call>{"name": "add", "arguments": {"a": -Infinity}}</tool_call>',
        "add(1e999999)",
        "add(a=-1e999999)",
        'Action: add\nAction Input: {"a": NaN}',
    ],
)
def test_numbers_json_cannot_carry_are_a_problem(text: str) -> None:
    reply = parse_reply(text, NAMES)
    assert reply.calls == ()
    assert len(reply.problems) == 1 and "infinite or NaN" in reply.problems[0]


HOSTILE_UNITS = st.sampled_from(
    [
        *CALL_UNITS.values(),
        *["[1] ", "{", "[", "(", '"', "'", "```json\n", "```\n", "-", '{"a":[', "{Action: x\n"],
    ]
)


@settings(max_examples=60, deadline=None)
@given(units=st.lists(st.tuples(HOSTILE_UNITS, st.integers(1, 4_000)), min_size=1, max_size=4))
def test_repeated_hostile_fragments_give_bounded_results(units: list[tuple[str, int]]) -> None:
    text = "".join(unit * count for unit, count in units)
    reply = parse_reply(text, NAMES)
    assert len(reply.calls) + len(reply.problems) <= MAX_CALLS + 1
    assert all(call.name in NAMES and _finite_json(call.arguments) for call in reply.calls)
    if not reply.calls and not reply.problems:
        assert reply.text == text


def _finite_json(arguments: dict[str, Any] | str) -> bool:
    json.dumps(arguments, allow_nan=False)  # raises on infinity or NaN
    return True


def test_problems_quote_only_a_snippet_of_what_the_model_wrote() -> None:
    huge_name = "x" * 100_000
    text = f'{{"tool": "{huge_name}", "arguments": {{}}}}\n' * 2
    reply = parse_reply(text, NAMES)
    assert len(reply.problems) == 2
    assert all(len(problem) < 1_000 for problem in reply.problems)


def test_a_fence_opening_line_is_bounded() -> None:
    body = '{"tool": "add", "arguments": {"a": 1}}'
    assert calls(f"```json {'x' * 200}\n{body}\n```") == [("add", {"a": 1})]
    # Past 256 characters the line opens no block; the object is then read as bare JSON.
    reply = parse_reply(f"```json {'x' * 300}\n{body}\n```", NAMES)
    assert [(c.name, c.arguments, c.raw) for c in reply.calls] == [("add", {"a": 1}, body)]


def test_broken_json_is_repaired_only_up_to_a_size() -> None:
    def broken(size: int) -> str:  # a trailing comma: valid JSON but for it
        return '{"tool": "add", "arguments": {"text": "' + "x" * size + '",}}'

    short = parse_reply(broken(MAX_REPAIR_CHARS - 100), NAMES)
    assert [call.name for call in short.calls] == ["add"] and short.problems == ()
    long = parse_reply(broken(MAX_REPAIR_CHARS), NAMES)
    assert long.calls == ()
    assert len(long.problems) == 1 and "could not be read as a call" in long.problems[0]
    # Within the size, the repairs of one reply share a budget: broken JSON json-repair is
    # slow on ("{Action: x" repeated, quadratic) is read a few times, then is unreadable.
    reply = parse_reply("{Action: x\n" * 20_000, NAMES)
    assert reply.calls == () and 1 <= len(reply.problems) <= MAX_CALLS + 1
