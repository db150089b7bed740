"""The pure Chat Completions wire helpers: fragment assembly, error shapes, usage sums."""

from __future__ import annotations

from typing import Any

import pytest

from bridge.errors import ProtocolError
from bridge.platforms._openai import add_usage, decode_object, error_details
from bridge.platforms.openai_chat.models import Completion, ToolCallAssembler
from bridge.types import Other, TextDelta


def _assemble(*fragments: dict[str, Any]) -> list[tuple[str, str, str]]:
    assembler = ToolCallAssembler()
    for fragment in fragments:
        assembler.add(fragment)
    return [(c.call_id, c.name, str(c.arguments)) for c in assembler.finish()]


def test_interleaved_fragments_by_index() -> None:
    assert _assemble(
        {"index": 0, "id": "a", "function": {"name": "f", "arguments": ""}},
        {"index": 1, "id": "b", "function": {"name": "g", "arguments": "{"}},
        {"index": 0, "function": {"arguments": '{"x": 1'}},
        {"index": 1, "function": {"arguments": "}"}},
        {"index": 0, "function": {"arguments": "}"}},
    ) == [("a", "f", '{"x": 1}'), ("b", "g", "{}")]


def test_repeated_id_and_name_on_every_fragment_do_not_duplicate() -> None:
    assert _assemble(
        {"index": 0, "id": "a", "function": {"name": "f", "arguments": '{"x"'}},
        {"index": 0, "id": "a", "function": {"name": "f", "arguments": ": 2}"}},
    ) == [("a", "f", '{"x": 2}')]


def test_id_arriving_after_the_first_fragment_is_kept() -> None:
    assert _assemble(
        {"index": 0, "function": {"name": "f", "arguments": "{"}},
        {"index": 0, "id": "late", "function": {"arguments": "}"}},
    ) == [("late", "f", "{}")]


def test_no_index_continues_the_last_call_until_a_new_id() -> None:
    assert _assemble(
        {"id": "a", "function": {"name": "f", "arguments": "[1,"}},
        {"function": {"arguments": "2]"}},
        {"id": "b", "function": {"name": "f", "arguments": "[3]"}},
        {"id": "b", "function": {"arguments": ""}},
    ) == [("a", "f", "[1,2]"), ("b", "f", "[3]")]


def test_no_index_no_id_a_second_name_starts_a_new_call() -> None:
    calls = _assemble(
        {"function": {"name": "f", "arguments": "{}"}},
        {"function": {"name": "f", "arguments": '{"y": 1}'}},
    )
    assert [(name, args) for _, name, args in calls] == [("f", "{}"), ("f", '{"y": 1}')]
    assert calls[0][0] != calls[1][0]


def test_index_null_and_boolean_index_count_as_missing() -> None:
    assert _assemble(
        {"index": None, "id": "a", "function": {"name": "f", "arguments": "{"}},
        {"index": True, "function": {"arguments": "}"}},
    ) == [("a", "f", "{}")]


def test_object_arguments_become_a_json_string() -> None:
    assert _assemble(
        {"index": 0, "id": "a", "function": {"name": "f", "arguments": {"q": "é"}}}
    ) == [("a", "f", '{"q": "é"}')]


def test_missing_arguments_and_name_are_empty_strings() -> None:
    assert _assemble({"index": 0, "id": "a"}) == [("a", "", "")]


def test_fragment_that_is_not_an_object() -> None:
    with pytest.raises(ProtocolError, match="a tool_calls entry is not an object: 'x'"):
        ToolCallAssembler().add("x")


def test_finish_keeps_made_up_ids_stable() -> None:
    assembler = ToolCallAssembler()
    assembler.add({"function": {"name": "f"}})
    assert assembler
    first = assembler.finish()
    assert first == assembler.finish()
    assert first[0].call_id.startswith("call_")
    assert not ToolCallAssembler()


def test_completion_follows_only_the_first_choice() -> None:
    completion = Completion()
    events = completion.absorb(
        {
            "id": "c",
            "choices": [
                {"index": 1, "delta": {"content": "other choice"}},
                {"index": 0, "delta": {"content": "Hi", "reasoning": "think"}},
            ],
        },
        key="delta",
    )
    assert events == [TextDelta(text="Hi"), Other(raw={"reasoning": "think"})]
    assert completion.text == ["Hi"] and completion.completion_id == "c"
    assert completion.finish_reason is None


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        ({"error": {"message": "m", "type": "t", "code": "c"}}, ("c", "m")),
        ({"error": {"message": "m", "type": "t", "code": None}}, ("t", "m")),
        ({"error": {"message": "m", "code": 500}}, ("500", "m")),
        ({"error": "plain"}, ("error", "plain")),
        (
            {"object": "error", "message": "flat", "type": "BadRequest", "code": 400},
            ("400", "flat"),
        ),
        ({"error": {"detail": "x"}}, ("error", '{"detail": "x"}')),
        ({"choices": []}, None),
        ({"error": None, "choices": []}, None),
        ([1], None),
    ],
)
def test_error_details_shapes(payload: Any, expected: tuple[str, str] | None) -> None:
    assert error_details(payload) == expected


def test_decode_object_errors() -> None:
    assert decode_object(b'{"a": 1}', None, what="x") == {"a": 1}
    with pytest.raises(ProtocolError, match="the body is not valid JSON") as info:
        decode_object("nope", "req", what="the body")
    assert info.value.request_id == "req" and info.value.body == "nope"
    with pytest.raises(ProtocolError, match="the body is a JSON str, expected an object"):
        decode_object('"text"', None, what="the body")


def test_add_usage_sums_integers_and_keeps_the_rest() -> None:
    assert add_usage(None, None) is None
    first = {"prompt_tokens": 3, "total_tokens": 5, "details": {"cached": 1}}
    assert add_usage(None, first) == first
    assert add_usage(first, None) is first
    assert add_usage(first, {"prompt_tokens": 4, "total_tokens": 6, "details": {"cached": 2}}) == {
        "prompt_tokens": 7,
        "total_tokens": 11,
        "details": {"cached": 2},
    }
