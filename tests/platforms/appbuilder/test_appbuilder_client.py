"""AppBuilderClient on the wire: URLs, headers, bodies, configuration and argument checks.

Every request goes over real HTTP to the recording fake server on loopback.
"""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path
from typing import ClassVar

import pytest
from ab_fakes import (
    NO_WAIT,
    TOKEN,
    FakeAppBuilder,
    chunk,
    final_chunk,
    json_reply,
    sse_reply,
    text_event,
)
from pydantic import BaseModel

from bridge.errors import ConfigurationError, UsageError
from bridge.platforms.appbuilder import (
    Action,
    AppBuilderClient,
    RunResponse,
    RunStream,
    ToolOutput,
    WireToolChoice,
)

SDK_CONFIG = (
    '{"appbuilder_sdk_version":"1.1.5","appbuilder_sdk_language":"python",'
    '"appbuilder_sdk_platform":"unknown"}'
)
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_current_weather",
        "description": "weather",
        "parameters": {
            "type": "object",
            "properties": {"location": {"type": "string"}},
            "required": ["location"],
        },
    },
}
UUID4 = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")


def _conversation(fake: FakeAppBuilder, conversation_id: str = "conv-1") -> None:
    fake.push(json_reply({"request_id": "r-1", "conversation_id": conversation_id}))


def _run_ok(fake: FakeAppBuilder) -> None:
    fake.push(json_reply(chunk("ok", [text_event("ok", status="done")])))


# --- headers and URLs ---------------------------------------------------------------------------


def test_create_conversation_request_is_the_sdks(
    client: AppBuilderClient, fake: FakeAppBuilder
) -> None:
    _conversation(fake, "conv-42")
    assert client.create_conversation() == "conv-42"
    [request] = fake.requests
    assert (request.method, request.path, request.query) == ("POST", "/v2/app/conversation", "")
    assert request.body == b'{"app_id": "app-1"}'
    names = [name for name, _ in request.headers]
    sdk_headers = [n for n in names if n.startswith("x-") or n in ("authorization", "content-type")]
    assert sdk_headers == [
        "x-appbuilder-sdk-config",
        "x-appbuilder-origin",
        "x-appbuilder-request-id",
        "x-bce-request-id",
        "authorization",
        "content-type",
    ]
    assert request.header("x-appbuilder-sdk-config") == SDK_CONFIG
    assert request.header("x-appbuilder-origin") == "appbuilder_sdk"
    request_id = request.header("x-appbuilder-request-id")
    assert request_id is not None and UUID4.match(request_id)
    assert request.header("x-bce-request-id") == request_id
    assert request.header("authorization") == f"Bearer {TOKEN}"
    assert request.header("content-type") == "application/json"
    assert request.header("accept") == "*/*"  # requests' default; no text/event-stream
    assert (request.header("user-agent") or "").startswith("python-requests/")


def test_each_request_gets_a_fresh_request_id(
    client: AppBuilderClient, fake: FakeAppBuilder
) -> None:
    _conversation(fake)
    _conversation(fake)
    client.create_conversation()
    client.create_conversation()
    ids = [r.header("x-appbuilder-request-id") for r in fake.requests]
    assert len(set(ids)) == 2


@pytest.mark.parametrize(
    ("token", "prefix_env", "sent"),
    [
        ("abc-123", None, "Bearer abc-123"),
        ("Bearer abc-123", None, "Bearer abc-123"),
        ("abc-123", "Token", "Token abc-123"),
    ],
)
def test_authorization_prefix(
    fake: FakeAppBuilder,
    fake_url: str,
    monkeypatch: pytest.MonkeyPatch,
    token: str,
    prefix_env: str | None,
    sent: str,
) -> None:
    if prefix_env:
        monkeypatch.setenv("SECRET_KEY_PREFIX", prefix_env)
    _conversation(fake)
    with AppBuilderClient("app-1", token, fake_url) as client:
        client.create_conversation()
    assert fake.requests[0].header("authorization") == sent


