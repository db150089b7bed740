"""The Responses adapter against a hostile or broken server: answers without bound (an endless
event, an endless body, arguments that never stop growing), bytes that are not UTF-8, HTML
where JSON belongs, an error echoing the key. Each must end in a clear `PlatformError`, with
memory bounded and no secret in the message, body or logs.

The bounds are lowered for the tests (they are read at each call), so that a few hundred
kilobytes over loopback stand for the hundreds of megabytes a real server could send.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from openai_fakes import FAST_RETRIES
from responses_fakes import Reply, ResponsesServer, call_item, events, response, stream_reply

from bridge.errors import AuthenticationError, PlatformError, ProtocolError, StreamLimitError
from bridge.platforms import _body, _sse
from bridge.platforms.openai_responses import OpenAIResponsesPlatform
from bridge.types import ToolCallsRequested

KEY = "sk-hostile-0123456789abcdef"
LIMIT = 64 * 1024
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {}}}


@pytest.fixture(autouse=True)
def _small_bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_sse, "MAX_EVENT_BYTES", LIMIT)
    monkeypatch.setattr(_body, "MAX_BODY_BYTES", LIMIT)


@pytest.fixture(scope="module")
def module_server() -> Iterator[ResponsesServer]:
    with ResponsesServer().running() as server:
        yield server


@pytest.fixture
def server(module_server: ResponsesServer) -> ResponsesServer:
    module_server.script()
    return module_server


@pytest.fixture
def platform(server: ResponsesServer) -> Iterator[OpenAIResponsesPlatform]:
    with OpenAIResponsesPlatform(server.base_url, "m", KEY, retry_policy=FAST_RETRIES) as p:
        yield p


def ask(platform: OpenAIResponsesPlatform, *, stream: bool = True) -> list[Any]:
    conversation = platform.create_conversation()
    return list(platform.start(conversation, "Weather?", tools=[WEATHER], stream=stream))


def test_an_event_that_never_ends_is_refused_at_the_bound(
    server: ResponsesServer, platform: OpenAIResponsesPlatform
) -> None:
    # One `data:` line without a newline, 16 times the bound: read no further than the bound.
    endless = [b'data: {"type": "response.output_text.delta", "delta": "']
    endless += [b"x" * 16384] * 64
    server.script(Reply(stream=endless))
    with pytest.raises(ProtocolError, match="event larger than 65536 bytes"):
        ask(platform)


def test_the_error_of_an_endless_event_says_what_to_expect(
    server: ResponsesServer, platform: OpenAIResponsesPlatform
) -> None:
    server.script(Reply(stream=[b"data: " + b"y" * (2 * LIMIT)]))
    with pytest.raises(ProtocolError) as caught:
        ask(platform)
    message = str(caught.value)
    assert server.base_url in message and "blank line" in message, message


@pytest.mark.parametrize("stream", [True, False])
def test_a_body_larger_than_the_bound_is_refused(
    server: ResponsesServer, platform: OpenAIResponsesPlatform, stream: bool
) -> None:
    # A streamed request answered with JSON is read as a body too (the same bound).
    huge = response(call_item(1, arguments=json.dumps({"city": "x" * (2 * LIMIT)})))
    server.script(Reply(json=huge))
    with pytest.raises(ProtocolError, match="is larger than") as caught:
        ask(platform, stream=stream)
    assert "expected a JSON body" in str(caught.value)


def test_a_body_under_the_bound_is_read_whole(
    server: ResponsesServer, platform: OpenAIResponsesPlatform
) -> None:
    server.script(Reply(json=response(call_item(1, arguments=json.dumps({"city": "x" * 1000})))))
    got = ask(platform, stream=False)
    assert isinstance(got[-1], ToolCallsRequested)
    assert got[-1].batch.calls[0].arguments_dict() == {"city": "x" * 1000}


def test_arguments_that_grow_without_end_are_refused(server: ResponsesServer) -> None:
    # Every delta is a small event; their sum passes the bound and the call never ends.
    head = events(response(call_item(1, arguments="{}")))[:3]  # created, in_progress, added
    deltas = [
        {
            "type": "response.function_call_arguments.delta",
            "output_index": 0,
            "item_id": "fc_1",
            "delta": "z" * 4096,
            "sequence_number": n,
        }
        for n in range(3, 3 + 2 * LIMIT // 4096)
    ]
    server.script(stream_reply([*head, *deltas]))
    bounded = OpenAIResponsesPlatform(
        server.base_url, "m", KEY, retry_policy=FAST_RETRIES, max_arguments_chars=LIMIT
    )
    with bounded, pytest.raises(StreamLimitError, match="tool-call arguments past 65536"):
        ask(bounded)


def test_bytes_that_are_not_utf8_are_a_protocol_error(
    server: ResponsesServer, platform: OpenAIResponsesPlatform
) -> None:
    server.script(Reply(stream=[b'data: {"type": "response.created", "x": "\xff\xfe"}\n\n']))
    with pytest.raises(ProtocolError, match="not UTF-8"):
        ask(platform)


@pytest.mark.parametrize("stream", [True, False])
def test_html_with_http_200_is_a_protocol_error(
    server: ResponsesServer, platform: OpenAIResponsesPlatform, stream: bool
) -> None:
    page = b"<html><body>Gateway login</body></html>"
    server.script(Reply(body=page, media_type="text/html"))
    with pytest.raises(ProtocolError):
        ask(platform, stream=stream)


@pytest.mark.parametrize("status", [200, 401])
def test_an_error_echoing_the_key_is_redacted(
    server: ResponsesServer,
    platform: OpenAIResponsesPlatform,
    caplog: pytest.LogCaptureFixture,
    status: int,
) -> None:
    echo = {"error": {"message": f"Incorrect API key provided: Bearer {KEY}", "code": "bad"}}
    server.script(Reply(json=echo, status=status))
    caplog.set_level(logging.DEBUG)
    with pytest.raises(PlatformError) as caught:
        ask(platform, stream=False)
    if status == 401:
        assert isinstance(caught.value, AuthenticationError)
    error = caught.value
    assert KEY not in str(error) and KEY not in (error.body or "") and KEY not in repr(error)
    assert KEY not in caplog.text


def test_a_call_id_given_twice_in_one_response_is_run_twice(
    server: ResponsesServer, platform: OpenAIResponsesPlatform
) -> None:
    twin = {**call_item(2, arguments='{"city": "Oslo"}'), "call_id": "call_1"}
    server.script(Reply(json=response(call_item(1), twin)))
    got = ask(platform, stream=False)
    assert isinstance(got[-1], ToolCallsRequested)
    ids = [c.call_id for c in got[-1].batch.calls]
    assert ids[0] == "call_1" and len(set(ids)) == 2, ids


DEEP = "[" * 20_000 + "]" * 20_000
"""Valid JSON nested deeper than Python's parser can follow (it raises RecursionError)."""


