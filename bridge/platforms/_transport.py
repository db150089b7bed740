"""The HTTP kernel of every platform adapter: one retry loop, one table of error translations.

`Transport.request` sends a request and returns a 2xx response whose body is still unread. It
retries connect failures, 429 and 5xx (honouring `Retry-After`) as `RetryPolicy` decides, and
only before any byte of an answer was read: once a server has started answering, a retry could
run the agent, and its side effects, twice. Each retry is logged at INFO and announced to
`RetryPolicy.on_retry`.

Each attempt is an OpenTelemetry CLIENT span named after the method (the stable HTTP semantic
conventions: `url.full` without userinfo or query string, `server.address`, `server.port`,
`http.response.status_code`, `error.type`, `http.request.resend_count` on a retry, and the
platform's request id as `toolbridge.platform.request_id`), a child of whatever span is current
(the loop's invoke_agent span), and its W3C ``traceparent`` goes out with the request, as other
OpenTelemetry-instrumented clients send it: an OpenAI-compatible server that traces (vLLM, a
gateway) continues the trace, the cloud platforms ignore a header they do not know, and
``OTEL_PROPAGATORS=none`` keeps it in. Without tracing no span is made and nothing is sent
(unless a trace came in: its context goes on out).

`Transport.errors` is the one place where exceptions of `requests`, urllib3, `json`, UTF-8
decoding, pydantic and the answer bounds (too large, nested too deeply) become
`bridge.errors`; `EXCEPTION_TABLE` lists, in order, which class maps to which error (a test
fails when a class of `requests.exceptions` is missing from it).

An adapter supplies only what differs between platforms: a status-error reader (an
`ErrorAnswer` in, a `PlatformStatusError` with the platform's code, message and hints out) and
the header its server puts the request id in.
"""

from __future__ import annotations

import contextlib
import functools
import json as jsonlib
import logging
import math
import ssl
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import pydantic
import requests
import urllib3.exceptions
from opentelemetry.trace import INVALID_SPAN, Span

from bridge.errors import (
    BridgeError,
    ConfigurationError,
    PlatformConnectionError,
    PlatformError,
    PlatformStatusError,
    PlatformTimeoutError,
    ProtocolError,
    RateLimitError,
    StreamInterruptedError,
    StreamTimeoutError,
    redact,
    register_secret,
    status_error_class,
)
from bridge.platforms import _body
from bridge.platforms._body import read_body
from bridge.platforms._headers import has_header, header, merge_headers
from bridge.platforms._http import (
    PlatformSession,
    causes,
    connect_failure,
    new_session,
    origin,
)
from bridge.platforms._limits import RunBudget
from bridge.platforms._sse import TooLargeError
from bridge.platforms.retry import ExcKind, RetryPolicy
from bridge.tracing import SpanKind, Tracing, inject_span, mark_failed

__all__ = [
    "ERROR_BODY_LIMIT",
    "EXCEPTION_TABLE",
    "KEPT_BODY",
    "ErrorAnswer",
    "FailedCall",
    "Files",
    "StatusErrorReader",
    "Transport",
    "trim",
]

logger = logging.getLogger(__name__)

ERROR_BODY_LIMIT = 64 * 1024
"""Bytes of an error answer read to find its message: enough for any JSON error, bounded."""
KEPT_BODY = 1000
"""Characters of a body kept on an exception's `body` (after redaction)."""
_DETAIL = 300
"""Characters of the server's own words quoted in an error message."""

Files = Mapping[str, tuple[str | None, Any]]
"""Multipart fields as `requests` takes them: name -> (file name or None, value)."""


def trim(text: str, limit: int = KEPT_BODY) -> str:
    """`text` stripped and cut to `limit` characters, marked when cut."""
    text = text.strip()
    return text if len(text) <= limit else text[:limit] + "…"