def test_environment_defaults(
    fake: FakeAppBuilder, fake_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("APPBUILDER_TOKEN", "env-token-1")
    monkeypatch.setenv("APPBUILDER_APP_ID", "env-app")
    monkeypatch.setenv("GATEWAY_URL_V2", fake_url)
    monkeypatch.setenv("APPBUILDER_SDK_PLATFORM", "toolbridge-test")
    _conversation(fake)
    with AppBuilderClient() as client:
        assert client.app_id == "env-app"
        client.create_conversation()
    request = fake.requests[0]
    assert request.body == b'{"app_id": "env-app"}'
    assert request.header("authorization") == "Bearer env-token-1"
    assert json.loads(request.header("x-appbuilder-sdk-config") or "")[
        "appbuilder_sdk_platform"
    ] == ("toolbridge-test")


def test_console_prefix_and_version_are_inserted(
    fake: FakeAppBuilder, fake_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CONSOLE_OPENAPI_PREFIX", "/api/console")
    monkeypatch.setenv("CONSOLE_OPENAPI_VERSION", "/v9")
    _conversation(fake)
    with AppBuilderClient("app-1", TOKEN, fake_url + "/") as client:
        client.create_conversation()
    assert fake.requests[0].path == "/api/console/v9/app/conversation"


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (None, "https://qianfan.baidubce.com"),
        ("qianfan.example.com", "https://qianfan.example.com"),
        ("http://127.0.0.1:8410/", "http://127.0.0.1:8410"),
        ("https://gw.example.com", "https://gw.example.com"),
    ],
)
def test_gateway_normalisation(given: str | None, expected: str) -> None:
    client = AppBuilderClient("app-1", TOKEN, given)
    assert client.base_url == expected
    assert client.api_root == expected + "/v2"
    client.close()


def test_missing_token_names_the_variable() -> None:
    with pytest.raises(ConfigurationError, match="APPBUILDER_TOKEN") as info:
        AppBuilderClient("app-1")
    assert "token=" in str(info.value)


def test_missing_app_id_names_the_variable() -> None:
    with pytest.raises(ConfigurationError, match="APPBUILDER_APP_ID") as info:
        AppBuilderClient(token=TOKEN)
    assert "app_id=" in str(info.value)


@pytest.mark.parametrize("field", ["connect_timeout", "idle_timeout"])
@pytest.mark.parametrize("value", [0, -1.0])
def test_timeouts_must_be_positive(field: str, value: float) -> None:
    with pytest.raises(ConfigurationError, match=f"{field} must be a positive number of seconds"):
        AppBuilderClient("app-1", TOKEN, **{field: value})  # type: ignore[arg-type]


def test_bad_max_retries_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="max_retries must be >= 0"):
        AppBuilderClient("app-1", TOKEN, max_retries=-1)


def test_repr_hides_the_token() -> None:
    client = AppBuilderClient("app-1", TOKEN, "http://127.0.0.1:1")
    assert "[secure]" in repr(client)
    assert TOKEN not in repr(client) and "0123456789abcdef" not in repr(client)


# --- run bodies ---------------------------------------------------------------------------------


def test_first_run_body_matches_the_sdk_bytes(
    client: AppBuilderClient, fake: FakeAppBuilder
) -> None:
    _run_ok(fake)
    result = client.run(
        "conv-1", "北京天气?", stream=False, tools=[WEATHER_TOOL], end_user_id="user_123456"
    )
    assert isinstance(result, RunResponse)
    assert fake.requests[0].path == "/v2/app/conversation/runs"
    assert fake.requests[0].body == (
        b'{"query": "\\u5317\\u4eac\\u5929\\u6c14?", "stream": false, "conversation_id": '
        b'"conv-1", "file_ids": [], "app_id": "app-1", "tools": [{"type": "function", '
        b'"function": {"name": "get_current_weather", "description": "weather", "parameters": '
        b'{"type": "object", "properties": {"location": {"type": "string"}}, "required": '
        b'["location"]}}}], "tool_outputs": null, "tool_choice": null, "end_user_id": '
        b'"user_123456", "action": null, "mcp_authorization": null, "parameters": null, '
        b'"custom_metadata": null}'
    )


