"""Drive the Coze emulator with the OFFICIAL cozepy 0.20.0; print what it saw as JSON.

Run by the cozepy venv's python (``tests/support/sdk_venv.py``, `COZE`), never imported by
pytest: it imports only cozepy and the standard library. The emulator is found the way
coze-py's ``examples/chat_local_plugin.py`` finds the real service: ``COZE_API_BASE``,
``COZE_API_TOKEN`` and ``COZE_BOT_ID`` in the environment. The bot's local plugins
(``get_weather``, ``get_time``) are declared by the test's scenario. Each check records what
the SDK saw; ``tests/platforms/coze/test_conformance_cozepy.py`` asserts on it.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cozepy import (
    ChatEvent,
    ChatEventType,
    ChatStatus,
    Coze,
    CozeAPIError,
    Message,
    MessageObjectString,
    Stream,
    TokenAuth,
    ToolOutput,
)

BASE = os.environ["COZE_API_BASE"]
BOT_ID = os.environ["COZE_BOT_ID"]
coze = Coze(auth=TokenAuth(token=os.environ["COZE_API_TOKEN"]), base_url=BASE)
USER_ID = "user id"


def get_weather(city: str) -> str:
    return f"{city}: 21 C, sunny"


def get_time(timezone: str) -> str:
    return f"12:00 in {timezone}"


LOCAL_PLUGINS: dict[str, Callable[..., str]] = {"get_weather": get_weather, "get_time": get_time}


class Seen:
    """What one `handle_stream` recursion saw (the example's loop, recording as it goes)."""

    def __init__(self) -> None:
        self.events: list[str] = []
        self.calls: list[dict[str, Any]] = []
        self.answer = ""
        self.token_count: int | None = None
        self.chat_ids: set[str] = set()
        self.conversation_id: str | None = None
        self.logids: list[str] = []

    def handle_stream(self, stream: Stream[ChatEvent]) -> None:
        """coze-py's examples/chat_local_plugin.py `handle_stream`, recording what it sees."""
        self.logids.append(stream.response.logid or "")
        for event in stream:
            self.events.append(str(event.event.value))
            if event.event == ChatEventType.CONVERSATION_MESSAGE_DELTA:
                self.answer += event.message.content
            if event.chat is not None:
                self.chat_ids.add(event.chat.id)
                self.conversation_id = event.chat.conversation_id
            if event.event == ChatEventType.CONVERSATION_CHAT_REQUIRES_ACTION:
                action = event.chat.required_action
                if not action or not action.submit_tool_outputs:
                    continue
                outputs: list[ToolOutput] = []
                for call in action.submit_tool_outputs.tool_calls:
                    arguments = json.loads(call.function.arguments or "{}")
                    self.calls.append({"id": call.id, "name": call.function.name, **arguments})
                    output = json.dumps({"output": LOCAL_PLUGINS[call.function.name](**arguments)})
                    outputs.append(ToolOutput(tool_call_id=call.id, output=output))
                self.handle_stream(
                    coze.chat.submit_tool_outputs(
                        conversation_id=event.chat.conversation_id,
                        chat_id=event.chat.id,
                        tool_outputs=outputs,
                        stream=True,
                    )
                )
            if event.event == ChatEventType.CONVERSATION_CHAT_COMPLETED:
                self.token_count = event.chat.usage.token_count

    def result(self) -> dict[str, Any]:
        return {
            "events": self.events,
            "calls": self.calls,
            "answer": self.answer,
            "token_count": self.token_count,
            "chat_ids": sorted(self.chat_ids),
            "conversation_id": self.conversation_id,
            "logids": self.logids,
        }


def ask_stream(text: str, **kwargs: Any) -> dict[str, Any]:
    seen = Seen()
    seen.handle_stream(
        coze.chat.stream(
            bot_id=BOT_ID,
            user_id=USER_ID,
            additional_messages=[Message.build_user_question_text(text)],
            **kwargs,
        )
    )
    return seen.result()


def example_chat_local_plugin() -> dict[str, Any]:
    """The example's two questions, each in its own conversation (as the example does)."""
    return {
        "weather": ask_stream("What is the weather in Paris?"),
        "time": ask_stream("What time is it in Tokyo?"),
    }


def parallel_calls() -> dict[str, Any]:
    return ask_stream("What is the weather in Paris and Tokyo?")


def one_conversation_two_turns() -> dict[str, Any]:
    conversation = coze.conversations.create(bot_id=BOT_ID)
    first = ask_stream("What is the weather in Paris?", conversation_id=conversation.id)
    second = ask_stream("What time is it in Tokyo?", conversation_id=conversation.id)
    return {"conversation_id": conversation.id, "first": first, "second": second}


def object_string_question() -> dict[str, Any]:
    seen = Seen()
    message = Message.build_user_question_objects(
        [MessageObjectString.build_text("What is the weather in Berlin?")]
    )
    seen.handle_stream(
        coze.chat.stream(bot_id=BOT_ID, user_id=USER_ID, additional_messages=[message])
    )
    return seen.result()


def file_question() -> dict[str, Any]:
    """files.upload, then a question whose object_string message carries the file."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "notes.txt"
        path.write_text("meeting notes", encoding="utf-8")
        uploaded = coze.files.upload(file=path)
    seen = Seen()
    message = Message.build_user_question_objects(
        [
            MessageObjectString.build_text("What is the weather in Oslo?"),
            MessageObjectString.build_file(file_id=uploaded.id),
        ]
    )
    seen.handle_stream(
        coze.chat.stream(bot_id=BOT_ID, user_id=USER_ID, additional_messages=[message])
    )
    return {"file": [uploaded.file_name, uploaded.bytes], **seen.result()}


def non_stream_poll() -> dict[str, Any]:
    """chat.create_and_poll, then submit_tool_outputs(stream=False), a retrieve loop and the
    message list: the non-streamed path of the API."""
    polled = coze.chat.create_and_poll(
        bot_id=BOT_ID,
        user_id=USER_ID,
        additional_messages=[Message.build_user_question_text("What is the weather in Rome?")],
    )
    chat = polled.chat
    first_status = str(chat.status.value)
    first_messages = [str(m.type.value) for m in polled.messages or []]
    calls = chat.required_action.submit_tool_outputs.tool_calls
    outputs = [
        ToolOutput(
            tool_call_id=c.id,
            output=LOCAL_PLUGINS[c.function.name](**json.loads(c.function.arguments)),
        )
        for c in calls
    ]
    submitted = coze.chat.submit_tool_outputs(
        conversation_id=chat.conversation_id, chat_id=chat.id, tool_outputs=outputs, stream=False
    )
    statuses = [str(submitted.status.value)]
    deadline = time.monotonic() + 60
    current = submitted
    while current.status == ChatStatus.IN_PROGRESS and time.monotonic() < deadline:
        current = coze.chat.retrieve(conversation_id=chat.conversation_id, chat_id=chat.id)
        statuses.append(str(current.status.value))
    messages = coze.chat.messages.list(conversation_id=chat.conversation_id, chat_id=chat.id)
    return {
        "first_status": first_status,
        "first_messages": first_messages,
        "calls": [c.function.name for c in calls],
        "statuses": statuses,
        "messages": [[str(m.type.value), m.content] for m in messages],
        "usage": current.usage.token_count if current.usage else None,
    }


def cancel_waiting_chat() -> dict[str, Any]:
    stream = coze.chat.stream(
        bot_id=BOT_ID,
        user_id=USER_ID,
        additional_messages=[Message.build_user_question_text("What is the weather in Oslo?")],
    )
    waiting = None
    for event in stream:
        if event.event == ChatEventType.CONVERSATION_CHAT_REQUIRES_ACTION:
            waiting = event.chat
    assert waiting is not None
    canceled = coze.chat.cancel(conversation_id=waiting.conversation_id, chat_id=waiting.id)
    try:
        coze.chat.cancel(conversation_id=waiting.conversation_id, chat_id=waiting.id)
        again: Any = "no error"
    except CozeAPIError as exc:
        again = exc.code
    return {"status": str(canceled.status.value), "cancel_again": again}


def bot_plugins() -> dict[str, Any]:
    bot = coze.bots.retrieve(bot_id=BOT_ID)
    return {
        "name": bot.name,
        "apis": [a.name for p in bot.plugin_info_list or [] for a in p.api_info_list],
    }


def api_errors() -> dict[str, Any]:
    found: dict[str, Any] = {}
    bad = Coze(auth=TokenAuth(token="wrong-token"), base_url=BASE)
    for label, call in (
        ("bad_token", lambda: bad.conversations.create(bot_id=BOT_ID)),
        (
            "bad_bot",
            lambda: coze.chat.create(
                bot_id="no-such-bot",
                user_id=USER_ID,
                additional_messages=[Message.build_user_question_text("hi")],
            ),
        ),
    ):
        try:
            call()
            found[label] = "no error"
        except CozeAPIError as exc:
            found[label] = {"code": exc.code, "logid": bool(exc.logid), "msg": exc.msg}
    try:
        list(
            coze.chat.stream(
                bot_id=BOT_ID,
                user_id=USER_ID,
                additional_messages=[Message.build_user_question_text("hello")],
                headers={"X-Emulator-Fault": "inband=5000,inband_after=1,message=node failed"},
            )
        )
        found["error_event"] = "no error"
    except CozeAPIError as exc:
        found["error_event"] = f"CozeAPIError {exc.code}"
    except Exception as exc:  # cozepy raises a bare Exception for an `error` event
        found["error_event"] = str(exc)
    return found


CHECKS: dict[str, Callable[[], Any]] = {
    "example": example_chat_local_plugin,
    "parallel": parallel_calls,
    "conversation": one_conversation_two_turns,
    "object_string": object_string_question,
    "file": file_question,
    "non_stream": non_stream_poll,
    "cancel": cancel_waiting_chat,
    "bot": bot_plugins,
    "errors": api_errors,
}


def main() -> None:
    results: dict[str, Any] = {}
    for name, check in CHECKS.items():
        try:
            results[name] = {"ok": True, "value": check()}
        except Exception:
            results[name] = {"ok": False, "error": traceback.format_exc()}
    json.dump(results, sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main()
