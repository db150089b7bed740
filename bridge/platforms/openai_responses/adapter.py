"""The OpenAI Responses API (OpenAI, Azure, Volcengine Ark, vLLM, any compatible server).

Each round is one ``POST /responses``. A query is a user message item; when the model asks
for tools, its ``function_call`` output items become a `ToolCallsRequested` (call ids are the
items' ``call_id``), and `submit` answers every call with a ``function_call_output`` item
echoing that ``call_id`` (never the item's ``id``), the tools sent again.

How a round continues the conversation depends on ``store``:

- ``store=True`` (the default): the server keeps each response, and the next request names
  the last one in ``previous_response_id``; only the new items are sent.
- ``store=False`` (zero data retention, or servers that lose items when chaining, like
  vLLM): nothing is kept server-side, so every request resends the whole transcript: the
  user messages, every output item as received (reasoning items with the
  ``encrypted_content`` asked for with ``include``, function calls, messages) and the
  outputs.

Either way the conversation's state only moves when a response completes, so a failed
`start` or `submit` can simply be called again; `export_state`/`import_state` carry it across
a restart. Wire shapes live in `models` and `stream`; the request and the reading of its answer in
`client` (on the shared OpenAI pieces, `bridge.platforms._openai`).
"""

from __future__ import annotations

import copy
import json
import logging
import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import requests

from bridge.errors import (
    ConfigurationError,
    NotFoundError,
    ProtocolError,
    UsageError,
)
from bridge.platforms._limits import RunBudget, StreamLimits
from bridge.platforms._openai import (
    OpenAIPlatform,
    add_usage,
    choice_name,
    follow_up_fields,
    function_tool_name,
    model_verdict,
    renamed_calls,
)
from bridge.platforms.base import (
    PlatformLimits,
    PlatformState,
    state_field,
)
from bridge.platforms.openai_responses.client import ResponsesClient
from bridge.platforms.openai_responses.models import (
    ResponsesConversation,
    ResponseTurn,
    function_calls,
)
from bridge.platforms.retry import RetryPolicy
from bridge.types import (
    Event,
    RunFailed,
    RunFinished,
    ToolBatch,
    ToolCall,
    ToolCallsRequested,
    ToolChoice,
    ToolResult,
)

__all__ = ["OpenAIResponsesPlatform"]

logger = logging.getLogger(__name__)

_ENDPOINT = "/responses"
_MANAGED_KEYS = frozenset(
    {"model", "input", "tools", "tool_choice", "stream", "store", "previous_response_id"}
)
_ENCRYPTED = "reasoning.encrypted_content"
STATE_VERSION = 1
"""The `export_state` format; `import_state` refuses others."""


