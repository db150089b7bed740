"""The OpenAI-compatible layer on the HTTP kernel: error bodies, hints, the endpoint's errors.

The kernel's retry loop and its table of exceptions are tested in test_transport*.py; the
adapter's behaviour over loopback in test_openai_chat*.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import closing

import pytest
import requests
from requests.structures import CaseInsensitiveDict

from bridge.errors import (
    AuthenticationError,
    BadRequestError,
    NotFoundError,
    PlatformStatusError,
    ProtocolError,
    StreamInterruptedError,
)
from bridge.platforms._openai import read_openai_status_error
from bridge.platforms._transport import ErrorAnswer
from bridge.platforms.openai_chat.client import ChatTransport
from bridge.platforms.retry import RetryPolicy
from bridge.types import Event, TextDelta

URL = "http://127.0.0.1:9/v1/chat/completions"


@pytest.fixture
def transport() -> Iterator[ChatTransport]:
    transport = ChatTransport(
        URL, api_key=None, connect_timeout=2.0, idle_timeout=7.0, retry_policy=RetryPolicy()
    )
    yield transport
    transport.close()


def _answer(status: int, body: object, *, request_id: str | None = None) -> ErrorAnswer:
    text = body if isinstance(body, str) else json.dumps(body)
    headers = CaseInsensitiveDict({"x-request-id": request_id} if request_id else {})
    return ErrorAnswer(
        where="",
        method="POST",
        url=URL,
        status=status,
        reason="Reason",
        headers=headers,
        text=text,
        header_request_id=request_id,
        sent_request_id=None,
        attempts=1,
        retrying=False,
        retry_after=None,
    )


@pytest.mark.parametrize(
    ("status", "body", "cls", "code", "message"),
    [
        (
            401,
            {"error": {"message": "Incorrect API key", "type": "invalid_request_error"}},
            AuthenticationError,
            "invalid_request_error",
            "answered HTTP 401: Incorrect API key; check the API key (api_key=, --api-key or "
            "OPENAI_API_KEY)",
        ),
        (
            404,
            {"object": "error", "message": "The model `m` does not exist.", "code": 404},
            NotFoundError,
            "404",
            "answered HTTP 404: The model `m` does not exist.; check the base URL",
        ),
        (400, {"error": "bad tools"}, BadRequestError, "error", "answered HTTP 400: bad tools"),
        (418, "<html>teapot</html>", PlatformStatusError, None, "answered HTTP 418: <html>"),
        (400, "", BadRequestError, None, "answered HTTP 400: Reason"),
    ],
    ids=["openai", "vllm-flat", "string-error", "not-json", "empty"],
)
def test_the_status_reader(
    status: int, body: object, cls: type[PlatformStatusError], code: str | None, message: str
) -> None:
    error = read_openai_status_error(_answer(status, body, request_id="rid"))
    assert type(error) is cls
    assert (error.status_code, error.code, error.request_id) == (status, code, "rid")
    assert message in error.message
    assert error.message.startswith(f"{URL} answered HTTP {status}: ")


def test_errors_name_the_endpoint_and_keep_what_arrived(transport: ChatTransport) -> None:
    received: list[Event] = [TextDelta(text="so far")]
    with (
        pytest.raises(StreamInterruptedError, match=r"dropped mid-answer \(reset\)") as info,
        transport.errors(streaming=True, received=received, request_id="req-1"),
    ):
        raise requests.exceptions.ConnectionError("reset")
    assert info.value.message.startswith(f"the connection to {URL}")
    assert (info.value.received, info.value.request_id) == (received, "req-1")


def test_platform_errors_pass_through_and_get_the_request_id(transport: ChatTransport) -> None:
    error = ProtocolError("odd chunk")
    with pytest.raises(ProtocolError) as info, transport.errors(request_id="req-2"):
        raise error
    assert info.value is error and error.request_id == "req-2"


def test_the_api_key_never_shows() -> None:
    key = "sk-openai-http-test-0123456789"
    with closing(
        ChatTransport(
            URL, api_key=key, connect_timeout=2.0, idle_timeout=7.0, retry_policy=RetryPolicy()
        )
    ) as keyed:
        assert keyed.transport.headers["Authorization"] == f"Bearer {key}"
        error = read_openai_status_error(_answer(401, {"error": {"message": f"bad key {key}"}}))
    assert key not in str(error) and key not in (error.body or "")
