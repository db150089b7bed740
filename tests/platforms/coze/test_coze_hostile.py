"""The Coze adapter against a hostile or broken server: an endless event or body, ids that
cannot be answered (empty, or one id for two calls), bytes that are not UTF-8, HTML where the
``{code, msg}`` envelope belongs, errors echoing the token, ids full of URL syntax. Each ends in
a clear `PlatformError` (memory bounded, no secret in the message, body or logs) or is sent
exactly as given.

The bounds are lowered for the tests (they are read at each call), so that a few hundred
kilobytes over loopback stand for the hundreds of megabytes a real server could send.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from coze_fakes import TOKEN, CozeServer, Reply, chat, frame, ok, tool_chat

from bridge.errors import AuthenticationError, ProtocolError
from bridge.platforms import _body, _sse
from bridge.platforms.coze import CozePlatform
from bridge.types import Event, ToolCallsRequested, ToolResult

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]
LIMIT = 64 * 1024


@pytest.fixture(autouse=True)
def _small_bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_sse, "MAX_EVENT_BYTES", LIMIT)
    monkeypatch.setattr(_body, "MAX_BODY_BYTES", LIMIT)


def start(platform: CozePlatform, conversation: str = "c1", **kw: Any) -> list[Event]:
    return list(platform.start(conversation, "weather?", tools=TOOLS, **kw))


def requires(*calls: tuple[str, str, str | None]) -> Reply:
    return Reply(
        stream=[
            frame("conversation.chat.created", chat("created")),
            frame("conversation.chat.requires_action", tool_chat(*calls)),
            frame("done", '"[DONE]"'),
        ]
    )


def test_an_event_that_never_ends_is_refused_at_the_bound(
    server: CozeServer, platform: CozePlatform
) -> None:
    endless = [b"event:conversation.message.delta\ndata:" + b"x" * 16384]
    endless += [b"x" * 16384] * 64
    server.script(Reply(stream=endless), ok(chat("canceled")))
    with pytest.raises(ProtocolError, match="event larger than 65536 bytes") as caught:
        start(platform)
    assert "/v3/chat" in str(caught.value) and "blank line" in str(caught.value)


@pytest.mark.parametrize("stream", [True, False])
def test_an_envelope_larger_than_the_bound_is_refused(
    server: CozeServer, platform: CozePlatform, stream: bool
) -> None:
    # A streamed request answered with JSON (how Coze refuses one) is read as a body too.
    server.script(ok(chat("in_progress", padding="p" * (2 * LIMIT))))
    with pytest.raises(ProtocolError, match="is larger than 65536 bytes"):
        start(platform, stream=stream)


def test_a_call_without_an_id_cannot_be_answered(
    server: CozeServer, platform: CozePlatform
) -> None:
    server.script(requires(("", "get_weather", "{}")))
    with pytest.raises(ProtocolError, match="empty id"):
        start(platform)


def test_one_id_listed_twice_for_the_same_call_is_one_call(
    server: CozeServer, platform: CozePlatform
) -> None:
    server.script(
        requires(("a", "get_weather", '{"city": "x"}'), ("a", "get_weather", '{"city": "x"}'))
    )
    pause = start(platform)[-1]
    assert isinstance(pause, ToolCallsRequested)
    assert [c.call_id for c in pause.batch.calls] == ["a"]


def test_one_id_for_two_different_calls_is_refused(
    server: CozeServer, platform: CozePlatform
) -> None:
    server.script(
        requires(("a", "get_weather", '{"city": "x"}'), ("a", "get_weather", '{"city": "y"}'))
    )
    with pytest.raises(ProtocolError, match="two different tool calls under one id 'a'"):
        start(platform)


def test_bytes_that_are_not_utf8_are_a_protocol_error(
    server: CozeServer, platform: CozePlatform
) -> None:
    server.script(Reply(stream=[b'event:conversation.chat.created\ndata:{"id": "\xff"}\n\n']))
    with pytest.raises(ProtocolError, match="not UTF-8"):
        start(platform)


@pytest.mark.parametrize("stream", [True, False])
def test_html_with_http_200_is_a_protocol_error(
    server: CozeServer, platform: CozePlatform, stream: bool
) -> None:
    server.script(Reply(json="<html>login</html>"))  # a JSON string: not the envelope object
    with pytest.raises(ProtocolError, match="expected an object with code, msg and data"):
        start(platform, stream=stream)


@pytest.mark.parametrize("body", [[1, 2], 3, None])
def test_json_that_is_no_envelope_is_a_protocol_error(
    server: CozeServer, platform: CozePlatform, body: Any
) -> None:
    server.script(Reply(json=body))
    with pytest.raises(ProtocolError, match="expected an object with code, msg and data"):
        platform.create_conversation()


@pytest.mark.parametrize("status", [200, 401])
def test_an_error_echoing_the_token_is_redacted(
    server: CozeServer,
    platform: CozePlatform,
    caplog: pytest.LogCaptureFixture,
    status: int,
) -> None:
    echo = {"code": 4100, "msg": f"authentication is invalid: Bearer {TOKEN}"}
    server.script(Reply(json=echo, status=status))
    caplog.set_level(logging.DEBUG)
    with pytest.raises(AuthenticationError) as caught:
        start(platform)
    error = caught.value
    assert TOKEN not in str(error) and TOKEN not in (error.body or "") and TOKEN not in repr(error)
    assert TOKEN not in caplog.text


@pytest.mark.parametrize("odd", ["a/../b", "c?x=1&y=2", "c#frag", "c%2F1", "c 1+2"])
def test_ids_with_url_syntax_are_sent_as_they_are(
    server: CozeServer, platform: CozePlatform, odd: str
) -> None:
    # Ids go in the query string, encoded: the path stays the endpoint's, the id arrives whole.
    pause_chat = {**tool_chat(("a", "get_weather", "")), "id": odd, "conversation_id": odd}
    server.script(
        Reply(stream=[frame("conversation.chat.requires_action", pause_chat), frame("done", "{}")]),
        Reply(stream=[frame("conversation.chat.completed", {**chat("completed"), "id": odd})]),
    )
    pause = start(platform, conversation=odd)[-1]
    assert isinstance(pause, ToolCallsRequested)
    list(platform.submit(odd, pause.batch, [ToolResult(call_id="a", output="1")]))
    chat_request, submit_request = server.requests
    assert chat_request["path"] == "/v3/chat"
    assert chat_request["params"] == {"conversation_id": odd}
    assert submit_request["path"] == "/v3/chat/submit_tool_outputs"
    assert submit_request["params"] == {"conversation_id": odd, "chat_id": odd}
    assert json.loads(json.dumps(submit_request["body"]))["tool_outputs"][0]["tool_call_id"] == "a"


@pytest.mark.parametrize("data", [None, [1], "k1", {"id": 5}])
def test_a_chat_of_the_wrong_shape_is_a_protocol_error(
    server: CozeServer, platform: CozePlatform, data: Any
) -> None:
    server.script(ok(data))
    with pytest.raises(ProtocolError, match="chat"):
        start(platform, stream=False)


@pytest.mark.parametrize("listed", [{"a": 1}, [1], ["m"], [{"content": 3}]])
def test_a_message_list_of_the_wrong_shape_is_a_protocol_error(
    server: CozeServer, platform: CozePlatform, listed: Any
) -> None:
    server.script(ok(chat("completed")), ok(listed))
    with pytest.raises(ProtocolError, match="message list"):
        start(platform, stream=False)


DEEP = "[" * 20_000 + "]" * 20_000
"""Valid JSON nested deeper than Python's parser can follow (it raises RecursionError)."""


@pytest.mark.parametrize("stream", [True, False])
def test_json_nested_too_deeply_is_a_protocol_error(
    server: CozeServer, platform: CozePlatform, stream: bool
) -> None:
    server.script(Reply(body=('{"code": 0, "data": ' + DEEP + "}").encode()))
    with pytest.raises(ProtocolError, match="nested too deeply"):
        start(platform, stream=stream)


def test_an_error_event_nested_too_deeply_is_a_protocol_error(
    server: CozeServer, platform: CozePlatform
) -> None:
    server.script(
        Reply(stream=[frame("conversation.chat.created", chat("created")), frame("error", DEEP)])
    )
    with pytest.raises(ProtocolError, match="nested too deeply"):
        start(platform)


def test_a_plain_request_reads_no_more_than_the_bound(
    server: CozeServer, platform: CozePlatform
) -> None:
    # Requests that are not streams (here: create a conversation) are read whole by the
    # transport itself: the same bound applies.
    server.script(ok({"id": "c1", "padding": "p" * (2 * LIMIT)}))
    with pytest.raises(ProtocolError, match=r"Coze conversation: the answer of .* is larger than"):
        platform.create_conversation()
