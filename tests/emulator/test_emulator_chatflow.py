"""Workflow questions (scenario ``ask`` steps): chatflow interrupts and ``action`` resume.

Raw HTTP against a running emulator: the events of a question, the conversation's state
machine (what may follow a pending question), bad resume requests, stream and non-stream,
faults on the resume, and scenario files with bad ``ask`` steps. The last tests drive the
emulator with the official SDK's documented chatflow samples (the wire's oracle).
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bridge.emulator import Emulator, ScenarioError, load_scenario
from bridge.emulator.templates import TemplateError, render
from tests.emulator.helpers import Api, body_events, interrupt_calls, statuses, tool
from tests.support.sdk_venv import ensure_sdk_venv

BOOK = tool(
    "book_room",
    "Book a room or a table for a day",
    {"what": {"type": "string"}, "date": {"type": "string"}},
    ["what", "date"],
)
FORECAST = tool("forecast", "Weather forecast", {"city": {"type": "string"}}, ["city"])

SCENARIO: dict[str, Any] = {
    "rules": [
        {
            "name": "booking",
            "match": "预订(?P<what>会议室|餐厅)",
            "steps": [
                {"ask": "您要预订哪一天的{what}？", "as": "date"},
                {"tool": "book_room", "arguments": {"what": "{what}", "date": "{answers.date}"}},
            ],
            "answer": "已为您预订{answers.date}的{what}：{outputs.book_room}",
        },
        {
            "name": "trip",
            "match": "^plan a trip",
            "steps": [
                {"ask": "From where?", "as": "origin"},
                {"ask": "And from {answers.origin} to where?", "as": "dest"},
            ],
            "answer": "{answers.origin} -> {answers.dest} ({query})",
        },
        {
            "name": "tools-then-ask",
            "match": "^picnic",
            "steps": [
                {"tool": "forecast", "arguments": {"city": "Paris"}},
                {"ask": "It will be {outputs.forecast.temp} degrees. Still go?"},
            ],
            "answer": "noted",
        },
        {
            "name": "flaky",
            "match": "^flaky question",
            "steps": [{"ask": "Sure?", "as": "sure"}],
            "answer": "you said {answers.sure}",
            "faults": "status=503,round=1,times=1",
        },
        {
            # Taken when book_room was not sent (the SDK samples send no tools).
            "name": "booking-without-tools",
            "match": "预订(?P<what>会议室|餐厅)",
            "steps": [{"ask": "您要预订哪一天的{what}？", "as": "date"}],
            "answer": "已为您预订{answers.date}的{what}",
        },
    ]
}


@pytest.fixture(scope="module")
def emu() -> Iterator[Emulator]:
    """An emulator scripted with questions (overrides the default-planner one)."""
    with Emulator(scenario=SCENARIO, faults="") as emulator:
        yield emulator


def resume_action(interrupt_id: str, kind: str = "chat") -> dict[str, Any]:
    """The `action` the official SDK sends (`Action.create_resume_action`)."""
    return {
        "action_type": "resume",
        "parameters": {"interrupt_event": {"id": interrupt_id, "type": kind}},
    }


def interrupt_id_of(chunks: list[dict[str, Any]]) -> str:
    """The `interrupt_event_id` of the response's `chatflow_interrupt` event."""
    [event] = [e for e in body_events(chunks) if e["content_type"] == "chatflow_interrupt"]
    value: str = event["outputs"]["interrupt_event_id"]
    return value


def ask(api: Api, query: str, *, stream: bool = False, **fields: Any) -> tuple[str, str]:
    """Start a conversation whose first query reaches a question; (conversation, interrupt id)."""
    conversation_id = api.create()
    chunks = api.chunks(conversation_id, query, stream=stream, **fields)
    return conversation_id, interrupt_id_of(chunks)


def error_of(response: Any) -> str:
    """The message of a 400 error body."""
    assert response.status_code == 400, response.text
    body = response.json()
    assert body["code"] == "InvalidRequestError" and body["request_id"]
    message: str = body["message"]
    return message


# --- the events of a question ---------------------------------------------------------------


