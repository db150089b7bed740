"""The Responses protocol of the emulator over real HTTP: objects, stream events, chaining,
``store: false`` resends, reasoning items, the real API's 400s, auth, faults and scenarios."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from bridge.emulator import Emulator

TIMEOUT = 30
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


class Client:
    """Raw HTTP to one Responses emulator."""

    def __init__(self, emu: Emulator) -> None:
        env = emu.env()
        self.url = env["OPENAI_BASE_URL"]
        self.model = env["OPENAI_MODEL"]
        self.headers = {"Authorization": f"Bearer {env['OPENAI_API_KEY']}"}
        self.session = requests.Session()

    def post(self, headers: dict[str, str] | None = None, **body: Any) -> requests.Response:
        body.setdefault("model", self.model)
        return self.session.post(
            self.url + "/responses",
            json=body,
            headers={**self.headers, **(headers or {})},
            timeout=TIMEOUT,
        )

    def ok(self, **body: Any) -> dict[str, Any]:
        response = self.post(**body)
        assert response.status_code == 200, response.text
        assert response.headers["x-request-id"]
        data: dict[str, Any] = response.json()
        return data

    def get(self, path: str, **kwargs: Any) -> requests.Response:
        kwargs.setdefault("headers", self.headers)
        return self.session.get(self.url + path, timeout=TIMEOUT, **kwargs)


def error_of(response: requests.Response, status: int) -> dict[str, Any]:
    """Assert OpenAI's error shape; return the error object."""
    assert response.status_code == status, response.text
    assert response.headers["x-request-id"]
    body = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"message", "type", "param", "code"}
    error: dict[str, Any] = body["error"]
    return error


def sse(response: requests.Response) -> list[dict[str, Any]]:
    """The events of a stream, asserting OpenAI's framing (``event:`` then ``data:``)."""
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    text = response.content.decode()
    assert text.endswith("\n\n")
    events = []
    for block in text[:-2].split("\n\n"):
        event_line, data_line = block.split("\n")
        data = json.loads(data_line.removeprefix("data: "))
        assert event_line == f"event: {data['type']}"
        events.append(data)
    return events