def test_tool_output_submission_matches_the_sdk_bytes(
    client: AppBuilderClient, fake: FakeAppBuilder
) -> None:
    fake.push(sse_reply(chunk("done"), final_chunk()))
    with client.run("conv-1", tool_outputs=[{"tool_call_id": "tc-1", "output": "35度"}]) as stream:
        assert isinstance(stream, RunStream)
        list(stream)
    assert fake.requests[0].body == (
        b'{"query": "", "stream": true, "conversation_id": "conv-1", "file_ids": [], "app_id": '
        b'"app-1", "tools": [], "tool_outputs": [{"tool_call_id": "tc-1", "output": '
        b'"35\\u5ea6"}], "tool_choice": null, "end_user_id": null, "action": null, '
        b'"mcp_authorization": null, "parameters": null, "custom_metadata": null}'
    )


def test_every_optional_field_reaches_the_wire(
    client: AppBuilderClient, fake: FakeAppBuilder
) -> None:
    _run_ok(fake)
    client.run(
        "conv-1",
        "hi",
        stream=False,
        tool_choice="get_current_weather",
        file_ids=["file-1"],
        action=Action.resume("ev-1"),
        parameters={"city": "北京"},
        mcp_authorization=[{"type": "netdisk"}],
        custom_metadata={"override_role_instruction": "be brief"},
        tool_outputs=[ToolOutput(tool_call_id="t", output="o")],
    )
    body = fake.requests[0].json()
    assert body["tool_choice"] == {
        "type": "function",
        "function": {"name": "get_current_weather", "input": {}},
    }
    assert body["file_ids"] == ["file-1"]
    assert body["action"]["parameters"]["interrupt_event"] == {"id": "ev-1", "type": "chat"}
    assert body["parameters"] == {"city": "北京"}
    assert body["mcp_authorization"] == [{"type": "netdisk"}]
    assert body["custom_metadata"] == {"override_role_instruction": "be brief"}
    assert body["tool_outputs"] == [{"tool_call_id": "t", "output": "o"}]


@pytest.mark.parametrize(
    ("choice", "wire"),
    [
        ("auto", {"type": "auto", "function": None}),
        ({"type": "auto", "function": None}, {"type": "auto", "function": None}),
        (
            WireToolChoice.for_function("f", {"a": 1}),
            {"type": "function", "function": {"name": "f", "input": {"a": 1}}},
        ),
    ],
)
def test_tool_choice_forms(
    client: AppBuilderClient, fake: FakeAppBuilder, choice: object, wire: dict[str, object]
) -> None:
    _run_ok(fake)
    client.run("conv-1", "hi", stream=False, tool_choice=choice)  # type: ignore[arg-type]
    assert fake.requests[0].json()["tool_choice"] == wire


def test_tool_dicts_are_put_in_sdk_key_order(
    client: AppBuilderClient, fake: FakeAppBuilder
) -> None:
    shuffled = {
        "function": {
            "parameters": {"type": "object", "properties": {}},
            "name": "f",
            "description": "d",
        },
        "type": "function",
    }
    _run_ok(fake)
    client.run("conv-1", "hi", stream=False, tools=[shuffled])
    assert b'"tools": [{"type": "function", "function": {"name": "f", "description": "d", ' in (
        fake.requests[0].body
    )


def test_pydantic_and_non_function_tools(client: AppBuilderClient, fake: FakeAppBuilder) -> None:
    class Function(BaseModel):
        name: str
        description: str | None
        parameters: dict[str, object]

    class Manifest(BaseModel):
        type: str = "function"
        function: Function

    manifest = Manifest(
        function=Function(name="m", description=None, parameters={"type": "object"})
    )
    _run_ok(fake)
    client.run("conv-1", "hi", stream=False, tools=[manifest, {"type": "code_interpreter"}])
    assert fake.requests[0].json()["tools"] == [
        {
            "type": "function",
            "function": {"name": "m", "description": None, "parameters": {"type": "object"}},
        },
        {"type": "code_interpreter"},
    ]