@dataclass(frozen=True)
class ErrorAnswer:
    """An HTTP error answer, already read (at most `ERROR_BODY_LIMIT` bytes) and closed.

    What a `StatusErrorReader` gets; `error()` builds the standard message from the detail the
    reader found in the body.
    """

    where: str
    """Who was called, e.g. "AppBuilder run" or "OpenAI-compatible server"."""
    method: str
    url: str
    status: int
    reason: str
    """The HTTP reason phrase ("Not Found")."""
    headers: Mapping[str, str]
    text: str
    """The body as text (undecodable bytes replaced)."""
    header_request_id: str | None
    """The response's request-id header, if the server sent one."""
    sent_request_id: str | None
    """The request id the client sent in the same header, if it did."""
    attempts: int
    """Attempts made, this one included."""
    retrying: bool
    """True when the transport will try again (the error is only logged)."""
    retry_after: float | None
    """The server's `Retry-After`, in seconds, if usable."""

    def json(self) -> dict[str, Any]:
        """The body as a JSON object, or {} when it is not one."""
        try:
            value = jsonlib.loads(self.text)
        except ValueError:
            return {}
        return value if isinstance(value, dict) else {}

    def error(
        self,
        detail: str | None = None,
        *,
        code: str | None = None,
        hint: str = "",
        request_id: str | None = None,
    ) -> PlatformStatusError:
        """The `PlatformStatusError` subclass for this status, with one message format.

        Args:
            detail: The server's message found in the body; the body's text when None.
            code: The platform's error code, if the body has one.
            hint: What the operator can do about it ("check the API key (...)").
            request_id: A request id found in the body; the response header wins over it, and
                it wins over the id that was sent.
        """
        words = " ".join((detail or self.text).split())
        shown = trim(words, _DETAIL) or self.reason or "no details"
        message = f"{_lead(self)}{self.url} answered HTTP {self.status}: {shown}"
        if hint:
            message += f"; {hint}"
        if self.attempts > 1 and not self.retrying:
            message += f" (gave up after {self.attempts} attempts)"
        error = status_error_class(self.status)(
            message,
            request_id=self.header_request_id or request_id or self.sent_request_id,
            status_code=self.status,
            code=code,
            body=trim(self.text),
        )
        if isinstance(error, RateLimitError):
            error.retry_after = self.retry_after
        return error


StatusErrorReader = Callable[[ErrorAnswer], PlatformStatusError]
"""An adapter's reading of an HTTP error answer: its code, message and hints."""


@dataclass
class FailedCall:
    """What an error message needs to know about the call that failed."""

    where: str
    url: str
    connect_timeout: float
    idle_timeout: float
    config_hint: str
    streaming: bool = False
    received: list[Any] = field(default_factory=list)
    request_id: str | None = None