class OpenAIResponsesPlatform(OpenAIPlatform[ResponsesConversation]):
    """A `Platform` speaking the Responses API.

    Args:
        base_url: The API root, e.g. ``https://api.openai.com/v1``; default `OPENAI_BASE_URL`.
        model: The model name; default `OPENAI_MODEL`.
        api_key: Sent as a bearer token; default `OPENAI_API_KEY`.
        store: True chains rounds with ``previous_response_id`` (the server keeps them);
            False keeps nothing server-side and resends every item of the conversation.
        connect_timeout: Seconds to wait for the TCP connection.
        idle_timeout: Seconds to wait for the next bytes of an answer.
        max_retries: Retries for connect errors, 429 and 5xx, only before any answer byte was
            read; ignored when `retry_policy` is given.
        session: A `requests.Session` to reuse (left open by `close`).
        extra_body: Extra fields merged into every request, e.g. ``{"temperature": 0}``.
        system: Instructions sent with every request (``instructions`` is not carried over by
            ``previous_response_id``).
        retry_policy: Full control over retries and backoff.
        run_timeout: Seconds one answer stream (a query, tool outputs or a reply) may last
            (the bounds of every answer stream: `StreamLimits.from_options`).
        max_answer_chars: Characters of answer text (reasoning included) one answer stream
            may carry.
        max_arguments_chars: Characters of tool-call arguments one answer stream may carry,
            all its calls together.
        max_tool_calls: Tool calls one answer stream may ask for.

    Raises:
        ConfigurationError: A required setting is missing or malformed.
    """

    name = "responses"
    dialect = "openai"
    limits = PlatformLimits()
    never_pauses = "a response never pauses for human input"
    client: ResponsesClient
    repr_fields = ("store",)
    lost_hint = (
        "call create_conversation() first, or import_state() the state exported before a restart"
    )

    def __init__(
        self,
        base_url: str | None = None,
        model: str | None = None,
        api_key: str | None = None,
        *,
        store: bool = True,
        connect_timeout: float = 10.0,
        idle_timeout: float = 120.0,
        max_retries: int = 3,
        session: requests.Session | None = None,
        extra_body: Mapping[str, Any] | None = None,
        system: str | None = None,
        retry_policy: RetryPolicy | None = None,
        run_timeout: float | None = None,
        max_answer_chars: int | None = None,
        max_arguments_chars: int | None = None,
        max_tool_calls: int | None = None,
    ) -> None:
        super().__init__()
        retry_policy = self.configure(
            base_url,
            model,
            api_key,
            endpoint=_ENDPOINT,
            managed_keys=_MANAGED_KEYS,
            connect_timeout=connect_timeout,
            idle_timeout=idle_timeout,
            max_retries=max_retries,
            retry_policy=retry_policy,
            extra_body=extra_body,
            system=system,
        )
        if not isinstance(store, bool):
            raise ConfigurationError(f"store must be True or False, got {store!r}")
        self.store = store
        self.client = ResponsesClient(
            self.base_url,
            api_key=self._api_key,
            connect_timeout=float(connect_timeout),
            idle_timeout=float(idle_timeout),
            retry_policy=retry_policy,
            session=session,
            limits=StreamLimits.from_options(
                run_timeout, max_answer_chars, max_arguments_chars, max_tool_calls
            ),
        )

    # --- conversations --------------------------------------------------------------------------

    def create_conversation(self, *, end_user_id: str | None = None) -> str:
        """Start a conversation (nothing is sent: the first response opens the chain)."""
        conversation_id = uuid.uuid4().hex
        self._conversations.put(conversation_id, ResponsesConversation())
        return conversation_id

    def previous_response_id(self, conversation_id: str) -> str | None:
        """The id of the conversation's last completed response (None before the first)."""
        return self._state(conversation_id).previous_response_id

    def items(self, conversation_id: str) -> list[dict[str, Any]]:
        """A copy of the items a ``store=False`` conversation resends (empty with store)."""
        items: list[dict[str, Any]] = _copied(self._state(conversation_id).items)
        return items

    # --- runs --------------------------------------------------------------------------------

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
        """Send the user's query as a new response (at once); yield its events as read.

        Raises:
            UsageError: Unknown conversation, empty query, file ids, bad tools or tool_choice
                (a forced input cannot be sent).
            PlatformError: The server refused the request, e.g. `BadRequestError` while calls
                of the last round are unanswered.
        """
        choice = choice_name(tool_choice, api="the Responses API")
        state = self._state(conversation_id)
        self.check_query(query, file_ids)
        # Calls left unanswered (an interrupted round) are not checked here: the server refuses
        # the request ("No tool output found for function call ..."), a refusal the loop
        # answers by continuing in a new platform conversation.
        fields = _tool_fields(tools, choice)
        state.turn_tools, state.turn_usage = fields, None
        given = [{"type": "message", "role": "user", "content": query}]
        return self._respond(state, given, fields, end_user_id=end_user_id, stream=stream)

    def submit(
        self,
        conversation_id: str,
        batch: ToolBatch,
        results: Sequence[ToolResult],
        *,
        end_user_id: str | None = None,
        stream: bool = True,
    ) -> Iterator[Event]:
        """Answer every call of the batch with a ``function_call_output`` (sent at once); yield
        the next response's events as read.

        The outputs follow the order of the batch's calls and echo their ``call_id``; the
        turn's tools are sent again, a forced ``tool_choice`` is not (the model may answer).

        Raises:
            UsageError: Unknown conversation, a batch that is not the pending one, or results
                that do not answer each call of the batch exactly once.
        """
        state, pending, by_id = self.answering(conversation_id, batch, results)
        given = [
            {
                "type": "function_call_output",
                "call_id": state.wire_ids.get(call.call_id, call.call_id),
                "output": by_id[call.call_id].output,
            }
            for call in pending.calls
        ]
        fields = follow_up_fields(state.turn_tools)
        return self._respond(state, given, fields, end_user_id=end_user_id, stream=stream)

    def check(self) -> str:
        """Prove the server answers and serves the model, with one ``GET /models``; for a
        server without that endpoint (404), with one tiny response instead.

        Raises:
            PlatformError: the server is unreachable, refused the key or the model.
            ConfigurationError: the server lists its models and the configured one is absent.
        """
        try:
            served = self.client.models()
        except NotFoundError:
            return self._check_response()
        return model_verdict(self.base_url, self.model, served)

    def _check_response(self) -> str:
        body = {
            **self.extra_body,
            "model": self.model,
            "input": "ping",
            "max_output_tokens": 16,
            "store": False,
            "stream": False,
        }
        response, request_id = self.client.send(body, stream=False)
        for _ in self.client.read(response, request_id, stream=False):
            pass  # a body: nothing is yielded
        return (
            f"{self._url} answered a tiny response for model {self.model!r} (the server has "
            "no GET /models)"
        )

    # --- state across a restart ------------------------------------------------------------------

    def export_state(self, conversation_id: str) -> PlatformState | None:
        """What a new process needs to continue the conversation (JSON, no secrets).

        The last completed response's id, the transcript a ``store=False`` conversation
        resends, the batch waiting for outputs and the current turn's tool fields.
        """
        state = self._state(conversation_id)
        with self._lock:
            return {
                "version": STATE_VERSION,
                "store": self.store,
                "previous_response_id": state.previous_response_id,
                "items": _copied(state.items),
                "pending": state.pending.model_dump(mode="json") if state.pending else None,
                "turn_tools": _copied(state.turn_tools),
                "call_ids": list(state.call_ids),
                "wire_ids": dict(state.wire_ids),
            }

    def export_state_json(self, conversation_id: str) -> str | None:
        """`export_state` as JSON text, the text ``json.dumps(export_state(conversation_id),
        ensure_ascii=False, allow_nan=False)`` gives, written from the held state without
        copying it first (the loop journals the state at each platform round)."""
        state = self._state(conversation_id)
        with self._lock:
            return json.dumps(
                {
                    "version": STATE_VERSION,
                    "store": self.store,
                    "previous_response_id": state.previous_response_id,
                    "items": state.items,
                    "pending": state.pending.model_dump(mode="json") if state.pending else None,
                    "turn_tools": state.turn_tools,
                    "call_ids": state.call_ids,
                    "wire_ids": state.wire_ids,
                },
                ensure_ascii=False,
                allow_nan=False,
            )

    def import_state(self, conversation_id: str, state: Mapping[str, Any]) -> None:
        """Continue a conversation exported by `export_state` (in this or another process).

        Raises:
            UsageError: the state is not one `export_state` wrote, or was written with the
                other ``store`` setting (a stored chain cannot be resent item by item, nor
                the reverse).
        """
        version = state_field(state, "version", int, platform=self.name, default=None)
        if version != STATE_VERSION:
            raise UsageError(
                f"cannot import the state of conversation {conversation_id}: expected a dict "
                f"written by export_state (version {STATE_VERSION}), got {dict(state)!r:.200}"
            )
        store = state_field(state, "store", bool, platform=self.name)
        if store is not self.store:
            raise UsageError(
                f"conversation {conversation_id} was kept with store={store}, but this platform "
                f"has store={self.store}; configure the same store setting"
            )
        previous = state_field(state, "previous_response_id", str, platform=self.name, default=None)
        items = state_field(state, "items", list, platform=self.name, default=[])
        pending = state_field(state, "pending", dict, platform=self.name, default=None)
        tools = state_field(state, "turn_tools", dict, platform=self.name, default={})
        call_ids = state_field(state, "call_ids", list, platform=self.name, default=[])
        wire_ids = state_field(state, "wire_ids", dict, platform=self.name, default={})
        try:
            restored = ResponsesConversation(
                previous_response_id=previous,
                items=[dict(item) for item in items],
                pending=ToolBatch.model_validate(pending) if pending else None,
                turn_tools=dict(tools),
                call_ids=[str(call_id) for call_id in call_ids],
                wire_ids={str(k): str(v) for k, v in wire_ids.items()},
            )
        except (TypeError, ValueError) as exc:
            raise UsageError(
                f"cannot import the state of conversation {conversation_id}: {exc}"
            ) from None
        self._conversations.put(conversation_id, restored)

    # --- one response ------------------------------------------------------------------------

    def _respond(
        self,
        state: ResponsesConversation,
        given: list[dict[str, Any]],
        fields: dict[str, Any],
        *,
        end_user_id: str | None,
        stream: bool,
    ) -> Iterator[Event]:
        body: dict[str, Any] = {**self.extra_body, "model": self.model}
        if self.store:
            body["input"] = given
            if state.previous_response_id:
                body["previous_response_id"] = state.previous_response_id
        else:
            body["input"] = [*_copied(state.items), *given]
            body["store"] = False
            include = list(body.get("include") or [])
            body["include"] = include if _ENCRYPTED in include else [*include, _ENCRYPTED]
        if self.system:
            body.setdefault("instructions", self.system)
        body.update(fields)
        body["stream"] = stream
        if end_user_id:
            body.setdefault("user", end_user_id)
        # Sent now, read as iterated: a refusal (e.g. a new input while calls of the chain are
        # unanswered) reaches the caller before it records anything as sent.
        budget = self.client.budget()  # the run's total time counts from the request
        response, request_id = self.client.send(body, stream=stream, budget=budget)
        return self._run(state, body, response, request_id, budget, stream=stream)

    def _run(
        self,
        state: ResponsesConversation,
        body: dict[str, Any],
        response: requests.Response,
        request_id: str | None,
        budget: RunBudget,
        *,
        stream: bool,
    ) -> Iterator[Event]:
        turn = yield from self.client.read(response, request_id, stream=stream, budget=budget)
        yield from self._finish(state, body, turn, request_id)

    def _finish(
        self,
        state: ResponsesConversation,
        body: dict[str, Any],
        turn: ResponseTurn,
        request_id: str | None,
    ) -> Iterator[Event]:
        if turn.status in ("failed", "error"):
            code, message = turn.error or ("failed", "the response failed without an error")
            yield RunFailed(code=code, message=message, request_id=request_id, raw=turn.raw)
            return
        if turn.status == "incomplete":
            reason = turn.incomplete_reason or "unknown"
            yield RunFailed(
                code="incomplete",
                message=f"the response ended incomplete ({reason}); a function call or the "
                "answer may be cut short (raise max_output_tokens if that is the reason)",
                request_id=request_id,
                raw=turn.raw,
            )
            return
        if turn.status != "completed":
            raise ProtocolError(
                f"{self._url} answered a response with status {turn.status!r}; expected "
                "completed, failed or incomplete (background responses are not supported)",
                request_id=request_id,
            )
        calls, renamed = _distinct_ids(function_calls(turn.output, self._url), state)
        response_id = turn.response_id or f"resp_{uuid.uuid4().hex}"
        state.turn_usage = add_usage(state.turn_usage, turn.usage)
        # The state moves before the last event is yielded: a consumer that stops reading at
        # the pause must still find the conversation in its new state.
        with self._lock:
            state.previous_response_id = response_id
            state.call_ids += [call.call_id for call in calls]
            state.wire_ids.update(renamed)
            if not self.store:
                state.items = [*body["input"], *_copied(turn.output)]
            if calls:
                batch = ToolBatch(
                    batch_id=response_id,
                    calls=calls,
                    resume={"request_id": request_id, "response_id": response_id},
                )
                state.pending = batch
            else:
                state.pending = None
        if calls:
            yield ToolCallsRequested(batch=batch)
            return
        yield RunFinished(
            answer=turn.answer(),
            usage=state.turn_usage,
            message_id=response_id,
            request_id=request_id,
            raw=turn.raw,
        )


