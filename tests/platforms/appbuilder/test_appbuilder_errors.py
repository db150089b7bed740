"""AppBuilder's side of error translation: names, hints, request ids, bodies, in-band errors.

The kernel's table (every `requests`/urllib3 class) is tested in tests/platforms/
test_transport_errors.py, the failures themselves over real HTTP in test_appbuilder_faults.py;
here each class is raised inside `CallContext.errors` to show AppBuilder's words and ids.
"""

from __future__ import annotations

import inspect
import json
from dataclasses import dataclass
from typing import Any

import pydantic
import pytest
import requests
import urllib3.exceptions
from requests.structures import CaseInsensitiveDict

from bridge.errors import (
    AuthenticationError,
    BridgeError,
    ConfigurationError,
    InBandError,
    NotFoundError,
    PlatformConnectionError,
    PlatformError,
    PlatformTimeoutError,
    ProtocolError,
    ServerError,
    StreamInterruptedError,
    StreamTimeoutError,
)
from bridge.platforms._transport import KEPT_BODY, ErrorAnswer, Transport
from bridge.platforms.appbuilder._errors import (
    REQUEST_ID_HEADER,
    CallContext,
    in_band_error,
    read_status_error,
)

URL = "http://127.0.0.1:1/v2/app/conversation/runs"


def _ctx(transport: Transport, *, streaming: bool = False) -> CallContext:
    ctx = CallContext(
        operation="run",
        url=URL,
        transport=transport,
        sent_request_id="sent-1",
        streaming=streaming,
    )
    ctx.received.append("chunk-0")
    return ctx


def _requests_exception_classes() -> list[type[requests.exceptions.RequestException]]:
    return sorted(
        (
            cls
            for _, cls in inspect.getmembers(requests.exceptions, inspect.isclass)
            if issubclass(cls, requests.exceptions.RequestException)
        ),
        key=lambda cls: cls.__name__,
    )


def _instance(cls: type[BaseException]) -> BaseException:
    if issubclass(cls, json.JSONDecodeError):
        return cls("Expecting value", "doc", 0)
    return cls("boom")


@pytest.mark.parametrize("cls", _requests_exception_classes(), ids=lambda c: c.__name__)
@pytest.mark.parametrize("streaming", [False, True], ids=["before-body", "mid-stream"])
def test_every_requests_exception_is_translated(
    transport: Transport, cls: type[requests.exceptions.RequestException], streaming: bool
) -> None:
    original = _instance(cls)
    with pytest.raises(BridgeError) as info, _ctx(transport, streaming=streaming).errors():
        raise original
    error = info.value
    assert error.__cause__ is original
    assert isinstance(error, PlatformError | ConfigurationError)
    assert error.message.startswith("AppBuilder run: ")


@pytest.mark.parametrize(
    "original",
    [
        json.JSONDecodeError("Expecting value", "{", 1),
        UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte"),
    ],
    ids=["json", "unicode"],
)
def test_decoding_errors_become_protocol_errors(
    transport: Transport, original: BaseException
) -> None:
    with pytest.raises(ProtocolError) as info, _ctx(transport).errors():
        raise original
    assert info.value.__cause__ is original
    assert info.value.request_id == "sent-1"


def test_validation_errors_become_protocol_errors(transport: Transport) -> None:
    class Model(pydantic.BaseModel):
        x: int

    with pytest.raises(ProtocolError, match="cannot be decoded") as info, _ctx(transport).errors():
        Model.model_validate({"x": "not a number"})
    assert isinstance(info.value.__cause__, pydantic.ValidationError)


def test_bridge_errors_and_unrelated_errors_pass_through(transport: Transport) -> None:
    original = InBandError("x")
    with pytest.raises(InBandError) as info, _ctx(transport).errors():
        raise original
    assert info.value is original
    with pytest.raises(KeyError), _ctx(transport).errors():
        raise KeyError("a bug of ours stays a bug")