class Transport:
    """Sends requests to one platform with bounded retries; maps whatever goes wrong.

    Args:
        label: Who is called, first in every message ("AppBuilder"); an operation given to
            `request`/`errors` is appended ("AppBuilder run"). "" when the URL says enough.
        headers: Sent with every request (Authorization...); their values are registered as
            secrets when they carry credentials.
        connect_timeout: Seconds to wait for the TCP connection.
        idle_timeout: Seconds to wait for any further bytes (headers, body, next chunk).
        retry_policy: When to retry and how long to wait.
        read_status_error: Turns an HTTP error answer into the platform's error.
        request_id_header: Where the server puts its request id (``x-request-id``).
        config_hint: Said when the request cannot even be sent (a malformed URL or header):
            which settings to check.
        session: The `requests.Session` to use; one is created (and closed by `close`) if None.
        sleep: Waits between attempts; injectable so tests need not wait.
        tracing: Where the attempts' client spans go (default: the global tracer provider);
            the bridge sets `tracing` to its own (`bridge.platforms.base.use_tracing`).
    """

    def __init__(
        self,
        *,
        label: str,
        headers: Mapping[str, str] | None = None,
        connect_timeout: float,
        idle_timeout: float,
        retry_policy: RetryPolicy,
        read_status_error: StatusErrorReader,
        request_id_header: str,
        config_hint: str = "check the base URL and the credentials",
        session: requests.Session | None = None,
        sleep: Callable[[float], None] = time.sleep,
        base_url: str = "",
        tracing: Tracing | None = None,
    ) -> None:
        self.label = label
        self.tracing = tracing if tracing is not None else Tracing()
        self.headers: dict[str, str] = dict(headers or {})
        for name, value in self.headers.items():
            if name.lower() in ("authorization", "api-key", "x-api-key"):
                register_secret(value)
        self.connect_timeout = float(connect_timeout)
        self.idle_timeout = float(idle_timeout)
        self.retry_policy = retry_policy
        self.read_status_error = read_status_error
        self.request_id_header = request_id_header
        self.config_hint = config_hint
        self._owns_session = session is None
        self._session = session if session is not None else new_session(base_url)
        self._sleep = sleep

    def close(self) -> None:
        """Close the session if this transport created it."""
        if self._owns_session:
            self._session.close()

    def request_id(self, response: requests.Response) -> str | None:
        """The server's request id of `response`, if it sent one."""
        return response.headers.get(self.request_id_header) or None

    def request(
        self,
        method: str,
        url: str,
        *,
        json: Any = None,
        params: Mapping[str, Any] | None = None,
        data: bytes | str | None = None,
        files: Files | Callable[[], Files] | None = None,
        headers: Mapping[str, str] | None = None,
        stream: bool,
        operation: str | None = None,
        budget: RunBudget | None = None,
    ) -> requests.Response:
        """Send a request, retrying while that is safe; return a 2xx response.

        Args:
            method: "GET", "POST"...
            url: The full URL.
            json: Sent as a UTF-8 JSON body (with `Content-Type: application/json`).
            params: Query parameters.
            data: A raw body.
            files: Multipart fields, or a function returning fresh ones for each attempt (so a
                retried upload sends the whole file again); file objects in them are closed
                after each attempt.
            headers: Added to (and overriding) the transport's headers.
            stream: True leaves the body unread, to be read as it arrives inside `errors(url,
                streaming=True, ...)`; False reads the whole body before returning (a failure
                while reading it is mapped as a dropped or idle answer).
            operation: Named in messages after the label ("run").
            budget: The run's budget, for an answer request: its total time counts from here
                (retries and their waits included), and the connection is cut once it is up
                (`RunBudget.sending`), even while the server trickles its headers.

        Raises:
            PlatformError: The matching subclass once retries are exhausted or not allowed.
            StreamTimeoutError: `budget`'s total time ran out.
        """
        merged = merge_headers(self.headers, headers or {})
        body = data
        if json is not None:
            body = jsonlib.dumps(json, ensure_ascii=False).encode("utf-8")
            if not has_header(merged, "Content-Type"):
                merged["Content-Type"] = "application/json"
        try:
            return self._attempts(
                method, url, params, body, files, merged, stream, operation, budget
            )
        except BaseException:
            if budget is not None:
                budget.close()  # no answer to read: its connection is not watched any more
            raise

    def _attempts(
        self,
        method: str,
        url: str,
        params: Mapping[str, Any] | None,
        body: bytes | str | None,
        files: Files | Callable[[], Files] | None,
        merged: dict[str, str],
        stream: bool,
        operation: str | None,
        budget: RunBudget | None,
    ) -> requests.Response:
        sent_id = header(merged, self.request_id_header)
        call = self._call(url, operation, request_id=sent_id)
        attempt = 0
        while True:
            if logger.isEnabledFor(logging.DEBUG):  # or redact() runs for nothing
                logger.debug("%s%s %s (attempt %d)", _lead(call), method, redact(url), attempt + 1)
            span = self._span(method, url, attempt)
            carrier: dict[str, str] = {}
            inject_span(span, carrier)
            sent = {**merged, **carrier} if carrier else merged
            try:
                if budget is None:
                    response = self._send(method, url, params, body, files, sent)
                else:
                    budget.check_time()
                    with budget.sending():
                        response = self._send(method, url, params, body, files, sent)
            except _FOREIGN as exc:
                mark_failed(span, type(exc).__qualname__, _failure(exc))
                span.end()
                if budget is not None and budget.expired:
                    raise budget.timeout_error() from exc
                error = _translate(exc, call)
                kind = _exc_kind(exc)
                delay = self._delay(call, method, attempt, exc_kind=kind)
                if delay is None:
                    raise error from exc
                reason = error.message
                if kind == "connect":  # without the label: the CLI shows it as is
                    reason = f"cannot connect to {origin(url)} ({connect_failure(exc)})"
                self._before_retry(call, method, attempt, delay, reason)
                attempt += 1
                continue
            except BaseException as exc:
                mark_failed(span, type(exc).__qualname__)  # its text may name the URL
                span.end()
                raise
            status = response.status_code
            if span.is_recording():
                span.set_attribute("http.response.status_code", status)
                request_id = self.request_id(response) or sent_id
                if request_id:
                    span.set_attribute("toolbridge.platform.request_id", request_id)
            if status < 400:
                # A streamed answer's span ends with its headers: the stream is read by the
                # adapter for as long as the agent talks (that time is the run's, on the
                # invoke_agent span), and an answer abandoned unread leaves no span open.
                # A whole answer's span covers reading it.
                if stream:
                    span.end()
                    return response
                try:
                    self._read_whole(response, url, operation, budget)
                except BaseException as exc:
                    mark_failed(span, type(exc).__qualname__)
                    raise
                finally:
                    span.end()
                return response
            mark_failed(span, str(status))
            retry_after = response.headers.get("Retry-After")
            delay = self._delay(call, method, attempt, status=status, retry_after=retry_after)
            try:
                status_error = self._status_error(
                    method, response, call, attempt, delay is not None, retry_after
                )
            finally:
                span.end()
            if budget is not None and budget.expired:
                raise budget.timeout_error() from status_error
            if delay is None:
                raise status_error
            self._before_retry(call, method, attempt, delay, status_error.message, status=status)
            attempt += 1

    @contextlib.contextmanager
    def errors(
        self,
        url: str,
        *,
        operation: str | None = None,
        streaming: bool = False,
        received: list[Any] | None = None,
        request_id: str | None = None,
    ) -> Iterator[None]:
        """Translate every `requests`/urllib3/decoding error raised in the block.

        `bridge.errors` exceptions pass through (a `PlatformError` without a request id gets
        `request_id`); exceptions of no library underneath (a bug of ours) are not touched.

        Args:
            url: What was called, for the message.
            operation: Named in messages after the label.
            streaming: The answer was already being read: a dropped connection is then a
                `StreamInterruptedError` carrying `received`, and silence a `StreamTimeoutError`.
            received: What was read so far (filled in by the caller as it goes).
            request_id: Put on the errors raised.
        """
        try:
            yield
        except PlatformError as exc:
            if exc.request_id is None:
                exc.request_id = request_id
            raise
        except BridgeError:
            raise
        except _FOREIGN as exc:
            call = self._call(url, operation, request_id=request_id)
            call.streaming = streaming
            call.received = received if received is not None else []
            raise _translate(exc, call) from exc

    # --- internals -----------------------------------------------------------------------------

    def _call(self, url: str, operation: str | None, *, request_id: str | None) -> FailedCall:
        return FailedCall(
            where=" ".join(part for part in (self.label, operation) if part),
            url=url,
            connect_timeout=self.connect_timeout,
            idle_timeout=self.idle_timeout,
            config_hint=self.config_hint,
            request_id=request_id,
        )

    def _span(self, method: str, url: str, attempt: int) -> Span:
        """The CLIENT span of one attempt (`INVALID_SPAN`, which records nothing, when off)."""
        tracing = self.tracing
        if not tracing.enabled:
            return INVALID_SPAN
        # Parsed once per address (a platform calls the same few), never with its query
        # string (secrets live there: the cache does not keep them).
        attributes = dict(_url_attributes(url.partition("?")[0].partition("#")[0]))
        attributes["http.request.method"] = method
        if attempt:
            attributes["http.request.resend_count"] = attempt
        return tracing.start(method, kind=SpanKind.CLIENT, attributes=attributes)

    def _send(
        self,
        method: str,
        url: str,
        params: Mapping[str, Any] | None,
        body: bytes | str | None,
        files: Files | Callable[[], Files] | None,
        headers: dict[str, str],
    ) -> requests.Response:
        session = self._session
        timeout = (self.connect_timeout, self.idle_timeout)
        # Ours: its environment is read once per host, so it is passed on explicitly.
        ours = session if isinstance(session, PlatformSession) and not session.trust_env else None
        if ours is not None and files is None and ours.plain:
            return ours.send_plain(
                method, url, params=params, body=body, headers=headers, timeout=timeout
            )
        parts = files() if callable(files) else files
        try:
            return session.request(
                method,
                url,
                params=params,
                data=body,
                files=dict(parts) if parts is not None else None,
                headers=dict(headers),
                timeout=timeout,
                stream=True,
                proxies=ours.proxies_for(url) if ours is not None else None,
            )
        finally:
            for _, value in (parts or {}).values():
                if hasattr(value, "close"):
                    value.close()

    def _read_whole(
        self,
        response: requests.Response,
        url: str,
        operation: str | None,
        budget: RunBudget | None,
    ) -> None:
        request_id = self.request_id(response)
        try:
            with self.errors(url, operation=operation, streaming=True, request_id=request_id):
                if budget is None:
                    read_body(response)
                else:
                    budget.body(response)
        finally:
            response.close()

    def _delay(
        self,
        call: FailedCall,
        method: str,
        attempt: int,
        *,
        status: int | None = None,
        exc_kind: ExcKind | None = None,
        retry_after: str | None = None,
    ) -> float | None:
        """Seconds to wait before the next attempt; None when there must be none."""
        policy = self.retry_policy
        if not policy.should_retry(attempt, status=status, exc_kind=exc_kind):
            return None
        delay = policy.delay(attempt, retry_after)
        if not math.isfinite(delay):
            logger.info(
                "%snot retrying %s %s: Retry-After %s is over %g s",
                _lead(call),
                method,
                redact(call.url),
                retry_after,
                policy.max_retry_after,
            )
            return None
        return delay

    def _before_retry(
        self,
        call: FailedCall,
        method: str,
        attempt: int,
        delay: float,
        reason: str,
        *,
        status: int | None = None,
    ) -> None:
        """Say why and when the next attempt comes (log, `on_retry`), then wait for it."""
        policy = self.retry_policy
        logger.info(
            "%sretrying %s %s in %.2f s after: %s (retry %d of %d)",
            _lead(call),
            method,
            redact(call.url),
            delay,
            reason,
            attempt + 1,
            policy.max_retries,
        )
        policy.announce(attempt, delay, status=status, reason=reason)
        self._sleep(delay)

    def _status_error(
        self,
        method: str,
        response: requests.Response,
        call: FailedCall,
        attempt: int,
        retrying: bool,
        retry_after: str | None,
    ) -> PlatformStatusError:
        answer = ErrorAnswer(
            where=call.where,
            method=method,
            url=call.url,
            status=response.status_code,
            reason=response.reason or "",
            headers=response.headers,
            text=_read_error_body(response),
            header_request_id=self.request_id(response),
            sent_request_id=call.request_id,
            attempts=attempt + 1,
            retrying=retrying,
            retry_after=self.retry_policy.parse_retry_after(retry_after),
        )
        return self.read_status_error(answer)