@pytest.mark.parametrize("stream", [True, False])
def test_a_question_is_a_message_then_a_chatflow_interrupt(
    api: Api, emu: Emulator, stream: bool
) -> None:
    conversation_id = api.create()
    chunks = api.chunks(conversation_id, "请帮我预订会议室", stream=stream, tools=[BOOK])
    assert statuses(chunks) == [
        "status/preparing",
        "publish_message/done",
        "chatflow_interrupt/done",
        "status/success",
    ]
    events = body_events(chunks)
    message, interrupt = events[1], events[2]
    assert message["event_type"] == interrupt["event_type"] == events[3]["event_type"] == "chatflow"
    assert message["outputs"]["message"] == "您要预订哪一天的会议室？"
    uuid.UUID(message["outputs"]["message_id"])
    interrupt_id = interrupt["outputs"]["interrupt_event_id"]
    uuid.UUID(interrupt_id)
    assert interrupt["outputs"] == {
        "interrupt_event_id": interrupt_id,
        "interrupt_event_type": "chat",
    }
    assert "tool_calls" not in interrupt and interrupt["event_code"] == 0
    # The question is in the event only: the answer text stays empty, as the platform sends it.
    assert all(c["answer"] == "" for c in chunks)
    assert len({c["message_id"] for c in chunks}) == 1
    if stream:
        assert chunks[-1]["content"] == [] and chunks[-1]["is_completion"] is True
        assert all(len(c["content"]) == 1 for c in chunks[:-1])
    snapshot = emu.conversation(conversation_id)
    assert snapshot.pending_interrupt_id == interrupt_id and snapshot.pending_call_ids == ()
    assert snapshot.pending_input is not None
    assert (snapshot.pending_input.question, snapshot.pending_input.name) == (
        "您要预订哪一天的会议室？",
        "date",
    )
    [record] = snapshot.messages
    assert (record.query, record.answer, record.status) == (
        "请帮我预订会议室",
        "您要预订哪一天的会议室？",
        "human_input",
    )
    assert record.message_id == chunks[0]["message_id"]


@pytest.mark.parametrize("stream", [True, False])
def test_resume_runs_the_next_steps_with_the_reply(api: Api, emu: Emulator, stream: bool) -> None:
    conversation_id, interrupt_id = ask(api, "请帮我预订餐厅", stream=stream, tools=[BOOK])
    chunks = api.chunks(conversation_id, "明天", stream=stream, action=resume_action(interrupt_id))
    assert statuses(chunks) == ["status/preparing", "contexts/interrupt"]
    [call] = interrupt_calls(chunks)
    assert call["function"] == {"name": "book_room", "arguments": {"what": "餐厅", "date": "明天"}}
    assert emu.conversation(conversation_id).pending_interrupt_id is None
    final = api.submit(conversation_id, {call["id"]: "订单 A-7"}, stream=stream)
    assert "".join(c["answer"] for c in final) == "已为您预订明天的餐厅：订单 A-7"
    assert statuses(final)[-1] == "status/success"
    snapshot = emu.conversation(conversation_id)
    assert snapshot.pending_input is None and snapshot.pending_call_ids == ()
    paused, done = snapshot.messages
    assert (paused.status, paused.tool_calls) == ("human_input", ())
    assert (done.query, done.answer, done.status) == (
        "明天",
        "已为您预订明天的餐厅：订单 A-7",
        "success",
    )
    assert [(c.name, c.arguments) for c in done.tool_calls] == [
        ("book_room", {"what": "餐厅", "date": "明天"})
    ]
    # The reply starts a new message; its tool round keeps one message id.
    assert paused.message_id != done.message_id == chunks[0]["message_id"] == final[0]["message_id"]


def test_questions_in_a_row_see_earlier_replies(api: Api, emu: Emulator) -> None:
    conversation_id, first = ask(api, "plan a trip please")
    second_chunks = api.chunks(conversation_id, "Oslo", stream=True, action=resume_action(first))
    second = interrupt_id_of(second_chunks)
    assert second != first
    [message] = [e for e in body_events(second_chunks) if e["content_type"] == "publish_message"]
    assert message["outputs"]["message"] == "And from Oslo to where?"
    final = api.chunks(conversation_id, "Rome", stream=True, action=resume_action(second))
    # {query} stays the query that matched the rule.
    assert "".join(c["answer"] for c in final) == "Oslo -> Rome (plan a trip please)"
    assert [m.status for m in emu.conversation(conversation_id).messages] == [
        "human_input",
        "human_input",
        "success",
    ]