@pytest.mark.parametrize("stream", [True, False])
def test_json_nested_too_deeply_is_a_protocol_error(
    server: ResponsesServer, platform: OpenAIResponsesPlatform, stream: bool
) -> None:
    body = ('{"object": "response", "output": ' + DEEP + "}").encode()
    if stream:
        server.script(Reply(stream=[b"data: " + body + b"\n\n"]))
    else:
        server.script(Reply(body=body))
    with pytest.raises(ProtocolError, match="nested too deeply"):
        ask(platform, stream=stream)


def test_two_items_at_one_output_index_are_refused(
    server: ResponsesServer, platform: OpenAIResponsesPlatform
) -> None:
    # Without the check, the deltas of call_1 would land in call_2's arguments.
    first = events(response(call_item(1), call_item(2)))
    for event in first:
        if event.get("output_index") == 1:
            event["output_index"] = 0
    server.script(stream_reply(first))
    with pytest.raises(ProtocolError, match="'fc_2' at output_index 0, where item 'fc_1'"):
        ask(platform)


def test_an_item_announced_again_at_its_own_index_is_kept(
    server: ResponsesServer, platform: OpenAIResponsesPlatform
) -> None:
    stream = [e for e in events(response(call_item(1))) if "sequence_number" in e]
    added = next(e for e in stream if e["type"] == "response.output_item.added")
    at = stream.index(added)
    stream = [{k: v for k, v in e.items() if k != "sequence_number"} for e in stream]
    stream.insert(at + 1, stream[at])  # a server (without numbers) that repeats the event
    server.script(stream_reply(stream))
    got = ask(platform)
    assert isinstance(got[-1], ToolCallsRequested)
    assert got[-1].batch.calls[0].arguments_dict() == {"city": "Paris"}
