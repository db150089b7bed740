"""Every transport exception the OpenAI adapter can meet becomes a `bridge.errors` error.

Most are produced for real on loopback in test_openai_chat.py; the ones a loopback server
cannot provoke deterministically (a connect timeout, an SSL error...) are raised here inside
the translating context manager, so the table covers every class.
"""

from __future__ import annotations

import pytest
import requests
import urllib3

from bridge.errors import (
    BridgeError,
    ConfigurationError,
    PlatformConnectionError,
    PlatformError,
    PlatformTimeoutError,
    ProtocolError,
    StreamInterruptedError,
    StreamTimeoutError,
)
from bridge.platforms._openai_http import ChatTransport, _exc_kind, _reason
from bridge.platforms.retry import RetryPolicy
from bridge.types import Event, TextDelta

URL = "http://127.0.0.1:9/v1/chat/completions"


@pytest.fixture
def transport() -> ChatTransport:
    return ChatTransport(
        URL, api_key=None, connect_timeout=2.0, idle_timeout=7.0, retry_policy=RetryPolicy()
    )


def _refused() -> requests.exceptions.ConnectionError:
    refused = ConnectionRefusedError(111, "Connection refused")
    new_conn = urllib3.exceptions.NewConnectionError(None, "Failed to establish")  # type: ignore[arg-type]
    new_conn.__cause__ = refused
    exhausted = urllib3.exceptions.MaxRetryError(None, URL, new_conn)  # type: ignore[arg-type]
    return requests.exceptions.ConnectionError(exhausted)


def _read_timeout() -> requests.exceptions.ConnectionError:
    inner = urllib3.exceptions.ReadTimeoutError(None, URL, "Read timed out.")  # type: ignore[arg-type]
    return requests.exceptions.ConnectionError(inner)


@pytest.mark.parametrize(
    ("raised", "streaming", "expected", "message"),
    [
        (
            requests.exceptions.ConnectTimeout("slow"),
            False,
            PlatformTimeoutError,
            "connecting to .* timed out after 2 s",
        ),
        (
            requests.exceptions.ReadTimeout("slow"),
            False,
            PlatformTimeoutError,
            r"sent nothing for 7 s \(idle_timeout\)",
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
            r"cannot connect to http://\S+ \(connection refused\); is the server running\?",
        ),
        (
            requests.exceptions.ConnectionError("reset"),
            True,
            StreamInterruptedError,
            r"dropped mid-answer \(reset\)",
        ),
        (
            requests.exceptions.ChunkedEncodingError("short"),
            True,
            StreamInterruptedError,
            "dropped mid-answer",
        ),
        (
            requests.exceptions.ContentDecodingError("gzip"),
            True,
            ProtocolError,
            "cannot decode the answer",
        ),
        (
            requests.exceptions.SSLError("bad cert"),
            False,
            PlatformConnectionError,
            "cannot connect",
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
            r"cannot send a request to .* \(no host\); check base_url / OPENAI_BASE_URL",
        ),
        (
            requests.exceptions.RetryError("odd"),
            False,
            PlatformConnectionError,
            r"request to .* failed \(odd\)",
        ),
        (
            UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte"),
            True,
            ProtocolError,
            r"not UTF-8 \(invalid start byte\)",
        ),
    ],
    ids=[
        "connect-timeout",
        "read-timeout",
        "stream-idle",
        "body-idle",
        "refused",
        "reset-mid-stream",
        "chunked",
        "decoding",
        "ssl",
        "redirects",
        "invalid-url",
        "other",
        "unicode",
    ],
)
def test_every_transport_error_is_translated(
    transport: ChatTransport,
    raised: BaseException,
    streaming: bool,
    expected: type[BridgeError],
    message: str,
) -> None:
    received: list[Event] = [TextDelta(text="so far")]
    with (
        pytest.raises(expected, match=message) as info,
        transport.errors(streaming=streaming, received=received, request_id="req-1"),
    ):
        raise raised
    assert type(info.value) is expected
    assert info.value.__cause__ is raised
    if isinstance(info.value, PlatformError):
        assert info.value.request_id == "req-1"
    if isinstance(info.value, StreamInterruptedError):
        assert info.value.received == received


def test_platform_errors_pass_through_and_get_the_request_id(transport: ChatTransport) -> None:
    error = ProtocolError("odd chunk")
    with pytest.raises(ProtocolError) as info, transport.errors(request_id="req-2"):
        raise error
    assert info.value is error and error.request_id == "req-2"


def test_other_exceptions_are_not_swallowed(transport: ChatTransport) -> None:
    with pytest.raises(KeyError), transport.errors():
        raise KeyError("bug")


def test_only_failures_to_connect_are_safe_to_resend(transport: ChatTransport) -> None:
    def translated(exc: BaseException) -> PlatformConnectionError:
        try:
            with transport.errors():
                raise exc
        except PlatformConnectionError as error:
            return error
        raise AssertionError("not translated")

    connect_timeout = requests.exceptions.ConnectTimeout(
        urllib3.exceptions.ConnectTimeoutError(None, "timed out")
    )
    assert _exc_kind(translated(_refused())) == "connect"
    assert _exc_kind(translated(connect_timeout)) == "connect"
    assert _exc_kind(translated(requests.exceptions.ReadTimeout("slow"))) == "timeout"
    assert _exc_kind(translated(requests.exceptions.ConnectionError("aborted"))) == "other"


def test_reason_is_short() -> None:
    assert _reason(_refused()) == "connection refused"
    assert _reason(requests.exceptions.ConnectionError("x" * 500)).endswith("...")
    assert _reason(requests.exceptions.ConnectionError()) == "ConnectionError"