def test_mcp_tools_are_wrapped_and_set_the_mcp_context(
    client: AppBuilderClient, fake: FakeAppBuilder
) -> None:
    class McpTool:  # shaped like mcp.types.Tool
        name = "lookup"
        description = "Look up"
        inputSchema: ClassVar[dict[str, object]] = {  # noqa: N815 - MCP's attribute name
            "type": "object",
            "properties": {"q": {"type": "string"}},
        }

    for _ in range(3):
        _run_ok(fake)
    client.run(
        "conv-1",
        "hi",
        stream=False,
        tools=[McpTool(), {"name": "n", "description": "d", "inputSchema": {}}],
    )
    client.run("conv-1", stream=False, tool_outputs=[{"tool_call_id": "t", "output": "o"}])
    client.run("conv-1", "next question", stream=False)
    first, submission, plain = fake.requests
    assert first.json()["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "lookup",
                "description": "Look up",
                "parameters": McpTool.inputSchema,
            },
        },
        {"type": "function", "function": {"name": "n", "description": "d", "parameters": {}}},
    ]
    for request in (first, submission):
        assert json.loads(request.header("x-appbuilder-sdk-config") or "") == {
            "appbuilder_sdk_version": "1.1.5",
            "appbuilder_sdk_language": "python",
            "appbuilder_sdk_platform": "unknown",
            "appbuilder_sdk_mcp_context": "client",
        }
    assert plain.header("x-appbuilder-sdk-config") == SDK_CONFIG


def test_mcp_context_from_the_environment(
    client: AppBuilderClient, fake: FakeAppBuilder, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("APPBUILDER_SDK_MCP_CONTEXT", "server")
    _conversation(fake)
    client.create_conversation()
    config = json.loads(fake.requests[0].header("x-appbuilder-sdk-config") or "")
    assert config["appbuilder_sdk_mcp_context"] == "server"


# --- argument checks (nothing is sent) ------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"conversation_id": ""},
            "conversation_id is empty; create one with create_conversation()",
        ),
        ({"query": ""}, "query and tool_outputs cannot both be empty"),
        ({"query": "", "tool_outputs": []}, "query and tool_outputs cannot both be empty"),
        ({"query": 3}, "query must be a str (got int)"),
        ({"tools": ["nope"]}, "tools[0] must be a dict like"),
        ({"tools": [{"type": "function"}]}, "tools[0] has no 'function' object"),
        (
            {"tools": [{"type": "function", "function": {"name": ""}}]},
            "tools[0].function.name must be a non-empty string",
        ),
        (
            {"tool_outputs": [{"tool_call_id": "t"}]},
            "tool_outputs[0] must be {'tool_call_id': str, 'output': str}",
        ),
        (
            {"tool_outputs": [{"tool_call_id": "t", "output": {"a": 1}}]},
            "JSON-encode structured outputs",
        ),
        ({"tool_choice": ""}, "tool_choice is an empty string"),
        ({"tool_choice": {"type": "sometimes"}}, "tool_choice must be a tool name, 'auto', or"),
        ({"action": {"action_type": "resume"}}, "action must be Action.resume(interrupt_event_id)"),
        ({"end_user_id": 5}, "invalid run arguments: end_user_id"),
    ],
)
def test_bad_run_arguments_are_usage_errors(
    client: AppBuilderClient, fake: FakeAppBuilder, kwargs: dict[str, object], message: str
) -> None:
    arguments: dict[str, object] = {"conversation_id": "conv-1", "query": "hi", "stream": False}
    arguments.update(kwargs)
    with pytest.raises(UsageError) as info:
        client.run(**arguments)  # type: ignore[arg-type]
    assert message in str(info.value)
    assert fake.requests == []