@functools.lru_cache(maxsize=256)
def _url_attributes(url: str) -> dict[str, Any]:
    """`url.full` without userinfo, query string or fragment (credentials and API keys live
    there), `server.address` and `server.port`, as the HTTP semantic conventions name them."""
    try:
        parts = urlsplit(url)
    except ValueError:  # e.g. an unclosed "[": the request fails, its span says little
        return {}
    netloc = parts.netloc.rpartition("@")[2]
    attributes: dict[str, Any] = {"url.full": f"{parts.scheme}://{netloc}{parts.path}"}
    host = parts.hostname
    if host:
        attributes["server.address"] = host
    try:
        port = parts.port
    except ValueError:  # a malformed port
        port = None
    if port is None:
        port = {"http": 80, "https": 443}.get(parts.scheme)
    if port is not None:
        attributes["server.port"] = port
    return attributes


def _failure(exc: BaseException) -> str:
    """Why a request failed, in the OS's few words, or the exception's class: never the
    exception's own text, which names the URL (its query string included)."""
    for error in causes(exc):
        if isinstance(error, requests.exceptions.RequestException):
            continue  # an OSError too, whose text is urllib3's, URL and all
        if isinstance(error, OSError) and (
            error.errno is not None or isinstance(error, TimeoutError | ssl.SSLError)
        ):
            return connect_failure(error)
    return type(exc).__qualname__