def _copied(value: Any) -> Any:
    """A deep copy of JSON values (dicts, lists, strings, numbers, booleans, None), twice as
    fast as `copy.deepcopy` for them (nothing to memoise: JSON has no cycles); any other
    value is left to `copy.deepcopy`."""
    kind = type(value)
    if kind is dict:
        return {key: _copied(item) for key, item in value.items()}
    if kind is list:
        return [_copied(item) for item in value]
    if kind is str or kind is int or kind is float or kind is bool or value is None:
        return value
    return copy.deepcopy(value)


def _distinct_ids(
    calls: tuple[ToolCall, ...], state: ResponsesConversation
) -> tuple[tuple[ToolCall, ...], dict[str, str]]:
    """The calls with a fresh id for any whose ``call_id`` the conversation already used, and
    the renames (fresh -> the server's).

    Some servers number calls per response ("call_0" every round); the loop runs a call id at
    most once per conversation, so a reused id would get the old output instead of a new run.
    The server never sees the difference: the output goes back under its own id.
    """
    return renamed_calls(calls, set(state.call_ids))


# --- requests ---------------------------------------------------------------------------------


def _tool_fields(tools: Sequence[dict[str, Any]], choice: str | None) -> dict[str, Any]:
    """``tools`` as Responses function tools (strict when every one fits) and ``tool_choice``."""
    # Imported here: the tools layer (and its dispatcher) loads only once tools are sent.
    from bridge.tools.schema import to_dialect

    plain = [_flat(position, tool) for position, tool in enumerate(tools)]
    strict: list[dict[str, Any]] = []
    for tool in plain:
        try:
            shaped = to_dialect(tool, "openai-strict")["function"]
        except UsageError as exc:
            logger.debug("tools sent without strict mode: %s", exc)
            strict = []
            break
        strict.append({"type": "function", **shaped})
    fields: dict[str, Any] = {}
    if plain:
        fields["tools"] = strict or [{"type": "function", **t, "strict": False} for t in plain]
    if choice is None:
        return fields
    names = [t["name"] for t in plain]
    if not names:
        raise UsageError(f"tool_choice {choice!r} was given but no tools were sent")
    if choice in ("auto", "none", "required"):
        fields["tool_choice"] = choice
    elif choice in names:
        fields["tool_choice"] = {"type": "function", "name": choice}
    else:
        raise UsageError(
            f"tool_choice {choice!r} names no tool of this request; expected one of "
            f"{', '.join(sorted(names))} (or auto, none, required)"
        )
    return fields


def _flat(position: int, tool: Mapping[str, Any]) -> dict[str, Any]:
    """name, description and parameters of a Chat Completions function tool (or of one that
    is already in the Responses shape)."""
    name = function_tool_name(position, tool, flat=True)
    function = tool.get("function")
    source = function if isinstance(function, Mapping) else tool
    parameters = source.get("parameters")
    return {
        "name": name,
        "description": str(source.get("description") or ""),
        "parameters": dict(parameters) if isinstance(parameters, Mapping) else {"type": "object"},
    }