# --- upload and feedback --------------------------------------------------------------------------


def test_upload_local_file_is_multipart_like_the_sdk(
    client: AppBuilderClient, fake: FakeAppBuilder, tmp_path: Path
) -> None:
    path = tmp_path / "report.csv"
    path.write_bytes(b"a,b\n1,2\n")
    fake.push(json_reply({"request_id": "r", "id": "file-9", "conversation_id": "conv-1"}))
    assert client.upload_file("conv-1", path=path) == "file-9"
    request = fake.requests[0]
    assert request.path == "/v2/app/conversation/file/upload"
    content_type = request.header("content-type") or ""
    assert content_type.startswith("multipart/form-data; boundary=")
    body = request.body.decode()
    names = re.findall(r'Content-Disposition: form-data; name="([^"]+)"', body)
    assert names == ["app_id", "conversation_id", "file"]
    assert 'name="file"; filename="report.csv"' in body
    assert "a,b\n1,2\n" in body
    assert request.header("authorization") == f"Bearer {TOKEN}"


def test_upload_by_url(client: AppBuilderClient, fake: FakeAppBuilder) -> None:
    fake.push(json_reply({"request_id": "r", "id": "file-10", "conversation_id": "conv-1"}))
    assert client.upload_file("conv-1", url="https://example.com/a.pdf") == "file-10"
    body = fake.requests[0].body.decode()
    assert re.findall(r'name="([^"]+)"', body) == ["app_id", "conversation_id", "file_url"]
    assert "https://example.com/a.pdf" in body


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {},
            "upload_file needs exactly one of path=... (a local file) or url=... "
            "(a file URL); got neither",
        ),
        ({"path": "x", "url": "y"}, "got both"),
        (
            {"path": "/definitely/not/here.txt"},
            "'/definitely/not/here.txt' is not an existing file",
        ),
        ({"url": ""}, "url is empty"),
    ],
)
def test_upload_argument_checks(
    client: AppBuilderClient, fake: FakeAppBuilder, kwargs: dict[str, str], message: str
) -> None:
    with pytest.raises(UsageError) as info:
        client.upload_file("conv-1", **kwargs)  # type: ignore[arg-type]
    assert message in str(info.value)
    assert fake.requests == []


def test_feedback(client: AppBuilderClient, fake: FakeAppBuilder) -> None:
    fake.push(json_reply({"request_id": "fb-1"}, headers={"X-Appbuilder-Request-Id": "srv-9"}))
    assert (
        client.feedback("conv-1", "m-1", "downvote", flag=["答非所问"], reason="off topic")
        == "srv-9"
    )
    request = fake.requests[0]
    assert request.path == "/v2/app/conversation/feedback"
    assert request.json() == {
        "app_id": "app-1",
        "conversation_id": "conv-1",
        "message_id": "m-1",
        "type": "downvote",
        "flag": ["答非所问"],
        "reason": "off topic",
    }
    fake.push(json_reply({"request_id": "fb-2"}))
    assert client.feedback("conv-1", "m-1", "upvote") == "fb-2"
    assert fake.requests[1].body == (
        b'{"app_id": "app-1", "conversation_id": "conv-1", "message_id": "m-1", "type": "upvote"}'
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("", "m", "upvote"), "conversation_id is empty"),
        (("c", "", "upvote"), "message_id is empty"),
        (("c", "m", "like"), "type must be one of upvote, downvote, cancel (got 'like')"),
    ],
)
def test_feedback_argument_checks(
    client: AppBuilderClient, fake: FakeAppBuilder, args: tuple[str, str, str], message: str
) -> None:
    with pytest.raises(UsageError, match=re.escape(message)):
        client.feedback(*args)  # type: ignore[arg-type]
    assert fake.requests == []


# --- responses ------------------------------------------------------------------------------------


