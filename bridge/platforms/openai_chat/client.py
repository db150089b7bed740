"""HTTP for the Chat Completions adapter: one request body built, sent and read.

`ChatTransport` POSTs JSON bodies to one endpoint of an OpenAI-compatible server (the shared
`_openai` kernel: auth, error bodies, retries). `ChatClient` is what the adapter and the text
tool protocol share: it builds a completion request from messages and tool fields (`body`),
sends it and reads the answer, streamed or not, into a `Completion` (`exchange`, through
`stream`), yielding its events as they arrive.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Generator, Iterator, Mapping
from typing import Any

import requests

from bridge.platforms._limits import RunBudget, StreamLimits
from bridge.platforms._openai import openai_transport
from bridge.platforms.openai_chat.models import Completion
from bridge.platforms.openai_chat.stream import read_body, read_stream
from bridge.platforms.retry import RetryPolicy
from bridge.tracing import Tracing
from bridge.types import Event

__all__ = ["ChatClient", "ChatTransport"]

logger = logging.getLogger(__name__)


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


class ChatClient:
    """Builds, sends and reads the completion requests of one model on one server.

    Args:
        base_url: The API root, e.g. ``http://127.0.0.1:8000/v1``.
        url: The full endpoint, e.g. ``http://127.0.0.1:8000/v1/chat/completions``.
        model: The model name sent with every request.
        http: The transport to that endpoint (closed by `close`).
        extra_body: Extra fields merged into every request.
        stream_usage: Ask for token usage in streamed answers (``stream_options``).
        stream_limits: The bounds of every answer.
    """

    def __init__(
        self,
        base_url: str,
        url: str,
        model: str,
        http: ChatTransport,
        *,
        extra_body: Mapping[str, Any],
        stream_usage: bool,
        stream_limits: StreamLimits,
    ) -> None:
        self.base_url = base_url
        self.url = url
        self.model = model
        self.http = http
        self.extra_body = extra_body
        self.stream_usage = stream_usage
        self.stream_limits = stream_limits

    def use_tracing(self, tracing: Tracing) -> None:
        """Send the client spans of its requests to `tracing`."""
        self.http.transport.tracing = tracing

    def close(self) -> None:
        """Close the HTTP session if the transport created it."""
        self.http.close()

    def body(
        self,
        messages: list[dict[str, Any]],
        tool_fields: dict[str, Any],
        *,
        end_user_id: str | None,
        stream: bool,
    ) -> dict[str, Any]:
        """The request body: `messages`, the tool fields, the model and the stream options."""
        body: dict[str, Any] = {**self.extra_body, "model": self.model, "messages": messages}
        body.update(tool_fields)
        body["stream"] = stream
        if not stream:
            body.pop("stream_options", None)  # servers reject it on non-streamed requests
        elif self.stream_usage:
            body.setdefault("stream_options", {"include_usage": True})
        if end_user_id:
            body.setdefault("user", end_user_id)
        return body

    def exchange(
        self, body: dict[str, Any], *, stream: bool
    ) -> Generator[Event, None, tuple[Completion, str | None]]:
        """POST one completion request; yield its events as they arrive, return what it said."""
        messages = body["messages"]
        logger.debug(
            "POST %s (model=%s, stream=%s, %d messages, %d tools)",
            self.url,
            self.model,
            stream,
            len(messages),
            len(body.get("tools", ())),
        )
        # The run's total time counts from the request.
        budget = self.stream_limits.budget(f"the stream from {self.url}", received=[])
        response = self.http.post(body, stream=stream, budget=budget)
        request_id = response.headers.get("x-request-id")
        budget.request_id = request_id
        logger.debug("HTTP %d from %s (request id %s)", response.status_code, self.url, request_id)
        try:
            content_type = response.headers.get("content-type", "")
            if stream and "json" not in content_type:
                turn = yield from read_stream(self.http, response, request_id, budget)
            else:
                # Also taken when a server ignores `stream` and answers with plain JSON.
                turn, events = read_body(
                    self.http, response, request_id, budget, self.stream_limits
                )
                yield from events
        finally:
            response.close()
            budget.close()
        return turn, request_id
