"""Each endpoint over real HTTP: create, runs, upload, feedback; auth, ids, body validation."""

from __future__ import annotations

import hashlib
import uuid
from pathlib import Path

import pytest
import requests

from bridge.emulator import Emulator
from bridge.errors import UsageError
from tests.emulator.helpers import WEATHER, Api, tool

REQUEST_ID = "X-Appbuilder-Request-Id"


def _error(response: requests.Response, status: int) -> str:
    """Assert the platform's error shape and return its message."""
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"request_id", "code", "message"}
    assert body["request_id"] == response.headers["X-Appbuilder-Request-Id"]
    return str(body["message"])


# --- create ---------------------------------------------------------------------------------


def test_create_returns_a_conversation_id_and_the_request_id(api: Api, emu: Emulator) -> None:
    response = api.post("", json={"app_id": "emulator-app"})
    assert response.status_code == 200
    body = response.json()
    assert set(body) == {"request_id", "conversation_id"}
    assert body["request_id"] == response.headers["X-Appbuilder-Request-Id"]
    uuid.UUID(body["conversation_id"])
    assert emu.conversation(body["conversation_id"]).app_id == "emulator-app"
    assert body["conversation_id"] in emu.conversation_ids()


def test_request_ids_are_unique_per_response(api: Api) -> None:
    ids = {api.post("", json={"app_id": "emulator-app"}).json()["request_id"] for _ in range(3)}
    assert len(ids) == 3


def test_the_client_request_id_is_echoed(api: Api, emu: Emulator) -> None:
    sent = "trace-" + str(uuid.uuid4())
    response = api.post("", json={"app_id": "emulator-app"}, headers={REQUEST_ID: sent})
    assert response.headers[REQUEST_ID] == sent and response.json()["request_id"] == sent
    assert emu.requests[-1].request_id == sent
    failed = api.post("", json={"app_id": "other"}, headers={REQUEST_ID: sent})
    assert failed.headers[REQUEST_ID] == sent and failed.json()["request_id"] == sent


@pytest.mark.parametrize("sent", ["", "x" * 129, "bad\x85id"])
def test_an_unusable_client_request_id_is_replaced(api: Api, sent: str) -> None:
    response = api.post("", json={"app_id": "emulator-app"}, headers={REQUEST_ID: sent})
    uuid.UUID(response.headers[REQUEST_ID])
    assert response.json()["request_id"] == response.headers[REQUEST_ID]


def test_unknown_app_is_404_naming_both_ids(api: Api) -> None:
    message = _error(api.post("", json={"app_id": "other-app"}), 404)
    assert "'other-app' not found" in message and "'emulator-app'" in message


def test_create_without_app_id_is_400(api: Api) -> None:
    message = _error(api.post("", json={}), 400)
    assert "app_id: required field is missing" in message


# --- auth -----------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["", "/runs", "/file/upload", "/feedback"])
def test_missing_token_is_401_with_the_documented_body(emu: Emulator, path: str) -> None:
    response = requests.post(
        f"{emu.base_url}/v2/app/conversation{path}", json={"app_id": "emulator-app"}, timeout=30
    )
    message = _error(response, 401)
    assert response.json()["code"] == "PermissionDeniedError"
    assert "没有权限" in message and "Authorization header is missing" in message


@pytest.mark.parametrize("value", ["Bearer wrong-token", "emulator-token", "Basic emulator-token"])
def test_wrong_token_is_401_and_never_echoed(emu: Emulator, value: str) -> None:
    response = requests.post(
        f"{emu.base_url}/v2/app/conversation",
        json={"app_id": "emulator-app"},
        headers={"Authorization": value},
        timeout=30,
    )
    message = _error(response, 401)
    assert "does not carry this emulator's token" in message
    assert "wrong-token" not in response.text


def test_the_token_is_masked_in_recorded_requests(api: Api, emu: Emulator) -> None:
    api.create()
    recorded = emu.requests[-1]
    assert recorded.headers["authorization"] == "Bearer [secure]"
    assert recorded.json == {"app_id": "emulator-app"}
    assert recorded.status == 200 and recorded.path == "/v2/app/conversation"
    assert "emulator-token" not in repr(emu.requests)


