"""`parse_chunk` reads an SSE event's data straight from its text when it can: whatever the
text, it gives the chunk, or the error, that `json.loads` then `model_validate` gives."""

from __future__ import annotations

import json
import math
from typing import Any

import pydantic
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bridge.errors import ProtocolError
from bridge.platforms._transport import Transport
from bridge.platforms.appbuilder._errors import CallContext
from bridge.platforms.appbuilder.models import RunResponse
from bridge.platforms.appbuilder.stream import parse_chunk

URL = "http://127.0.0.1:9/v2/app/conversation/runs"


@pytest.fixture(scope="module")
def ctx(transport: Transport) -> CallContext:
    return CallContext(operation="run", url=URL, transport=transport, sent_request_id="s")


def _reference(data: str) -> RunResponse:
    payload = json.loads(data)
    if not isinstance(payload, dict):
        raise ProtocolError("not an object")
    return RunResponse.model_validate(payload)


def _outcome(read: Any, data: str) -> Any:
    try:
        chunk = read(data)
    except (ValueError, ProtocolError) as exc:  # ValidationError is a ValueError
        return type(exc)
    # repr: NaN compares unequal to itself, its repr does not.
    return repr(chunk.model_dump()), repr(chunk.model_fields_set)


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(alphabet=st.characters(codec="utf-8"), max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=8,
)
field_values = json_values | st.sampled_from(["0", "1", "true", "", "running", "text", 0, 1])
events = st.fixed_dictionaries(
    {},
    optional={
        key: field_values
        for key in (
            "event_code",
            "event_message",
            "event_status",
            "content_type",
            "outputs",
            "usage",
            "tool_calls",
        )
    },
)
chunks = st.fixed_dictionaries(
    {},
    optional={
        "request_id": field_values,
        "answer": field_values,
        "message_id": field_values,
        "is_completion": field_values,
        "content": st.lists(events, max_size=3) | json_values,
        "code": field_values,
        "message": field_values,
        "http_request_id": field_values,
    },
)


@settings(max_examples=400, deadline=None)
@given(payload=chunks | json_values, mangle=st.sampled_from(["", "lone", "cut", "tab", "bom"]))
def test_the_text_reads_as_json_then_the_model_reads_it(
    ctx: CallContext, payload: Any, mangle: str
) -> None:
    data = json.dumps(payload, allow_nan=True)
    if mangle == "lone":  # a lone surrogate escape: json accepts it, pydantic's parser not
        data = data.replace('"', '"\\ud800', 1)
    elif mangle == "cut":
        data = data[: len(data) // 2]
    elif mangle == "tab":  # a raw control character inside a string: both refuse it
        data = data.replace('"', '"\t', 1)
    elif mangle == "bom":
        data = "\ufeff" + data
    assert _outcome(lambda d: parse_chunk(d, ctx), data) == _outcome(_reference, data)


def test_each_error_says_what_was_wrong(ctx: CallContext) -> None:
    with pytest.raises(ValueError, match="Expecting value"):  # json's own message
        parse_chunk("not json", ctx)
    with pytest.raises(ProtocolError, match="expected a JSON object in each SSE event, got list"):
        parse_chunk("[1, 2]", ctx)
    with pytest.raises(pydantic.ValidationError, match="content"):
        parse_chunk('{"content": 5}', ctx)
    chunk = parse_chunk('{"answer": "\\ud800"}', ctx)  # refused by pydantic's parser only
    assert chunk.answer == "\ud800"
    nan = parse_chunk('{"content": [{"outputs": {"n": NaN}}]}', ctx)
    assert math.isnan(nan.content[0].outputs["n"])
