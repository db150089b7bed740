"""HTTP for the Responses adapter: one ``POST /responses`` read into a `ResponseTurn`.

`ResponsesClient.send` posts a request through the shared kernel (`_transport`, with the
OpenAI error reader of `_openai`) at once, so a refusal is raised to the caller before
anything is read; `ResponsesClient.read` then reads the answer: a stream event by event through
`StreamAssembler` (yielding text deltas as they arrive), or a single body (also when a server
ignores ``stream``), and returns the turn; the adapter decides what the turn means for the
conversation.
"""

from __future__ import annotations

import logging
from collections.abc import Generator
from typing import Any

import requests

from bridge.errors import InBandError, ProtocolError, StreamInterruptedError
from bridge.platforms._body import keep_connection
from bridge.platforms._limits import RunBudget, StreamLimits
from bridge.platforms._openai import decode_object, error_details, openai_transport, trim
from bridge.platforms._sse import iter_sse_data
from bridge.platforms.openai_responses.models import ResponseTurn, turn_from_body
from bridge.platforms.openai_responses.stream import StreamAssembler
from bridge.platforms.retry import RetryPolicy
from bridge.tracing import Tracing
from bridge.types import Event

__all__ = ["ResponsesClient"]

logger = logging.getLogger(__name__)


class ResponsesClient:
    """Sends Responses requests to one server and reads their answers.

    Args:
        base_url: The API root (``…/v1``).
        api_key: Sent as a bearer token when set (registered as a secret).
        connect_timeout: Seconds to wait for the TCP connection.
        idle_timeout: Seconds to wait for the next bytes of an answer.
        retry_policy: When to retry (before any answer byte was read) and how long to wait.
        session: A `requests.Session` to reuse (left open by `close`).
        limits: The bounds of each answer stream (time, text, arguments, calls).
    """

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None,
        connect_timeout: float,
        idle_timeout: float,
        retry_policy: RetryPolicy,
        session: requests.Session | None = None,
        limits: StreamLimits | None = None,
    ) -> None:
        self.base_url = base_url
        self.limits = limits or StreamLimits()
        self.url = base_url + "/responses"
        self._http = openai_transport(
            base_url,
            api_key=api_key,
            connect_timeout=connect_timeout,
            idle_timeout=idle_timeout,
            retry_policy=retry_policy,
            session=session,
        )

    def use_tracing(self, tracing: Tracing) -> None:
        """Send the client spans of its requests to `tracing`."""
        self._http.tracing = tracing

    def close(self) -> None:
        """Close the HTTP session if this client created it."""
        self._http.close()

    def models(self) -> list[str] | None:
        """The model ids ``GET /models`` lists (None when its answer is not JSON).

        Raises:
            PlatformError: the server is unreachable or refused the key.
        """
        url = self.base_url + "/models"
        response = self._http.request("GET", url, stream=False, operation="model list")
        try:
            with self._http.errors(url):
                body = response.json()
        except ProtocolError:
            return None
        models = body.get("data") if isinstance(body, dict) else None
        return [str(m.get("id")) for m in models or [] if isinstance(m, dict)]

    def budget(self) -> RunBudget:
        """The budget of one answer request, its clock started now (before `send`)."""
        return self.limits.budget(f"the stream from {self.url}", received=[])

    def send(
        self, body: dict[str, Any], *, stream: bool, budget: RunBudget | None = None
    ) -> tuple[requests.Response, str | None]:
        """POST one request now; return the accepted answer (body unread) and its request id.

        `budget` (from `budget()`, then given to `read`) bounds the request's total time from
        here to the end of its answer.

        Raises:
            PlatformError: HTTP errors, after the retries the policy allows (a refusal is
                raised here, before anything is read, so a caller knows the request was
                not accepted).
        """
        logger.debug(
            "POST %s (model=%s, stream=%s, %d input items, previous=%s)",
            self.url,
            body.get("model"),
            stream,
            len(body["input"]),
            body.get("previous_response_id"),
        )
        response = self._http.request(
            "POST", self.url, json=body, stream=stream, operation="response", budget=budget
        )
        return response, self._http.request_id(response)

    def read(
        self,
        response: requests.Response,
        request_id: str | None,
        *,
        stream: bool,
        budget: RunBudget | None = None,
    ) -> Generator[Event, None, ResponseTurn]:
        """Read an answer `send` returned; yield its text deltas as they arrive, return the turn.

        Raises:
            PlatformError: a stream that breaks off or is out of sequence, an answer that is
                not a response.
        """
        budget = budget if budget is not None else self.budget()
        budget.request_id = request_id
        try:
            if stream and "json" not in response.headers.get("content-type", ""):
                turn = yield from self._read_stream(response, request_id, budget)
            else:
                turn = self._read_body(response, request_id, budget)
        finally:
            response.close()
            budget.close()
        return turn

    def _read_stream(
        self, response: requests.Response, request_id: str | None, budget: RunBudget
    ) -> Generator[Event, None, ResponseTurn]:
        received: list[Event] = budget.received
        assembler = StreamAssembler(self.url, budget)
        with self._http.errors(self.url, streaming=True, received=received, request_id=request_id):
            for data in iter_sse_data(budget.chunks(response)):
                event = decode_object(data, request_id, what="a stream event")
                for neutral in assembler.feed(event):
                    received.append(neutral)
                    yield neutral
                if assembler.finished:
                    keep_connection(response)
                    break
        if not assembler.finished and assembler.events == 0:
            # Nothing was interrupted: the answer was never a stream of events (an HTML page of
            # a proxy or login, a server lying about its content type).
            kind = response.headers.get("content-type") or "none"
            raise ProtocolError(
                f"{self.url} answered a stream request without any server-sent event "
                f"(content-type {kind!r}); expected text/event-stream of response.* events: "
                "check the base URL (it should end in /v1 of an API, not a web page)",
                request_id=request_id,
            )
        if not assembler.finished:
            raise StreamInterruptedError(
                f"the stream from {self.url} ended before the response did (no "
                "response.completed, failed or incomplete event arrived)",
                received=received,
                request_id=request_id,
            )
        return assembler.turn

    def _read_body(
        self, response: requests.Response, request_id: str | None, budget: RunBudget
    ) -> ResponseTurn:
        with self._http.errors(self.url, request_id=request_id):
            content = budget.body(response)
        payload = decode_object(content, request_id, what="the response body")
        if payload.get("object") != "response" and "output" not in payload:
            error = error_details(payload)
            if error is not None:
                raise InBandError(
                    f"{self.url} answered HTTP 200 with an error: {error[1]}",
                    request_id=request_id,
                    status_code=response.status_code,
                    code=error[0],
                    body=trim(content.decode("utf-8", "replace")),
                )
            raise ProtocolError(
                f"{self.url} answered without a response object: expected "
                '{"object": "response", "output": [...]}',
                request_id=request_id,
                body=trim(content.decode("utf-8", "replace")),
            )
        return turn_from_body(payload)