def test_a_question_after_a_tool_round_uses_its_output(api: Api, emu: Emulator) -> None:
    conversation_id = api.create()
    first = api.chunks(conversation_id, "picnic tomorrow?", stream=False, tools=[FORECAST])
    [call] = interrupt_calls(first)
    asked = api.submit(conversation_id, {call["id"]: '{"temp": 14}'})
    [message] = [e for e in body_events(asked) if e["content_type"] == "publish_message"]
    assert message["outputs"]["message"] == "It will be 14 degrees. Still go?"
    # An ask without `as` is resumed like any other; its reply just has no name.
    final = api.chunks(
        conversation_id, "yes", stream=False, action=resume_action(interrupt_id_of(asked))
    )
    assert final[0]["answer"] == "noted"
    paused, done = emu.conversation(conversation_id).messages
    assert [c.name for c in paused.tool_calls] == ["forecast"] and done.tool_calls == ()


def test_a_question_that_cannot_be_rendered_fails_the_run(api: Api, emu: Emulator) -> None:
    conversation_id = api.create()
    [call] = interrupt_calls(api.chunks(conversation_id, "picnic?", stream=False, tools=[FORECAST]))
    chunks = api.submit(conversation_id, {call["id"]: "not json"})
    [error] = [e for e in body_events(chunks) if e["event_status"] == "error"]
    assert "scenario rule 2 (tools-then-ask): steps[1].ask" in error["event_message"]
    assert "the output of 'forecast' is not JSON" in error["event_message"]
    snapshot = emu.conversation(conversation_id)
    assert snapshot.pending_input is None and snapshot.messages[-1].status == "error"


# --- the state machine: what may follow a pending question ---------------------------------


def test_a_query_without_action_while_a_question_waits_is_its_reply(
    api: Api, emu: Emulator
) -> None:
    conversation_id, _ = ask(api, "预订会议室", tools=[BOOK])
    chunks = api.chunks(conversation_id, "后天", stream=False, tools=[BOOK])
    [call] = interrupt_calls(chunks)
    assert call["function"] == {
        "name": "book_room",
        "arguments": {"what": "会议室", "date": "后天"},
    }
    snapshot = emu.conversation(conversation_id)
    assert snapshot.pending_interrupt_id is None
    assert [(m.query, m.status) for m in snapshot.messages] == [("预订会议室", "human_input")]


def test_tool_outputs_while_a_question_waits_are_refused(api: Api, emu: Emulator) -> None:
    conversation_id, interrupt_id = ask(api, "预订会议室", tools=[BOOK])
    outputs = [{"tool_call_id": "tc-1", "output": "x"}]
    message = error_of(api.run(conversation_id, "", tool_outputs=outputs))
    assert "waiting for the person's reply" in message and "not for tool outputs" in message
    assert f"interrupt_event_id {interrupt_id}" in message
    assert emu.conversation(conversation_id).pending_interrupt_id == interrupt_id


def test_resume_with_another_id_names_the_expected_one(api: Api, emu: Emulator) -> None:
    conversation_id, interrupt_id = ask(api, "预订会议室", tools=[BOOK])
    message = error_of(api.run(conversation_id, "明天", action=resume_action("ev-wrong")))
    assert (
        f"action.parameters.interrupt_event.id 'ev-wrong' is not the pending interrupt of "
        f"conversation {conversation_id!r}; expected {interrupt_id!r}"
    ) in message
    # Nothing changed: the right id still resumes.
    chunks = api.chunks(conversation_id, "明天", stream=False, action=resume_action(interrupt_id))
    assert interrupt_calls(chunks)[0]["function"]["arguments"]["date"] == "明天"


def test_resume_when_nothing_waits_is_refused(api: Api) -> None:
    conversation_id = api.create()
    message = error_of(api.run(conversation_id, "明天", action=resume_action("ev-1")))
    assert f"conversation {conversation_id!r} has no pending question" in message
    assert "interrupt_event_id 'ev-1'" in message and "send the query without action" in message


def test_resume_while_tool_calls_wait_is_refused(api: Api, emu: Emulator) -> None:
    conversation_id = api.create()
    [call] = interrupt_calls(api.chunks(conversation_id, "picnic?", stream=False, tools=[FORECAST]))
    message = error_of(api.run(conversation_id, "yes", action=resume_action("ev-1")))
    assert f"waiting for tool outputs for tool_call_id(s) {call['id']}" in message
    assert "submit tool_outputs instead" in message
    assert emu.conversation(conversation_id).pending_call_ids == (call["id"],)


def test_a_resumed_question_cannot_be_resumed_twice(api: Api) -> None:
    conversation_id, interrupt_id = ask(api, "plan a trip")
    api.chunks(conversation_id, "Oslo", stream=False, action=resume_action(interrupt_id))
    message = error_of(api.run(conversation_id, "Oslo", action=resume_action(interrupt_id)))
    assert f"{interrupt_id!r} is not the pending interrupt" in message


