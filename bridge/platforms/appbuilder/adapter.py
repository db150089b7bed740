"""AppBuilder as a `bridge.platforms.base.Platform`: client chunks in, neutral events out.

Mapping of one run (stream or not) to `bridge.types` events:

- each chunk's non-empty `answer` -> `TextDelta` (in non-stream mode: the whole answer once);
- an event with `event_status == "error"` or a non-zero `event_code` -> `RunFailed`, which ends
  the run; an in-band error (HTTP 200 whose body is `code`/`message`) -> `RunFailed` too;
- interrupt events carrying `tool_calls` (in any event of any chunk, duplicates merged by call
  id) -> one `ToolCallsRequested` when the response ends, answered by `submit`;
- a `chatflow_interrupt` event -> `HumanInputRequested` when the response ends, answered by
  `resume`; its `prompt` is the text of the response's workflow `publish_message` events
  (where a workflow puts its question; the chunk `answer` stays empty), else the answer text;
- every other event -> `Other(raw=event)`;
- otherwise, when the response ends, `RunFinished` with the full answer and the last usage seen.

A stream that ends (EOF) with neither an interrupt, an error, nor a `success` status event is
judged by its last chunk: if answer text arrived and the final chunk (no events, or
`is_completion: true`) came, the run is treated as finished; anything else means the stream
was cut short and `StreamInterruptedError` is raised with the chunks received. A non-stream
response is complete by construction and ends in `RunFinished`.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from bridge.errors import InBandError, ProtocolError, StreamInterruptedError, UsageError
from bridge.platforms.appbuilder.client import AppBuilderClient, RunStream
from bridge.platforms.appbuilder.models import (
    Action,
    FunctionCall,
    RunChunk,
    RunEvent,
    RunResponse,
    ToolOutput,
    Usage,
    WireToolChoice,
)
from bridge.platforms.base import PlatformLimits, parse_tool_choice
from bridge.types import (
    Event,
    HumanInputRequested,
    Other,
    RunFailed,
    RunFinished,
    TextDelta,
    ToolBatch,
    ToolCall,
    ToolCallsRequested,
    ToolChoice,
    ToolResult,
)

__all__ = ["AppBuilderPlatform", "tool_choice_for"]

log = logging.getLogger(__name__)


class AppBuilderPlatform:
    """The AppBuilder conversation API behind the neutral `Platform` protocol.

    Args:
        client: A ready `AppBuilderClient`; when omitted one is built from the other arguments
            (and the environment, see `AppBuilderClient`).
        app_id: See `AppBuilderClient`.
        token: See `AppBuilderClient`.
        base_url: See `AppBuilderClient`.
        **client_options: `connect_timeout`, `idle_timeout`, `max_retries`, `retry_policy`,
            `session`, passed to `AppBuilderClient`.
    """

    name = "appbuilder"
    dialect = "appbuilder"
    limits = PlatformLimits(max_query_chars=2000, end_user_id_min_chars=6, end_user_id_max_chars=64)
    """AppBuilder's documented limits (docs/wire/appbuilder.md: query, end_user_id)."""
    platform_tool_types = frozenset({"code_interpreter", "file_retrieval"})
    """The tool types besides `function` that the run API documents (its `tools[].type` enum):
    sent as `{"type": ...}` next to the local tools, run by AppBuilder itself."""

    def __init__(
        self,
        client: AppBuilderClient | None = None,
        *,
        app_id: str | None = None,
        token: str | None = None,
        base_url: str | None = None,
        **client_options: Any,
    ) -> None:
        if client is not None and (app_id or token or base_url or client_options):
            raise UsageError(
                "AppBuilderPlatform: pass either client=... or the client's settings "
                "(app_id, token, base_url, timeouts), not both"
            )
        self.client = client or AppBuilderClient(app_id, token, base_url, **client_options)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(client={self.client!r})"

    def create_conversation(self, *, end_user_id: str | None = None) -> str:
        """Open a conversation (AppBuilder binds the end user per run, not here)."""
        return self.client.create_conversation()

    def export_state(self, conversation_id: str) -> dict[str, Any] | None:
        """None: AppBuilder keeps the conversation server-side, so its id is all another
        process needs (what a pending batch needs travels in its `resume`, journaled with it)."""
        return None

    def import_state(self, conversation_id: str, state: Mapping[str, Any]) -> None:
        """Nothing to take over (see `export_state`); anything but an empty state is refused.

        Raises:
            UsageError: `state` has fields (written for another platform).
        """
        if state:
            raise UsageError(
                f"cannot continue conversation {conversation_id!r} on the appbuilder platform "
                f"with saved state {sorted(map(str, state))}: AppBuilder keeps conversations "
                "server-side and needs only their id (expected an empty state)"
            )

    def upload_file(self, conversation_id: str, path: str | Path) -> str:
        """Upload a local file into the conversation; returns its file id."""
        return self.client.upload_file(conversation_id, path=path)

    def start(
        self,
        conversation_id: str,
        query: str,
        *,
        tools: Sequence[dict[str, Any]],
        tool_choice: ToolChoice | str | None = None,
        end_user_id: str | None = None,
        file_ids: Sequence[str] | None = None,
        stream: bool = True,
    ) -> Iterator[Event]:
        """Send `query` with the tool manifests; yield the run's events.

        A forced `tool_choice` goes out as `{"type": "function", "function": {"name",
        "input"}}`: with an `input`, AppBuilder calls the tool with those arguments.
        """
        return self._events(
            stream,
            conversation_id,
            query,
            tools=list(tools),
            tool_choice=tool_choice_for(tool_choice),
            end_user_id=end_user_id,
            file_ids=list(file_ids) if file_ids else None,
        )

    def submit(
        self,
        conversation_id: str,
        batch: ToolBatch,
        results: Sequence[ToolResult],
        *,
        end_user_id: str | None = None,
        stream: bool = True,
    ) -> Iterator[Event]:
        """Send every output of `batch` in one request (`query: ""`, `tools: []`)."""
        outputs = _outputs_for(batch, results)
        return self._events(
            stream,
            conversation_id,
            "",
            tool_outputs=outputs,
            end_user_id=end_user_id,
        )

    def resume(
        self,
        conversation_id: str,
        interrupt_id: str,
        answer: str,
        *,
        tools: Sequence[dict[str, Any]] = (),
        end_user_id: str | None = None,
        stream: bool = True,
    ) -> Iterator[Event]:
        """Answer a workflow's question (`HumanInputRequested`) with `answer` as the query."""
        if not interrupt_id:
            raise UsageError("resume: interrupt_id is empty; use HumanInputRequested.interrupt_id")
        if not answer:
            raise UsageError("resume: answer is empty; the workflow expects the person's reply")
        return self._events(
            stream,
            conversation_id,
            answer,
            tools=list(tools),
            end_user_id=end_user_id,
            action=Action.resume(interrupt_id),
        )

    def check(self) -> str:
        """Prove configuration, token, app id and reachability by opening a conversation.

        Creating a conversation is the cheapest call that exercises all of them (the service
        keeps an unused conversation for 7 days, at no cost).

        Raises:
            PlatformError: What failed (`AuthenticationError` for a bad token, `NotFoundError`
                or an in-band error for an unknown app, `PlatformConnectionError`...).
        """
        conversation_id = self.client.create_conversation()
        return (
            f"AppBuilder at {self.client.base_url} accepted the token and opened conversation "
            f"{conversation_id} for app {self.client.app_id}"
        )

    def close(self) -> None:
        """Release the client's connections."""
        self.client.close()

    # --- mapping ----------------------------------------------------------------------------------

    def _events(
        self, stream: bool, conversation_id: str, query: str, **options: Any
    ) -> Iterator[Event]:
        # Validate and send before the caller starts iterating, so bad arguments and HTTP
        # errors surface at the call, like the client's own `run`.
        try:
            reply = self.client.run(conversation_id, query, stream=stream, **options)
        except InBandError as exc:
            return iter([_failed_from_in_band(exc)])
        if isinstance(reply, RunStream):
            if reply.whole_answer is not None:  # a JSON body where SSE was asked for
                return _map_response(reply.whole_answer)
            return _map_stream(reply)
        return _map_response(reply)