def _read_error_body(response: requests.Response) -> str:
    """Up to `ERROR_BODY_LIMIT` bytes of an error answer, then close it."""
    data = bytearray()
    try:
        for piece in response.iter_content(chunk_size=8192):
            data += piece
            if len(data) >= ERROR_BODY_LIMIT:
                break
    except (requests.exceptions.RequestException, urllib3.exceptions.HTTPError):
        pass  # the status already says what failed; the body only adds detail
    finally:
        response.close()
    return bytes(data[:ERROR_BODY_LIMIT]).decode("utf-8", "replace")


# --- the translation table ----------------------------------------------------------------------


def _caused_by(exc: BaseException, kind: type[BaseException]) -> bool:
    return any(isinstance(link, kind) for link in causes(exc))


def _exc_kind(exc: BaseException) -> ExcKind:
    """How a request failed; only `connect` (it never reached the server) is safe to resend."""
    if isinstance(exc, requests.exceptions.SSLError):
        return "other"  # a TLS failure does not heal by itself
    # urllib3's NewConnectionError (refused, DNS) subclasses its ConnectTimeoutError.
    if isinstance(exc, requests.exceptions.ConnectTimeout) or _caused_by(
        exc, urllib3.exceptions.ConnectTimeoutError
    ):
        return "connect"
    if isinstance(exc, requests.exceptions.Timeout) or _caused_by(
        exc, urllib3.exceptions.ReadTimeoutError
    ):
        return "timeout"
    return "other"


