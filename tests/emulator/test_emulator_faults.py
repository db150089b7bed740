"""Fault injection over real HTTP: by header, by scenario rule, by argument and environment."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import requests

from bridge.emulator import ENV_VAR, Emulator, FaultSpecError, parse_faults
from tests.emulator.helpers import WEATHER, Api, body_events, interrupt_calls, parse_sse, statuses

FAULT = "X-Emulator-Fault"


def _fault(spec: str) -> dict[str, str]:
    return {FAULT: spec}


def _stream_until_error(response: requests.Response) -> tuple[list[str], Exception | None]:
    """Read SSE lines until EOF or a transport error; return the data lines and the error."""
    lines: list[str] = []
    try:
        for line in response.iter_lines(decode_unicode=True):
            if line:
                lines.append(line)
    except requests.exceptions.RequestException as exc:
        return lines, exc
    return lines, None


# --- status faults ----------------------------------------------------------------------------


def test_429_with_retry_after_then_success_with_times(api: Api, emu: Emulator) -> None:
    conversation_id = api.create()
    headers = _fault("status=429,retry_after=2,times=1")
    first = api.run(conversation_id, "weather in Paris", tools=[WEATHER], headers=headers)
    assert first.status_code == 429
    assert first.headers["Retry-After"] == "2"
    body = first.json()
    assert body["code"] == "TooManyRequestsError"
    assert body["request_id"] == first.headers["X-Appbuilder-Request-Id"]
    assert emu.conversation(conversation_id).messages == ()  # nothing happened
    assert emu.conversation(conversation_id).pending_call_ids == ()
    second = api.run(conversation_id, "weather in Paris", tools=[WEATHER], headers=headers)
    assert second.status_code == 200  # a retry with the same header gets through


def test_429_defaults_to_retry_after_one_second(api: Api) -> None:
    response = api.run(api.create(), "hi", headers=_fault("status=429"))
    assert response.status_code == 429 and response.headers["Retry-After"] == "1"


@pytest.mark.parametrize("status", [500, 502, 503])
def test_server_errors_for_the_first_n_requests(api: Api, status: int) -> None:
    conversation_id = api.create()
    headers = _fault(f"status={status},times=2,message=overloaded")
    codes = [api.run(conversation_id, "hi", headers=headers).status_code for _ in range(3)]
    assert codes == [status, status, 200]


def test_503_with_retry_after(api: Api) -> None:
    response = api.run(api.create(), "hi", headers=_fault("status=503,retry_after=0.5"))
    assert response.status_code == 503 and response.headers["Retry-After"] == "0.5"
    assert response.json()["code"] == "ServiceUnavailableError"


def test_a_rejected_submission_keeps_the_calls_pending(api: Api, emu: Emulator) -> None:
    conversation_id = api.create()
    (call,) = interrupt_calls(
        api.chunks(conversation_id, "weather in Paris", stream=False, tools=[WEATHER])
    )
    outputs = [{"tool_call_id": call["id"], "output": "sunny"}]
    response = api.run(conversation_id, tool_outputs=outputs, headers=_fault("status=500"))
    assert response.status_code == 500
    assert emu.conversation(conversation_id).pending_call_ids == (call["id"],)
    assert api.run(conversation_id, tool_outputs=outputs).status_code == 200


def test_status_faults_apply_to_every_endpoint_when_sent_as_header(api: Api) -> None:
    response = api.post("", json={"app_id": "emulator-app"}, headers=_fault("status=503"))
    assert response.status_code == 503
    assert response.headers["X-Appbuilder-Request-Id"] == response.json()["request_id"]


# --- in-band errors ---------------------------------------------------------------------------


def test_inband_error_non_stream(api: Api) -> None:
    headers = _fault("inband=ServiceError,message=code node failed")
    response = api.run(api.create(), "hi", headers=headers)
    assert response.status_code == 200
    body = response.json()
    assert body == {
        "request_id": response.headers["X-Appbuilder-Request-Id"],
        "code": "ServiceError",
        "message": "code node failed",
        "content": [],
    }


def test_inband_error_stream_with_a_numeric_code(api: Api) -> None:
    response = api.run(api.create(), "hi", stream=True, headers=_fault("inband=5001"))
    assert response.status_code == 200
    (payload,) = parse_sse(response.text)
    assert payload["code"] == 5001 and payload["content"] == []


def test_json_error_on_stream_answers_a_stream_with_a_json_body(api: Api) -> None:
    headers = _fault("json_error_on_stream,message=code node failed")
    response = api.run(api.create(), "hi", stream=True, headers=headers)
    assert response.status_code == 200
    assert response.headers["Content-Type"].startswith("application/json")
    assert response.json() == {
        "request_id": response.headers["X-Appbuilder-Request-Id"],
        "code": "ServiceError",
        "message": "code node failed",
        "content": None,
    }


def test_inband_error_after_some_messages(api: Api, emu: Emulator) -> None:
    conversation_id = api.create()
    response = api.run(
        conversation_id, "hi", stream=True, headers=_fault("inband=E1,inband_after=2")
    )
    payloads = parse_sse(response.text)
    assert statuses(payloads[:2]) == ["status/preparing", "text/running"]
    assert payloads[2]["code"] == "E1"
    assert len(payloads) == 3
    assert emu.conversation(conversation_id).messages  # the run itself was processed


# --- stream damage ----------------------------------------------------------------------------


def test_drop_after_n_messages_really_closes_the_connection(api: Api, emu: Emulator) -> None:
    conversation_id = api.create()
    body = api.run_body(conversation_id, "a long question " * 3, stream=True)
    response = api.session.post(
        f"{api.base_url}/v2/app/conversation/runs",
        json=body,
        headers={**api.headers, FAULT: "drop_after=3"},
        stream=True,
        timeout=30,
    )
    assert response.status_code == 200
    lines, error = _stream_until_error(response)
    assert len(lines) == 3 and all(line.startswith("data: ") for line in lines)
    assert isinstance(error, requests.exceptions.ChunkedEncodingError)
    assert emu.requests[-1].dropped is True


def test_drop_non_stream_body_after_n_bytes(api: Api) -> None:
    response = api.session.post(
        f"{api.base_url}/v2/app/conversation/runs",
        json=api.run_body(api.create(), "hi"),
        headers={**api.headers, FAULT: "drop_after=20"},
        stream=True,
        timeout=30,
    )
    assert int(response.headers["Content-Length"]) > 20
    with pytest.raises(requests.exceptions.ChunkedEncodingError):
        _ = response.content


def test_the_server_survives_a_drop(api: Api) -> None:
    conversation_id = api.create()
    response = api.session.post(
        f"{api.base_url}/v2/app/conversation/runs",
        json=api.run_body(conversation_id, "hi", stream=True),
        headers={**api.headers, FAULT: "drop_after=1"},
        stream=True,
        timeout=30,
    )
    with pytest.raises(requests.exceptions.ChunkedEncodingError):
        _ = response.content
    assert api.run(conversation_id, "hi again").status_code == 200


def test_malformed_sse_line(api: Api) -> None:
    response = api.run(api.create(), "hi", stream=True, headers=_fault("malformed=1"))
    blocks = response.text.split("\n\n")
    assert blocks[1].startswith("data: {") and "this is not JSON" in blocks[1]
    with pytest.raises(json.JSONDecodeError):
        json.loads(blocks[1][len("data: ") :])
    assert json.loads(blocks[0][len("data: ") :])["content"][0]["event_status"] == "preparing"


def test_malformed_non_stream_body(api: Api) -> None:
    response = api.run(api.create(), "hi", headers=_fault("malformed=0"))
    assert response.status_code == 200
    with pytest.raises(requests.exceptions.JSONDecodeError):
        response.json()


def test_duplicated_interrupt_event(api: Api, emu: Emulator) -> None:
    conversation_id = api.create()
    headers = _fault("duplicate_interrupt")
    chunks = api.chunks(
        conversation_id, "weather in Paris", stream=True, tools=[WEATHER], headers=headers
    )
    assert statuses(chunks) == ["status/preparing", "contexts/interrupt", "contexts/interrupt"]
    assert chunks[1] == chunks[2]
    (call,) = emu.conversation(conversation_id).pending_calls
    api.submit(conversation_id, {call.call_id: "sunny"})  # answering once is right


def test_duplicated_interrupt_non_stream(api: Api) -> None:
    conversation_id = api.create()
    (body,) = api.chunks(
        conversation_id,
        "weather in Paris",
        stream=False,
        tools=[WEATHER],
        headers=_fault("duplicate_interrupt=true"),
    )
    interrupts = [e for e in body["content"] if e["event_status"] == "interrupt"]
    assert len(interrupts) == 2 and interrupts[0] == interrupts[1]


def test_delay_keeps_the_stream_intact(api: Api) -> None:
    chunks = api.chunks(api.create(), "hi", stream=True, headers=_fault("delay=0.01"))
    assert statuses(chunks)[-1] == "status/success"


def test_round_targets_one_round_of_a_run(api: Api) -> None:
    conversation_id = api.create()
    headers = _fault("status=500,round=1")
    first = api.run(conversation_id, "weather in Paris", tools=[WEATHER], headers=headers)
    assert first.status_code == 200  # round 0 is spared
    (call,) = interrupt_calls([first.json()])
    outputs = [{"tool_call_id": call["id"], "output": "sunny"}]
    assert api.run(conversation_id, tool_outputs=outputs, headers=headers).status_code == 500


def test_a_bad_fault_header_is_400(api: Api) -> None:
    response = api.run(api.create(), "hi", headers=_fault("status=abc"))
    assert response.status_code == 400
    assert (
        "bad X-Emulator-Fault header: fault spec 'status=abc': status='abc' is not a whole"
        in (response.json()["message"])
    )


# --- global faults (argument, environment) and rule faults ------------------------------------


def test_global_faults_apply_to_runs_only_by_default() -> None:
    with Emulator(faults="status=503,times=1") as emu:
        api = Api(emu.base_url)
        conversation_id = api.create()  # create is not targeted
        assert api.run(conversation_id, "hi").status_code == 503
        assert api.run(conversation_id, "hi").status_code == 200


def test_global_faults_on_chosen_endpoints() -> None:
    with Emulator(faults="status=500,on=create|feedback") as emu:
        api = Api(emu.base_url)
        response = api.post("", json={"app_id": "emulator-app"})
        assert response.status_code == 500


def test_faults_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_VAR, "inband=FromEnv")
    with Emulator() as emu:
        api = Api(emu.base_url)
        assert api.run(api.create(), "hi").json()["code"] == "FromEnv"


def test_header_faults_win_over_global_faults() -> None:
    with Emulator(faults="status=500") as emu:
        api = Api(emu.base_url)
        conversation_id = api.create()
        response = api.run(conversation_id, "hi", headers=_fault("status=429"))
        assert response.status_code == 429


def test_rule_faults_apply_to_the_runs_the_rule_matched(tmp_path: Path) -> None:
    path = tmp_path / "faulty.yaml"
    path.write_text(
        "rules:\n"
        "  - name: flaky\n"
        "    match: flaky\n"
        "    steps: [{tool: get_weather, arguments: {city: Paris}}]\n"
        "    answer: done\n"
        "    faults: 'status=429,round=1,times=1'\n",
        encoding="utf-8",
    )
    with Emulator(scenario=path, faults="") as emu:
        api = Api(emu.base_url)
        conversation_id = api.create()
        assert api.run(conversation_id, "other question").status_code == 200
        (call,) = interrupt_calls(
            api.chunks(conversation_id, "a flaky one", stream=False, tools=[WEATHER])
        )
        outputs = [{"tool_call_id": call["id"], "output": "sunny"}]
        assert api.run(conversation_id, tool_outputs=outputs).status_code == 429
        retried = api.run(conversation_id, tool_outputs=outputs)
        assert retried.status_code == 200 and retried.json()["answer"] == "done"
        assert body_events([retried.json()])[-1]["event_status"] == "success"


# --- the spec parser --------------------------------------------------------------------------


def test_parse_faults_reads_every_key() -> None:
    spec = parse_faults(
        "delay=0.5; drop_after=3, status=429, retry_after=2, times=2, round=1, on=runs|upload, "
        "malformed=1, duplicate_interrupt, message=slow down"
    )
    assert spec is not None
    assert (spec.delay, spec.drop_after, spec.status, spec.retry_after) == (0.5, 3, 429, 2.0)
    assert (spec.times, spec.round, spec.malformed, spec.duplicate_interrupt) == (2, 1, 1, True)
    assert spec.on == frozenset({"runs", "upload"}) and spec.message == "slow down"
    assert parse_faults("  ") is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("boom=1", "unknown key 'boom'; expected one of"),
        ("status=200", "status=200 is not an HTTP error (400..599)"),
        ("status=429,inband=X", "status and inband exclude each other"),
        ("delay=-1", "delay must be 0..600 s"),
        ("delay=soon", "delay='soon' is not a number of seconds"),
        ("times=0", "times must be at least 1"),
        ("drop_after=-2", "drop_after must be >= 0"),
        ("drop_after", "drop_after needs a value"),
        ("on=everywhere", "on='everywhere' names unknown endpoints ['everywhere']"),
        ("duplicate_interrupt=maybe", "duplicate_interrupt takes no value or true/false"),
        ("json_error_on_stream,inband_after=1", "cannot come after inband_after=N messages"),
    ],
)
def test_parse_faults_errors_are_clear(text: str, expected: str) -> None:
    with pytest.raises(FaultSpecError) as info:
        parse_faults(text)
    assert f"fault spec {text!r}: " in str(info.value) and expected in str(info.value)


def test_a_bad_global_fault_spec_fails_at_construction() -> None:
    with pytest.raises(FaultSpecError, match="unknown key 'nope'"):
        Emulator(faults="nope=1")
