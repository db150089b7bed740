"""Reading one Chat Completions answer: a stream of chunks, or a single body.

Both end in a `Completion` (`models`): text, calls assembled from their fragments, usage,
finish reason, or the error the server sent in-band.
"""

from __future__ import annotations

from collections.abc import Generator
from contextlib import AbstractContextManager
from typing import Any, Protocol

import requests

from bridge.errors import InBandError, ProtocolError, StreamInterruptedError
from bridge.platforms._limits import RunBudget, StreamLimits
from bridge.platforms._openai import decode_object, error_details, trim
from bridge.platforms._sse import iter_sse_data
from bridge.platforms.openai_chat.models import Completion
from bridge.types import Event

__all__ = ["Endpoint", "read_body", "read_stream"]


class Endpoint(Protocol):
    """The endpoint an answer came from: its URL, and how its read errors are mapped
    (`ChatTransport.errors`)."""

    url: str

    def errors(
        self,
        *,
        streaming: bool = False,
        received: list[Any] | None = None,
        request_id: str | None = None,
    ) -> AbstractContextManager[None]: ...


def read_stream(
    http: Endpoint, response: requests.Response, request_id: str | None, budget: RunBudget
) -> Generator[Event, None, Completion]:
    """Read a stream of chunks; yield its events as they arrive, return what it said."""
    received: list[Event] = budget.received
    turn = Completion(budget=budget)
    with http.errors(streaming=True, received=received, request_id=request_id):
        for data in iter_sse_data(budget.chunks(response)):
            payload = decode_object(data, request_id, what="a stream chunk")
            turn.error = error_details(payload)
            if turn.error is not None:
                turn.raw = payload
                return turn
            for event in turn.absorb(payload, key="delta"):
                received.append(event)
                yield event
    if turn.finish_reason is None:
        raise StreamInterruptedError(
            f"the stream from {http.url} ended before the completion finished "
            "(no finish_reason arrived)",
            received=received,
            request_id=request_id,
        )
    return turn


def read_body(
    http: Endpoint,
    response: requests.Response,
    request_id: str | None,
    budget: RunBudget,
    limits: StreamLimits,
) -> tuple[Completion, list[Event]]:
    """Read a single ``chat.completion`` body (also a server's answer that ignored `stream`)."""
    with http.errors(request_id=request_id):
        content = budget.body(response)
    payload = decode_object(content, request_id, what="the response body")
    error = error_details(payload)
    if error is not None:
        code, message = error
        raise InBandError(
            f"{http.url} answered HTTP 200 with an error: {message}",
            request_id=request_id,
            status_code=response.status_code,
            code=code,
            body=trim(content.decode("utf-8", "replace")),
        )
    turn = Completion(budget=limits.budget(f"the answer of {http.url}"))
    with http.errors(request_id=request_id):
        events = turn.absorb(payload, key="message")
    if turn.finish_reason is None and not turn.text and not turn.calls:
        raise ProtocolError(
            f"{http.url} answered without a choice: expected a chat.completion object "
            "with choices[0].message",
            request_id=request_id,
            body=trim(content.decode("utf-8", "replace")),
        )
    return turn, events
