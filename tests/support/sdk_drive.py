"""Drive the emulator with the OFFICIAL appbuilder-sdk 1.1.5; print the results as JSON.

Run by the SDK venv's python (``tests/support/sdk_venv.py``), never imported by pytest: it
imports only the SDK and the standard library. The emulator is found the way the SDK finds the
real platform: ``GATEWAY_URL_V2`` and ``APPBUILDER_TOKEN`` in the environment. Argument: the
app id. The conformance scenario (``tests/platforms/appbuilder/test_conformance_sdk.py``)
scripts the rules used here.
Each check records what the SDK saw; the test asserts on it.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
import traceback
from collections.abc import Callable
from typing import Any, Literal

import appbuilder
from appbuilder.core.console.appbuilder_client.event_handler import (
    AppBuilderEventHandler,
    ToolCallEventHandler,
)


def get_current_weather(location: str, unit: Literal["celsius", "fahrenheit"] = "celsius") -> str:
    """Get the current weather of a city."""
    temp = 21 if unit == "celsius" else 70
    return json.dumps({"location": location, "temp": temp, "condition": "sunny"})


def suggest_clothes(temperature: int) -> str:
    """Suggest clothes for a temperature in celsius."""
    return "a light jacket" if int(temperature) < 25 else "a t-shirt"


def get_city_weather(location: str, unit: str) -> str:
    """查询指定中国城市的当前天气。

    参数:
        location (str): 城市名称，例如："北京"
        unit (str): 温度单位，可选 "celsius" 或 "fahrenheit"

    返回:
        str: 天气情况描述
    """
    return json.dumps({"location": location, "unit": unit, "condition": "晴"}, ensure_ascii=False)


TIME_TOOL = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "Current local time in a time zone",
        "parameters": {
            "type": "object",
            "properties": {"timezone": {"type": "string", "description": "IANA time zone"}},
            "required": ["timezone"],
        },
    },
}


class Recorder(AppBuilderEventHandler):
    """The SDK's documented event-handler pattern: record callbacks, answer interrupts."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []
        self.thoughts: list[str] = []
        self.calls: list[dict[str, Any]] = []
        self.answer = ""

    def preparing(self, run_context: Any, run_response: Any) -> None:
        self.seen.append("preparing")

    def running(self, run_context: Any, run_response: Any) -> None:
        self.seen.append("running")
        if self._stream:
            self.answer += run_response.answer

    def done(self, run_context: Any, run_response: Any) -> None:
        self.seen.append("done")

    def error(self, run_context: Any, run_response: Any) -> None:
        self.seen.append("error")

    def success(self, run_context: Any, run_response: Any) -> None:
        self.seen.append("success")
        if not self._stream:
            self.answer = run_response.answer

    def interrupt(self, run_context: Any, run_response: Any) -> list[dict[str, str]]:
        self.seen.append("interrupt")
        self.thoughts.append(run_context.current_thought)
        outputs = []
        for call in run_context.current_tool_calls:
            self.calls.append({"name": call.function.name, "arguments": call.function.arguments})
            output = get_current_weather(**call.function.arguments)
            outputs.append({"tool_call_id": call.id, "output": output})
        return outputs


def _error(exc: BaseException) -> dict[str, str]:
    return {"type": type(exc).__name__, "message": str(exc)}


def check_non_stream_manifest(client: Any) -> dict[str, Any]:
    """Non-stream run with a Manifest tool; interrupt; tool_outputs; final answer."""
    conversation_id = client.create_conversation()
    manifest = appbuilder.Manifest.from_function(get_current_weather)
    message = client.run(
        conversation_id, "What is the weather in Beijing in fahrenheit?", tools=[manifest]
    )
    event = message.content.events[-1]
    call = event.tool_calls[-1]
    output = get_current_weather(**call.function.arguments)
    final = client.run(conversation_id, tool_outputs=[{"tool_call_id": call.id, "output": output}])
    return {
        "status": event.status,
        "event_type": event.event_type,
        "content_type": event.content_type,
        "tool": call.function.name,
        "arguments": call.function.arguments,
        "thought": event.detail["text"]["function_call"]["thought"],
        "interrupt_answer": message.content.answer,
        "output": output,
        "answer": final.content.answer,
        "final_statuses": [e.status for e in final.content.events],
        "message_ids": [message.content.message_id, final.content.message_id],
        "usage": [e.usage.model_dump() if e.usage else None for e in final.content.events],
    }


