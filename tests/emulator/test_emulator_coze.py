"""The Coze emulator over real HTTP: the v3 chat wire, its errors, faults and the bot's plugins."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from bridge.emulator import Emulator, ScenarioError
from bridge.emulator.protocols import PROTOCOLS

TIMEOUT = 30
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "City name"}},
            "required": ["city"],
        },
    },
}
PING = {"name": "ping_server", "description": "Ping the server", "parameters": {"type": "object"}}
SCENARIO: dict[str, Any] = {
    "coze": {"bot_name": "Weather bot", "plugins": [WEATHER, PING]},
    "rules": [
        {
            "name": "booking",
            "match": "book a room",
            "steps": [{"ask": "Which day?", "as": "day"}],
            "answer": "Booked for {answers.day}.",
        }
    ],
}


@pytest.fixture(scope="module")
def emu() -> Iterator[Emulator]:
    with Emulator(protocol="coze", scenario=SCENARIO, faults="") as emulator:
        yield emulator


class Coze:
    """A raw client: JSON envelopes and strict SSE frames (one event: and one data: line)."""

    def __init__(self, emu: Emulator, token: str | None = None) -> None:
        self.base = emu.base_url
        self.bot_id = emu.app_id
        self.headers = {"Authorization": f"Bearer {token or emu.token}"}

    def post(self, path: str, body: Any = None, **kw: Any) -> requests.Response:
        headers = {**self.headers, **kw.pop("headers", {})}
        return requests.post(self.base + path, json=body, headers=headers, timeout=TIMEOUT, **kw)

    def chat(self, query: str, *, stream: bool = True, **extra: Any) -> requests.Response:
        params = (
            {"conversation_id": extra.pop("conversation_id")}
            if "conversation_id" in extra
            else None
        )
        body = {
            "bot_id": self.bot_id,
            "user_id": "user-1",
            "stream": stream,
            "auto_save_history": True,
            "additional_messages": [
                {"role": "user", "type": "question", "content": query, "content_type": "text"}
            ],
            **extra,
        }
        return self.post("/v3/chat", body, params=params, headers=extra.pop("headers", {}))

    def submit(
        self, chat: dict[str, Any], outputs: list[dict[str, str]], *, stream: bool = True
    ) -> requests.Response:
        params = {"conversation_id": chat["conversation_id"], "chat_id": chat["id"]}
        return self.post(
            "/v3/chat/submit_tool_outputs",
            {"tool_outputs": outputs, "stream": stream},
            params=params,
        )

    def get(self, path: str, **params: str) -> requests.Response:
        return requests.get(self.base + path, params=params, headers=self.headers, timeout=TIMEOUT)


def frames(response: requests.Response) -> list[tuple[str, Any]]:
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    result = []
    for block in response.text.split("\n\n"):
        if not block:
            continue
        lines = block.split("\n")
        assert len(lines) == 2 and lines[0].startswith("event:") and lines[1].startswith("data:")
        result.append((lines[0][6:], json.loads(lines[1][5:])))
    return result


def names(events: list[tuple[str, Any]]) -> list[str]:
    return [name for name, _ in events]


def required(events: list[tuple[str, Any]]) -> dict[str, Any]:
    return next(data for name, data in events if name == "conversation.chat.requires_action")


@pytest.fixture
def coze(emu: Emulator) -> Coze:
    emu.clear_requests()
    return Coze(emu)


def test_the_protocol_is_registered_with_the_coze_client_environment(emu: Emulator) -> None:
    assert PROTOCOLS["coze"].module == "bridge.emulator.coze"
    assert emu.env() == {
        "COZE_API_BASE": emu.base_url,
        "COZE_API_TOKEN": emu.token,
        "COZE_BOT_ID": emu.app_id,
    }


def test_a_streamed_tool_round_trip(coze: Coze, emu: Emulator) -> None:
    first = frames(coze.chat("What is the weather in Paris?"))
    assert names(first) == [
        "conversation.chat.created",
        "conversation.chat.in_progress",
        "conversation.message.completed",
        "conversation.chat.requires_action",
        "done",
    ]
    assert first[-1][1] == "[DONE]"
    chat = required(first)
    calls = chat["required_action"]["submit_tool_outputs"]["tool_calls"]
    assert [(c["type"], c["function"]["name"]) for c in calls] == [("function", "get_weather")]
    assert json.loads(calls[0]["function"]["arguments"]) == {"city": "Paris"}
    function_call = first[2][1]
    assert function_call["type"] == "function_call"
    assert json.loads(function_call["content"])["name"] == "local_plugin-get_weather"
    assert emu.conversation(chat["conversation_id"]).pending_call_ids == (calls[0]["id"],)

    second = frames(coze.submit(chat, [{"tool_call_id": calls[0]["id"], "output": "18 C"}]))
    kinds = [(n, d.get("type")) for n, d in second if n.startswith("conversation.message")]
    assert kinds[0] == ("conversation.message.completed", "tool_response")
    answer = "".join(d["content"] for n, d in second if n == "conversation.message.delta")
    assert answer == "18 C"
    done = next(d for n, d in second if n == "conversation.chat.completed")
    assert done["id"] == chat["id"] and done["usage"]["token_count"] > 0
    assert second[-1] == ("done", "[DONE]")
    snapshot = emu.conversation(chat["conversation_id"])
    assert snapshot.pending_call_ids == () and snapshot.accepted_outputs == {calls[0]["id"]: 1}
    assert snapshot.messages[-1].answer == "18 C"
    assert all(r.headers.get("authorization") == "Bearer [secure]" for r in emu.requests)


def test_every_answer_carries_x_tt_logid(coze: Coze) -> None:
    ok = coze.post("/v1/conversation/create", {"bot_id": coze.bot_id})
    missing = coze.post("/v3/nowhere", {})
    assert ok.headers["x-tt-logid"] and missing.headers["x-tt-logid"]
    assert missing.json()["detail"]["logid"] == missing.headers["x-tt-logid"]


def test_a_conversation_created_first_is_continued(coze: Coze) -> None:
    created = coze.post("/v1/conversation/create", {"bot_id": coze.bot_id}).json()
    assert created["code"] == 0 and created["msg"] == ""
    conversation_id = created["data"]["id"]
    events = frames(coze.chat("hello there", conversation_id=conversation_id))
    done = next(d for n, d in events if n == "conversation.chat.completed")
    assert done["conversation_id"] == conversation_id


def test_a_plugin_without_arguments_gets_an_empty_arguments_string(coze: Coze) -> None:
    calls = required(frames(coze.chat("ping the server")))["required_action"][
        "submit_tool_outputs"
    ]["tool_calls"]
    assert calls[0]["function"] == {"name": "ping_server", "arguments": ""}


def test_the_non_streamed_chat_is_polled_then_listed(coze: Coze) -> None:
    chat = coze.chat("What is the weather in Tokyo?", stream=False).json()["data"]
    assert chat["status"] == "in_progress"
    params = {"conversation_id": chat["conversation_id"], "chat_id": chat["id"]}
    polled = coze.post("/v3/chat/retrieve", params=params).json()["data"]
    assert polled["status"] == "requires_action"
    call = polled["required_action"]["submit_tool_outputs"]["tool_calls"][0]
    submitted = coze.submit(polled, [{"tool_call_id": call["id"], "output": "rain"}], stream=False)
    assert submitted.json()["data"]["status"] == "in_progress"
    final = coze.post("/v3/chat/retrieve", params=params).json()["data"]
    assert final["status"] == "completed" and final["usage"]["output_count"] > 0
    listed = coze.get("/v3/chat/message/list", **params).json()["data"]
    assert [m["type"] for m in listed] == ["function_call", "tool_response", "answer", "verbose"]
    assert listed[2]["content"] == "rain"


def test_a_question_pauses_with_reply_message_and_the_next_chat_answers_it(coze: Coze) -> None:
    events = frames(coze.chat("please book a room"))
    question = "".join(d["content"] for n, d in events if n == "conversation.message.delta")
    assert question == "Which day?"
    chat = required(events)
    call = chat["required_action"]["submit_tool_outputs"]["tool_calls"][0]
    assert call["type"] == "reply_message" and "function" not in call
    refused = coze.submit(chat, [{"tool_call_id": call["id"], "output": "Monday"}]).json()
    assert refused["code"] == 4000 and "reply_message" in refused["msg"]
    reply = frames(coze.chat("Monday", conversation_id=chat["conversation_id"]))
    answer = "".join(d["content"] for n, d in reply if n == "conversation.message.delta")
    assert answer == "Booked for Monday."


def test_the_bot_lists_its_plugin_apis(coze: Coze) -> None:
    body = coze.get("/v1/bot/get_online_info", bot_id=coze.bot_id).json()
    assert body["code"] == 0 and body["data"]["name"] == "Weather bot"
    (plugin,) = body["data"]["plugin_info_list"]
    assert [a["name"] for a in plugin["api_info_list"]] == ["get_weather", "ping_server"]


@pytest.mark.parametrize(
    ("token", "status", "code"), [("wrong-token", 401, 4100), (None, 200, 4200)]
)
def test_a_bad_token_or_bot_is_a_coze_error(
    emu: Emulator, token: str | None, status: int, code: int
) -> None:
    client = Coze(emu, token)
    if token is None:
        client.bot_id = "no-such-bot"
    response = client.chat("hello")
    assert response.status_code == status
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert body["code"] == code and body["msg"]
    assert "wrong-token" not in body["msg"]


def test_outputs_must_answer_every_call_of_the_chat(coze: Coze) -> None:
    chat = required(frames(coze.chat("weather in Paris and Tokyo")))
    calls = chat["required_action"]["submit_tool_outputs"]["tool_calls"]
    assert len(calls) == 2
    body = coze.submit(chat, [{"tool_call_id": calls[0]["id"], "output": "x"}]).json()
    assert (
        body["code"] == 4000
        and f"missing output(s) for tool_call_id(s) {calls[1]['id']}" in (body["msg"])
    )
    busy = coze.chat("hello", conversation_id=chat["conversation_id"]).json()
    assert busy["code"] == 4016 and chat["id"] in busy["msg"]
    bad = coze.submit(chat, [{"tool_call_id": calls[0]["id"], "output": {"not": "a string"}}])
    assert bad.json()["code"] == 4000 and "tool_outputs[0].output" in bad.json()["msg"]


def test_a_chat_without_auto_save_history_cannot_take_outputs(coze: Coze) -> None:
    chat = required(frames(coze.chat("weather in Paris", auto_save_history=False)))
    call = chat["required_action"]["submit_tool_outputs"]["tool_calls"][0]
    body = coze.submit(chat, [{"tool_call_id": call["id"], "output": "x"}]).json()
    assert body["code"] == 5000 and "auto_save_history=true" in body["msg"]


def test_cancel_ends_a_waiting_chat_and_refuses_a_finished_one(coze: Coze, emu: Emulator) -> None:
    chat = required(frames(coze.chat("weather in Paris")))
    ids = {"conversation_id": chat["conversation_id"], "chat_id": chat["id"]}
    canceled = coze.post("/v3/chat/cancel", ids).json()
    assert canceled["data"]["status"] == "canceled"
    assert emu.conversation(chat["conversation_id"]).pending_call_ids == ()
    again = coze.post("/v3/chat/cancel", ids).json()
    assert again["code"] == 4104


def test_unknown_ids_and_bodies_are_named(coze: Coze) -> None:
    gone = coze.chat("hello", conversation_id="nope").json()
    assert gone["code"] == 4200 and "'nope'" in gone["msg"]
    retrieve = coze.post("/v3/chat/retrieve", params={"conversation_id": "x"}).json()
    assert retrieve["code"] == 4000 and "chat_id missing" in retrieve["msg"]
    no_user = coze.post("/v3/chat", {"bot_id": coze.bot_id, "user_id": "u"}).json()
    assert no_user["code"] == 4000 and "no user message" in no_user["msg"]
    no_bot = coze.post("/v3/chat", {"user_id": "u"}).json()
    assert no_bot["code"] == 4000 and "bot_id" in no_bot["msg"]


def test_faults_permission_rate_limit_and_error_events(coze: Coze) -> None:
    chat = required(frames(coze.chat("weather in Paris")))
    call = chat["required_action"]["submit_tool_outputs"]["tool_calls"][0]
    params = {"conversation_id": chat["conversation_id"], "chat_id": chat["id"]}
    denied = coze.post(
        "/v3/chat/submit_tool_outputs",
        {"tool_outputs": [{"tool_call_id": call["id"], "output": "x"}], "stream": True},
        params=params,
        headers={"X-Emulator-Fault": "inband=4101,message=no permission submitToolChat"},
    )
    assert denied.status_code == 200 and denied.json()["code"] == 4101
    limited = coze.chat("hello", headers={"X-Emulator-Fault": "status=429"})
    assert limited.status_code == 429 and limited.headers["retry-after"] == "1"
    assert limited.json()["code"] == 4013
    broken = frames(
        coze.chat("hello", headers={"X-Emulator-Fault": "inband=5000,inband_after=2,message=boom"})
    )
    assert names(broken) == [
        "conversation.chat.created",
        "conversation.chat.in_progress",
        "error",
        "done",
    ]
    assert broken[2][1] == {"code": 5000, "msg": "boom"}


def test_a_bad_coze_section_names_the_key(tmp_path: Any) -> None:
    path = tmp_path / "bot.yaml"
    path.write_text("coze:\n  plugins:\n    - name: 'bad name'\n", encoding="utf-8")
    with pytest.raises(
        ScenarioError, match=r"bot\.yaml: coze: plugins\[0\]\.name: String should match"
    ):
        Emulator(protocol="coze", scenario=path)
    path.write_text("coze: {plugins: [{name: a}]}\nrules: [{match: '('}]\n", encoding="utf-8")
    with pytest.raises(ScenarioError, match=r"bot\.yaml: rules\[0\]\.match"):
        Emulator(protocol="coze", scenario=path)


def test_files_are_uploaded_and_referenced_by_object_string_messages(coze: Coze) -> None:
    uploaded = requests.post(
        coze.base + "/v1/files/upload",
        files={"file": ("a.txt", b"hello")},
        headers=coze.headers,
        timeout=TIMEOUT,
    ).json()
    assert uploaded["code"] == 0 and uploaded["data"]["bytes"] == 5
    file_id = uploaded["data"]["id"]
    assert coze.get("/v1/files/retrieve", file_id=file_id).json()["data"]["file_name"] == "a.txt"
    content = json.dumps(
        [{"type": "text", "text": "weather in Paris"}, {"type": "file", "file_id": file_id}]
    )
    message = {"role": "user", "content": content, "content_type": "object_string"}
    body = {"bot_id": coze.bot_id, "user_id": "u", "stream": True, "additional_messages": [message]}
    events = frames(coze.post("/v3/chat", body))
    assert "conversation.chat.requires_action" in names(events)
    unknown = json.dumps([{"type": "text", "text": "hi"}, {"type": "file", "file_id": "nope"}])
    body["additional_messages"] = [{**message, "content": unknown}]
    refused = coze.post("/v3/chat", body).json()
    assert refused["code"] == 4000 and "file_id(s) nope were not uploaded" in refused["msg"]
    not_multipart = coze.post("/v1/files/upload", {"file": "x"}).json()
    assert not_multipart["code"] == 4000 and "multipart/form-data" in not_multipart["msg"]


def test_a_bot_without_plugins_says_so() -> None:
    with Emulator(protocol="coze", faults="") as emu:
        events = frames(Coze(emu).chat("What is the weather in Paris?"))
    answer = "".join(d["content"] for n, d in events if n == "conversation.message.delta")
    assert "This bot has no local plugins" in answer and "coze: plugins" in answer
    assert answer.endswith("You asked: What is the weather in Paris?")