def test_custom_token_and_app_id() -> None:
    with Emulator(token="bce-v3/ALTAK-x/y", app_id="app-9", faults="") as emu:
        api = Api(emu.base_url, token="bce-v3/ALTAK-x/y", app_id="app-9")
        assert api.create()
        assert emu.env() == {
            "GATEWAY_URL_V2": emu.base_url,
            "APPBUILDER_TOKEN": "bce-v3/ALTAK-x/y",
            "APPBUILDER_APP_ID": "app-9",
        }


def test_base_url_before_start_is_a_usage_error() -> None:
    emu = Emulator(faults="")
    with pytest.raises(UsageError, match="has not been started"):
        _ = emu.base_url
    assert not emu.running
    assert "not started" in repr(emu)


# --- unknown paths and methods --------------------------------------------------------------


def test_unknown_path_is_404_with_request_id(api: Api) -> None:
    message = _error(api.post("/nope", json={}), 404)
    assert "no endpoint /v2/app/conversation/nope" in message


def test_wrong_method_is_405(emu: Emulator) -> None:
    response = requests.get(f"{emu.base_url}/v2/app/conversation/runs", timeout=30)
    assert "GET is not allowed" in _error(response, 405)


# --- run body validation --------------------------------------------------------------------


def test_body_that_is_not_json_is_400(api: Api) -> None:
    response = api.post("/runs", data=b"{nope", headers={"Content-Type": "application/json"})
    assert "not valid JSON" in _error(response, 400)


def test_body_that_is_not_an_object_is_400(api: Api) -> None:
    assert "must be a JSON object, not list" in _error(api.post("/runs", json=[1]), 400)


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"query": ""}, "query and tool_outputs cannot both be empty"),
        ({"stream": "yes"}, "stream: Input should be a valid boolean"),
        ({"tool_output": []}, "tool_output: unknown field (not part of the AppBuilder API)"),
        ({"query": "x" * 2001}, "query has 2001 characters; at most 2000"),
        ({"end_user_id": "u1"}, "end_user_id: String should have at least 6 characters"),
        ({"tools": [{"type": "function"}]}, "a tool of type 'function' needs a 'function'"),
        (
            {"tools": [tool("bad name!", "d", {}, [])]},
            "tools[0].function.name: String should match pattern",
        ),
        ({"tools": [WEATHER, WEATHER]}, "repeated: ['get_weather']"),
        (
            {"tool_outputs": [{"tool_call_id": "", "output": "x"}]},
            "tool_outputs[0].tool_call_id: String should have at least 1 character",
        ),
        (
            {"tool_outputs": [{"tool_call_id": "a", "output": 3}]},
            "tool_outputs[0].output: Input should be a valid string",
        ),
        ({"tool_choice": {"type": "function"}}, "tool_choice of type 'function' needs"),
        ({"tool_choice": {"type": "sometimes"}}, "tool_choice.type: Input should be 'auto'"),
        ({"conversation_id": None}, "conversation_id: Input should be a valid string"),
    ],
)
def test_invalid_run_bodies_are_400_naming_the_field(
    api: Api, fields: dict[str, object], expected: str
) -> None:
    conversation_id = api.create()
    body = {**api.run_body(conversation_id, "hello"), **fields}
    message = _error(api.post("/runs", json=body), 400)
    assert message.startswith("invalid request body: ")
    assert expected in message


def test_missing_run_keys_are_named(api: Api) -> None:
    message = _error(api.post("/runs", json={"query": "hi"}), 400)
    assert "app_id: required field is missing" in message
    assert "conversation_id: required field is missing" in message


