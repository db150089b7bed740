"""What OpenAI-compatible servers share on top of the HTTP kernel: auth, error bodies, hints.

`read_openai_status_error` reads an `{"error": {"message", "type", "code"}}` answer (or the
other shapes `_openai_wire.error_details` knows) and adds what to check;
`openai_transport` builds a `Transport` for one server. `ChatTransport` is the Chat Completions
adapter's view of it: one endpoint, JSON bodies.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import requests

from bridge.errors import (
    AuthenticationError,
    BadRequestError,
    NotFoundError,
    PlatformStatusError,
    RateLimitError,
    ServerError,
    register_secret,
    status_error_class,
)
from bridge.platforms._limits import RunBudget
from bridge.platforms._openai_wire import error_details
from bridge.platforms._transport import ErrorAnswer, Transport
from bridge.platforms.retry import RetryPolicy

__all__ = [
    "CONFIG_HINT",
    "LABEL",
    "REQUEST_ID_HEADER",
    "ChatTransport",
    "openai_transport",
    "read_openai_status_error",
]

LABEL = ""
"""No prefix: the server's URL in each message says who failed."""
REQUEST_ID_HEADER = "x-request-id"
CONFIG_HINT = (
    "check base_url / OPENAI_BASE_URL (expected e.g. http://127.0.0.1:8000/v1) and the API key"
)

_STATUS_HINTS: dict[type[PlatformStatusError], str] = {
    AuthenticationError: "check the API key (api_key=, --api-key or OPENAI_API_KEY)",
    NotFoundError: "check the base URL (it usually ends in /v1) and the model name",
    BadRequestError: "the server rejected the request (model, tools or parameters)",
    RateLimitError: "the server is rate limiting",
    ServerError: "the server failed",
}


def read_openai_status_error(answer: ErrorAnswer) -> PlatformStatusError:
    """The error for an OpenAI-style error answer, with its code and what to check."""
    details = error_details(answer.json())
    code, detail = details if details is not None else (None, None)
    if code == _LOST_CHAIN:
        # The Responses API answers 400 for a chain it no longer has: what is missing is the
        # conversation (as a 404 says elsewhere), so the loop may continue in a new one.
        error = answer.error(detail, code=code, hint=_LOST_CHAIN_HINT)
        return NotFoundError(
            error.message,
            request_id=error.request_id,
            status_code=error.status_code,
            code=code,
            body=error.body,
        )
    hint = _STATUS_HINTS.get(status_error_class(answer.status), "")
    return answer.error(detail, code=code, hint=hint)


_LOST_CHAIN = "previous_response_not_found"
_LOST_CHAIN_HINT = (
    "the server no longer has this conversation's previous response (it expired or was "
    "deleted there, or the emulator serving it lost its state); a new conversation is needed"
)


def openai_transport(
    base_url: str,
    *,
    api_key: str | None,
    connect_timeout: float,
    idle_timeout: float,
    retry_policy: RetryPolicy,
    label: str = LABEL,
    session: requests.Session | None = None,
    sleep: Callable[[float], None] | None = None,
) -> Transport:
    """A `Transport` for one OpenAI-compatible server (Bearer auth, `x-request-id`)."""
    register_secret(api_key)
    options: dict[str, Any] = {} if sleep is None else {"sleep": sleep}
    return Transport(
        label=label,
        headers={"Authorization": f"Bearer {api_key}"} if api_key else {},
        connect_timeout=connect_timeout,
        idle_timeout=idle_timeout,
        retry_policy=retry_policy,
        read_status_error=read_openai_status_error,
        request_id_header=REQUEST_ID_HEADER,
        config_hint=CONFIG_HINT,
        session=session,
        base_url=base_url,
        **options,
    )


class ChatTransport:
    """POSTs JSON bodies to one endpoint of an OpenAI-compatible server.

    Args:
        url: The full endpoint, e.g. ``http://127.0.0.1:8000/v1/chat/completions``.
        api_key: Sent as ``Authorization: Bearer``; registered as a secret so no message or
            log shows it.
        connect_timeout: Seconds to wait for the TCP connection.
        idle_timeout: Seconds to wait for any further bytes (headers, body, next chunk).
        retry_policy: When to retry and how long to wait.
        session: The `requests.Session` to use; one is created (and closed by `close`) if None.
        sleep: Waits between attempts (tests inject one that does not).
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
        sleep: Callable[[float], None] | None = None,
    ) -> None:
        self.url = url
        self.transport = openai_transport(
            url,
            api_key=api_key,
            connect_timeout=connect_timeout,
            idle_timeout=idle_timeout,
            retry_policy=retry_policy,
            session=session,
            sleep=sleep,
        )

    def close(self) -> None:
        """Close the session if this transport created it."""
        self.transport.close()

    def post(
        self, body: dict[str, Any], *, stream: bool, budget: RunBudget | None = None
    ) -> requests.Response:
        """POST `body` as JSON; return a 2xx response whose body is still unread.

        `budget` bounds the request's total time, from here to the end of its answer.

        Raises:
            PlatformError: The matching subclass once retries are exhausted or not allowed.
        """
        accept = "text/event-stream" if stream else "application/json"
        return self.transport.request(
            "POST", self.url, json=body, headers={"Accept": accept}, stream=True, budget=budget
        )

    def get(self, url: str) -> requests.Response:
        """GET `url` (e.g. the server's model list) with the same auth, retries and mapping.

        Raises:
            PlatformError: The matching subclass once retries are exhausted or not allowed.
        """
        return self.transport.request(
            "GET", url, headers={"Accept": "application/json"}, stream=True
        )

    @contextlib.contextmanager
    def errors(
        self,
        *,
        streaming: bool = False,
        received: list[Any] | None = None,
        request_id: str | None = None,
    ) -> Iterator[None]:
        """`Transport.errors` for this endpoint (see there)."""
        with self.transport.errors(
            self.url, streaming=streaming, received=received, request_id=request_id
        ):
            yield