def tool_choice_for(choice: ToolChoice | str | None) -> WireToolChoice | None:
    """The wire `tool_choice` for the neutral one: a `ToolChoice` or a tool name forces that
    tool, with its `input` when given.

    None and "auto" send `null` (the agent decides; the trial `auto` mode is not needed for
    that). "none" and "required" are OpenAI modes AppBuilder has no word for: `UsageError`.
    """
    parsed = parse_tool_choice(choice)
    if parsed is None or parsed == "auto":
        return None
    if not isinstance(parsed, ToolChoice):
        raise UsageError(
            f"tool_choice {parsed!r} is not available on AppBuilder, which can only force a "
            "named tool (optionally with its input) or leave the choice to the agent ('auto')"
        )
    return WireToolChoice.for_function(parsed.name, parsed.input)


class _RunState:
    """What one response has said so far; decides the terminal event."""

    def __init__(self, fallback_request_id: str | None) -> None:
        self.request_id: str | None = None
        self.fallback_request_id = fallback_request_id
        self.message_id = ""
        self.answer: list[str] = []
        self.usage: Usage | None = None
        """The last usage seen (dumped once, into `RunFinished`)."""
        self.calls: dict[str, ToolCall] = {}
        self.human: HumanInputRequested | None = None
        self.published: list[str] = []
        """Texts of `publish_message` events: a workflow's messages, such as its question."""
        self.succeeded = False
        self.final_chunk = False
        self.last_chunk: RunChunk | None = None
        """Dumped to JSON only when the run ends (`RunFinished.raw`), not for every chunk."""

    @property
    def best_request_id(self) -> str | None:
        """The server's request id if it gave one, else the one the client sent."""
        return self.request_id or self.fallback_request_id

    def read(self, chunk: RunChunk, *, deltas: bool) -> Iterator[Event]:
        """Events for one chunk; a `RunFailed` among them ends the run."""
        # The response header's id is authoritative; the body's is next best.
        self.request_id = self.request_id or chunk.http_request_id or chunk.request_id or None
        self.message_id = chunk.message_id or self.message_id
        self.last_chunk = chunk
        if chunk.answer:
            self.answer.append(chunk.answer)
            if deltas:
                yield TextDelta(text=chunk.answer)
        # "Final" describes the latest chunk only: an empty chunk early on is not an ending.
        self.final_chunk = not chunk.content or bool(chunk.is_completion)
        for event in chunk.content:
            if event.usage is not None:
                self.usage = event.usage
            if event.failed:
                yield self._failed(event)
                return
            if event.content_type == "chatflow_interrupt":
                self.human = self._human(event)
                continue
            if event.content_type == "publish_message":
                message = event.outputs.get("message")
                if isinstance(message, str) and message:
                    self.published.append(message)
            if event.is_interrupt and self._take_calls(event):
                continue
            if event.event_status == "success":
                self.succeeded = True
            if event.content_type == "text" and event.event_status == "running" and deltas:
                continue  # a streamed piece of the answer: already a TextDelta
            yield Other(raw=event.model_dump(mode="json"))

    def finish(self, *, complete: bool, received: list[RunChunk]) -> Event:
        """The event that ends a response which had no error."""
        if self.calls:
            batch_id = self.message_id or f"batch-{uuid.uuid4()}"
            resume = {"request_id": self.best_request_id, "message_id": self.message_id or None}
            return ToolCallsRequested(
                batch=ToolBatch(batch_id=batch_id, calls=tuple(self.calls.values()), resume=resume)
            )
        if self.human is not None:
            # The whole response is read by now, so the question is there wherever it came.
            prompt = "\n".join(self.published) or "".join(self.answer)
            return self.human.model_copy(update={"prompt": prompt})
        text = "".join(self.answer)
        if complete or self.succeeded or (text and self.final_chunk):
            return RunFinished(
                answer=text,
                usage=None if self.usage is None else self.usage.model_dump(mode="json"),
                message_id=self.message_id or None,
                request_id=self.best_request_id,
                raw=self.last_chunk.model_dump(mode="json") if self.last_chunk else None,
            )
        raise StreamInterruptedError(
            "AppBuilder run: the stream ended before the run finished (no success, interrupt "
            f"or error event; {len(received)} chunk(s) received)",
            received=received,
            request_id=self.best_request_id,
        )

    def _failed(self, event: RunEvent) -> RunFailed:
        code = str(event.event_code)
        if code in ("", "0"):
            code = "event_error"
        message = event.event_message or f"{event.event_type or 'an event'} reported an error"
        return RunFailed(
            code=code,
            message=message,
            request_id=self.best_request_id,
            raw=event.model_dump(mode="json"),
        )

    def _human(self, event: RunEvent) -> HumanInputRequested:
        outputs = event.outputs
        interrupt_id = outputs.get("interrupt_event_id")
        if not interrupt_id:
            raise ProtocolError(
                "AppBuilder run: a chatflow_interrupt event has no outputs.interrupt_event_id",
                request_id=self.best_request_id,
            )
        return HumanInputRequested(
            interrupt_id=str(interrupt_id),
            interrupt_type=str(outputs.get("interrupt_event_type") or "chat"),
            request_id=self.best_request_id,
            raw=event.model_dump(mode="json"),
        )

    def _take_calls(self, event: RunEvent) -> bool:
        """Collect the event's tool calls (first occurrence of an id wins); False if none."""
        found = False
        for item in event.tool_calls or ():
            call_id = item.id or _context_call_id(event)
            if not call_id:
                raise ProtocolError(
                    "AppBuilder run: an interrupt's tool call has no id, so its output could "
                    f"not be sent back (tool {item.function.name!r})",
                    request_id=self.best_request_id,
                )
            found = True
            if call_id not in self.calls:
                self.calls[call_id] = ToolCall(
                    call_id=call_id,
                    name=item.function.name,
                    arguments=item.function.arguments,
                    raw_arguments=item.function.raw_arguments,
                )
        if not found:
            # Some servers only describe the call in outputs.text.function_call.
            call = _context_call(event)
            if call is not None:
                self.calls.setdefault(call.call_id, call)
                found = True
        return found