def _lead(call: FailedCall | ErrorAnswer) -> str:
    """What starts a message: who was called ("AppBuilder run: "), if the adapter names it."""
    return f"{call.where}: " if call.where else ""


def _count(call: FailedCall) -> str:
    return f"after {len(call.received)} event(s)"


def _idle(exc: BaseException, call: FailedCall) -> PlatformError:
    if call.streaming:
        return StreamTimeoutError(
            f"{_lead(call)}the stream from {call.url} was idle for more than "
            f"{call.idle_timeout:g} s (idle_timeout) {_count(call)}",
            received=call.received,
            request_id=call.request_id,
        )
    return PlatformTimeoutError(
        f"{_lead(call)}{call.url} sent nothing for {call.idle_timeout:g} s (idle_timeout)",
        request_id=call.request_id,
    )


def _dropped(exc: BaseException, call: FailedCall) -> PlatformError:
    text = f"{_lead(call)}the connection to {call.url} dropped mid-answer ({connect_failure(exc)})"
    if call.streaming:
        return StreamInterruptedError(
            f"{text} {_count(call)}", received=call.received, request_id=call.request_id
        )
    return PlatformConnectionError(text, request_id=call.request_id)


def _connection(exc: BaseException, call: FailedCall) -> PlatformError:
    # requests reports a read timeout inside iter_content as a bare ConnectionError.
    if _caused_by(exc, urllib3.exceptions.ReadTimeoutError):
        return _idle(exc, call)
    if call.streaming:
        return _dropped(exc, call)
    failure = connect_failure(exc)
    if _exc_kind(exc) != "connect":
        return PlatformConnectionError(
            f"{_lead(call)}the connection to {origin(call.url)} failed before an answer "
            f"({failure})",
            request_id=call.request_id,
        )
    # The OS's few words, not urllib3's "HTTPConnectionPool(host=...): Max retries exceeded";
    # the full text stays on __cause__.
    advice = "; is the server running?" if failure == "connection refused" else ""
    return PlatformConnectionError(
        f"{_lead(call)}cannot connect to {origin(call.url)} ({failure}){advice}",
        request_id=call.request_id,
    )