@pytest.mark.parametrize(
    ("schema", "expected"),
    [
        ({"type": "object"}, "tools[0].function.parameters: an object schema needs 'properties'"),
        (
            {"type": "object", "properties": {"tags": {"type": "array"}}},
            "parameters.properties.tags: an array schema needs 'items'",
        ),
        (
            {"type": "object", "properties": {"meta": {"type": "object"}}},
            "parameters.properties.meta: an object schema needs 'properties'",
        ),
    ],
)
def test_manifests_breaking_appbuilder_rules_are_400(
    api: Api, schema: dict[str, object], expected: str
) -> None:
    bad = {"type": "function", "function": {"name": "f", "description": "d", "parameters": schema}}
    message = _error(api.run(api.create(), "hi", tools=[bad]), 400)
    assert message.startswith("invalid tool manifest: ") and expected in message


def test_sdk_style_manifest_with_python_types_is_accepted(api: Api) -> None:
    manifest = {
        "type": "function",
        "function": {
            "name": "add",
            "description": None,
            "parameters": {
                "type": "object",
                "properties": {
                    "a": {"name": "a", "type": "Any", "description": None, "required": True}
                },
                "required": ["a"],
            },
        },
    }
    assert api.run(api.create(), "add 1", tools=[manifest]).status_code == 200


def test_run_for_unknown_app_is_404(api: Api) -> None:
    conversation_id = api.create()
    body = api.run_body(conversation_id, "hi", app_id="someone-else")
    assert "'someone-else' not found" in _error(api.post("/runs", json=body), 404)


def test_run_for_unknown_conversation_is_404(api: Api) -> None:
    message = _error(api.run("no-such-conversation", "hi"), 404)
    assert "conversation 'no-such-conversation' not found" in message
    assert "POST /v2/app/conversation" in message


def test_tool_choice_naming_a_tool_not_sent_is_400(api: Api) -> None:
    choice = {"type": "function", "function": {"name": "get_time", "input": {}}}
    response = api.run(api.create(), "hi", tools=[WEATHER], tool_choice=choice)
    message = _error(response, 400)
    assert "'get_time'" in message and "tools: get_weather" in message


# --- upload -----------------------------------------------------------------------------------


def test_upload_a_file_then_use_its_id(api: Api, emu: Emulator, tmp_path: Path) -> None:
    conversation_id = api.create()
    path = tmp_path / "report.pdf"
    path.write_bytes(b"%PDF-1.4 tiny")
    with path.open("rb") as handle:
        response = api.post(
            "/file/upload",
            files={
                "app_id": (None, "emulator-app"),
                "conversation_id": (None, conversation_id),
                "file": ("report.pdf", handle),
            },
        )
    assert response.status_code == 200, response.text
    body = response.json()
    assert set(body) == {"request_id", "id", "conversation_id"}
    assert body["conversation_id"] == conversation_id
    assert body["request_id"] == response.headers["X-Appbuilder-Request-Id"]
    (record,) = emu.conversation(conversation_id).files
    assert record.file_id == body["id"] and record.filename == "report.pdf"
    assert record.size == 13 and record.sha256 == hashlib.sha256(b"%PDF-1.4 tiny").hexdigest()
    assert emu.requests[-1].form == {
        "app_id": "emulator-app",
        "conversation_id": conversation_id,
        "file": {"filename": "report.pdf", "size": 13},
    }
    assert api.run(conversation_id, "summarise", file_ids=[body["id"]]).status_code == 200


def test_upload_by_url(api: Api, emu: Emulator) -> None:
    conversation_id = api.create()
    response = api.post(
        "/file/upload",
        files={
            "app_id": (None, "emulator-app"),
            "conversation_id": (None, conversation_id),
            "file_url": (None, "https://example.com/a.png"),
        },
    )
    assert response.status_code == 200, response.text
    (record,) = emu.conversation(conversation_id).files
    assert record.url == "https://example.com/a.png" and record.filename is None