def calls_of(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [item for item in body["output"] if item["type"] == "function_call"]


def answer_of(body: dict[str, Any]) -> str:
    (message,) = [item for item in body["output"] if item["type"] == "message"]
    return str(message["content"][0]["text"])


def outputs(body: dict[str, Any], text: str = "sunny, 21 C") -> list[dict[str, Any]]:
    return [
        {"type": "function_call_output", "call_id": c["call_id"], "output": text}
        for c in calls_of(body)
    ]


@pytest.fixture(scope="module")
def emu() -> Iterator[Emulator]:
    with Emulator(protocol="responses", faults="") as emulator:
        yield emulator


@pytest.fixture
def client(emu: Emulator) -> Client:
    emu.clear_requests()
    return Client(emu)


# --- objects and chaining -------------------------------------------------------------------


def test_client_env_names_what_the_openai_package_reads(emu: Emulator) -> None:
    env = emu.env()
    assert env["OPENAI_BASE_URL"] == emu.base_url + "/v1"
    assert env["OPENAI_API_KEY"] == emu.token
    assert env["OPENAI_MODEL"] == emu.app_id


def test_models_lists_the_served_model(client: Client) -> None:
    response = client.get("/models")
    assert response.status_code == 200
    assert [m["id"] for m in response.json()["data"]] == [client.model]


def test_a_tool_round_then_an_answer_chained_by_previous_response_id(
    client: Client, emu: Emulator
) -> None:
    first = client.ok(input="What is the weather in Paris?", tools=[WEATHER])
    assert first["object"] == "response" and first["status"] == "completed"
    assert first["id"].startswith("resp_")
    reasoning, call = first["output"]
    assert reasoning["type"] == "reasoning" and reasoning["id"].startswith("rs_")
    assert call["id"].startswith("fc_") and call["call_id"].startswith("call_")
    assert json.loads(call["arguments"]) == {"city": "Paris"}
    conversation = emu.app.response_conversation(first["id"])  # type: ignore[attr-defined]
    assert emu.conversation(conversation).pending_call_ids == (call["call_id"],)

    second = client.ok(previous_response_id=first["id"], input=outputs(first), tools=[WEATHER])
    assert answer_of(second) == "sunny, 21 C"
    assert second["previous_response_id"] == first["id"]
    assert second["usage"]["total_tokens"] > 0
    snapshot = emu.conversation(conversation)
    assert snapshot.pending_call_ids == ()
    assert snapshot.accepted_outputs == {call["call_id"]: 1}
    assert snapshot.messages[-1].answer == "sunny, 21 C"
    assert client.get(f"/responses/{second['id']}").json() == second


def test_a_list_in_the_query_is_a_parallel_batch_answered_line_by_line(client: Client) -> None:
    first = client.ok(input="What is the weather in Paris and Tokyo?", tools=[WEATHER])
    cities = [json.loads(c["arguments"])["city"] for c in calls_of(first)]
    assert cities == ["Paris", "Tokyo"]
    given = [
        {"type": "function_call_output", "call_id": c["call_id"], "output": f"fine in {city}"}
        for c, city in zip(calls_of(first), cities, strict=True)
    ]
    second = client.ok(previous_response_id=first["id"], input=given, tools=[WEATHER])
    assert answer_of(second) == "Paris: fine in Paris\nTokyo: fine in Tokyo"


def test_a_new_question_after_an_answer_starts_a_new_run(client: Client) -> None:
    first = client.ok(input="What is the weather in Paris?", tools=[WEATHER])
    second = client.ok(previous_response_id=first["id"], input=outputs(first), tools=[WEATHER])
    third = client.ok(
        previous_response_id=second["id"], input="What is the weather in Oslo?", tools=[WEATHER]
    )
    assert [json.loads(c["arguments"]) for c in calls_of(third)] == [{"city": "Oslo"}]


def test_a_query_no_tool_matches_gets_a_plain_answer(client: Client) -> None:
    body = client.ok(input="Tell me a joke", tools=[WEATHER])
    assert "plain reply to: Tell me a joke" in answer_of(body)


# --- the stream -----------------------------------------------------------------------------


def test_the_stream_of_a_tool_round(client: Client) -> None:
    events = sse(client.post(input="What is the weather in Paris?", tools=[WEATHER], stream=True))
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    kinds = [e["type"] for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed"
    added = [e for e in events if e["type"] == "response.output_item.added"]
    call_added = next(e for e in added if e["item"]["type"] == "function_call")
    assert call_added["item"]["arguments"] == ""
    index, item_id = call_added["output_index"], call_added["item"]["id"]
    deltas = [e for e in events if e["type"] == "response.function_call_arguments.delta"]
    assert all(e["output_index"] == index and e["item_id"] == item_id for e in deltas)
    (done,) = [e for e in events if e["type"] == "response.function_call_arguments.done"]
    assert "".join(e["delta"] for e in deltas) == done["arguments"]
    final = events[-1]["response"]
    assert calls_of(final)[0]["arguments"] == done["arguments"]
    assert events[0]["response"]["id"] == final["id"]


def test_the_stream_of_an_answer_has_the_content_part_events(client: Client) -> None:
    first = client.ok(input="What is the weather in Paris?", tools=[WEATHER])
    events = sse(
        client.post(
            previous_response_id=first["id"], input=outputs(first), tools=[WEATHER], stream=True
        )
    )
    kinds = [e["type"] for e in events]
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert kinds[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    text = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert text == "sunny, 21 C" == answer_of(events[-1]["response"])


# --- the real API's refusals ----------------------------------------------------------------


def test_every_call_must_be_answered(client: Client) -> None:
    first = client.ok(input="What is the weather in Paris and Tokyo?", tools=[WEATHER])
    missing = calls_of(first)[1]["call_id"]
    error = error_of(
        client.post(previous_response_id=first["id"], input=outputs(first)[:1], tools=[WEATHER]),
        400,
    )
    assert error["message"] == f"No tool output found for function call {missing}."
    assert error["param"] == "input"
    error = error_of(
        client.post(previous_response_id=first["id"], input="new question", tools=[WEATHER]), 400
    )
    assert "No tool output found for function call" in error["message"]


def test_an_output_item_with_an_id_is_refused_with_previous_response_id(client: Client) -> None:
    first = client.ok(input="What is the weather in Paris?", tools=[WEATHER])
    given = [{**outputs(first)[0], "id": calls_of(first)[0]["id"]}]
    error = error_of(
        client.post(previous_response_id=first["id"], input=given, tools=[WEATHER]), 400
    )
    assert error["message"].startswith("No tool output found for function call call_")


def test_an_output_for_an_unknown_call_is_refused(client: Client) -> None:
    first = client.ok(input="What is the weather in Paris?", tools=[WEATHER])
    given = [*outputs(first), {"type": "function_call_output", "call_id": "call_x", "output": ""}]
    error = error_of(
        client.post(previous_response_id=first["id"], input=given, tools=[WEATHER]), 400
    )
    assert "No tool call found for function call output with call_id call_x" in error["message"]


def test_an_unknown_previous_response_is_400(client: Client) -> None:
    error = error_of(client.post(previous_response_id="resp_nope", input="hi"), 400)
    assert error["code"] == "previous_response_not_found"
    assert "resp_nope" in error["message"]


@pytest.mark.parametrize(
    ("tool", "expected"),
    [
        (
            {"type": "function", "function": {"name": "get_weather", "parameters": {}}},
            "Missing required parameter: 'tools[0].name'. (Responses takes",
        ),
        (
            {**WEATHER, "parameters": {"type": "object", "properties": {"city": {}}}},
            "Invalid schema for function 'get_weather': In context=(), 'additionalProperties'",
        ),
        (
            {
                **WEATHER,
                "parameters": {
                    "type": "object",
                    "properties": {"city": {"type": "string"}},
                    "additionalProperties": False,
                },
            },
            "including every key in properties. Missing 'city'",
        ),
        ({"type": "web_search"}, "this emulator serves function tools only"),
    ],
)
def test_bad_tools_are_refused_as_the_real_api_refuses_them(
    client: Client, tool: dict[str, Any], expected: str
) -> None:
    error = error_of(client.post(input="hi", tools=[tool]), 400)
    assert expected in error["message"]


def test_bad_bodies_are_400_naming_the_field(client: Client) -> None:
    assert "Missing required parameter: 'input'" in error_of(client.post(), 400)["message"]
    error = error_of(client.post(messages=[{"role": "user", "content": "hi"}]), 400)
    assert "'messages' belongs to Chat Completions" in error["message"]
    error = error_of(client.post(input="hi", tool_choice="always"), 400)
    assert error["param"] == "tool_choice"
    error = error_of(client.post(input="hi", background=True), 400)
    assert error["param"] == "background" and "background responses" in error["message"]
    error = error_of(client.post(input="hi", conversation="conv_1"), 400)
    assert "previous_response_id" in error["message"]
    response = client.session.post(
        client.url + "/responses", data=b"{not json", headers=client.headers, timeout=TIMEOUT
    )
    assert "could not parse the JSON body" in error_of(response, 400)["message"]


def test_an_unknown_model_is_404(client: Client) -> None:
    error = error_of(client.post(model="gpt-nope", input="hi"), 404)
    assert error["code"] == "model_not_found" and client.model in error["message"]


def test_tool_choice(client: Client) -> None:
    forced = client.ok(
        input="Tell me a joke",
        tools=[WEATHER],
        tool_choice={"type": "function", "name": "get_weather"},
    )
    assert [c["name"] for c in calls_of(forced)] == ["get_weather"]
    none = client.ok(input="Weather in Paris?", tools=[WEATHER], tool_choice="none")
    assert not calls_of(none)
    required = client.ok(input="Tell me a joke", tools=[WEATHER], tool_choice="required")
    assert [c["name"] for c in calls_of(required)] == ["get_weather"]
    error = error_of(
        client.post(input="hi", tools=[WEATHER], tool_choice={"type": "function", "name": "x"}),
        400,
    )
    assert error["message"] == "Tool choice 'x' not found in 'tools' parameter."


# --- store: false -----------------------------------------------------------------------------


def test_store_false_cannot_be_chained_or_retrieved(client: Client) -> None:
    first = client.ok(input="What is the weather in Paris?", tools=[WEATHER], store=False)
    assert first["store"] is False
    assert error_of(client.get(f"/responses/{first['id']}"), 404)["message"] == (
        f"Response with id '{first['id']}' not found."
    )
    error = error_of(
        client.post(previous_response_id=first["id"], input=outputs(first), tools=[WEATHER]), 400
    )
    assert "store=false" in error["message"] and "resend its items" in error["message"]


def test_store_false_resends_every_item_with_encrypted_reasoning(
    client: Client, emu: Emulator
) -> None:
    question = {"role": "user", "content": "What is the weather in Paris?"}
    include = ["reasoning.encrypted_content"]
    first = client.ok(input=[question], tools=[WEATHER], store=False, include=include)
    reasoning, call = first["output"]
    assert reasoning["encrypted_content"]

    without_reasoning = [question, call, *outputs(first)]
    error = error_of(client.post(input=without_reasoning, tools=[WEATHER], store=False), 400)
    assert error["message"] == (
        f"Item '{call['id']}' of type 'function_call' was provided without its required "
        f"'reasoning' item: '{reasoning['id']}'."
    )
    bare = {k: v for k, v in reasoning.items() if k != "encrypted_content"}
    error = error_of(
        client.post(input=[question, bare, call, *outputs(first)], tools=[WEATHER], store=False),
        400,
    )
    assert "Items are not persisted when `store` is set to false" in error["message"]

    second = client.ok(
        input=[question, reasoning, call, *outputs(first)], tools=[WEATHER], store=False
    )
    assert answer_of(second) == "sunny, 21 C"
    conversation = emu.app.response_conversation(second["id"])  # type: ignore[attr-defined]
    assert emu.conversation(conversation).accepted_outputs == {call["call_id"]: 1}


# --- auth -----------------------------------------------------------------------------------


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"}])
def test_a_missing_or_wrong_key_is_401(emu: Emulator, headers: dict[str, str]) -> None:
    response = requests.post(
        emu.env()["OPENAI_BASE_URL"] + "/responses",
        json={"model": emu.app_id, "input": "hi"},
        headers=headers,
        timeout=TIMEOUT,
    )
    error = error_of(response, 401)
    assert "wrong" not in error["message"]


def test_an_unknown_path_is_404_listing_the_endpoints(client: Client) -> None:
    error = error_of(client.get("/chat/completions"), 404)
    assert "POST /v1/responses" in error["message"]


# --- faults ---------------------------------------------------------------------------------


def test_a_429_fault_has_retry_after_and_leaves_nothing_behind(client: Client) -> None:
    response = client.post(
        input="Weather in Paris?", tools=[WEATHER], headers={"X-Emulator-Fault": "status=429"}
    )
    assert response.headers["Retry-After"] == "1"
    assert error_of(response, 429)["type"] == "rate_limit_exceeded"


def test_an_inband_fault_is_an_error_event_in_the_stream(client: Client) -> None:
    response = client.post(
        input="Weather in Paris?",
        tools=[WEATHER],
        stream=True,
        headers={"X-Emulator-Fault": "inband=server_error,inband_after=2,message=boom"},
    )
    events = sse(response)
    assert [e["type"] for e in events] == ["response.created", "response.in_progress", "error"]
    assert events[-1]["message"] == "boom" and events[-1]["sequence_number"] == 2


def test_a_drop_fault_cuts_the_stream(client: Client) -> None:
    response = client.session.post(
        client.url + "/responses",
        json={
            "model": client.model,
            "input": "Weather in Paris?",
            "tools": [WEATHER],
            "stream": True,
        },
        headers={**client.headers, "X-Emulator-Fault": "drop_after=3"},
        stream=True,
        timeout=TIMEOUT,
    )
    with pytest.raises(requests.exceptions.ChunkedEncodingError):
        response.content  # noqa: B018


# --- scenarios ------------------------------------------------------------------------------


def test_a_scenario_scripts_the_responses_protocol_too() -> None:
    scenario = {
        "rules": [
            {
                "match": r"weather in (?P<city>\w+)",
                "steps": [{"tool": "get_weather", "arguments": {"city": "{city}"}}],
                "answer": "It is {outputs.get_weather} in {city}.",
            }
        ]
    }
    with Emulator(protocol="responses", scenario=scenario, faults="") as emu:
        client = Client(emu)
        first = client.ok(input="weather in Lima", tools=[WEATHER])
        assert json.loads(calls_of(first)[0]["arguments"]) == {"city": "Lima"}
        second = client.ok(
            previous_response_id=first["id"], input=outputs(first, "warm"), tools=[WEATHER]
        )
        assert answer_of(second) == "It is warm in Lima."


def test_outputs_delivered_twice_are_counted_twice(client: Client, emu: Emulator) -> None:
    first = client.ok(input="What is the weather in Paris?", tools=[WEATHER])
    for _ in range(2):
        client.ok(previous_response_id=first["id"], input=outputs(first), tools=[WEATHER])
    conversation = emu.app.response_conversation(first["id"])  # type: ignore[attr-defined]
    assert emu.conversation(conversation).accepted_outputs == {calls_of(first)[0]["call_id"]: 2}


@pytest.mark.parametrize("stream", [True, False])
def test_an_incomplete_fault_ends_the_response_incomplete(client: Client, stream: bool) -> None:
    fault = {"X-Emulator-Fault": "inband=max_output_tokens"}
    response = client.post(input="Weather in Paris?", tools=[WEATHER], stream=stream, headers=fault)
    if stream:
        events = sse(response)
        assert events[-1]["type"] == "response.incomplete"
        assert [e["sequence_number"] for e in events] == list(range(len(events)))
        body = events[-1]["response"]
    else:
        assert response.status_code == 200, response.text
        body = response.json()
    assert body["status"] == "incomplete"
    assert body["incomplete_details"] == {"reason": "max_output_tokens"}
