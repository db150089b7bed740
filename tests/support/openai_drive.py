"""Drive the Responses emulator with the OFFICIAL openai package, in its own venv.

Run by tests/platforms/test_conformance_openai.py as ``.venv-openai/bin/python
openai_drive.py``, with OPENAI_BASE_URL, OPENAI_API_KEY and OPENAI_MODEL pointing at the
emulator. Each part uses only the package's public API and records what it saw; the last line
printed is one JSON object (a part that raised records {"crashed": traceback}). Not imported by
toolbridge: this file must run on the venv's interpreter alone.
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
from openai.lib._tools import pydantic_responses_function_tool
from openai.lib.responses_tool_runner import RegisteredFunction, ResponsesToolRunner

MODEL = os.environ["OPENAI_MODEL"]
WEATHER: dict[str, Any] = {
    "type": "function",
    "name": "get_weather",
    "description": "Get the current weather for a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string", "description": "City name"}},
        "required": ["city"],
        "additionalProperties": False,
    },
    "strict": True,
}


class GetWeather(pydantic.BaseModel):
    """Get the current weather for a city."""

    city: str


def weather(city: str) -> str:
    return json.dumps({"city": city, "sky": "sunny", "temp": 21})


def calls_of(response: Any) -> list[Any]:
    return [item for item in response.output if item.type == "function_call"]


def outputs_for(response: Any) -> list[dict[str, Any]]:
    return [
        {
            "type": "function_call_output",
            "call_id": call.call_id,
            "output": weather(json.loads(call.arguments)["city"]),
        }
        for call in calls_of(response)
    ]


def create_non_stream(client: OpenAI) -> dict[str, Any]:
    first = client.responses.create(
        model=MODEL, input="What is the weather in Paris and Tokyo?", tools=[WEATHER]
    )
    second = client.responses.create(
        model=MODEL, previous_response_id=first.id, input=outputs_for(first), tools=[WEATHER]
    )
    fetched = client.responses.retrieve(second.id)
    return {
        "first_status": first.status,
        "first_types": [item.type for item in first.output],
        "calls": [
            {"id": c.id, "call_id": c.call_id, "name": c.name, "arguments": c.arguments}
            for c in calls_of(first)
        ],
        "second_previous": second.previous_response_id,
        "answer": second.output_text,
        "usage_total": second.usage.total_tokens if second.usage else None,
        "retrieved_same": fetched.id == second.id and fetched.output_text == second.output_text,
    }


def store_false(client: OpenAI) -> dict[str, Any]:
    """Zero data retention as OpenAI's guide shows it: the output items go back in ``input``."""
    history: list[Any] = [{"role": "user", "content": "What is the weather in Lima?"}]
    first = client.responses.create(
        model=MODEL,
        input=history,
        tools=[WEATHER],
        store=False,
        include=["reasoning.encrypted_content"],
    )
    history += [*first.output, *outputs_for(first)]
    second = client.responses.create(model=MODEL, input=history, tools=[WEATHER], store=False)
    reasoning = [item for item in first.output if item.type == "reasoning"]
    return {
        "encrypted": bool(reasoning and reasoning[0].encrypted_content),
        "answer": second.output_text,
        "store": second.store,
    }


def stream(client: OpenAI) -> dict[str, Any]:
    seen: list[str] = []
    with client.responses.stream(
        model=MODEL, input="What is the weather in Oslo?", tools=[WEATHER]
    ) as events:
        for event in events:
            seen.append(event.type)
        first = events.get_final_response()
    texts = []
    with client.responses.stream(
        model=MODEL, previous_response_id=first.id, input=outputs_for(first), tools=[WEATHER]
    ) as events:
        for event in events:
            if event.type == "response.output_text.delta":
                texts.append(event.delta)
        second = events.get_final_response()
    return {
        "first_events": seen,
        "first_calls": [json.loads(c.arguments) for c in calls_of(first)],
        "deltas_joined": "".join(texts),
        "answer": second.output_text,
        "status": second.status,
    }


def tool_runner(client: OpenAI, *, streamed: bool) -> dict[str, Any]:
    executed: list[str] = []

    def execute(arguments: GetWeather) -> str:
        executed.append(arguments.city)
        return weather(arguments.city)

    tool = pydantic_responses_function_tool(
        GetWeather, name="get_weather", description="Get the current weather for a city"
    )
    runner = ResponsesToolRunner(functions=[RegisteredFunction.from_tool(tool, execute=execute)])
    final = runner.run(
        client,
        {"model": MODEL, "input": "What is the weather in Lima and Quito?"},
        stream=streamed,
        max_steps=5,
    )
    return {"executed": executed, "answer": final.output_text, "status": final.status}


def errors(client: OpenAI) -> dict[str, Any]:
    got: dict[str, Any] = {}
    try:
        OpenAI(api_key="wrong-key").responses.create(model=MODEL, input="hi")
    except openai.AuthenticationError as exc:
        got["auth"] = {"status": exc.status_code, "request_id": exc.request_id}
    first = client.responses.create(
        model=MODEL, input="What is the weather in Paris and Tokyo?", tools=[WEATHER]
    )
    try:
        client.responses.create(
            model=MODEL,
            previous_response_id=first.id,
            input=outputs_for(first)[:1],
            tools=[WEATHER],
        )
    except openai.BadRequestError as exc:
        got["missing_output"] = {"status": exc.status_code, "message": exc.message}
    return got


def main() -> None:
    client = OpenAI(max_retries=0, timeout=60)
    parts: dict[str, Callable[[], Any]] = {
        "create": lambda: create_non_stream(client),
        "store_false": lambda: store_false(client),
        "stream": lambda: stream(client),
        "runner": lambda: tool_runner(client, streamed=False),
        "runner_stream": lambda: tool_runner(client, streamed=True),
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
