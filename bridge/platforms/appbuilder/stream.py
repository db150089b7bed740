"""`RunStream`: the typed chunks of a streamed run, read from SSE, errors translated."""

from __future__ import annotations

import json
from collections.abc import Generator, Iterator
from types import TracebackType

import requests
from pydantic import ValidationError

from bridge.errors import ProtocolError
from bridge.platforms._limits import RunBudget, StreamLimits
from bridge.platforms._sse import iter_sse_data
from bridge.platforms.appbuilder._errors import CallContext, in_band_error
from bridge.platforms.appbuilder.models import RunChunk, RunResponse

__all__ = ["RunStream", "parse_chunk"]


class RunStream(Iterator[RunChunk]):
    """The chunks of a streamed run, in order; iterate it once.

    The HTTP status was already checked when `AppBuilderClient.run` returned. Iterating may
    raise `InBandError` (an error payload inside the stream), `StreamInterruptedError` (the
    connection dropped; `.received` holds the chunks that did arrive), `StreamTimeoutError`
    (idle longer than `idle_timeout`) or `ProtocolError` (a payload that is not JSON). The
    response is closed at the end of the stream, on error, and by `close()`.

    When the server answered the stream request with a plain JSON body instead of SSE, that
    body is `whole_answer` (already read, and already checked not to be an error) and the
    stream yields it as its only chunk.
    """

    def __init__(
        self,
        response: requests.Response,
        ctx: CallContext,
        *,
        answer: RunChunk | None = None,
        limits: StreamLimits | None = None,
        budget: RunBudget | None = None,
    ) -> None:
        self._response = response
        self._ctx = ctx
        self._limits = limits or StreamLimits()
        self._budget = budget
        """The run's budget, made before its request was sent (else one made when read)."""
        self.whole_answer: RunChunk | None = answer
        """The complete answer when it came as one JSON body rather than an SSE stream."""
        self.request_id: str | None = ctx.header_request_id
        """`X-Appbuilder-Request-Id` of the response, if the server sent one."""
        self.sent_request_id: str | None = ctx.sent_request_id
        """The request id this client sent."""
        self._chunks: Generator[RunChunk, None, None] = self._generate()

    @property
    def received(self) -> list[RunChunk]:
        """The chunks received so far."""
        return list(self._ctx.received)

    def __iter__(self) -> RunStream:
        return self

    def __next__(self) -> RunChunk:
        return next(self._chunks)

    def close(self) -> None:
        """Stop reading and release the connection."""
        self._chunks.close()
        self._response.close()
        if self._budget is not None:
            self._budget.close()

    def __enter__(self) -> RunStream:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _generate(self) -> Generator[RunChunk, None, None]:
        ctx = self._ctx
        ctx.streaming = True
        if self.whole_answer is not None:
            ctx.received.append(self.whole_answer)
            yield self.whole_answer
            return
        budget = self._budget
        if budget is None:
            budget = self._limits.budget(f"AppBuilder run: the stream from {ctx.url}")
        budget.received = ctx.received
        budget.request_id = ctx.request_id()
        counted: set[str] = set()
        try:
            with ctx.errors():
                chunks = budget.chunks(self._response)
                for data in iter_sse_data(chunks):
                    chunk = parse_chunk(data, ctx)
                    if chunk.is_error:
                        raise in_band_error(ctx, json.loads(data))
                    _count(chunk, budget, counted)
                    chunk.http_request_id = ctx.header_request_id
                    ctx.received.append(chunk)
                    yield chunk
        finally:
            self._response.close()
            budget.close()


def _count(chunk: RunChunk, budget: RunBudget, counted: set[str]) -> None:
    """Count a chunk's answer text, and its tool calls (each id once: AppBuilder may repeat
    a call in several events), against the stream's bounds."""
    budget.text(chunk.answer or "")
    for event in chunk.content:
        for item in event.tool_calls or ():
            if item.id in counted and item.id:
                continue
            counted.add(item.id)
            budget.tool_call()
            arguments = item.function.raw_arguments
            if arguments is None:
                arguments = json.dumps(item.function.arguments, ensure_ascii=False)
            budget.arguments(arguments)


def parse_chunk(data: str, ctx: CallContext) -> RunChunk:
    """One SSE event's data as a chunk.

    Raises:
        ValueError: Not JSON.
        ProtocolError: JSON, but not an object.
        pydantic.ValidationError: An object without a chunk's shape.
    """
    try:
        # One pass from the text, no dict in between, for the chunks that are well formed.
        return RunResponse.model_validate_json(data)
    except ValidationError:
        # Read again the long way, so that the error says what is wrong; a text only the long
        # way accepts (a lone surrogate escape, refused by pydantic's parser) reads as before.
        pass
    payload = json.loads(data)
    if not isinstance(payload, dict):
        raise ProtocolError(
            f"AppBuilder run: expected a JSON object in each SSE event, got "
            f"{type(payload).__name__}: {data[:200]!r}",
            request_id=ctx.request_id(),
        )
    return RunResponse.model_validate(payload)