def test_non_stream_run_returns_the_typed_body(
    client: AppBuilderClient, fake: FakeAppBuilder
) -> None:
    fake.push(
        json_reply(
            chunk("hello", [text_event("hello", status="done")], message_id="m-7"),
            headers={"X-Appbuilder-Request-Id": "srv-1"},
        )
    )
    result = client.run("conv-1", "hi", stream=False)
    assert (result.answer, result.message_id, result.http_request_id) == ("hello", "m-7", "srv-1")
    assert result.content[0].outputs == {"text": "hello"}


def test_stream_run_yields_typed_chunks(client: AppBuilderClient, fake: FakeAppBuilder) -> None:
    fake.push(
        sse_reply(
            chunk("a", [text_event("a")]),
            chunk("b", [text_event("b")]),
            final_chunk(),
            headers={"X-Appbuilder-Request-Id": "srv-2"},
        )
    )
    stream = client.run("conv-1", "hi")
    assert stream.request_id == "srv-2"
    assert stream.sent_request_id == fake.requests[0].header("x-appbuilder-request-id")
    chunks = list(stream)
    assert [c.answer for c in chunks] == ["a", "b", ""]
    assert all(c.http_request_id == "srv-2" for c in chunks)
    assert stream.received == chunks


def test_stream_framing_variants_over_http(client: AppBuilderClient, fake: FakeAppBuilder) -> None:
    one = json.dumps(chunk("a", [text_event("a")])).encode()
    two = json.dumps(chunk("b")).encode()
    raw = (
        b": keep-alive comment\r\n"
        b"event: message\r\nid: 1\r\ndata:" + one + b"\r\n\r\n"
        b"event: ping\r\n\r\n"
        b"data: " + two + b"\n\n"
        b"data: [DONE]\n\n"
        b'data: {"never": true}\n\n'
    )
    fake.push(sse_reply(*[raw[i : i + 5] for i in range(0, len(raw), 5)]))
    assert [c.answer for c in client.run("conv-1", "hi")] == ["a", "b"]


def test_closing_a_stream_early_releases_it(client: AppBuilderClient, fake: FakeAppBuilder) -> None:
    fake.push(sse_reply(chunk("a"), chunk("b"), final_chunk()))
    stream = client.run("conv-1", "hi")
    assert next(stream).answer == "a"
    stream.close()
    with pytest.raises(StopIteration):
        next(stream)
    _conversation(fake)
    assert client.create_conversation() == "conv-1"  # the client is still usable


def test_a_session_passed_in_is_used_and_left_open(fake: FakeAppBuilder, fake_url: str) -> None:
    import requests

    session = requests.Session()
    session.headers["X-Test-Session"] = "yes"
    _conversation(fake)
    _conversation(fake)
    with AppBuilderClient(
        "app-1", TOKEN, fake_url, session=session, retry_policy=NO_WAIT
    ) as client:
        client.create_conversation()
    assert fake.requests[0].header("x-test-session") == "yes"
    assert session.post(fake_url + "/v2/app/conversation", timeout=5).status_code == 200
    session.close()


def test_request_ids_are_uuid4(client: AppBuilderClient, fake: FakeAppBuilder) -> None:
    _conversation(fake)
    client.create_conversation()
    value = fake.requests[0].header("x-appbuilder-request-id") or ""
    assert uuid.UUID(value).version == 4


def test_every_missing_setting_is_named_at_once() -> None:
    with pytest.raises(ConfigurationError) as info:
        AppBuilderClient()
    message = str(info.value)
    assert "APPBUILDER_APP_ID" in message and "APPBUILDER_TOKEN" in message


def test_open_platform_needs_settings_or_the_emulator_switch() -> None:
    from bridge import open_platform

    with (
        pytest.raises(ConfigurationError, match=r"open_platform\(emulator=True\)") as info,
        open_platform(),
    ):
        pass
    assert "APPBUILDER_APP_ID" in str(info.value) and "APPBUILDER_TOKEN" in str(info.value)
    with open_platform(emulator=True, scenario={"rules": []}) as platform:
        assert platform.check().startswith("AppBuilder at http://127.0.0.1:")
