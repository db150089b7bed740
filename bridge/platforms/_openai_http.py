"""HTTP for the OpenAI-compatible adapter: one POST with bounded retries, errors translated.

`ChatTransport.post` retries connect errors, 429 and 5xx (honouring `Retry-After`) before any
byte of an answer was read, as `RetryPolicy` decides; `ChatTransport.errors` is the one place
where `requests`, urllib3 and decoding exceptions become `bridge.errors` (none escape).
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Iterator
from typing import Any

import requests
import urllib3

from bridge.errors import (
    AuthenticationError,
    BadRequestError,
    ConfigurationError,
    NotFoundError,
    PlatformConnectionError,
    PlatformError,
    PlatformStatusError,
    PlatformTimeoutError,
    ProtocolError,
    RateLimitError,
    ServerError,
    StreamInterruptedError,
    StreamTimeoutError,
    register_secret,
    status_error_class,
)
from bridge.platforms._http import connect_failure, new_session, origin
from bridge.platforms._openai_wire import BODY_LIMIT, error_details, trim
from bridge.platforms.retry import ExcKind, RetryPolicy
from bridge.types import Event

__all__ = ["ChatTransport"]

logger = logging.getLogger(__name__)

_STATUS_HINTS: dict[type[PlatformStatusError], str] = {
    AuthenticationError: "check the API key (api_key=, --api-key or OPENAI_API_KEY)",
    NotFoundError: "check the base URL (it usually ends in /v1) and the model name",
    BadRequestError: "the server rejected the request (model, tools or parameters)",
    RateLimitError: "the server is rate limiting",
    ServerError: "the server failed",
}


class ChatTransport:
    """POSTs JSON bodies to one URL and maps what goes wrong.

    Args:
        url: The full endpoint, e.g. ``http://127.0.0.1:8000/v1/chat/completions``.
        api_key: Sent as ``Authorization: Bearer``; registered as a secret so no message or
            log shows it.
        connect_timeout: Seconds to wait for the TCP connection.
        idle_timeout: Seconds to wait for any further bytes (headers, body, next chunk).
        retry_policy: When to retry and how long to wait.
        session: The `requests.Session` to use; one is created (and closed by `close`) if None.
    """

    def __init__(
        self,
        url: str,
        *,
        api_key: str | None,
        connect_timeout: float,
        idle_timeout: float,
        retry_policy: RetryPolicy,
        session: requests.Session | None = None,
    ) -> None:
        self.url = url
        self._api_key = api_key
        register_secret(api_key)
        self.connect_timeout = connect_timeout
        self.idle_timeout = idle_timeout
        self.retry_policy = retry_policy
        self._owns_session = session is None
        self._session = session if session is not None else new_session(url)

    def close(self) -> None:
        """Close the session if this transport created it."""
        if self._owns_session:
            self._session.close()

    def post(self, body: dict[str, Any], *, stream: bool) -> requests.Response:
        """POST `body` as JSON; return a 2xx response whose body is still unread.

        Raises:
            PlatformError: The matching subclass once retries are exhausted or not allowed.
        """
        data = json.dumps(body, ensure_ascii=False).encode("utf-8")
        headers = {
            "Content-Type": "application/json",
            "Accept": "text/event-stream" if stream else "application/json",
        }
        return self._send("POST", self.url, data=data, headers=headers)

    def get(self, url: str) -> requests.Response:
        """GET `url` (e.g. the server's model list) with the same auth, retries and mapping.

        Raises:
            PlatformError: The matching subclass once retries are exhausted or not allowed.
        """
        return self._send("GET", url, data=None, headers={"Accept": "application/json"})

    def _send(
        self, method: str, url: str, *, data: bytes | None, headers: dict[str, str]
    ) -> requests.Response:
        if self._api_key:
            headers = {**headers, "Authorization": f"Bearer {self._api_key}"}
        attempt = 0
        while True:
            try:
                with self.errors():
                    response = self._session.request(
                        method,
                        url,
                        data=data,
                        headers=headers,
                        timeout=(self.connect_timeout, self.idle_timeout),
                        stream=True,
                    )
            except PlatformConnectionError as exc:
                if not self._wait_before_retry(attempt, None, _exc_kind(exc), exc):
                    raise
                attempt += 1
                continue
            if response.status_code < 400:
                return response
            retry_after = response.headers.get("retry-after")
            error = self._status_error(response, attempt)
            if not self._wait_before_retry(attempt, response.status_code, None, error, retry_after):
                raise error
            attempt += 1

    @contextlib.contextmanager
    def errors(
        self,
        *,
        streaming: bool = False,
        received: list[Event] | None = None,
        request_id: str | None = None,
    ) -> Iterator[None]:
        """Translate every `requests`/urllib3/decoding error raised in the block.

        Args:
            streaming: The answer was already being read: a dropped connection is then a
                `StreamInterruptedError` carrying `received`.
            received: The events yielded so far (filled in by the caller as it goes).
            request_id: Added to errors that do not carry one yet.
        """
        where = self.url
        try:
            yield
        except PlatformError as exc:
            if exc.request_id is None:
                exc.request_id = request_id
            raise
        except requests.exceptions.ConnectTimeout as exc:
            raise PlatformTimeoutError(
                f"connecting to {where} timed out after {self.connect_timeout:g} s",
                request_id=request_id,
            ) from exc
        except requests.exceptions.ReadTimeout as exc:
            raise PlatformTimeoutError(
                f"{where} sent nothing for {self.idle_timeout:g} s (idle_timeout)",
                request_id=request_id,
            ) from exc
        except requests.exceptions.ContentDecodingError as exc:
            raise ProtocolError(
                f"cannot decode the answer of {where} ({_reason(exc)})", request_id=request_id
            ) from exc
        except requests.exceptions.ChunkedEncodingError as exc:
            raise StreamInterruptedError(
                f"the connection to {where} dropped mid-answer ({_reason(exc)})",
                received=received,
                request_id=request_id,
            ) from exc
        except requests.exceptions.ConnectionError as exc:
            # requests reports a read timeout inside iter_content as a ConnectionError.
            if _caused_by(exc, urllib3.exceptions.ReadTimeoutError) and not streaming:
                raise PlatformTimeoutError(
                    f"{where} sent nothing for {self.idle_timeout:g} s (idle_timeout)",
                    request_id=request_id,
                ) from exc
            if _caused_by(exc, urllib3.exceptions.ReadTimeoutError):
                raise StreamTimeoutError(
                    f"the stream from {where} was idle for more than {self.idle_timeout:g} s "
                    f"(idle_timeout) after {len(received or ())} event(s)",
                    received=received,
                    request_id=request_id,
                ) from exc
            if streaming:
                raise StreamInterruptedError(
                    f"the connection to {where} dropped mid-answer ({_reason(exc)})",
                    received=received,
                    request_id=request_id,
                ) from exc
            raise PlatformConnectionError(
                f"cannot connect to {origin(where)} ({connect_failure(exc)}); is the server "
                "running?",
                request_id=request_id,
            ) from exc
        except requests.exceptions.TooManyRedirects as exc:
            raise ProtocolError(
                f"{where} redirected too many times", request_id=request_id
            ) from exc
        except (
            requests.exceptions.InvalidURL,
            requests.exceptions.InvalidSchema,
            requests.exceptions.MissingSchema,
            requests.exceptions.InvalidHeader,
        ) as exc:
            raise ConfigurationError(
                f"cannot send a request to {where} ({_reason(exc)}); check base_url / "
                "OPENAI_BASE_URL (expected e.g. http://127.0.0.1:8000/v1) and the API key"
            ) from exc
        except requests.exceptions.RequestException as exc:
            raise PlatformConnectionError(
                f"request to {where} failed ({_reason(exc)})", request_id=request_id
            ) from exc
        except UnicodeDecodeError as exc:
            raise ProtocolError(
                f"{where} sent text that is not UTF-8 ({exc.reason})", request_id=request_id
            ) from exc

    def _wait_before_retry(
        self,
        attempt: int,
        status: int | None,
        kind: ExcKind | None,
        error: PlatformError,
        retry_after: str | None = None,
    ) -> bool:
        if not self.retry_policy.should_retry(attempt, status=status, exc_kind=kind):
            return False
        delay = self.retry_policy.delay(attempt, retry_after)
        if delay == float("inf"):
            logger.info("not retrying POST %s: Retry-After %s is too long", self.url, retry_after)
            return False
        logger.info(
            "retrying POST %s in %.2f s after: %s (retry %d of %d)",
            self.url,
            delay,
            error.message,
            attempt + 1,
            self.retry_policy.max_retries,
        )
        reason = error.message.removesuffix("; is the server running?")
        self.retry_policy.announce(attempt, delay, status=status, reason=reason)
        time.sleep(delay)
        return True

    def _status_error(self, response: requests.Response, attempt: int) -> PlatformStatusError:
        status = response.status_code
        request_id = response.headers.get("x-request-id")
        text = _read_error_body(response)
        try:
            details = error_details(json.loads(text))
        except ValueError:
            details = None
        code, detail = details if details is not None else (None, "")
        detail = trim(" ".join((detail or text).split()), 300) or response.reason or "no details"
        cls = status_error_class(status)
        hint = _STATUS_HINTS.get(cls, "")
        if attempt and cls in (RateLimitError, ServerError):
            hint += f" (gave up after {attempt + 1} attempts)"
        message = f"{self.url} answered HTTP {status}: {detail}"
        error = cls(
            f"{message}; {hint}" if hint else message,
            request_id=request_id,
            status_code=status,
            code=code,
            body=trim(text),
        )
        if isinstance(error, RateLimitError):
            error.retry_after = self.retry_policy.parse_retry_after(
                response.headers.get("retry-after")
            )
        return error


def _read_error_body(response: requests.Response) -> str:
    """Up to `BODY_LIMIT` bytes of an error response, then close it."""
    data = b""
    try:
        for chunk in response.iter_content(chunk_size=8192):
            data += chunk
            if len(data) >= BODY_LIMIT:
                break
    except (requests.exceptions.RequestException, urllib3.exceptions.HTTPError):
        pass  # the status already says what failed; the body only adds detail
    finally:
        response.close()
    return data[:BODY_LIMIT].decode("utf-8", "replace")


def _exc_kind(error: PlatformConnectionError) -> ExcKind:
    """How a request failed; only `connect` (it never reached the server) is safe to resend."""
    # urllib3's NewConnectionError (refused, DNS) subclasses its ConnectTimeoutError.
    if _caused_by(error, urllib3.exceptions.ConnectTimeoutError):
        return "connect"
    return "timeout" if isinstance(error, PlatformTimeoutError) else "other"


def _caused_by(exc: BaseException, kind: type[BaseException]) -> bool:
    return any(isinstance(link, kind) for link in _chain(exc))


def _reason(exc: BaseException) -> str:
    """A short cause ("connection refused") instead of urllib3's nested repr."""
    for link in _chain(exc):
        if isinstance(link, OSError) and link.strerror:
            return link.strerror.lower()
    text = str(exc) or type(exc).__name__
    return text if len(text) <= 200 else text[:200] + "..."


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """The exception and its causes: `__cause__`, `__context__`, urllib3's `reason`, `args[0]`."""
    seen: set[int] = set()
    todo: list[BaseException] = [exc]
    while todo:
        link = todo.pop(0)
        if id(link) in seen:
            continue
        seen.add(id(link))
        yield link
        for nxt in (
            getattr(link, "reason", None),
            link.__cause__,
            link.__context__,
            link.args[0] if link.args else None,
        ):
            if isinstance(nxt, BaseException):
                todo.append(nxt)