@pytest.mark.parametrize(
    ("action", "query", "expected"),
    [
        (
            {
                "action_type": "restart",
                "parameters": {"interrupt_event": {"id": "x", "type": "chat"}},
            },
            "明天",
            "action.action_type: Input should be 'resume'",
        ),
        ({"action_type": "resume"}, "明天", "action.parameters: required field is missing"),
        (
            {"action_type": "resume", "parameters": {"interrupt_event": {"id": "x"}}},
            "明天",
            "action.parameters.interrupt_event.type: required field is missing",
        ),
        (
            {
                "action_type": "resume",
                "parameters": {"interrupt_event": {"id": "x", "type": "form"}},
            },
            "明天",
            "action.parameters.interrupt_event.type: Input should be 'chat'",
        ),
        (
            {
                "action_type": "resume",
                "parameters": {"interrupt_event": {"id": "", "type": "chat"}},
            },
            "明天",
            "action.parameters.interrupt_event.id: String should have at least 1 character",
        ),
        (
            {**resume_action("x"), "note": "hi"},
            "明天",
            "action.note: unknown field",
        ),
        ("resume", "明天", "action: Input should be a valid dictionary"),
        (resume_action("x"), "", "action resume needs the person's reply in query, which is empty"),
    ],
)
def test_bad_resume_actions(api: Api, action: Any, query: str, expected: str) -> None:
    conversation_id = api.create()
    message = error_of(api.run(conversation_id, query, action=action))
    assert message.startswith("invalid request body: ")
    assert expected in message


def test_action_and_tool_outputs_together_are_refused(api: Api) -> None:
    conversation_id = api.create()
    outputs = [{"tool_call_id": "tc-1", "output": "x"}]
    message = error_of(
        api.run(conversation_id, "明天", action=resume_action("x"), tool_outputs=outputs)
    )
    assert "action (resume a question) and tool_outputs (answer tool calls) exclude" in message


# --- faults on a question -------------------------------------------------------------------


def test_a_rejected_resume_leaves_the_question_pending(api: Api, emu: Emulator) -> None:
    conversation_id, interrupt_id = ask(api, "flaky question")
    refused = api.run(conversation_id, "yes", action=resume_action(interrupt_id))
    assert refused.status_code == 503, refused.text
    assert emu.conversation(conversation_id).pending_interrupt_id == interrupt_id
    chunks = api.chunks(conversation_id, "yes", stream=True, action=resume_action(interrupt_id))
    assert "".join(c["answer"] for c in chunks) == "you said yes"


@pytest.mark.parametrize("stream", [True, False])
def test_duplicate_interrupt_repeats_the_chatflow_interrupt(api: Api, stream: bool) -> None:
    conversation_id = api.create()
    chunks = api.chunks(
        conversation_id,
        "plan a trip",
        stream=stream,
        headers={"X-Emulator-Fault": "duplicate_interrupt"},
    )
    interrupts = [e for e in body_events(chunks) if e["content_type"] == "chatflow_interrupt"]
    assert len(interrupts) == 2 and interrupts[0] == interrupts[1]


# --- scenario files with bad ask steps ------------------------------------------------------


def _rule(steps: list[Any], **extra: Any) -> dict[str, Any]:
    return {"rules": [{"match": "x", "steps": steps, **extra}]}