READ_TIMEOUT = urllib3.exceptions.ReadTimeoutError(None, "/v2", "Read timed out.")  # type: ignore[arg-type]
REFUSED = urllib3.exceptions.NewConnectionError(None, "Connection refused")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("exc", "streaming", "expected"),
    [
        (requests.exceptions.ConnectTimeout("t"), False, PlatformTimeoutError),
        (requests.exceptions.ReadTimeout("t"), False, PlatformTimeoutError),
        (requests.exceptions.ReadTimeout("t"), True, StreamTimeoutError),
        (requests.exceptions.ConnectionError(READ_TIMEOUT), True, StreamTimeoutError),
        (requests.exceptions.ConnectionError(REFUSED), False, PlatformConnectionError),
        (requests.exceptions.ChunkedEncodingError("ended"), True, StreamInterruptedError),
        (requests.exceptions.ChunkedEncodingError("ended"), False, PlatformConnectionError),
        (requests.exceptions.ConnectionError("reset"), True, StreamInterruptedError),
        (requests.exceptions.ContentDecodingError("gzip"), True, ProtocolError),
        (requests.exceptions.JSONDecodeError("x", "doc", 0), False, ProtocolError),
        (requests.exceptions.TooManyRedirects("loop"), False, ProtocolError),
        (requests.exceptions.MissingSchema("no scheme"), False, ConfigurationError),
        (requests.exceptions.InvalidURL("bad"), False, ConfigurationError),
        (requests.exceptions.InvalidHeader("bad header"), False, ConfigurationError),
        (requests.exceptions.SSLError("cert"), False, PlatformConnectionError),
        (requests.exceptions.ProxyError("proxy"), False, PlatformConnectionError),
    ],
)
def test_translation_table(
    transport: Transport,
    exc: requests.exceptions.RequestException,
    streaming: bool,
    expected: type[BridgeError],
) -> None:
    with pytest.raises(expected) as info, _ctx(transport, streaming=streaming).errors():
        raise exc
    error = info.value
    assert type(error) is expected
    if isinstance(error, StreamInterruptedError):
        assert error.received == ["chunk-0"]
    if isinstance(error, ConfigurationError):
        assert "GATEWAY_URL_V2" in error.message


@dataclass
class _Chunk:
    request_id: str


def test_a_stream_error_names_the_last_chunks_request_id_when_no_header_did(
    transport: Transport,
) -> None:
    ctx = CallContext(operation="run", url=URL, transport=transport, sent_request_id="sent-1")
    ctx.streaming = True
    with pytest.raises(StreamInterruptedError) as info, ctx.errors():
        ctx.received.append(_Chunk("body-7"))
        raise requests.exceptions.ChunkedEncodingError("ended")
    assert info.value.request_id == "body-7"
    ctx.header_request_id = "hdr-7"
    with pytest.raises(StreamInterruptedError) as info2, ctx.errors():
        raise requests.exceptions.ChunkedEncodingError("ended")
    assert info2.value.request_id == "hdr-7"


def _answer(status: int, body: str, headers: dict[str, str] | None = None) -> ErrorAnswer:
    header_id = (headers or {}).get(REQUEST_ID_HEADER)
    return ErrorAnswer(
        where="AppBuilder run",
        method="POST",
        url=URL,
        status=status,
        reason="Reason",
        headers=CaseInsensitiveDict(headers or {}),
        text=body,
        header_request_id=header_id,
        sent_request_id="sent-1",
        attempts=1,
        retrying=False,
        retry_after=None,
    )


def test_status_error_prefers_header_then_body_then_sent_id() -> None:
    body = json.dumps({"request_id": "body-id", "code": "X", "message": "m"})
    with_header = read_status_error(_answer(400, body, {REQUEST_ID_HEADER: "hdr"}))
    assert with_header.request_id == "hdr"
    assert read_status_error(_answer(400, body)).request_id == "body-id"
    assert read_status_error(_answer(400, "plain")).request_id == "sent-1"


@pytest.mark.parametrize(
    ("status", "cls", "hint"),
    [
        (401, AuthenticationError, "check the token (APPBUILDER_TOKEN or --token)"),
        (404, NotFoundError, "check the app id (APPBUILDER_APP_ID or --app-id)"),
        (500, ServerError, ""),
    ],
)
def test_status_errors_say_what_to_check(status: int, cls: type[Any], hint: str) -> None:
    body = json.dumps({"code": "C", "message": "没有权限"})
    error = read_status_error(_answer(status, body))
    assert type(error) is cls and error.code == "C"
    assert error.message.startswith(f"AppBuilder run: {URL} answered HTTP {status}: 没有权限")
    assert hint in error.message


def test_status_error_trims_long_bodies() -> None:
    error = read_status_error(_answer(500, "x" * 10_000))
    assert error.body is not None and len(error.body) <= KEPT_BODY + 1
    assert len(error.message) < 500


def test_in_band_error_fields(transport: Transport) -> None:
    payload: dict[str, Any] = {"request_id": "b", "code": 7, "message": "failed", "content": None}
    error = in_band_error(_ctx(transport), payload)
    assert (error.status_code, error.code, error.request_id) == (200, "7", "b")
    assert "failed" in str(error) and "HTTP 200" in str(error)
