"""Contract (b): the optional `export_state`/`import_state` adapter methods and their helpers."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from bridge.errors import UsageError
from bridge.platforms.base import (
    export_state_of,
    exports_state,
    import_state_into,
    state_field,
)


class _Stateful:
    name = "stateful"

    def __init__(self, exported: Any = None) -> None:
        self.exported = exported
        self.imported: dict[str, Mapping[str, Any]] = {}

    def export_state(self, conversation_id: str) -> Any:
        return self.exported

    def import_state(self, conversation_id: str, state: Mapping[str, Any]) -> None:
        self.imported[conversation_id] = state


class _ExportOnly:
    name = "half"

    def export_state(self, conversation_id: str) -> dict[str, Any]:
        return {"x": 1}


def test_an_adapter_takes_part_only_with_both_methods() -> None:
    assert exports_state(_Stateful())
    assert not exports_state(_ExportOnly())
    assert not exports_state(object())
    assert export_state_of(_ExportOnly(), "c1") is None
    assert import_state_into(object(), "c1", {"x": 1}) is False


def test_exported_state_is_a_detached_json_copy() -> None:
    inner = {"messages": [{"role": "user", "content": "hi"}]}
    platform = _Stateful(inner)
    state = export_state_of(platform, "c1")
    assert state == inner
    assert state is not inner
    assert state is not None
    state["messages"].append({"role": "assistant"})
    assert len(inner["messages"]) == 1


def test_none_means_the_id_alone_is_enough() -> None:
    assert export_state_of(_Stateful(None), "c1") is None


@pytest.mark.parametrize(
    ("exported", "expected"),
    [
        (["not", "a", "dict"], "returned list; expected a dict of JSON values or None"),
        ({"when": object()}, "is not JSON-serialisable"),
        ({"x": float("nan")}, "is not JSON-serialisable"),
    ],
)
def test_an_export_that_cannot_be_journaled_is_refused_clearly(
    exported: Any, expected: str
) -> None:
    with pytest.raises(UsageError, match=expected) as info:
        export_state_of(_Stateful(exported), "c1")
    assert "stateful platform's export_state('c1')" in str(info.value)


def test_import_gives_the_adapter_the_state() -> None:
    platform = _Stateful()
    assert import_state_into(platform, "c1", {"chat_id": "42"}) is True
    assert platform.imported == {"c1": {"chat_id": "42"}}


def test_import_refuses_a_state_that_is_not_a_dict() -> None:
    with pytest.raises(UsageError, match="is list; expected the dict export_state returned"):
        import_state_into(_Stateful(), "c1", ["x"])  # type: ignore[arg-type]


def test_state_field_reads_and_checks_a_field() -> None:
    state = {"chat_id": "42", "count": 3, "flag": True}
    assert state_field(state, "chat_id", str, platform="coze") == "42"
    assert state_field(state, "count", int, platform="coze") == 3
    assert state_field(state, "flag", bool, platform="coze") is True
    assert state_field(state, "absent", str, platform="coze", default=None) is None


def test_state_field_says_what_is_missing_and_what_it_has() -> None:
    with pytest.raises(
        UsageError, match=r"coze platform's saved state has no 'chat_id' \(it has: x"
    ):
        state_field({"x": 1}, "chat_id", str, platform="coze")


def test_state_field_says_which_type_was_expected() -> None:
    with pytest.raises(UsageError, match="'messages' of type str; expected list"):
        state_field({"messages": "hi"}, "messages", list, platform="openai")
    # A bool is not an int here, although Python says it is.
    with pytest.raises(UsageError, match="'count' of type bool; expected int"):
        state_field({"count": True}, "count", int, platform="openai")


def test_appbuilder_needs_only_the_conversation_id() -> None:
    from bridge.platforms.appbuilder import AppBuilderPlatform

    platform = AppBuilderPlatform(
        app_id="app-0123", token="tok-0123456789", base_url="http://127.0.0.1:9"
    )
    try:
        assert exports_state(platform)
        assert export_state_of(platform, "c1") is None
        platform.import_state("c1", {})
        with pytest.raises(UsageError, match=r"saved state \['chat_id'\]: AppBuilder keeps"):
            platform.import_state("c1", {"chat_id": "x"})
    finally:
        platform.close()
