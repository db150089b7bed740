"""A platform state exported as JSON text is journaled as that text when nothing in it is
masked, and exactly as masking it string by string gives otherwise."""

from __future__ import annotations

import json
import uuid
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from bridge.errors import redacts_nothing_in_json, register_secret
from bridge.journal import MemoryJournal
from bridge.journal.records import StateSnapshot, redacted_state, redacted_state_json

SECRET = f'sec"ret\\{uuid.uuid4().hex[:10]}\n'
"""Registered once: a secret JSON writes escaped (a quote, a backslash, a newline)."""
register_secret(SECRET)

_PIECES = st.sampled_from(
    [
        "plain",
        SECRET,
        SECRET[:-3],
        "ToKeN",
        "Authorization: Bearer abcdefghijkl",
        "bce-v3/ALTAK-xyz/abc",
        "apikey=0123456789ab",
        "Api-Key",
        "a\ud800b",
        "\U0001f600",
        "K",  # KELVIN SIGN: IGNORECASE matches it with "k"
        "to\u212aen",
        "\u017fecret",  # LONG S: IGNORECASE matches it with "s"
        '"',
        "\\",
    ]
)
_TEXT = st.lists(_PIECES, max_size=4).map("".join)
_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | _TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TEXT, inner, max_size=3),
    max_leaves=12,
)


def _snapshot(text: str) -> StateSnapshot:
    return StateSnapshot.from_json(text, platform_conversation_id="p", platform="openai")


def _slow(state: dict[str, Any]) -> str:
    return json.dumps(redacted_state(state), ensure_ascii=False, allow_nan=False)


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(_TEXT, _JSON, max_size=4))
def test_the_text_is_what_masking_string_by_string_writes(state: dict[str, Any]) -> None:
    text = json.dumps(state, ensure_ascii=False, allow_nan=False)
    assert redacted_state_json(_snapshot(text)) == _slow(json.loads(text))


def test_an_exported_state_with_nothing_to_mask_is_journaled_as_its_text() -> None:
    text = json.dumps({"id": "resp_1", "tools": [{"name": "get_weather"}]}, ensure_ascii=False)
    assert redacts_nothing_in_json(text)
    assert redacted_state_json(_snapshot(text)) is text


def test_a_secret_registered_after_the_export_is_masked() -> None:
    secret = f"later-{uuid.uuid4().hex[:12]}"
    snapshot = _snapshot(json.dumps({"chain": [f"id {secret}"]}))
    journal = MemoryJournal()
    journal.save_platform_state("conv", snapshot)
    register_secret(secret)
    journal.save_platform_state("conv", snapshot)
    record = journal.platform_state("conv", "p")
    assert record is not None and record.state == {"chain": ["id [secure]"]}


def test_each_read_of_a_memory_journal_state_is_its_own_copy() -> None:
    journal = MemoryJournal()
    journal.save_platform_state("conv", _snapshot('{"items": [{"a": 1}]}'))
    first = journal.platform_state("conv", "p")
    assert first is not None
    first.state["items"][0]["a"] = 2
    again = journal.platform_state("conv", "p")
    assert again is not None and again.state == {"items": [{"a": 1}]}


def test_a_snapshot_read_from_json_is_the_record_validation_builds() -> None:
    text = '{"id": "resp_1", "items": [{"a": 1.5}], "pending": null}'
    made = _snapshot(text)
    validated = StateSnapshot(
        platform_conversation_id="p", platform="openai", state=json.loads(text), writer=""
    )
    assert made.model_dump() == validated.model_dump()
    assert made.model_fields_set == validated.model_fields_set
    assert made == StateSnapshot.from_json(text, platform_conversation_id="p", platform="openai")
