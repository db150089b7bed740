"""The daemon's HTTP API, against a real `toolbridge serve` process and the emulator."""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path
from typing import Any

import requests

from tests.daemon.conftest import API_KEY, DaemonProcess, executions, wait_for


def _error(response: requests.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    error = response.json()["error"]
    assert error["code"] == code
    assert error["request_id"] == response.headers["x-request-id"]
    assert error["message"]
    return dict(error)


def _sse(response: requests.Response) -> list[tuple[str, dict[str, Any]]]:
    events = []
    name = ""
    for raw in response.iter_lines(decode_unicode=True):
        if raw.startswith("event: "):
            name = raw[len("event: ") :]
        elif raw.startswith("data: "):
            events.append((name, json.loads(raw[len("data: ") :])))
    return events


# --- conversations and messages -------------------------------------------------------------------


def test_conversation_round_trip(daemon: DaemonProcess) -> None:
    cid = daemon.new_conversation(end_user_id="user-42")
    response = daemon.ask(cid, "what is the weather in Paris?")
    assert response.status_code == 200, response.text
    result = response.json()
    assert result["answer"] == "Paris: 18 degrees"
    assert result["status"] == "finished"
    assert result["rounds"] == 1
    assert [run["name"] for run in result["tool_runs"]] == ["get_weather"]
    assert result["tool_runs"][0]["arguments"] == {"city": "Paris"}
    assert result["request_ids"], "the platform's request ids are reported"

    detail = daemon.request("GET", f"/v1/conversations/{cid}").json()
    assert detail["busy"] is False
    assert detail["conversation"]["end_user_id"] == "user-42"
    assert detail["conversation"]["status"] == "finished"
    [message] = detail["messages"]
    assert message["query"] == "what is the weather in Paris?"
    assert message["answer"] == "Paris: 18 degrees"
    [call] = detail["tool_calls"]
    assert call["state"] == "submitted"
    assert call["output"] == '{"city": "Paris", "temp": 18}'
    assert call["message_id"] == message["message_id"] == result["message_id"]


def test_conversations_are_paged(daemon: DaemonProcess) -> None:
    ids = [daemon.new_conversation() for _ in range(3)]
    page = daemon.request("GET", "/v1/conversations", params={"limit": 2}).json()
    assert page["limit"] == 2 and page["offset"] == 0
    assert len(page["items"]) == 2
    assert page["total"] >= 3
    assert [item["conversation_id"] for item in page["items"]] == ids[::-1][:2]
    second = daemon.request("GET", "/v1/conversations", params={"limit": 2, "offset": 1}).json()
    assert second["items"][0]["conversation_id"] == ids[1]


def test_streamed_message_is_server_sent_events(daemon: DaemonProcess) -> None:
    cid = daemon.new_conversation()
    with daemon.request(
        "POST",
        f"/v1/conversations/{cid}/messages",
        json={"query": "weather in Tokyo", "stream": True},
        stream=True,
    ) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        events = _sse(response)
    names = [name for name, _ in events]
    assert names[0] == "tool_calls"
    assert names.index("tool_call_started") < names.index("tool_call_finished")
    assert "text_delta" in names and names[-2:] == ["finished", "done"]
    text = "".join(data["text"] for name, data in events if name == "text_delta")
    assert text == "Tokyo: 22 degrees"
    finished = dict(events)["tool_call_finished"]
    assert finished["name"] == "get_weather" and finished["error"] is None
    assert finished["duration_ms"] >= 0
    done = events[-1][1]
    assert done["status"] == "finished"
    assert done["result"]["answer"] == "Tokyo: 22 degrees"


def test_second_message_on_a_busy_conversation_is_409(
    daemon: DaemonProcess, tools_dir: Path
) -> None:
    (tools_dir / "executions.log").unlink(missing_ok=True)
    cid = daemon.new_conversation()
    first: dict[str, requests.Response] = {}
    thread = threading.Thread(target=lambda: first.update(r=daemon.ask(cid, "slow 1.5")))
    thread.start()
    try:
        wait_for(lambda: "slow_step 1.5" in executions(tools_dir), "the slow tool to start")
        assert daemon.request("GET", f"/v1/conversations/{cid}").json()["busy"] is True
        error = _error(daemon.ask(cid, "weather in Paris"), 409, "conversation_busy")
        assert cid in error["message"] and "when it is done" in error["message"]
        with daemon.request("GET", f"/v1/conversations/{cid}/events", stream=True) as live:
            names = [name for name, _ in _sse(live)]
        assert names[0] == "tool_calls" and names[-1] == "done"
    finally:
        thread.join(timeout=60)
    assert first["r"].status_code == 200
    assert first["r"].json()["answer"] == "slept 1.5"
    again = daemon.ask(cid, "weather in Paris")
    assert again.status_code == 200, "the conversation takes messages again once idle"


def test_follow_without_a_run_is_idle(daemon: DaemonProcess) -> None:
    cid = daemon.new_conversation()
    with daemon.request("GET", f"/v1/conversations/{cid}/events", stream=True) as response:
        assert _sse(response) == [("idle", {"busy": False})]


def test_unknown_conversation_is_404(daemon: DaemonProcess) -> None:
    _error(daemon.ask("no-such-conversation", "hi"), 404, "conversation_not_found")
    _error(daemon.request("GET", "/v1/conversations/nope"), 404, "conversation_not_found")
    _error(daemon.request("GET", "/v1/conversations/nope/events"), 404, "conversation_not_found")


def test_unknown_tool_choice_is_422(daemon: DaemonProcess) -> None:
    cid = daemon.new_conversation()
    error = _error(daemon.ask(cid, "weather in Paris", tool_choice="nope"), 422, "unknown_tool")
    assert "'nope' is not a loaded tool" in error["message"] and "get_weather" in error["message"]


# --- validation, limits, error shape --------------------------------------------------------------


def test_bad_bodies_get_a_json_error_naming_the_problem(daemon: DaemonProcess) -> None:
    cid = daemon.new_conversation()
    path = f"/v1/conversations/{cid}/messages"
    not_json = daemon.request("POST", path, data=b"{not json", headers={"Content-Type": "x/y"})
    assert "invalid request" in _error(not_json, 422, "invalid_request")["message"]
    missing = _error(daemon.request("POST", path, json={}), 422, "invalid_request")
    assert "query: Field required" in missing["message"]
    wrong = _error(daemon.request("POST", path, json={"query": 5}), 422, "invalid_request")
    assert "query: Input should be a valid string" in wrong["message"]
    extra = daemon.request("POST", path, json={"query": "hi", "colour": "red"})
    assert (
        "colour: Extra inputs are not permitted" in _error(extra, 422, "invalid_request")["message"]
    )
    empty = _error(daemon.request("POST", path, json={"query": ""}), 422, "invalid_request")
    assert "at least 1 character" in empty["message"]
    bad_user = daemon.request("POST", "/v1/conversations", json={"end_user_id": 7})
    assert "end_user_id" in _error(bad_user, 422, "invalid_request")["message"]
    bad_page = daemon.request("GET", "/v1/conversations", params={"limit": 0})
    assert "limit" in _error(bad_page, 422, "invalid_request")["message"]


def test_size_limits(daemon: DaemonProcess) -> None:
    cid = daemon.new_conversation()
    path = f"/v1/conversations/{cid}/messages"
    too_long = _error(
        daemon.request("POST", path, json={"query": "x" * 16_001}), 422, "invalid_request"
    )
    assert "at most 16000 characters" in too_long["message"]
    big = json.dumps({"query": "y" * 70_000}).encode()
    error = _error(daemon.request("POST", path, data=big), 413, "body_too_large")
    assert "larger than 65536 bytes" in error["message"]
    chunked = daemon.request("POST", path, data=iter([big[:40_000], big[40_000:]]))
    assert chunked.headers.get("transfer-encoding") is None
    _error(chunked, 413, "body_too_large")


def test_framework_errors_have_the_same_shape(daemon: DaemonProcess) -> None:
    assert (
        "no such endpoint"
        in _error(daemon.request("GET", "/v1/nothing"), 404, "not_found")["message"]
    )
    wrong_method = _error(daemon.request("DELETE", "/v1/tools"), 405, "method_not_allowed")
    assert "DELETE is not allowed" in wrong_method["message"]
    bad_id = daemon.request("GET", "/v1/conversations/" + "x" * 200)
    assert "conversation_id" in _error(bad_id, 422, "invalid_request")["message"]


def test_request_id_is_echoed_or_made(daemon: DaemonProcess) -> None:
    mine = daemon.request("GET", "/v1/tools", headers={"X-Request-Id": "trace-abc.123"})
    assert mine.headers["x-request-id"] == "trace-abc.123"
    fresh = daemon.request("GET", "/v1/tools", headers={"X-Request-Id": "bad id\twith spaces"})
    assert fresh.headers["x-request-id"] != "bad id\twith spaces"
    assert len(fresh.headers["x-request-id"]) == 32


# --- auth -----------------------------------------------------------------------------------------


def test_missing_or_wrong_key_is_401(daemon: DaemonProcess) -> None:
    for path in ("/v1/conversations", "/v1/tools", "/metrics"):
        missing = requests.get(daemon.url + path, timeout=30)
        assert "Authorization: Bearer" in _error(missing, 401, "unauthorized")["message"]
        assert missing.headers["www-authenticate"].startswith("Bearer")
        wrong = requests.get(
            daemon.url + path, headers={"Authorization": "Bearer nope"}, timeout=30
        )
        assert _error(wrong, 401, "unauthorized")["message"] == "unknown API key"
    basic = requests.get(
        daemon.url + "/v1/tools", headers={"Authorization": "Basic dXNlcjpwdw=="}, timeout=30
    )
    _error(basic, 401, "unauthorized")
    for open_path in ("/healthz", "/readyz", "/openapi.json", "/"):
        assert requests.get(daemon.url + open_path, timeout=30).status_code == 200, open_path


# --- tools ----------------------------------------------------------------------------------------


def test_tools_list(daemon: DaemonProcess) -> None:
    data = daemon.request("GET", "/v1/tools").json()
    tools = {tool["name"]: tool for tool in data["tools"]}
    assert {"get_weather", "charge", "lookup", "hello"} <= set(tools)
    assert tools["lookup"]["idempotent"] is True and tools["charge"]["idempotent"] is False
    assert tools["get_weather"]["parameters"]["required"] == ["city"]
    assert len(data["specs"]) == 2


def test_reload_with_a_broken_spec_keeps_the_old_toolbox(
    daemon: DaemonProcess, tools_dir: Path
) -> None:
    extra = tools_dir / "extra_tools.py"
    original = extra.read_text(encoding="utf-8")
    before = daemon.request("GET", "/v1/tools").json()
    try:
        extra.write_text("def broken(:\n", encoding="utf-8")
        error = _error(daemon.request("POST", "/v1/tools/reload"), 422, "reload_failed")
        assert "previous toolbox" in error["message"] and "SyntaxError" in error["message"]
        after = daemon.request("GET", "/v1/tools").json()
        assert after["generation"] == before["generation"]
        assert [t["name"] for t in after["tools"]] == [t["name"] for t in before["tools"]]
        assert "SyntaxError" in after["last_reload_error"]
        cid = daemon.new_conversation()
        assert daemon.ask(cid, "hello Ada").json()["answer"] == "hello Ada", "old tools still run"

        extra.write_text(original.replace('f"hello {name}"', 'f"bonjour {name}"'), encoding="utf-8")
        reloaded = daemon.request("POST", "/v1/tools/reload")
        assert reloaded.status_code == 200, reloaded.text
        assert reloaded.json()["generation"] == before["generation"] + 1
        assert daemon.request("GET", "/v1/tools").json()["last_reload_error"] is None
        assert daemon.ask(cid, "hello Ada").json()["answer"] == "bonjour Ada"
    finally:
        extra.write_text(original, encoding="utf-8")
        assert daemon.request("POST", "/v1/tools/reload").status_code == 200


# --- health, metrics, openapi, logs ---------------------------------------------------------------


def test_health_and_readiness(daemon: DaemonProcess) -> None:
    health = requests.get(daemon.url + "/healthz", timeout=30).json()
    assert health["status"] == "ok" and health["replica"].endswith(":pid" + str(daemon.proc.pid))
    ready = requests.get(daemon.url + "/readyz", timeout=30).json()
    assert ready["status"] == "ready" and ready["tools"] >= 6


def test_openapi_document(daemon: DaemonProcess) -> None:
    spec = requests.get(daemon.url + "/openapi.json", timeout=30).json()
    paths = spec["paths"]
    for path in (
        "/v1/conversations",
        "/v1/conversations/{conversation_id}",
        "/v1/conversations/{conversation_id}/messages",
        "/v1/conversations/{conversation_id}/events",
        "/v1/tools",
        "/v1/tools/reload",
        "/healthz",
        "/readyz",
        "/metrics",
    ):
        assert path in paths, path
    message = paths["/v1/conversations/{conversation_id}/messages"]["post"]
    assert "409" in message["responses"]
    assert "text/event-stream" in message["responses"]["200"]["content"]


def test_logs_are_json_lines_correlating_request_ids(daemon: DaemonProcess) -> None:
    cid = daemon.new_conversation()
    response = daemon.request(
        "POST",
        f"/v1/conversations/{cid}/messages",
        json={"query": "weather in Tokyo"},
        headers={"X-Request-Id": "corr-1"},
    )
    platform_ids = response.json()["request_ids"]

    def mine() -> list[dict[str, Any]]:
        records = [json.loads(line) for line in list(daemon.lines) if line.startswith("{")]
        return [r for r in records if r.get("request_id") == "corr-1"]

    def access_line() -> bool:  # written once the response is sent: poll for it
        return any(
            r.get("path", "").endswith("/messages") and r.get("status") == 200 for r in mine()
        )

    wait_for(access_line, "the access log line")
    assert any(r.get("platform_request_id") in platform_ids for r in mine()), mine()
    assert any(r.get("conversation_id") == cid for r in mine())


def test_secrets_never_leak(daemon: DaemonProcess, emulator: Any) -> None:
    cid = daemon.new_conversation()
    daemon.ask(cid, "weather in Paris")
    detail = daemon.request("GET", f"/v1/conversations/{cid}").text
    metrics = daemon.request("GET", "/metrics").text
    journal = b"".join(p.read_bytes() for p in daemon.db.parent.glob("journal.db*"))  # type: ignore[attr-defined]
    for secret in (API_KEY, emulator.token):
        assert secret not in daemon.log
        assert secret not in detail and secret not in metrics
        assert secret.encode() not in journal


def test_non_loopback_bind_without_key_is_refused(tools_dir: Path, emulator: Any) -> None:
    proc = DaemonProcess(
        ["--tools", str(tools_dir / "daemon_tools.py"), "--host", "0.0.0.0", "--db", ":memory:"],
        env={**emulator.env(), "TB_TOOLS_DIR": str(tools_dir)},
        wait=False,
    )
    try:
        assert proc.wait_exit() == 2
    finally:
        proc.stop()
    assert "binding 0.0.0.0" in proc.log and "needs an API key" in proc.log
    assert "--api-key" in proc.log
    assert "listening" not in proc.log


def test_port_in_use_exits_2_with_one_line(tools_dir: Path, emulator: Any) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = DaemonProcess(
            [
                "--tools",
                str(tools_dir / "daemon_tools.py"),
                "--port",
                str(port),
                "--db",
                ":memory:",
            ],
            env={**emulator.env(), "TB_TOOLS_DIR": str(tools_dir)},
            wait=False,
        )
        try:
            assert proc.wait_exit() == 2
        finally:
            proc.stop()
    assert [line for line in proc.lines if line.strip()] == [
        f"error: port {port} on 127.0.0.1 is in use by another process; stop it or choose "
        "another --port (0 picks a free one)"
    ]