def _map_stream(reply: RunStream) -> Iterator[Event]:
    state = _RunState(reply.request_id or reply.sent_request_id)
    try:
        for chunk in reply:
            for event in state.read(chunk, deltas=True):
                yield event
                if isinstance(event, RunFailed):
                    return
        yield state.finish(complete=False, received=reply.received)
    except InBandError as exc:
        yield _failed_from_in_band(exc)
    finally:
        reply.close()


def _map_response(reply: RunResponse) -> Iterator[Event]:
    state = _RunState(None)
    for event in state.read(reply, deltas=False):
        if isinstance(event, RunFailed):
            if reply.answer:
                yield TextDelta(text=reply.answer)
            yield event
            return
        yield event
    if reply.answer:
        yield TextDelta(text=reply.answer)
    yield state.finish(complete=True, received=[reply])


def _failed_from_in_band(exc: InBandError) -> RunFailed:
    return RunFailed(
        code=exc.code or "in_band_error",
        message=exc.message,
        request_id=exc.request_id,
        raw=exc.body,
    )


def _outputs_for(batch: ToolBatch, results: Sequence[ToolResult]) -> list[ToolOutput]:
    if not results:
        raise UsageError(f"submit: no results for batch {batch.batch_id}; one per call is needed")
    expected = [call.call_id for call in batch.calls]
    given = [result.call_id for result in results]
    missing = [call_id for call_id in expected if call_id not in given]
    unknown = [call_id for call_id in given if call_id not in expected]
    duplicated = sorted({call_id for call_id in given if given.count(call_id) > 1})
    if missing or unknown or duplicated:
        problems = []
        if missing:
            problems.append(f"missing outputs for {missing}")
        if unknown:
            problems.append(f"outputs for calls not in the batch {unknown}")
        if duplicated:
            problems.append(f"several outputs for {duplicated}")
        raise UsageError(
            f"submit: batch {batch.batch_id} expects exactly one output per call "
            f"{expected}: " + "; ".join(problems)
        )
    return [ToolOutput(tool_call_id=r.call_id, output=r.output) for r in results]


def _function_call_context(event: RunEvent) -> Mapping[str, Any] | None:
    text = event.outputs.get("text")
    if isinstance(text, Mapping):
        function_call = text.get("function_call")
        if isinstance(function_call, Mapping):
            return function_call
    return None


def _context_call_id(event: RunEvent) -> str | None:
    context = _function_call_context(event)
    value = context.get("tool_call_id") if context else None
    return str(value) if value else None


def _context_call(event: RunEvent) -> ToolCall | None:
    context = _function_call_context(event)
    if not context or not context.get("tool_call_id") or not context.get("name"):
        return None
    function = FunctionCall.model_validate(
        {"name": str(context["name"]), "arguments": context.get("arguments")}
    )
    return ToolCall(
        call_id=str(context["tool_call_id"]),
        name=function.name,
        arguments=function.arguments,
        raw_arguments=function.raw_arguments,
    )