def check_stream_dict_tool(client: Any) -> dict[str, Any]:
    """Stream run with a dict tool; interrupt; stream the tool_outputs answer."""
    conversation_id = client.create_conversation()
    query = 'What time is it in "Asia/Tokyo"?'
    message = client.run(conversation_id, query, tools=[TIME_TOOL], stream=True)
    chunks = list(message.content)
    interrupt = [c for c in chunks if c.events and c.events[-1].status == "interrupt"][-1]
    call = interrupt.events[-1].tool_calls[-1]
    final = client.run(
        conversation_id, tool_outputs=[{"tool_call_id": call.id, "output": "10:30"}], stream=True
    )
    final_chunks = list(final.content)
    return {
        "first_statuses": [e.status for c in chunks for e in c.events],
        "tool": call.function.name,
        "arguments": call.function.arguments,
        "statuses": [e.status for c in final_chunks for e in c.events],
        "empty_last_chunk": final_chunks[-1].events == [],
        "answer": "".join(c.answer for c in final_chunks),
        "deltas": [c.answer for c in final_chunks if c.answer],
    }


def check_parallel_with_tool_call_handler(client: Any, stream: bool) -> dict[str, Any]:
    """The SDK's ToolCallEventHandler on a scenario that asks for two calls at once."""
    conversation_id = client.create_conversation()
    manifest = appbuilder.Manifest.from_function(get_current_weather)
    handler = ToolCallEventHandler(functions=[get_current_weather])
    with client.run_with_handler(
        conversation_id,
        "Compare Paris and London",
        tools=[manifest],
        stream=stream,
        event_handler=handler,
    ) as run:
        run.until_done()
    return {"result": handler.result, "conversation_id": conversation_id}


def check_chained_with_tool_call_handler(client: Any) -> dict[str, Any]:
    """Two tool rounds (the second uses the first output) through the SDK's handler loop."""
    conversation_id = client.create_conversation()
    tools = [
        appbuilder.Manifest.from_function(get_current_weather),
        appbuilder.Manifest.from_function(suggest_clothes),
    ]
    handler = ToolCallEventHandler(functions=[get_current_weather, suggest_clothes])
    for _ in client.run_with_handler(
        conversation_id,
        "What should I wear in Oslo?",
        tools=tools,
        stream=True,
        event_handler=handler,
    ):
        pass
    return {"result": handler.result, "conversation_id": conversation_id}


def check_recorder(client: Any, stream: bool) -> dict[str, Any]:
    """A custom AppBuilderEventHandler with the default planner."""
    conversation_id = client.create_conversation()
    recorder = Recorder()
    manifest = appbuilder.Manifest.from_function(get_current_weather)
    for _ in client.run_with_handler(
        conversation_id,
        "weather in Shanghai please",
        tools=[manifest],
        stream=stream,
        event_handler=recorder,
    ):
        pass
    return {
        "seen": recorder.seen,
        "calls": recorder.calls,
        "thoughts": recorder.thoughts,
        "answer": recorder.answer,
    }


def check_files_and_feedback(client: Any) -> dict[str, Any]:
    """upload_local_file, upload_file(file_url=...), a run with file_ids, feedback."""
    conversation_id = client.create_conversation()
    with tempfile.NamedTemporaryFile("wb", suffix=".txt", delete=False) as handle:
        handle.write(b"quarterly numbers")
        path = handle.name
    try:
        file_id = client.upload_local_file(conversation_id, path)
    finally:
        os.unlink(path)
    url_file_id = client.upload_file(conversation_id, file_url="https://example.com/chart.png")
    message = client.run(conversation_id, "hello, please summarise the file", file_ids=[file_id])
    request_id = client.feedback(
        conversation_id, message.content.message_id, "downvote", flag=["没有帮助"], reason="short"
    )
    return {
        "conversation_id": conversation_id,
        "file_ids": [file_id, url_file_id],
        "answer": message.content.answer,
        "feedback_request_id": request_id,
    }