def _not_utf8(exc: BaseException, call: FailedCall) -> PlatformError:
    reason = exc.reason if isinstance(exc, UnicodeDecodeError) else str(exc)
    return ProtocolError(
        f"{_lead(call)}{call.url} sent text that is not UTF-8 ({reason})",
        request_id=call.request_id,
    )


def _unexpected_shape(exc: BaseException, call: FailedCall) -> PlatformError:
    detail = str(exc)
    if isinstance(exc, pydantic.ValidationError):
        detail = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}"
            for e in exc.errors(include_url=False)[:5]
        )
    return ProtocolError(
        f"{_lead(call)}the answer of {call.url} cannot be decoded: unexpected shape "
        f"({trim(detail, _DETAIL)})",
        request_id=call.request_id,
    )


def _configuration(exc: BaseException, call: FailedCall) -> BridgeError:
    return ConfigurationError(
        f"{_lead(call)}cannot send a request to {call.url} ({trim(str(exc), _DETAIL)}); "
        f"{call.config_hint}"
    )


Mapper = Callable[[BaseException, FailedCall], BridgeError]


def _says(error: type[PlatformError], template: str) -> Mapper:
    """A mapper raising `error` with `template` filled in: {lead} (who was called), {url},
    {origin}, {reason} (the OS's few words), {text} (the exception's own), {connect_timeout}."""

    def mapper(exc: BaseException, call: FailedCall) -> BridgeError:
        message = template.format(
            lead=_lead(call),
            url=call.url,
            origin=origin(call.url),
            reason=connect_failure(exc),
            text=trim(str(exc), _DETAIL),
            connect_timeout=call.connect_timeout,
        )
        return error(message, request_id=call.request_id)

    return mapper


_connect_timeout = _says(
    PlatformTimeoutError,
    "{lead}connecting to {origin} timed out after {connect_timeout:g} s (connect_timeout)",
)
_tls = _says(
    PlatformConnectionError,
    "{lead}cannot connect to {origin} ({reason}); check the server's certificate "
    "(REQUESTS_CA_BUNDLE names a CA bundle to trust)",
)
_proxy = _says(
    PlatformConnectionError,
    "{lead}cannot connect to {origin} through the proxy ({reason}); check HTTP_PROXY / "
    "HTTPS_PROXY / NO_PROXY",
)
_undecodable = _says(ProtocolError, "{lead}cannot decode the answer of {url} ({reason})")
_not_json = _says(
    ProtocolError, "{lead}the answer of {url} cannot be decoded: it is not JSON ({text})"
)