@pytest.mark.parametrize(
    ("fields", "status", "expected"),
    [
        ({"conversation_id": "C"}, 400, "multipart field(s) app_id missing or empty"),
        ({"app_id": "emulator-app", "conversation_id": "C"}, 400, "send exactly one of"),
        (
            {"app_id": "emulator-app", "conversation_id": "C", "file_url": "ftp://x/y"},
            400,
            "file_url must be an http(s) URL, got 'ftp://x/y'",
        ),
        (
            {"app_id": "emulator-app", "conversation_id": "C", "file": "plain text"},
            400,
            "'file' must be a file part",
        ),
        (
            {"app_id": "emulator-app", "conversation_id": "missing", "file_url": "https://x"},
            404,
            "not found",
        ),
        (
            {"app_id": "other", "conversation_id": "C", "file_url": "https://x"},
            404,
            "'other' not found",
        ),
    ],
)
def test_bad_uploads_are_rejected_clearly(
    api: Api, fields: dict[str, str], status: int, expected: str
) -> None:
    conversation_id = api.create()
    parts = {
        k: (None, v.replace("C", conversation_id) if v == "C" else v) for k, v in fields.items()
    }
    assert expected in _error(api.post("/file/upload", files=parts), status)


def test_upload_that_is_not_a_form_is_400(api: Api) -> None:
    message = _error(api.post("/file/upload", json={"app_id": "emulator-app"}), 400)
    assert "must be multipart/form-data (or application/x-www-form-urlencoded" in message


def test_an_urlencoded_file_url_upload_is_accepted(api: Api, emu: Emulator) -> None:
    conversation_id = api.create()
    fields = {
        "app_id": "emulator-app",
        "conversation_id": conversation_id,
        "file_url": "https://x/a.pdf",
    }
    response = api.post("/file/upload", data=fields)
    assert response.status_code == 200, response.text
    (record,) = emu.conversation(conversation_id).files
    assert record.url == "https://x/a.pdf" and record.file_id == response.json()["id"]


def test_an_urlencoded_file_field_is_no_file(api: Api) -> None:
    fields = {"app_id": "emulator-app", "conversation_id": api.create(), "file": "a.txt"}
    message = _error(api.post("/file/upload", data=fields), 400)
    assert "'file' must be a file part" in message


def test_unknown_file_ids_in_a_run_are_400(api: Api) -> None:
    conversation_id = api.create()
    message = _error(api.run(conversation_id, "hi", file_ids=["f-1"]), 400)
    assert "file_ids ['f-1'] were not uploaded" in message


# --- feedback ---------------------------------------------------------------------------------


def test_feedback_on_a_message(api: Api, emu: Emulator) -> None:
    conversation_id = api.create()
    (body,) = api.chunks(conversation_id, "hello there", stream=False)
    response = api.post(
        "/feedback",
        json={
            "app_id": "emulator-app",
            "conversation_id": conversation_id,
            "message_id": body["message_id"],
            "type": "downvote",
            "flag": ["答非所问"],
            "reason": "off topic",
        },
    )
    assert response.status_code == 200, response.text
    assert response.json() == {"request_id": response.headers["X-Appbuilder-Request-Id"]}
    (feedback,) = emu.conversation(conversation_id).feedback
    assert feedback["type"] == "downvote" and feedback["flag"] == ["答非所问"]


@pytest.mark.parametrize(
    ("fields", "status", "expected"),
    [
        ({"type": "like"}, 400, "type: Input should be 'upvote', 'downvote' or 'cancel'"),
        ({"message_id": "m-404"}, 404, "message 'm-404' not found in conversation"),
        ({"conversation_id": "c-404"}, 404, "conversation 'c-404' not found"),
        ({"extra": 1}, 400, "extra: unknown field"),
    ],
)
def test_bad_feedback_is_rejected_clearly(
    api: Api, fields: dict[str, object], status: int, expected: str
) -> None:
    conversation_id = api.create()
    (body,) = api.chunks(conversation_id, "hello there", stream=False)
    payload = {
        "app_id": "emulator-app",
        "conversation_id": conversation_id,
        "message_id": body["message_id"],
        "type": "upvote",
        **fields,
    }
    assert expected in _error(api.post("/feedback", json=payload), status)
