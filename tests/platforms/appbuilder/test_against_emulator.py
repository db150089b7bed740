"""The toolbridge client and adapter against the emulator (bridge.emulator) over loopback.

A multi-round tool conversation at the raw `client.run(...)` level, stream and non-stream,
the same through `AppBuilderPlatform`, and the emulator's injected faults as the client sees
them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from bridge.emulator import HEADER, Emulator
from bridge.errors import (
    AuthenticationError,
    InBandError,
    ProtocolError,
    RateLimitError,
    StreamInterruptedError,
)
from bridge.platforms.appbuilder import (
    AppBuilderClient,
    AppBuilderPlatform,
    RetryPolicy,
    RunResponse,
    ToolCallItem,
)
from bridge.types import Event, RunFailed, RunFinished, TextDelta, ToolCallsRequested, ToolResult

SCENARIO = {
    "rules": [
        {
            "name": "trip",
            "match": r"trip to (?P<city>\w+)",
            "steps": [
                {
                    "calls": [
                        {"tool": "get_weather", "arguments": {"city": "{city}"}},
                        {"tool": "get_time", "arguments": {"city": "{city}"}},
                    ]
                },
                {"tool": "advise", "arguments": {"weather": "{outputs.get_weather}"}},
            ],
            "answer": "{city}: {outputs.get_weather} at {outputs.get_time}. {outputs.advise}",
        }
    ]
}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": f"the {name} tool",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "weather": {"type": "string"}},
            },
        },
    }
    for name in ("get_weather", "get_time", "advise")
]
LOCAL = {
    "get_weather": lambda args: f"sunny in {args['city']}",
    "get_time": lambda args: "12:00",
    "advise": lambda args: f"wear a hat ({args['weather']})",
}
EXPECTED = "Paris: sunny in Paris at 12:00. wear a hat (sunny in Paris)"
QUICK = RetryPolicy(max_retries=2, backoff_base=0.0, jitter=0.0)


@pytest.fixture(scope="module")
def emulator() -> Iterator[Emulator]:
    with Emulator(scenario=SCENARIO, faults="") as emu:
        yield emu


@pytest.fixture
def client(emulator: Emulator) -> Iterator[AppBuilderClient]:
    with AppBuilderClient(
        emulator.app_id, emulator.token, emulator.base_url, retry_policy=QUICK, idle_timeout=10
    ) as instance:
        yield instance


@contextlib.contextmanager
def _faulty(emulator: Emulator, spec: str) -> Iterator[AppBuilderClient]:
    """A client whose every request carries the emulator's fault header."""
    with requests.Session() as session:
        session.headers[HEADER] = spec
        with AppBuilderClient(
            emulator.app_id,
            emulator.token,
            emulator.base_url,
            retry_policy=QUICK,
            idle_timeout=10,
            session=session,
        ) as client:
            yield client


def _chunks(reply: Any) -> list[RunResponse]:
    return [reply] if isinstance(reply, RunResponse) else list(reply)


