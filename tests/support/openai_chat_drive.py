"""Drive the Chat Completions emulator with the OFFICIAL openai package, in its own venv.

Run by tests/platforms/test_conformance_openai_chat.py as
``.venv-openai/bin/python openai_chat_drive.py``,
with OPENAI_BASE_URL, OPENAI_API_KEY and OPENAI_MODEL pointing at the emulator. Each part uses
only the package's public API and records what it saw; the last line printed is one JSON object
(a part that raised records {"crashed": traceback}). Not imported by toolbridge: this file must
run on the venv's interpreter alone.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from collections.abc import Callable
from typing import Any

import openai
import pydantic
from openai import OpenAI

MODEL = os.environ["OPENAI_MODEL"]
WEATHER: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "City name"}},
            "required": ["city"],
            "additionalProperties": False,
        },
        "strict": True,
    },
}


class GetWeather(pydantic.BaseModel):
    """Get the current weather for a city."""

    city: str


def weather(city: str) -> str:
    return json.dumps({"city": city, "sky": "sunny", "temp": 21})


def tool_messages(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {
            "role": "tool",
            "tool_call_id": call["id"],
            "content": weather(json.loads(call["function"]["arguments"])["city"]),
        }
        for call in calls
    ]


def create_non_stream(client: OpenAI) -> dict[str, Any]:
    question = {"role": "user", "content": "What is the weather in Paris and Tokyo?"}
    first = client.chat.completions.create(model=MODEL, messages=[question], tools=[WEATHER])
    message = first.choices[0].message
    calls = [call.model_dump() for call in message.tool_calls or []]
    assistant = message.model_dump(exclude_none=True)
    second = client.chat.completions.create(
        model=MODEL, messages=[question, assistant, *tool_messages(calls)], tools=[WEATHER]
    )
    return {
        "first_finish": first.choices[0].finish_reason,
        "calls": calls,
        "answer": second.choices[0].message.content,
        "second_finish": second.choices[0].finish_reason,
        "usage_total": second.usage.total_tokens if second.usage else None,
        "models": [model.id for model in client.models.list()],
    }


def stream_create(client: OpenAI) -> dict[str, Any]:
    """``create(stream=True, tools=...)``, the calls assembled by index as OpenAI documents."""
    question = {"role": "user", "content": "What is the weather in Lima and Quito?"}
    chunks = list(
        client.chat.completions.create(
            model=MODEL,
            messages=[question],
            tools=[WEATHER],
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    calls: dict[int, dict[str, Any]] = {}
    finish = None
    for chunk in chunks:
        if not chunk.choices:
            continue
        choice = chunk.choices[0]
        finish = choice.finish_reason or finish
        for fragment in choice.delta.tool_calls or []:
            call = calls.setdefault(
                fragment.index,
                {"id": None, "type": "function", "function": {"name": "", "arguments": ""}},
            )
            if fragment.id:
                call["id"] = fragment.id
            if fragment.function and fragment.function.name:
                call["function"]["name"] = fragment.function.name
            if fragment.function and fragment.function.arguments:
                call["function"]["arguments"] += fragment.function.arguments
    assembled = [calls[index] for index in sorted(calls)]
    assistant = {"role": "assistant", "content": None, "tool_calls": assembled}
    answer_chunks = list(
        client.chat.completions.create(
            model=MODEL,
            messages=[question, assistant, *tool_messages(assembled)],
            tools=[WEATHER],
            stream=True,
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in answer_chunks if c.choices)
    return {
        "finish": finish,
        "calls": assembled,
        "usage_total": chunks[-1].usage.total_tokens if chunks[-1].usage else None,
        "last_has_choices": bool(chunks[-1].choices),
        "answer": text,
        "answer_finish": answer_chunks[-1].choices[0].finish_reason,
    }


def stream_helper(client: OpenAI) -> dict[str, Any]:
    """The SDK's own stream accumulator, with a pydantic tool whose arguments it parses."""
    completions = client.chat.completions
    stream_of = getattr(completions, "stream", None) or client.beta.chat.completions.stream
    tool = openai.pydantic_function_tool(GetWeather, name="get_weather")
    question = {"role": "user", "content": "What is the weather in Oslo?"}
    kinds: list[str] = []
    with stream_of(model=MODEL, messages=[question], tools=[tool]) as stream:
        for event in stream:
            kinds.append(event.type)
        final = stream.get_final_completion()
    message = final.choices[0].message
    (call,) = message.tool_calls or []
    parsed = call.function.parsed_arguments
    assistant = message.model_dump(exclude_none=True)
    for tool_call in assistant.get("tool_calls", []):
        tool_call["function"].pop("parsed_arguments", None)
    assistant.pop("parsed", None)
    with stream_of(
        model=MODEL,
        messages=[question, assistant, *tool_messages([call.model_dump()])],
        tools=[tool],
    ) as stream:
        text = "".join(e.delta for e in stream if e.type == "content.delta")
        answer = stream.get_final_completion().choices[0].message.content
    return {
        "events": sorted(set(kinds)),
        "parsed": parsed.model_dump() if isinstance(parsed, pydantic.BaseModel) else parsed,
        "finish": final.choices[0].finish_reason,
        "deltas_joined": text,
        "answer": answer,
    }


def errors(client: OpenAI) -> dict[str, Any]:
    got: dict[str, Any] = {}
    question = {"role": "user", "content": "hi"}
    try:
        OpenAI(api_key="wrong-key", max_retries=0).chat.completions.create(
            model=MODEL, messages=[question]
        )
    except openai.AuthenticationError as exc:
        got["auth"] = {"status": exc.status_code, "request_id": exc.request_id}
    try:
        client.chat.completions.create(model="gpt-nope", messages=[question])
    except openai.NotFoundError as exc:
        got["model"] = {"status": exc.status_code, "code": exc.code}
    try:
        client.chat.completions.create(model=MODEL, messages=[{"role": "robot", "content": "x"}])
    except openai.BadRequestError as exc:
        got["malformed"] = {"status": exc.status_code, "param": exc.param, "type": exc.type}
    first = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "What is the weather in Paris and Tokyo?"}],
        tools=[WEATHER],
    )
    message = first.choices[0].message
    calls = [call.model_dump() for call in message.tool_calls or []]
    try:
        client.chat.completions.create(
            model=MODEL,
            messages=[
                {"role": "user", "content": "What is the weather in Paris and Tokyo?"},
                message.model_dump(exclude_none=True),
                *tool_messages(calls)[:1],
            ],
            tools=[WEATHER],
        )
    except openai.BadRequestError as exc:
        got["missing_result"] = {"status": exc.status_code, "message": exc.message}
    return got


def main() -> None:
    client = OpenAI(max_retries=0, timeout=60)
    parts: dict[str, Callable[[], Any]] = {
        "create": lambda: create_non_stream(client),
        "stream": lambda: stream_create(client),
        "stream_helper": lambda: stream_helper(client),
        "errors": lambda: errors(client),
    }
    results: dict[str, Any] = {"sdk_version": openai.__version__}
    for name, part in parts.items():
        try:
            results[name] = part()
        except Exception:  # any failure is recorded for the test to show
            results[name] = {"crashed": traceback.format_exc()}
    print(json.dumps(results, ensure_ascii=False))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
