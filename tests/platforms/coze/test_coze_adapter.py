"""The Coze adapter against scripted loopback servers: every quirk of docs/wire/coze.md."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from coze_fakes import (
    DROP,
    TOKEN,
    CozeServer,
    Reply,
    answer_stream,
    chat,
    frame,
    message,
    ok,
    tool_chat,
)

from bridge.errors import (
    AuthenticationError,
    BadRequestError,
    ConfigurationError,
    NotFoundError,
    PlatformError,
    ProtocolError,
    RateLimitError,
    ServerError,
    StreamInterruptedError,
    UsageError,
)
from bridge.platforms.coze import COM_BASE_URL, CozePlatform
from bridge.types import (
    Event,
    HumanInputRequested,
    RunFailed,
    RunFinished,
    TextDelta,
    ToolCallsRequested,
    ToolResult,
)

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]


def run(events: Any) -> list[Event]:
    return list(events)


def start(platform: CozePlatform, query: str = "weather?", **kw: Any) -> list[Event]:
    return run(platform.start("c1", query, tools=TOOLS, **kw))


def requires(*calls: tuple[str, str, str | None]) -> Reply:
    return Reply(
        stream=[
            frame("conversation.chat.created", chat("created")),
            frame("conversation.chat.requires_action", tool_chat(*calls)),
            frame("done", '"[DONE]"'),
        ]
    )


def test_a_question_is_sent_with_auto_save_history(
    server: CozeServer, platform: CozePlatform
) -> None:
    server.script(Reply(stream=answer_stream("Hel", "lo")))
    events = start(platform, end_user_id="alice")
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["Hel", "lo"]
    end = events[-1]
    assert isinstance(end, RunFinished) and end.answer == "Hello"
    assert end.request_id == "LOGID-1" and end.usage == {
        "prompt_tokens": 4,
        "completion_tokens": 3,
        "total_tokens": 7,
    }
    (request,) = server.requests
    assert request["path"] == "/v3/chat" and request["params"] == {"conversation_id": "c1"}
    assert request["headers"]["authorization"] == f"Bearer {TOKEN}"
    assert request["body"] == {
        "bot_id": "b1",
        "user_id": "alice",
        "stream": True,
        "auto_save_history": True,
        "additional_messages": [
            {"role": "user", "type": "question", "content": "weather?", "content_type": "text"}
        ],
    }


def test_opaque_ids_and_empty_arguments(server: CozeServer, platform: CozePlatform) -> None:
    server.script(requires(("BUJJS0JK+/=SUI=", "get_weather", ""), ("x/2", "get_weather", None)))
    pause = start(platform)[-1]
    assert isinstance(pause, ToolCallsRequested)
    first, second = pause.batch.calls
    assert first.call_id == "BUJJS0JK+/=SUI=" and first.arguments == {}
    assert second.arguments == {}
    assert pause.batch.resume == {"conversation_id": "c1", "chat_id": "k1", "request_id": "LOGID-1"}


def test_every_output_goes_in_one_submit_whose_stream_is_read(
    server: CozeServer, platform: CozePlatform
) -> None:
    server.script(
        requires(("a", "get_weather", '{"city": "北京"}'), ("b", "get_weather", '{"city": "x"}')),
        Reply(stream=answer_stream("done")),
    )
    batch = start(platform)[-1]
    assert isinstance(batch, ToolCallsRequested)
    assert batch.batch.calls[0].arguments == '{"city": "北京"}'
    results = [ToolResult(call_id="b", output="2"), ToolResult(call_id="a", output="1")]
    events = run(platform.submit("c1", batch.batch, results))
    assert isinstance(events[-1], RunFinished) and events[-1].answer == "done"
    submit = server.requests[-1]
    assert submit["path"] == "/v3/chat/submit_tool_outputs"
    assert submit["params"] == {"conversation_id": "c1", "chat_id": "k1"}
    assert submit["body"] == {
        "tool_outputs": [
            {"tool_call_id": "a", "output": "1"},
            {"tool_call_id": "b", "output": "2"},
        ],
        "stream": True,
    }


def test_results_must_answer_the_whole_batch(server: CozeServer, platform: CozePlatform) -> None:
    server.script(requires(("a", "get_weather", ""), ("b", "get_weather", "")))
    batch = start(platform)[-1]
    assert isinstance(batch, ToolCallsRequested)
    with pytest.raises(UsageError, match=r"no result for call\(s\) b"):
        platform.submit("c1", batch.batch, [ToolResult(call_id="a", output="1")])


def test_invalid_arguments_reach_the_dispatcher_as_sent(
    server: CozeServer, platform: CozePlatform
) -> None:
    server.script(requires(("a", "get_weather", "{not json")))
    pause = start(platform)[-1]
    assert isinstance(pause, ToolCallsRequested)
    call = pause.batch.calls[0]
    assert call.arguments == "{not json" and call.raw_arguments == "{not json"


def test_reply_message_is_a_question_for_the_person(
    server: CozeServer, platform: CozePlatform
) -> None:
    question = chat(
        "requires_action",
        required_action={
            "type": "submit_tool_outputs",
            "submit_tool_outputs": {"tool_calls": [{"id": "q1", "type": "reply_message"}]},
        },
    )
    server.script(
        Reply(
            stream=[
                frame("conversation.message.delta", message("answer", "Which day?")),
                frame("conversation.chat.requires_action", question),
                frame("done", '"[DONE]"'),
            ]
        ),
        Reply(stream=answer_stream("Booked.")),
    )
    pause = start(platform)[-1]
    assert isinstance(pause, HumanInputRequested)
    assert pause.interrupt_id == "q1" and pause.prompt == "Which day?"
    events = run(platform.resume("c1", "q1", "Monday"))
    assert isinstance(events[-1], RunFinished)
    resumed = server.requests[-1]
    assert resumed["path"] == "/v3/chat"
    assert resumed["body"]["additional_messages"][0]["content"] == "Monday"


def test_an_error_event_fails_the_run(server: CozeServer, platform: CozePlatform) -> None:
    server.script(
        Reply(
            stream=[
                frame("conversation.chat.created", chat("created")),
                frame("error", {"code": 4000, "msg": "workflow node failed"}),
                frame("done", '"[DONE]"'),
            ]
        )
    )
    end = start(platform)[-1]
    assert isinstance(end, RunFailed)
    assert (end.code, end.message, end.request_id) == ("4000", "workflow node failed", "LOGID-1")


def test_an_error_event_whose_data_is_not_json_still_fails_the_run(
    server: CozeServer, platform: CozePlatform
) -> None:
    server.script(Reply(stream=[frame("error", "internal error"), frame("done", "x")]))
    end = start(platform)[-1]
    assert isinstance(end, RunFailed) and (end.code, end.message) == ("error", "internal error")


def test_a_failed_chat_carries_its_last_error(server: CozeServer, platform: CozePlatform) -> None:
    failed = chat("failed", last_error={"code": 5000, "msg": "model overloaded"})
    server.script(Reply(stream=[frame("conversation.chat.failed", failed), frame("done", "x")]))
    end = start(platform)[-1]
    assert isinstance(end, RunFailed) and (end.code, end.message) == ("5000", "model overloaded")


def test_a_done_only_stream_is_followed_by_polling(
    server: CozeServer, platform: CozePlatform
) -> None:
    server.script(
        requires(("a", "get_weather", "")),
        Reply(stream=[frame("done", '"[DONE]"')]),
        ok(chat("in_progress")),
        ok(chat("completed", usage={"token_count": 2, "output_count": 1, "input_count": 1})),
        ok([message("tool_response", "1"), message("answer", "polled answer")]),
    )
    batch = start(platform)[-1]
    assert isinstance(batch, ToolCallsRequested)
    events = run(platform.submit("c1", batch.batch, [ToolResult(call_id="a", output="1")]))
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["polled answer"]
    assert isinstance(events[-1], RunFinished) and events[-1].answer == "polled answer"
    assert server.paths[2:] == [
        "POST /v3/chat/retrieve",
        "POST /v3/chat/retrieve",
        "GET /v3/chat/message/list",
    ]
    assert server.requests[2]["params"] == {"conversation_id": "c1", "chat_id": "k1"}


def test_a_done_only_first_stream_is_a_clear_error(
    server: CozeServer, platform: CozePlatform
) -> None:
    server.script(Reply(stream=[frame("done", '"[DONE]"')]))
    with pytest.raises(Exception, match="ended before any chat event"):
        start(platform)


def test_non_streamed_mode_polls_retrieve_then_lists_messages(
    server: CozeServer, platform: CozePlatform
) -> None:
    server.script(
        ok(chat("in_progress")),
        ok(tool_chat(("a", "get_weather", '{"city": "x"}'))),
        ok([message("function_call", "{}")]),
        ok(chat("in_progress")),
        ok(chat("completed")),
        ok([message("answer", "sunny")]),
    )
    pause = start(platform, stream=False)[-1]
    assert isinstance(pause, ToolCallsRequested)
    assert server.requests[0]["body"]["stream"] is False
    events = run(
        platform.submit("c1", pause.batch, [ToolResult(call_id="a", output="1")], stream=False)
    )
    assert isinstance(events[-1], RunFinished) and events[-1].answer == "sunny"
    assert server.requests[3]["body"]["stream"] is False


@pytest.mark.parametrize(
    ("code", "kind", "words"),
    [
        (4100, AuthenticationError, "COZE_API_TOKEN"),
        (4101, AuthenticationError, "submitToolChat"),
        (4013, RateLimitError, "rate limiting"),
        (4200, NotFoundError, "COZE_BOT_ID"),
        (5000, ServerError, "platform failed"),
        (4000, BadRequestError, "refused"),
    ],
)
def test_http_200_code_msg_errors_are_mapped(
    server: CozeServer, platform: CozePlatform, code: int, kind: type[Exception], words: str
) -> None:
    server.script(Reply(json={"code": code, "msg": "nope", "detail": {"logid": "L"}}))
    with pytest.raises(kind, match=words) as caught:
        start(platform)
    assert caught.value.code == str(code) and caught.value.request_id == "LOGID-1"  # type: ignore[attr-defined]
    assert TOKEN not in str(caught.value)


def test_the_submit_permission_error_says_what_to_grant(
    server: CozeServer, platform: CozePlatform
) -> None:
    server.script(
        requires(("a", "get_weather", "")),
        Reply(json={"code": 4101, "msg": "The token you entered does not have the permission"}),
    )
    batch = start(platform)[-1]
    assert isinstance(batch, ToolCallsRequested)
    with pytest.raises(AuthenticationError, match="needs submitToolChat"):
        run(platform.submit("c1", batch.batch, [ToolResult(call_id="a", output="1")]))


def test_5000_after_a_chat_without_history_is_a_server_error(
    server: CozeServer, platform: CozePlatform
) -> None:
    server.script(
        requires(("a", "get_weather", "")),
        Reply(json={"code": 5000, "msg": "internal error"}),
    )
    batch = start(platform)[-1]
    assert isinstance(batch, ToolCallsRequested)
    with pytest.raises(ServerError, match="code 5000"):
        run(platform.submit("c1", batch.batch, [ToolResult(call_id="a", output="1")]))


def test_http_statuses_keep_their_class_and_429_is_retried(
    server: CozeServer, platform: CozePlatform
) -> None:
    limited = Reply(json={"code": 4013, "msg": "slow down"}, status=429)
    server.script(limited, Reply(stream=answer_stream("ok")))
    assert isinstance(start(platform)[-1], RunFinished)
    server.script(Reply(json={"code": 4100, "msg": "bad token"}, status=401))
    with pytest.raises(AuthenticationError, match="bad token") as caught:
        start(platform)
    assert caught.value.status_code == 401


def test_a_dropped_stream_keeps_what_arrived(server: CozeServer, platform: CozePlatform) -> None:
    stream = [*answer_stream("par", "tial")[:2], DROP]
    server.script(Reply(stream=stream))
    with pytest.raises(StreamInterruptedError) as caught:
        start(platform)
    assert [e.text for e in caught.value.received if isinstance(e, TextDelta)] == ["par"]


def test_undecodable_data_is_a_protocol_error(server: CozeServer, platform: CozePlatform) -> None:
    server.script(Reply(stream=[frame("conversation.chat.created", "{not json")]))
    with pytest.raises(ProtocolError):
        start(platform)


def test_a_stream_abandoned_mid_run_cancels_the_chat(
    server: CozeServer, platform: CozePlatform
) -> None:
    server.script(
        Reply(
            stream=[
                frame("conversation.chat.created", chat("created")),
                *answer_stream("a")[:2],
                1.0,
            ]
        ),
        ok(chat("canceled")),
    )
    events = platform.start("c1", "weather?", tools=TOOLS)
    while not isinstance(next(events), TextDelta):
        pass
    events.close()
    assert server.paths[-1] == "POST /v3/chat/cancel"
    assert server.requests[-1]["body"] == {"conversation_id": "c1", "chat_id": "k1"}


def test_an_unknown_tool_is_logged_and_its_output_explains(
    server: CozeServer, platform: CozePlatform, caplog: pytest.LogCaptureFixture
) -> None:
    server.script(requires(("a", "secret_plugin", "")), Reply(stream=answer_stream("ok")))
    with caplog.at_level(logging.WARNING):
        batch = start(platform)[-1]
    assert "'secret_plugin', which its plugin has but no local tool" in caplog.text
    assert isinstance(batch, ToolCallsRequested)
    unknown = ToolResult(call_id="a", output="Unknown tool 'secret_plugin'.", is_error=True)
    run(platform.submit("c1", batch.batch, [unknown]))
    output = server.requests[-1]["body"]["tool_outputs"][0]["output"]
    assert "The bot's plugin has a tool 'secret_plugin'" in output and "get_weather" in output


def test_what_coze_cannot_do_is_refused_clearly(platform: CozePlatform) -> None:
    with pytest.raises(UsageError, match="Coze chats take no tool choice"):
        platform.start("c1", "q", tools=TOOLS, tool_choice="get_weather")
    with pytest.raises(UsageError, match="non-empty"):
        platform.start("c1", " ", tools=TOOLS)


def test_settings_are_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigurationError, match=r"COZE_API_TOKEN.*COZE_BOT_ID"):
        CozePlatform()
    assert CozePlatform("t", "b", region="com").base_url == COM_BASE_URL
    assert CozePlatform("t", "b").base_url == "https://api.coze.cn"
    monkeypatch.setenv("COZE_API_BASE", "http://127.0.0.1:9/")
    assert CozePlatform("t", "b").base_url == "http://127.0.0.1:9"
    with pytest.raises(ConfigurationError, match="not a Coze region"):
        CozePlatform("t", "b", region="eu")
    with pytest.raises(ConfigurationError, match="should stop before /v3"):
        CozePlatform("t", "b", base_url="https://api.coze.cn/v3")
    assert "[secure]" in repr(CozePlatform("secret-token-123", "b"))


def test_state_round_trips_and_bad_state_is_refused(
    server: CozeServer, platform: CozePlatform
) -> None:
    assert platform.export_state("c1") is None
    server.script(Reply(stream=answer_stream("x")))
    start(platform)
    state = platform.export_state("c1")
    assert state == {"chat_id": "k1", "local_tools": ["get_weather"]}
    other = CozePlatform(TOKEN, "b1", server.base_url)
    other.import_state("c1", state)
    assert other.export_state("c1") == state
    with pytest.raises(UsageError, match="'chat_id' of type int"):
        other.import_state("c1", {"chat_id": 3})


def test_remote_tool_names_and_check_read_the_bot(
    server: CozeServer, platform: CozePlatform
) -> None:
    bot = {
        "bot_id": "b1",
        "name": "Helper",
        "plugin_info_list": [
            {"plugin_id": "p", "name": "local", "api_info_list": [{"name": "get_weather"}]},
            {"plugin_id": "q", "name": "cloud", "api_info_list": [{"name": "search"}]},
        ],
    }
    server.script(ok(bot), ok(bot))
    assert platform.remote_tool_names() == ["get_weather", "search"]
    assert "Helper, 2 plugin API(s)" in platform.check()
    assert server.requests[0]["params"] == {"bot_id": "b1"}


def test_a_refusal_is_raised_at_the_call_not_when_reading(
    server: CozeServer, platform: CozePlatform
) -> None:
    # The loop marks outputs as submitted once submit() returns: a refusal must come first.
    server.script(
        requires(("a", "get_weather", "")),
        Reply(json={"code": 4000, "msg": "chat k1 is completed: no tool outputs are expected"}),
    )
    batch = start(platform)[-1]
    assert isinstance(batch, ToolCallsRequested)
    with pytest.raises(BadRequestError, match="no tool outputs are expected"):
        platform.submit("c1", batch.batch, [ToolResult(call_id="a", output="1")])
    server.script(Reply(json={"code": 4016, "msg": "conversation busy"}))
    with pytest.raises(BadRequestError, match="conversation busy"):
        platform.start("c1", "again", tools=TOOLS)


def test_files_are_uploaded_then_sent_as_object_string_items(
    server: CozeServer, platform: CozePlatform, tmp_path: Any
) -> None:
    photo, notes = tmp_path / "photo.PNG", tmp_path / "notes.txt"
    photo.write_bytes(b"\x89PNG...")
    notes.write_text("hello", encoding="utf-8")
    server.script(
        ok({"id": "f-img", "bytes": 7, "file_name": "photo.PNG"}),
        ok({"id": "f-txt", "bytes": 5, "file_name": "notes.txt"}),
        Reply(stream=answer_stream("seen")),
    )
    ids = [platform.upload_file("c1", photo), platform.upload_file("c1", notes)]
    assert ids == ["f-img", "f-txt"]
    assert server.requests[0]["path"] == "/v1/files/upload"
    assert server.requests[0]["body"] == {"file": ("photo.PNG", 7)}
    assert isinstance(start(platform, "describe", file_ids=[*ids, "elsewhere"])[-1], RunFinished)
    (message,) = server.requests[-1]["body"]["additional_messages"]
    assert message["content_type"] == "object_string"
    assert json.loads(message["content"]) == [
        {"type": "text", "text": "describe"},
        {"type": "image", "file_id": "f-img"},
        {"type": "file", "file_id": "f-txt"},
        {"type": "file", "file_id": "elsewhere"},
    ]
    with pytest.raises(UsageError, match="it is not a file"):
        platform.upload_file("c1", tmp_path / "missing.pdf")


def test_create_conversation_reads_the_id(server: CozeServer, platform: CozePlatform) -> None:
    server.script(ok({"id": "7446", "created_at": 1}), ok({"id": 7447}), ok({"created_at": 1}))
    assert platform.create_conversation() == "7446"
    assert platform.create_conversation() == "7447"
    with pytest.raises(PlatformError, match=r"without a conversation id \(expected data.id\)"):
        platform.create_conversation()
    assert server.requests[0]["body"] == {"bot_id": "b1"}


def test_polling_never_repeats_answer_text_already_given(
    server: CozeServer, platform: CozePlatform
) -> None:
    # Non-stream: the bot spoke before its tool round; the final list holds both messages.
    server.script(
        ok(chat("in_progress")),
        ok(tool_chat(("a", "get_weather", ""))),
        ok([message("answer", "Let me check. ", id="m1"), message("function_call", "{}", id="m2")]),
        ok(chat("in_progress")),
        ok(chat("completed")),
        ok([message("answer", "Let me check. ", id="m1"), message("answer", "Sunny.", id="m3")]),
    )
    first = start(platform, stream=False)
    assert [e.text for e in first if isinstance(e, TextDelta)] == ["Let me check. "]
    pause = first[-1]
    assert isinstance(pause, ToolCallsRequested)
    results = [ToolResult(call_id="a", output="1")]
    second = run(platform.submit("c1", pause.batch, results, stream=False))
    assert [e.text for e in second if isinstance(e, TextDelta)] == ["Sunny."]
    assert isinstance(second[-1], RunFinished) and second[-1].answer == "Sunny."
    # Stream: deltas arrived, then the stream ended with done and no verdict.
    server.script(
        Reply(
            stream=[
                frame("conversation.chat.created", chat("created")),
                frame("conversation.message.delta", message("answer", "Hel", id="m9")),
                frame("conversation.message.delta", message("answer", "lo", id="m9")),
                frame("done", '"[DONE]"'),
            ]
        ),
        ok(chat("completed")),
        ok([message("answer", "Hello", id="m9")]),
    )
    events = start(platform)
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["Hel", "lo"]
    assert isinstance(events[-1], RunFinished)


def test_a_handle_s_first_chat_opens_the_conversation_it_names(
    server: CozeServer, platform: CozePlatform
) -> None:
    server.script(
        Reply(
            stream=[
                frame("conversation.chat.created", chat("created")),
                *answer_stream("Hi"),
            ]
        ),
        Reply(stream=answer_stream("Again")),
    )
    handle = platform.conversation_handle()
    assert handle != platform.conversation_handle(), "each conversation its own handle"
    events = platform.start(handle, "hello", tools=TOOLS)
    # Known as soon as the chat is accepted, before its answer is read.
    assert platform.opened_conversation(handle) == "c1"
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["Hi"]
    assert server.requests[0]["params"] == {}, "no conversation id: the chat opens one"
    run(platform.start("c1", "again", tools=TOOLS))
    assert server.requests[1]["params"] == {"conversation_id": "c1"}
    assert platform.opened_conversation("c1") is None


def test_a_stream_is_read_to_its_end_after_done_and_its_connection_reused(
    server: CozeServer, platform: CozePlatform
) -> None:
    late = frame("conversation.chat.failed", chat("failed", last_error={"code": 1, "msg": "x"}))
    server.script(
        Reply(stream=[*answer_stream("Hel", "lo"), late]), Reply(stream=answer_stream("ok"))
    )
    first = start(platform)
    second = start(platform)
    end = first[-1]
    assert isinstance(end, RunFinished) and end.answer == "Hello", "nothing counts after done"
    assert isinstance(second[-1], RunFinished)
    assert server.requests[0]["client"] == server.requests[1]["client"], "one connection"
