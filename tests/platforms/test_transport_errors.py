"""Every exception of the libraries under the transport becomes a `bridge.errors` error.

The failures a loopback server can provoke are produced for real in test_transport.py and the
adapters' tests; here each class is raised inside `Transport.errors`, so that the table covers
every one. Like httpx's test of its own mapping, the first test fails when `requests` grows an
exception class that `EXCEPTION_TABLE` does not list.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Iterator
from types import SimpleNamespace

import pydantic
import pytest
import requests
import urllib3

from bridge.errors import (
    BridgeError,
    ConfigurationError,
    InBandError,
    PlatformConnectionError,
    PlatformError,
    PlatformStatusError,
    PlatformTimeoutError,
    ProtocolError,
    StreamInterruptedError,
    StreamTimeoutError,
)
from bridge.platforms._transport import EXCEPTION_TABLE, ErrorAnswer, Transport, _exc_kind
from bridge.platforms.retry import RetryPolicy
from bridge.types import Event, TextDelta

URL = "http://127.0.0.1:9/v1/chat/completions"


def _reader(answer: ErrorAnswer) -> PlatformStatusError:
    return answer.error()


@pytest.fixture
def transport() -> Iterator[Transport]:
    transport = Transport(
        label="Test",
        connect_timeout=2.0,
        idle_timeout=7.0,
        retry_policy=RetryPolicy(),
        read_status_error=_reader,
        request_id_header="x-request-id",
        config_hint="check base_url / TEST_BASE_URL",
    )
    yield transport
    transport.close()


def _classes(module: object, base: type[BaseException]) -> list[type[BaseException]]:
    return sorted(
        (c for _, c in inspect.getmembers(module, inspect.isclass) if issubclass(c, base)),
        key=lambda c: c.__name__,
    )


REQUESTS_CLASSES = _classes(requests.exceptions, requests.exceptions.RequestException)
URLLIB3_CLASSES = _classes(urllib3.exceptions, urllib3.exceptions.HTTPError)
LISTED = {cls for classes, _ in EXCEPTION_TABLE for cls in classes}


@pytest.mark.parametrize("cls", REQUESTS_CLASSES, ids=lambda c: c.__name__)
def test_every_requests_exception_class_is_listed_in_the_table(cls: type[BaseException]) -> None:
    assert cls in LISTED, (
        f"requests.exceptions.{cls.__name__} has no row of its own in EXCEPTION_TABLE: decide "
        "which bridge error it is and add it"
    )


def _instance(cls: type[BaseException]) -> BaseException:
    if issubclass(cls, json.JSONDecodeError):
        return cls("Expecting value", "doc", 0)
    if issubclass(cls, urllib3.exceptions.InvalidChunkLength):
        return cls(SimpleNamespace(tell=lambda: 3, length_remaining=7), b"zz")  # type: ignore[arg-type]
    if issubclass(cls, urllib3.exceptions.IncompleteRead):
        return cls(3, 7)
    # urllib3's classes take (pool, url, message) or (pool, message)
    for args in (("boom",), (None, "/v1", "boom"), (None, "boom")):
        try:
            return cls(*args)
        except TypeError:
            continue
    raise AssertionError(f"cannot build {cls.__name__}")


@pytest.mark.parametrize("cls", REQUESTS_CLASSES + URLLIB3_CLASSES, ids=lambda c: c.__name__)
@pytest.mark.parametrize("streaming", [False, True], ids=["before-body", "mid-stream"])
def test_every_exception_class_is_translated(
    transport: Transport, cls: type[BaseException], streaming: bool
) -> None:
    original = _instance(cls)
    with (
        pytest.raises(BridgeError) as info,
        transport.errors(URL, operation="run", streaming=streaming, request_id="r"),
    ):
        raise original
    error = info.value
    assert error.__cause__ is original
    assert isinstance(error, PlatformError | ConfigurationError)
    assert error.message.startswith("Test run: ")
    if isinstance(error, PlatformError):
        assert error.request_id == "r"


def _refused() -> requests.exceptions.ConnectionError:
    refused = ConnectionRefusedError(111, "Connection refused")
    new_conn = urllib3.exceptions.NewConnectionError(None, "Failed to establish")  # type: ignore[arg-type]
    new_conn.__cause__ = refused
    exhausted = urllib3.exceptions.MaxRetryError(None, URL, new_conn)  # type: ignore[arg-type]
    return requests.exceptions.ConnectionError(exhausted)


def _read_timeout() -> requests.exceptions.ConnectionError:
    inner = urllib3.exceptions.ReadTimeoutError(None, URL, "Read timed out.")  # type: ignore[arg-type]
    return requests.exceptions.ConnectionError(inner)


class _Model(pydantic.BaseModel):
    x: int


def _validation_error() -> pydantic.ValidationError:
    try:
        _Model.model_validate({"x": "not a number"})
    except pydantic.ValidationError as exc:
        return exc
    raise AssertionError("validated")


@pytest.mark.parametrize(
    ("raised", "streaming", "expected", "message"),
    [
        (
            requests.exceptions.ConnectTimeout("slow"),
            False,
            PlatformTimeoutError,
            r"connecting to http://127.0.0.1:9 timed out after 2 s \(connect_timeout\)",
        ),
        (
            requests.exceptions.ReadTimeout("slow"),
            False,
            PlatformTimeoutError,
            r"sent nothing for 7 s \(idle_timeout\)",
        ),
        (
            requests.exceptions.ReadTimeout("slow"),
            True,
            StreamTimeoutError,
            r"stream from .* was idle for more than 7 s \(idle_timeout\) after 1 event\(s\)",
        ),
        (
            _read_timeout(),
            True,
            StreamTimeoutError,
            r"stream from .* was idle for more than 7 s \(idle_timeout\) after 1 event\(s\)",
        ),
        (_read_timeout(), False, PlatformTimeoutError, r"sent nothing for 7 s \(idle_timeout\)"),
        (
            _refused(),
            False,
            PlatformConnectionError,
            r"cannot connect to http://127.0.0.1:9 \(connection refused\); is the server running\?",
        ),
        (
            requests.exceptions.ConnectionError("reset"),
            False,
            PlatformConnectionError,
            r"the connection to http://127.0.0.1:9 failed before an answer \(reset\)",
        ),
        (
            requests.exceptions.ConnectionError("reset"),
            True,
            StreamInterruptedError,
            r"dropped mid-answer \(reset\) after 1 event\(s\)",
        ),
        (
            requests.exceptions.ChunkedEncodingError("short"),
            True,
            StreamInterruptedError,
            "dropped mid-answer",
        ),
        (
            requests.exceptions.ChunkedEncodingError("short"),
            False,
            PlatformConnectionError,
            "dropped mid-answer",
        ),
        (
            requests.exceptions.ContentDecodingError("gzip"),
            True,
            ProtocolError,
            r"cannot decode the answer of .* \(gzip\)",
        ),
        (
            requests.exceptions.SSLError("bad cert"),
            False,
            PlatformConnectionError,
            r"cannot connect to .* \(bad cert\); check the server's certificate",
        ),
        (
            requests.exceptions.ProxyError("refused"),
            False,
            PlatformConnectionError,
            "through the proxy .* HTTPS_PROXY",
        ),
        (
            requests.exceptions.TooManyRedirects("loop"),
            False,
            ProtocolError,
            "redirected too many times",
        ),
        (
            requests.exceptions.InvalidURL("no host"),
            False,
            ConfigurationError,
            r"cannot send a request to .* \(no host\); check base_url / TEST_BASE_URL",
        ),
        (
            requests.exceptions.RetryError("odd"),
            False,
            PlatformConnectionError,
            r"request to .* failed \(odd\)",
        ),
        (
            requests.exceptions.JSONDecodeError("Expecting value", "doc", 0),
            True,
            ProtocolError,
            "cannot be decoded: it is not JSON",
        ),
        (
            json.JSONDecodeError("Expecting value", "{", 1),
            False,
            ProtocolError,
            "cannot be decoded: it is not JSON",
        ),
        (
            UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte"),
            True,
            ProtocolError,
            r"not UTF-8 \(invalid start byte\)",
        ),
        (
            _validation_error(),
            False,
            ProtocolError,
            r"cannot be decoded: unexpected shape \(x: Input should be a valid integer",
        ),
    ],
    ids=[
        "connect-timeout",
        "read-timeout",
        "read-timeout-mid-stream",
        "stream-idle",
        "body-idle",
        "refused",
        "reset-before-answer",
        "reset-mid-stream",
        "chunked",
        "chunked-before-body",
        "decoding",
        "ssl",
        "proxy",
        "redirects",
        "invalid-url",
        "other",
        "requests-json",
        "json",
        "unicode",
        "validation",
    ],
)
def test_the_table(
    transport: Transport,
    raised: BaseException,
    streaming: bool,
    expected: type[BridgeError],
    message: str,
) -> None:
    received: list[Event] = [TextDelta(text="so far")]
    with (
        pytest.raises(expected, match=message) as info,
        transport.errors(URL, streaming=streaming, received=received, request_id="req-1"),
    ):
        raise raised
    assert type(info.value) is expected
    assert info.value.__cause__ is raised
    if isinstance(info.value, PlatformError):
        assert info.value.request_id == "req-1"
    if isinstance(info.value, StreamInterruptedError):
        assert info.value.received == received
        assert info.value.received is not received  # a snapshot, not the caller's list


def test_bridge_errors_pass_through_and_get_the_request_id(transport: Transport) -> None:
    error = ProtocolError("odd chunk")
    with pytest.raises(ProtocolError) as info, transport.errors(URL, request_id="req-2"):
        raise error
    assert info.value is error and error.request_id == "req-2"
    kept = InBandError("x", request_id="own")
    with pytest.raises(InBandError) as info2, transport.errors(URL, request_id="req-3"):
        raise kept
    assert info2.value.request_id == "own"
    usage = ConfigurationError("bad")
    with pytest.raises(ConfigurationError) as info3, transport.errors(URL):
        raise usage
    assert info3.value is usage


def test_other_exceptions_are_not_swallowed(transport: Transport) -> None:
    with pytest.raises(KeyError), transport.errors(URL):
        raise KeyError("a bug of ours stays a bug")


def _connection_error(reason: BaseException) -> requests.exceptions.ConnectionError:
    return requests.exceptions.ConnectionError(
        urllib3.exceptions.MaxRetryError(None, "/v2", reason)  # type: ignore[arg-type]
    )


REFUSED = urllib3.exceptions.NewConnectionError(None, "Connection refused")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (requests.exceptions.ConnectTimeout("t"), "connect"),
        (
            requests.exceptions.ConnectTimeout(
                urllib3.exceptions.ConnectTimeoutError(None, "timed out")
            ),
            "connect",
        ),
        (_refused(), "connect"),
        (_connection_error(REFUSED), "connect"),
        (_connection_error(urllib3.exceptions.ConnectTimeoutError("t")), "connect"),
        (requests.exceptions.ConnectionError(REFUSED), "connect"),
        (requests.exceptions.ConnectionError("reset by peer"), "other"),
        (_connection_error(urllib3.exceptions.ProtocolError("aborted")), "other"),
        (requests.exceptions.ReadTimeout("t"), "timeout"),
        (_read_timeout(), "timeout"),
        (requests.exceptions.SSLError(_connection_error(REFUSED)), "other"),
        (requests.exceptions.ChunkedEncodingError("x"), "other"),
        (ValueError("x"), "other"),
    ],
)
def test_only_failures_to_connect_are_safe_to_resend(exc: BaseException, kind: str) -> None:
    assert _exc_kind(exc) == kind