def check_async_upload_url(app_id: str) -> dict[str, Any]:
    """The async client's upload_file(file_url=...): aiohttp sends it urlencoded."""

    async def drive() -> dict[str, Any]:
        client = appbuilder.AsyncAppBuilderClient(app_id)
        try:
            conversation_id = await client.create_conversation()
            file_id = await client.upload_file(
                conversation_id, file_url="https://example.com/report.pdf"
            )
        finally:
            await client.http_client.session.close()
        return {"conversation_id": conversation_id, "file_id": file_id}

    return asyncio.run(drive())


def check_component_choice(client: Any) -> dict[str, Any]:
    """tool_choice naming one of the app's own components (not a tool of the run)."""
    from appbuilder.core.console.appbuilder_client import data_class

    def choice(given: dict[str, Any]) -> Any:
        function = data_class.ToolChoiceFunction(name="WeatherQuery", input=given)
        return data_class.ToolChoice(type="function", function=function)

    def seen(answers: list[Any]) -> list[list[Any]]:
        return [
            [e.event_type, e.content_type, e.status, e.detail] for a in answers for e in a.events
        ]

    conversation_id = client.create_conversation()
    message = client.run(conversation_id, "北京", tool_choice=choice({}))
    streamed = client.run(
        conversation_id, "天气", tool_choice=choice({"city": "上海"}), stream=True
    )
    chunks = list(streamed.content)
    return {
        "conversation_id": conversation_id,
        "events": seen([message.content]),
        "answer": message.content.answer,
        "stream_events": seen(chunks),
        "stream_answer": "".join(c.answer for c in chunks),
    }


class FollowUpHandler(AppBuilderEventHandler):
    """The SDK's own follow-up test handler (tests/test_appbuilder_client_follow_up_query.py)."""

    def __init__(self) -> None:
        super().__init__()
        self.follow_up_queries: list[str] = []

    def handle_content_type(self, run_context: Any, run_response: Any) -> None:
        for event in run_response.events:
            if event.content_type == "json" and event.event_type == "FollowUpQuery":
                self.follow_up_queries.extend(event.detail.get("json").get("follow_up_querys"))


def check_follow_up_and_dialog_events(client: Any) -> dict[str, Any]:
    """FollowUpQuery (stream, and the handler non-stream) and a chatflow multiple_dialog_event,
    read the way the SDK's own chatflow and follow-up tests read them."""
    from appbuilder.core.console.appbuilder_client import data_class

    conversation_id = client.create_conversation()
    streamed = []
    for answer in client.run(conversation_id, "你能做什么", stream=True).content:
        for event in answer.events:
            if event.content_type == "json" and event.event_type == "FollowUpQuery":
                streamed.extend(event.detail.get("json").get("follow_up_querys"))
    handler = FollowUpHandler()
    with client.run_with_handler(
        conversation_id=conversation_id, query="你能做什么", stream=False, event_handler=handler
    ) as run:
        run.until_done()

    conversation_id = client.create_conversation()
    interrupt_id = None
    for answer in client.run(conversation_id, "查天气", stream=True).content:
        for event in answer.events:
            if event.content_type == "chatflow_interrupt":
                interrupt_id = event.detail.get("interrupt_event_id")
    action = data_class.Action.create_resume_action(interrupt_id)
    dialog_events = []
    for answer in client.run(conversation_id, "北京的", stream=True, action=action).content:
        for event in answer.events:
            if event.content_type == "multiple_dialog_event":
                dialog_events.append([event.event_type, event.detail])
    return {
        "streamed": streamed,
        "handler": handler.follow_up_queries,
        "dialog_events": dialog_events,
    }


def check_docstring_manifest(client: Any) -> dict[str, Any]:
    """The SDK samples' style: Manifest.from_function on a function documented in Chinese
    (the parameters' descriptions live only in the docstring); the default planner plans."""
    manifest = appbuilder.Manifest.from_function(get_city_weather)
    out: dict[str, Any] = {}
    for query in ("北京和上海今天天气怎么样，用华氏度", "上海的天气怎么样？"):
        message = client.run(client.create_conversation(), query, tools=[manifest])
        calls = message.content.events[-1].tool_calls or []
        out[query] = [c.function.arguments for c in calls]
    return out