def _too_large(exc: BaseException, call: FailedCall) -> PlatformError:
    limit = exc.limit if isinstance(exc, TooLargeError) else _body.MAX_BODY_BYTES
    if isinstance(exc, TooLargeError) and exc.what == "an event":
        what = (
            f"the stream from {call.url} sent an event larger than {_mib(limit)} without "
            "ending it (a blank line ends each server-sent event)"
        )
        where = f" {_count(call)}" if call.streaming else ""
        return ProtocolError(
            f"{_lead(call)}{what}{where}; the server's stream is malformed or its answer too "
            "large, so it was not read further",
            request_id=call.request_id,
        )
    return ProtocolError(
        f"{_lead(call)}the answer of {call.url} is larger than {_mib(limit)}; expected a "
        "JSON body far smaller than that, so it was not read further",
        request_id=call.request_id,
    )


def _too_deep(exc: BaseException, call: FailedCall) -> PlatformError:
    # Raised by `json` (and pydantic) on an answer nested deeper than Python's stack allows.
    return ProtocolError(
        f"{_lead(call)}the answer of {call.url} cannot be decoded: its JSON is nested too "
        "deeply; expected the platform's usual shallow objects",
        request_id=call.request_id,
    )


def _mib(limit: int) -> str:
    return f"{limit / 1024 / 1024:g} MiB" if limit >= 1024 * 1024 else f"{limit} bytes"


_redirects = _says(ProtocolError, "{lead}{url} redirected too many times")
_failed = _says(PlatformConnectionError, "{lead}request to {url} failed ({reason})")

_rex = requests.exceptions
_u3 = urllib3.exceptions

EXCEPTION_TABLE: tuple[tuple[tuple[type[BaseException], ...], Mapper], ...] = (
    # Subclasses before their bases: the first row whose classes match wins.
    ((_rex.ConnectTimeout,), _connect_timeout),
    ((_rex.ReadTimeout, _rex.Timeout, _u3.ReadTimeoutError), _idle),
    ((_rex.SSLError, _u3.SSLError), _tls),
    ((_rex.ProxyError, _u3.ProxyError), _proxy),
    ((_rex.ConnectionError, _u3.ConnectTimeoutError, _u3.MaxRetryError), _connection),
    ((_rex.ChunkedEncodingError, _u3.ProtocolError, _u3.IncompleteRead), _dropped),
    ((_rex.ContentDecodingError, _u3.DecodeError), _undecodable),
    ((_rex.JSONDecodeError, _rex.InvalidJSONError, jsonlib.JSONDecodeError), _not_json),
    ((_rex.TooManyRedirects,), _redirects),
    (
        (
            _rex.InvalidProxyURL,
            _rex.InvalidURL,
            _rex.InvalidSchema,
            _rex.MissingSchema,
            _rex.URLRequired,
            _rex.InvalidHeader,
            _u3.LocationValueError,
        ),
        _configuration,
    ),
    (
        (
            _rex.RetryError,
            _rex.HTTPError,
            _rex.StreamConsumedError,
            _rex.UnrewindableBodyError,
            _rex.RequestException,
            _u3.HTTPError,
        ),
        _failed,
    ),
    ((UnicodeDecodeError,), _not_utf8),
    ((TooLargeError,), _too_large),
    ((RecursionError,), _too_deep),
    ((pydantic.ValidationError,), _unexpected_shape),
)
"""(exception classes, how to map them), in order: the one translation of foreign errors."""

_FOREIGN: tuple[type[BaseException], ...] = tuple(
    cls for classes, _ in EXCEPTION_TABLE for cls in classes
)


def _translate(exc: BaseException, call: FailedCall) -> BridgeError:
    for classes, mapper in EXCEPTION_TABLE:
        if isinstance(exc, classes):
            return mapper(exc, call)
    raise TypeError(f"no translation for {type(exc).__name__}")  # unreachable: see _FOREIGN
