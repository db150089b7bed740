"""Every exception the libraries under the client can raise is translated (httpx-style check).

The transport failures themselves are exercised over real HTTP in test_appbuilder_faults.py;
here each class is raised inside `map_errors` to prove that none is left unmapped.
"""

from __future__ import annotations

import inspect
import json
from typing import Any

import pydantic
import pytest
import requests
import urllib3.exceptions

from bridge.errors import (
    BridgeError,
    ConfigurationError,
    InBandError,
    PlatformConnectionError,
    PlatformError,
    PlatformTimeoutError,
    ProtocolError,
    StreamInterruptedError,
)
from bridge.platforms.appbuilder._errors import (
    CallContext,
    StreamTimeoutError,
    in_band_error,
    is_connect_error,
    map_errors,
    status_error,
)


def _ctx(*, streaming: bool = False) -> CallContext:
    ctx = CallContext(
        operation="run",
        url="http://127.0.0.1:1/v2/app/conversation/runs",
        connect_timeout=10.0,
        idle_timeout=120.0,
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
    cls: type[requests.exceptions.RequestException], streaming: bool
) -> None:
    original = _instance(cls)
    with pytest.raises(BridgeError) as info, map_errors(_ctx(streaming=streaming)):
        raise original
    error = info.value
    assert error.__cause__ is original
    assert isinstance(error, PlatformError | ConfigurationError)
    assert "AppBuilder run" in error.message


@pytest.mark.parametrize(
    "original",
    [
        json.JSONDecodeError("Expecting value", "{", 1),
        UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte"),
    ],
    ids=["json", "unicode"],
)
def test_decoding_errors_become_protocol_errors(original: BaseException) -> None:
    with pytest.raises(ProtocolError) as info, map_errors(_ctx()):
        raise original
    assert info.value.__cause__ is original
    assert info.value.request_id == "sent-1"


def test_validation_errors_become_protocol_errors() -> None:
    class Model(pydantic.BaseModel):
        x: int

    with pytest.raises(ProtocolError, match="cannot be decoded") as info, map_errors(_ctx()):
        Model.model_validate({"x": "not a number"})
    assert isinstance(info.value.__cause__, pydantic.ValidationError)


def test_bridge_errors_and_unrelated_errors_pass_through() -> None:
    original = InBandError("x")
    with pytest.raises(InBandError) as info, map_errors(_ctx()):
        raise original
    assert info.value is original
    with pytest.raises(KeyError), map_errors(_ctx()):
        raise KeyError("a bug of ours stays a bug")


def _connection_error(reason: BaseException) -> requests.exceptions.ConnectionError:
    return requests.exceptions.ConnectionError(
        urllib3.exceptions.MaxRetryError(None, "/v2", reason)  # type: ignore[arg-type]
    )


REFUSED = urllib3.exceptions.NewConnectionError(None, "Connection refused")  # type: ignore[arg-type]
READ_TIMEOUT = urllib3.exceptions.ReadTimeoutError(None, "/v2", "Read timed out.")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("exc", "streaming", "expected"),
    [
        (requests.exceptions.ConnectTimeout("t"), False, PlatformTimeoutError),
        (requests.exceptions.ReadTimeout("t"), False, PlatformTimeoutError),
        (requests.exceptions.ReadTimeout("t"), True, StreamTimeoutError),
        (requests.exceptions.ConnectionError(READ_TIMEOUT), True, StreamTimeoutError),
        (_connection_error(REFUSED), False, PlatformConnectionError),
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
    exc: requests.exceptions.RequestException, streaming: bool, expected: type[BridgeError]
) -> None:
    ctx = _ctx(streaming=streaming)
    with pytest.raises(expected) as info, map_errors(ctx):
        raise exc
    error = info.value
    assert type(error) is expected
    if isinstance(error, StreamInterruptedError):
        assert error.received == ["chunk-0"]
    if isinstance(error, ConfigurationError):
        assert "GATEWAY_URL_V2" in error.message


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (requests.exceptions.ConnectTimeout("t"), True),
        (_connection_error(REFUSED), True),
        (_connection_error(urllib3.exceptions.ConnectTimeoutError("t")), True),
        (requests.exceptions.ConnectionError(REFUSED), True),
        (requests.exceptions.ConnectionError("reset by peer"), False),
        (_connection_error(urllib3.exceptions.ProtocolError("aborted")), False),
        (requests.exceptions.ReadTimeout("t"), False),
        (requests.exceptions.SSLError("cert"), False),
        (requests.exceptions.ChunkedEncodingError("x"), False),
        (ValueError("x"), False),
    ],
)
def test_only_connect_phase_errors_are_retryable(exc: BaseException, expected: bool) -> None:
    assert is_connect_error(exc) is expected


def test_status_error_prefers_header_then_body_then_sent_id() -> None:
    body = json.dumps({"request_id": "body-id", "code": "X", "message": "m"})
    with_header = status_error(_ctx(), 400, {"X-Appbuilder-Request-Id": "hdr"}, body)
    assert with_header.request_id == "hdr"
    assert status_error(_ctx(), 400, {}, body).request_id == "body-id"
    assert status_error(_ctx(), 400, {}, "plain").request_id == "sent-1"


def test_status_error_trims_long_bodies() -> None:
    error = status_error(_ctx(), 500, {}, "x" * 10_000)
    assert error.body is not None and len(error.body) <= 501
    assert len(error.message) < 400


def test_in_band_error_fields() -> None:
    payload: dict[str, Any] = {"request_id": "b", "code": 7, "message": "failed", "content": None}
    error = in_band_error(_ctx(), payload)
    assert (error.status_code, error.code, error.request_id) == (200, "7", "b")
    assert "failed" in str(error) and "HTTP 200" in str(error)