def _calls(chunks: list[RunResponse]) -> list[ToolCallItem]:
    found: dict[str, ToolCallItem] = {}
    for item in chunks:
        for event in item.content:
            for call in event.tool_calls or ():
                found.setdefault(call.id, call)
    return list(found.values())


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "non-stream"])
def test_multi_round_tool_conversation_with_the_raw_client(
    client: AppBuilderClient, emulator: Emulator, stream: bool
) -> None:
    conversation_id = client.create_conversation()
    chunks = _chunks(
        client.run(conversation_id, "plan a trip to Paris", stream=stream, tools=TOOLS)
    )
    rounds = 0
    while calls := _calls(chunks):
        rounds += 1
        assert rounds <= 5, "the emulator kept asking for tools"
        if rounds == 1:  # two parallel calls in one interrupt
            assert sorted(call.function.name for call in calls) == ["get_time", "get_weather"]
            assert all(call.function.arguments == {"city": "Paris"} for call in calls)
        outputs = [
            {"tool_call_id": call.id, "output": LOCAL[call.function.name](call.function.arguments)}
            for call in calls
        ]
        chunks = _chunks(client.run(conversation_id, stream=stream, tool_outputs=outputs))
    assert rounds == 2
    answer = "".join(item.answer for item in chunks)
    assert answer == EXPECTED
    statuses = [event.event_status for item in chunks for event in item.content]
    assert "success" in statuses
    if stream:
        assert chunks[-1].content == []  # the final chunk with no events
    assert emulator.conversation(conversation_id).pending_call_ids == ()


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "non-stream"])
def test_multi_round_tool_conversation_through_the_platform(
    client: AppBuilderClient, emulator: Emulator, stream: bool
) -> None:
    platform = AppBuilderPlatform(client)
    conversation_id = platform.create_conversation()
    events: list[Event] = list(
        platform.start(conversation_id, "a trip to Paris please", tools=TOOLS, stream=stream)
    )
    rounds = 0
    while isinstance(events[-1], ToolCallsRequested):
        rounds += 1
        assert rounds <= 5
        batch = events[-1].batch
        results = [
            ToolResult(call_id=call.call_id, output=LOCAL[call.name](call.arguments_dict()))
            for call in batch.calls
        ]
        events = list(platform.submit(conversation_id, batch, results, stream=stream))
    finished = events[-1]
    assert isinstance(finished, RunFinished), events
    assert rounds == 2
    assert finished.answer == EXPECTED
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == EXPECTED
    assert finished.request_id and finished.message_id


def test_wrong_token_is_an_authentication_error(emulator: Emulator) -> None:
    client = AppBuilderClient(emulator.app_id, "wrong-token", emulator.base_url)
    with client, pytest.raises(AuthenticationError) as info:
        client.create_conversation()
    assert info.value.status_code == 401
    assert info.value.request_id


def test_rate_limit_once_is_retried(emulator: Emulator) -> None:
    with _faulty(emulator, "status=429,retry_after=0,times=1,on=create") as client:
        assert client.create_conversation()


def test_rate_limit_that_persists(emulator: Emulator) -> None:
    with (
        _faulty(emulator, "status=429,retry_after=0,on=create") as client,
        pytest.raises(RateLimitError),
    ):
        client.create_conversation()


def test_dropped_stream(client: AppBuilderClient, emulator: Emulator) -> None:
    conversation_id = client.create_conversation()
    with _faulty(emulator, "drop_after=1") as faulty:
        stream = faulty.run(conversation_id, "plan a trip to Paris", tools=TOOLS)
        with pytest.raises(StreamInterruptedError) as info:
            list(stream)
    assert len(info.value.received) == 1


def test_in_band_error(client: AppBuilderClient, emulator: Emulator) -> None:
    conversation_id = client.create_conversation()
    with _faulty(emulator, "inband=ServiceError,message=code node failed") as faulty:
        with pytest.raises(InBandError, match="code node failed"):
            faulty.run(conversation_id, "plan a trip to Paris", tools=TOOLS, stream=False)
        platform = AppBuilderPlatform(faulty)
        events = list(platform.start(conversation_id, "plan a trip to Paris", tools=TOOLS))
    failed = events[-1]
    assert isinstance(failed, RunFailed) and failed.code == "ServiceError"


def test_malformed_line(client: AppBuilderClient, emulator: Emulator) -> None:
    conversation_id = client.create_conversation()
    with _faulty(emulator, "malformed=1") as faulty, pytest.raises(ProtocolError):
        list(faulty.run(conversation_id, "plan a trip to Paris", tools=TOOLS))


def test_duplicated_interrupt_is_one_batch(client: AppBuilderClient, emulator: Emulator) -> None:
    conversation_id = client.create_conversation()
    with _faulty(emulator, "duplicate_interrupt") as faulty:
        platform = AppBuilderPlatform(faulty)
        events = list(platform.start(conversation_id, "plan a trip to Paris", tools=TOOLS))
    batches = [e.batch for e in events if isinstance(e, ToolCallsRequested)]
    assert len(batches) == 1
    assert sorted(c.name for c in batches[0].calls) == ["get_time", "get_weather"]