@pytest.mark.parametrize(
    ("scenario", "expected"),
    [
        (
            _rule([{"ask": "q?", "tool": "f"}]),
            "rules[0].steps[0]: a step either calls tools ('tool' or 'calls') or asks a "
            "question ('ask'), not both",
        ),
        (_rule([{"ask": "q?", "calls": [{"tool": "f"}]}]), "rules[0].steps[0]: a step either"),
        (
            _rule([{"calls": [{"tool": "f"}], "as": "a"}]),
            "rules[0].steps[0]: 'as' on a step names the reply to its 'ask'; this step has none",
        ),
        (
            _rule([{"ask": "q?", "thought": "hmm"}]),
            "rules[0].steps[0]: an 'ask' step takes no 'thought'",
        ),
        (_rule([{}]), "rules[0].steps[0]: a step needs 'tool' or 'calls' (to call tools) or 'ask'"),
        (_rule([{"ask": ""}]), "rules[0].steps[0].ask: String should have at least 1 character"),
        (_rule([{"ask": ["q?"]}]), "rules[0].steps[0].ask: Input should be a valid string"),
        (_rule([{"ask": "q?", "as": "a b"}]), "rules[0].steps[0].as: String should match pattern"),
        (
            _rule([{"ask": "q {answers.day}?", "as": "day"}]),
            "rules[0].steps[0].ask: {answers.day} uses the answer 'day', which no earlier "
            "'ask' step names with 'as: day' (available: none: no earlier ask step has 'as')",
        ),
        (
            _rule([{"tool": "f", "arguments": {"d": "{answers.day}"}}, {"ask": "q?", "as": "day"}]),
            "rules[0].steps[0].calls[0].arguments.d: {answers.day} uses the answer 'day'",
        ),
        (
            _rule([{"ask": "q?", "as": "a"}], answer="{answers.b}"),
            "rules[0].answer: {answers.b} uses the answer 'b', which no earlier 'ask' step "
            "names with 'as: b' (available: a)",
        ),
        (
            _rule([{"ask": "q?", "as": "a"}], answer="{answers.a.x}"),
            "rules[0].answer: {answers.a.x}: only outputs.NAME can be followed by a path "
            "(an answer is plain text)",
        ),
        (
            _rule([{"ask": "q?", "as": "a"}], answer="{answers}"),
            "{answers} needs the name of an ask step: answers.NAME",
        ),
        (
            _rule([{"ask": "q?", "as": "a"}], answer="{a}"),
            "rules[0].answer: unknown placeholder {a}; known names: query, and outputs.TOOL "
            "for earlier outputs, answers.NAME for earlier replies",
        ),
        (
            {"rules": [{"match": "(?P<answers>x)", "steps": [{"ask": "q?"}]}]},
            "rules[0].match: the group name 'answers' is reserved for {answers.NAME} placeholders",
        ),
    ],
)
def test_bad_ask_steps_name_the_key(scenario: dict[str, Any], expected: str) -> None:
    with pytest.raises(ScenarioError) as info:
        load_scenario(scenario)
    message = str(info.value)
    assert message.startswith("<scenario>: ")
    assert expected in message


def test_a_yaml_ask_step_loads(tmp_path: Path) -> None:
    path = tmp_path / "ask.yaml"
    path.write_text(
        "rules:\n"
        "  - match: 'book'\n"
        "    steps:\n"
        "      - ask: '哪一天？'\n"
        "        as: day\n"
        "      - {tool: book_room, arguments: {date: '{answers.day}'}}\n"
        "    answer: '{answers.day}: {outputs.book_room}'\n",
        encoding="utf-8",
    )
    [rule] = load_scenario(path).rules
    assert [step.is_ask for step in rule.steps] == [True, False]
    assert (rule.steps[0].ask, rule.steps[0].alias) == ("哪一天？", "day")
    assert rule.tools == {"book_room"}


def test_answers_in_templates() -> None:
    assert render("{answers.d} at {t}", {"t": "9:00"}, {}, {"d": "明天"}) == "明天 at 9:00"
    with pytest.raises(TemplateError, match=r"\{answers.x\}: no answer named 'x' \(answers: d\)"):
        render("{answers.x}", {}, {}, {"d": "明天"})


# --- the official SDK's chatflow samples ----------------------------------------------------