def check_console(app_id: str) -> dict[str, Any]:
    """The console calls: describe_apps, describe_app, get_app_list, get_all_apps."""
    described = appbuilder.describe_app(app_id)
    return {
        "describe_apps": [a.model_dump() for a in appbuilder.describe_apps()],
        "describe_apps_after": [a.model_dump() for a in appbuilder.describe_apps(marker=app_id)],
        "describe_app": described.model_dump(),
        "get_app_list": [a.model_dump() for a in appbuilder.get_app_list(limit=5)],
        "get_app_list_after": [a.model_dump() for a in appbuilder.get_app_list(after=app_id)],
        "get_all_apps": [a.id for a in appbuilder.get_all_apps()],
    }


def check_errors(client: Any, app_id: str) -> dict[str, Any]:
    """How the SDK reports the emulator's errors."""
    out: dict[str, Any] = {}

    def attempt(name: str, action: Callable[[], Any]) -> None:
        try:
            value = action()
            out[name] = {"type": None, "value": value}
        except Exception as exc:
            out[name] = _error(exc)

    attempt(
        "bad_token",
        lambda: appbuilder.AppBuilderClient(app_id, secret_key="wrong").create_conversation(),
    )
    attempt("unknown_app", lambda: appbuilder.AppBuilderClient("no-such-app").create_conversation())
    attempt("unknown_app_described", lambda: appbuilder.describe_app("no-such-app").id)
    attempt("unknown_conversation", lambda: client.run("no-such-conversation", "hi").content.answer)
    conversation_id = client.create_conversation()
    manifest = appbuilder.Manifest.from_function(get_current_weather)
    client.run(conversation_id, "weather in Beijing", tools=[manifest])
    attempt(
        "wrong_tool_call_id",
        lambda: client.run(
            conversation_id, tool_outputs=[{"tool_call_id": "made-up", "output": "x"}]
        ),
    )
    attempt(
        "rate_limited",
        lambda: client.run(client.create_conversation(), "rate limit me").content.answer,
    )
    attempt(
        "after_rate_limit",
        lambda: client.run(client.create_conversation(), "rate limit me").content.answer,
    )
    attempt(
        "malformed_stream",
        lambda: [
            c.answer
            for c in client.run(
                client.create_conversation(), "malformed please", stream=True
            ).content
        ],
    )

    def inband() -> dict[str, Any]:
        message = client.run(client.create_conversation(), "in-band failure")
        return {"answer": message.content.answer, "events": len(message.content.events)}

    attempt("inband", inband)
    return out


def main() -> None:
    app_id = sys.argv[1]
    client = appbuilder.AppBuilderClient(app_id)
    checks: dict[str, Callable[[], Any]] = {
        "non_stream_manifest": lambda: check_non_stream_manifest(client),
        "stream_dict_tool": lambda: check_stream_dict_tool(client),
        "parallel_handler_stream": lambda: check_parallel_with_tool_call_handler(client, True),
        "parallel_handler_non_stream": lambda: check_parallel_with_tool_call_handler(client, False),
        "chained_handler": lambda: check_chained_with_tool_call_handler(client),
        "recorder_stream": lambda: check_recorder(client, True),
        "recorder_non_stream": lambda: check_recorder(client, False),
        "files_and_feedback": lambda: check_files_and_feedback(client),
        "async_upload_url": lambda: check_async_upload_url(app_id),
        "console": lambda: check_console(app_id),
        "component_choice": lambda: check_component_choice(client),
        "follow_up_and_dialog": lambda: check_follow_up_and_dialog_events(client),
        "docstring_manifest": lambda: check_docstring_manifest(client),
        "errors": lambda: check_errors(client, app_id),
    }
    results: dict[str, Any] = {"sdk_version": appbuilder.__version__}
    for name, check in checks.items():
        try:
            results[name] = check()
        except Exception as exc:  # report, so the test shows which check broke and why
            results[name] = {"crashed": _error(exc), "traceback": traceback.format_exc()}
    sys.stdout.write(json.dumps(results, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