SDK_SCRIPT = r"""
import json, sys
import appbuilder
from appbuilder.core.console.appbuilder_client import data_class
from appbuilder.core.console.appbuilder_client.event_handler import AppBuilderEventHandler

client = appbuilder.AppBuilderClient(sys.argv[1])
out = {}


def events(msg, stream):
    answers = list(msg.content) if stream else [msg.content]
    found = [(e.event_type, e.content_type, e.status, e.detail) for a in answers for e in a.events]
    return found, "".join(a.answer for a in answers)


# "方式1": run, read chatflow_interrupt / publish_message, run again with a resume action.
for stream in (True, False):
    conversation_id = client.create_conversation()
    found, answer = events(client.run(conversation_id, "请帮我预订会议室", stream=stream), stream)
    interrupt_id = [d["interrupt_event_id"] for t, c, s, d in found if c == "chatflow_interrupt"][0]
    action = data_class.Action.create_resume_action(interrupt_id)
    again = client.run(conversation_id, "明天", stream=stream, action=action)
    out["raw_stream" if stream else "raw_non_stream"] = {
        "events": [[t, c, s] for t, c, s, d in found],
        "question": [d["message"] for t, c, s, d in found if c == "publish_message"],
        "first_answer": answer,
        "answer": events(again, stream)[1],
    }


# "方式3": the documented event handler, unchanged, over several dialogs.
class MyEventHandler(AppBuilderEventHandler):
    def __init__(self):
        super().__init__()
        self.interrupt_ids = []
        self.messages = []

    def handle_content_type(self, run_context, run_response):
        event = run_response.events[-1]
        if event.content_type == "chatflow_interrupt":
            self.interrupt_ids.append(event.detail.get("interrupt_event_id"))
        if event.content_type == "publish_message":
            self.messages.append(event.detail.get("message"))

    def _create_action(self):
        if len(self.interrupt_ids) == 0:
            return None
        event_id = self.interrupt_ids.pop()
        return {"action_type": "resume",
                "parameters": {"interrupt_event": {"id": event_id, "type": "chat"}}}

    def gen_action(self):
        while True:
            yield self._create_action()


for stream in (True, False):
    conversation_id = client.create_conversation()
    handler = MyEventHandler()
    dialogs = client.run_multiple_dialog_with_handler(
        conversation_id=conversation_id,
        queries=["plan a trip", "Oslo", "Rome"],
        event_handler=handler,
        stream=stream,
        actions=handler.gen_action(),
    )
    for data in dialogs:
        for ans in data:
            pass
    out["handler" if stream else "handler_non_stream"] = {
        "conversation_id": conversation_id,
        "messages": handler.messages,
        "interrupt_ids": handler.interrupt_ids,
    }
print(json.dumps(out, ensure_ascii=False))
"""


@pytest.fixture(scope="module")
def sdk_results(emu: Emulator, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Run the SDK samples against `emu` in the SDK's own venv; what they saw, as JSON."""
    python = ensure_sdk_venv()
    script = tmp_path_factory.mktemp("sdk") / "chatflow.py"
    script.write_text(SDK_SCRIPT, encoding="utf-8")
    prefixes = ("APPBUILDER_", "GATEWAY_URL", "CONSOLE_OPENAPI_", "SECRET_KEY_PREFIX")
    env = {k: v for k, v in os.environ.items() if not k.startswith(prefixes)}
    env.update({"GATEWAY_URL_V2": emu.base_url, "APPBUILDER_TOKEN": emu.token})
    done = subprocess.run(
        [str(python), str(script), emu.app_id],
        env=env,
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, f"SDK script failed:\n{done.stdout}\n{done.stderr}"
    results: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return results


@pytest.mark.conformance
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("mode", ["raw_stream", "raw_non_stream"])
def test_the_sdk_reads_the_question_and_resumes(sdk_results: dict[str, Any], mode: str) -> None:
    got = sdk_results[mode]
    assert got["events"] == [
        ["ChatAgent", "status", "preparing"],
        ["chatflow", "publish_message", "done"],
        ["chatflow", "chatflow_interrupt", "done"],
        ["chatflow", "status", "success"],
    ]
    assert got["question"] == ["您要预订哪一天的会议室？"] and got["first_answer"] == ""
    assert got["answer"] == "已为您预订明天的会议室"


@pytest.mark.conformance
@pytest.mark.timeout(1800)
def test_the_sdk_event_handler_sample_runs_the_dialogs(
    sdk_results: dict[str, Any], emu: Emulator
) -> None:
    got = sdk_results["handler"]
    assert got["messages"] == ["From where?", "And from Oslo to where?"]
    records = emu.conversation(got["conversation_id"]).messages
    assert [(m.query, m.status) for m in records] == [
        ("plan a trip", "human_input"),
        ("Oslo", "human_input"),
        ("Rome", "success"),
    ]
    assert records[-1].answer == "Oslo -> Rome (plan a trip)"


@pytest.mark.conformance
@pytest.mark.timeout(1800)
def test_the_sdk_event_handler_sample_runs_the_dialogs_non_stream(
    sdk_results: dict[str, Any], emu: Emulator
) -> None:
    got = sdk_results["handler_non_stream"]
    # Non-stream, the handler sees only the last event (status/success): no interrupt id, so
    # the replies come as plain queries, which answer the pending questions.
    assert got["interrupt_ids"] == [] and got["messages"] == []
    records = emu.conversation(got["conversation_id"]).messages
    assert [(m.query, m.status) for m in records] == [
        ("plan a trip", "human_input"),
        ("Oslo", "human_input"),
        ("Rome", "success"),
    ]
    assert records[-1].answer == "Oslo -> Rome (plan a trip)"
