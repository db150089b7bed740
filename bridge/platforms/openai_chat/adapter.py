"""OpenAI-compatible Chat Completions: vLLM, Ollama, llama.cpp server, any compatible gateway.

Chat Completions is stateless, so the history lives here, one list of messages per
conversation id. A turn appends the user message and POSTs `/chat/completions`. When the
model asks for tools (`finish_reason == "tool_calls"`, or calls present whatever the reason:
Ollama says "stop"), the assistant message with its `tool_calls` joins the history and a
`ToolCallsRequested` pauses the run; `submit` appends one `role: "tool"` message per result
and asks for the next completion. The history only changes when a completion succeeds, so a
failed `start` or `submit` can simply be called again.

A history survives a restart through the journal (contract b in `bridge.platforms.base`):
`export_state` gives the messages (and, while tool calls wait for results, the pending batch
with the turn's tool fields), `import_state` takes them back in another process.

Wire shapes (fragment assembly, tool fields) live in `models`, reading an answer in `stream`,
building and sending requests in `client` (on the shared `bridge.platforms._openai`); this
module owns histories and events.
"""

from __future__ import annotations

import copy
import logging
import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Literal

import requests
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from bridge.errors import ProtocolError, UsageError
from bridge.platforms._limits import StreamLimits
from bridge.platforms._openai import (
    OpenAIPlatform,
    add_usage,
    choice_name,
    follow_up_fields,
    model_verdict,
    renamed_calls,
)
from bridge.platforms.base import PlatformLimits
from bridge.platforms.openai_chat import models
from bridge.platforms.openai_chat.client import ChatClient, ChatTransport
from bridge.platforms.openai_chat.models import ChatConversation, Completion
from bridge.platforms.openai_chat.text_tools import TextToolProtocol, _TextTurn
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

__all__ = ["OpenAIChatPlatform"]

logger = logging.getLogger(__name__)

_ENDPOINT = "/chat/completions"
_MANAGED_KEYS = frozenset({"model", "messages", "tools", "tool_choice", "stream"})


class OpenAIChatPlatform(OpenAIPlatform[ChatConversation]):
    """A `Platform` speaking OpenAI-compatible Chat Completions, history kept client-side.

    Args:
        base_url: The API root, e.g. ``http://127.0.0.1:8000/v1``; default `OPENAI_BASE_URL`.
        model: The model name the server serves; default `OPENAI_MODEL`.
        api_key: Sent as a bearer token when set; default `OPENAI_API_KEY` (local servers
            usually need none).
        connect_timeout: Seconds to wait for the TCP connection.
        idle_timeout: Seconds to wait for the next bytes of an answer (headers, body or the next
            stream chunk).
        max_retries: Retries for connect errors, 429 and 5xx, only before any answer byte was
            read; ignored when `retry_policy` is given.
        session: A `requests.Session` to reuse (left open by `close`).
        extra_body: Extra fields merged into every request, e.g. ``{"temperature": 0}``.
        system: A system prompt that opens every new conversation.
        stream_usage: Ask for token usage in streamed answers (``stream_options``); turn it
            off for a server that rejects the field.
        retry_policy: Full control over retries and backoff.
        tool_protocol: ``native`` sends the tools as Chat Completions' `tools` field;
            ``text`` describes them in the system prompt and reads the calls the model writes
            in its reply, for models and servers without native tool calls (see
            `bridge.platforms.openai_chat.text_tools`).
        run_timeout: Seconds one answer stream (a query, tool outputs or a reply) may last
            (the bounds of every answer stream: `StreamLimits.from_options`).
        max_answer_chars: Characters of answer text (reasoning included) one answer stream
            may carry.
        max_arguments_chars: Characters of tool-call arguments one answer stream may carry,
            all its calls together.
        max_tool_calls: Tool calls one answer stream may ask for.

    Raises:
        ConfigurationError: A required setting is missing or malformed.
        UsageError: `tool_protocol` is neither ``native`` nor ``text``.
    """

    name = "openai"
    dialect = "openai"
    outputs_in_state = True
    """Submitted outputs are written into the client-side history (`HoldsSubmittedOutputs`)."""
    limits = PlatformLimits()
    """None known: servers differ (context length is the model's, not a fixed query size)."""
    never_pauses = "Chat Completions never pauses for human input"
    client: ChatClient
    lost_hint = (
        "the openai platform keeps histories in memory, so call create_conversation() first "
        "(histories do not survive a restart)"
    )

    def __init__(
        self,
        base_url: str | None = None,
        model: str | None = None,
        api_key: str | None = None,
        *,
        connect_timeout: float = 10.0,
        idle_timeout: float = 120.0,
        max_retries: int = 3,
        session: requests.Session | None = None,
        extra_body: Mapping[str, Any] | None = None,
        system: str | None = None,
        stream_usage: bool = True,
        retry_policy: RetryPolicy | None = None,
        tool_protocol: str = "native",
        run_timeout: float | None = None,
        max_answer_chars: int | None = None,
        max_arguments_chars: int | None = None,
        max_tool_calls: int | None = None,
    ) -> None:
        super().__init__()
        if tool_protocol not in ("native", "text"):
            raise UsageError(
                f"tool_protocol must be 'native' (the server's tool calls) or 'text' (tools "
                f"described in the prompt, calls read from the reply), got {tool_protocol!r}"
            )
        self.tool_protocol = tool_protocol
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
        self.stream_limits = StreamLimits.from_options(
            run_timeout, max_answer_chars, max_arguments_chars, max_tool_calls
        )
        self.stream_usage = stream_usage
        http = ChatTransport(
            self._url,
            api_key=self._api_key,
            connect_timeout=float(connect_timeout),
            idle_timeout=float(idle_timeout),
            retry_policy=retry_policy,
            session=session,
        )
        self.client = ChatClient(
            self.base_url,
            self._url,
            self.model,
            http,
            extra_body=self.extra_body,
            stream_usage=stream_usage,
            stream_limits=self.stream_limits,
        )
        self._text = TextToolProtocol(self.client, self._lock) if tool_protocol == "text" else None

    # --- conversations --------------------------------------------------------------------------

    def create_conversation(self, *, end_user_id: str | None = None) -> str:
        """Start an empty history (opened by the system prompt, if any) and return its id."""
        conversation_id = uuid.uuid4().hex
        messages = [{"role": "system", "content": self.system}] if self.system else []
        self._conversations.put(conversation_id, ChatConversation(messages=messages))
        return conversation_id

    def history(self, conversation_id: str) -> list[dict[str, Any]]:
        """A copy of the messages sent so far in a conversation (for transcripts and tests)."""
        return copy.deepcopy(self._state(conversation_id).messages)

    def export_state(self, conversation_id: str) -> dict[str, Any] | None:
        """The history and pending tool calls, as JSON, to continue in another process.

        Its size is the history's: every message of the conversation (the server needs them
        all), plus, while tool calls wait for results, the batch and the turn's tool fields.
        None for a conversation this process does not hold.
        """
        state = self._conversations.get(conversation_id)
        if state is None:
            return None
        with self._lock:
            if state.pending is None:
                saved = _SavedConversation(messages=state.messages)
            else:
                # Only a pending batch needs the turn: `submit` sends its tools again.
                text = state.text_turn if isinstance(state.text_turn, _TextTurn) else None
                saved = _SavedConversation(
                    messages=state.messages,
                    pending=state.pending,
                    turn_tools=state.turn_tools,
                    turn_usage=state.turn_usage,
                    text_turn=_SavedTextTurn.of(text) if text is not None else None,
                )
            return saved.model_dump(mode="json")

    def import_state(self, conversation_id: str, state: Mapping[str, Any]) -> None:
        """Hold a conversation exported by `export_state` (replacing what this process held).

        Raises:
            UsageError: `state` is not what `export_state` returns, saying what is wrong.
        """
        try:
            saved = _SavedConversation.model_validate(state)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(map(str, error['loc'])) or 'state'}: {error['msg']}"
                for error in exc.errors()[:5]
            )
            raise UsageError(
                f"cannot continue conversation {conversation_id!r} on the openai platform: its "
                f"saved state is not what export_state writes ({problems}); expected "
                "{'version': 1, 'messages': [...], 'pending': ...}"
            ) from None
        conversation = ChatConversation(
            messages=copy.deepcopy(saved.messages),
            pending=saved.pending,
            turn_tools=copy.deepcopy(saved.turn_tools),
            turn_usage=copy.deepcopy(saved.turn_usage),
            text_turn=saved.text_turn.turn() if saved.text_turn is not None else None,
        )
        self._conversations.put(conversation_id, conversation)

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
        """Append the user's query to the history and yield the completion's events.

        `tool_choice` is a tool name or `ToolChoice` (sent as a forced function choice) or one
        of ``auto``, ``none`` and ``required``. The history is only extended once the
        completion succeeds.

        Raises:
            UsageError: Unknown conversation, empty query, file ids, bad tools or tool_choice
                (a `ToolChoice` with an `input`: Chat Completions cannot fix a call's
                arguments), or tool calls of the previous round still unanswered.
        """
        tool_choice = choice_name(tool_choice, api="OpenAI-compatible Chat Completions")
        state = self._state(conversation_id)
        self.check_query(query, file_ids)
        if state.pending is not None:
            pending = ", ".join(c.call_id for c in state.pending.calls)
            raise UsageError(
                f"conversation {conversation_id} is waiting for the results of tool calls "
                f"{pending}: submit() them before asking again, or forget() the conversation"
            )
        if self._text is not None:
            return self._text.start(
                state, query, tools, tool_choice, end_user_id=end_user_id, stream=stream
            )
        tool_fields = models.tool_fields(tools, tool_choice)
        state.turn_tools, state.turn_usage = tool_fields, None
        messages = [*state.messages, {"role": "user", "content": query}]
        return self._complete(state, messages, tool_fields, end_user_id=end_user_id, stream=stream)

    def submit(
        self,
        conversation_id: str,
        batch: ToolBatch,
        results: Sequence[ToolResult],
        *,
        end_user_id: str | None = None,
        stream: bool = True,
    ) -> Iterator[Event]:
        """Send one `role: "tool"` message per call of the batch and yield the next events.

        The messages follow the order of the batch's calls. The tools of the turn's `start` are
        sent again, as Chat Completions expects; a forced `tool_choice` (a tool name or
        ``required``) is not, so the model can answer instead of calling the tool again.

        Raises:
            UsageError: Unknown conversation, a batch that is not the pending one, or results
                that do not answer each call of the batch exactly once.
        """
        state, pending, by_id = self.answering(conversation_id, batch, results)
        if self._text is not None:
            return self._text.submit(state, pending, by_id, end_user_id=end_user_id, stream=stream)
        tool_messages = [
            {"role": "tool", "tool_call_id": call.call_id, "content": by_id[call.call_id].output}
            for call in pending.calls
        ]
        messages = [*state.messages, *tool_messages]
        tool_fields = follow_up_fields(state.turn_tools)
        events = self._complete(
            state, messages, tool_fields, end_user_id=end_user_id, stream=stream
        )
        return models.delivering(state, messages, self._lock, events)

    def check(self) -> str:
        """Prove the server answers and serves the model, with one `GET /models`.

        Returns:
            What was verified, in one sentence.

        Raises:
            PlatformError: the server is unreachable or refused the key.
            ConfigurationError: the server lists its models and the configured one is absent.
        """
        response = self.client.http.get(self.base_url + "/models")
        try:
            with self.client.http.errors():
                body = response.json()
        except ProtocolError:
            return model_verdict(self.base_url, self.model, None)
        finally:
            response.close()
        models = body.get("data") if isinstance(body, dict) else None
        served = [str(m.get("id")) for m in models or [] if isinstance(m, dict)]
        return model_verdict(self.base_url, self.model, served)

    def check_chat(self) -> str:
        """Prove chat completions answer, with one completion of at most one token.

        For servers without `GET /models` (some gateways and llama.cpp builds); unlike `check`
        it costs a (tiny) completion.

        Raises:
            PlatformError: the server is unreachable, refused the key or the model.
        """
        body = {
            "model": self.model,
            "messages": [{"role": "user", "content": "ping"}],
            "max_tokens": 1,
            "stream": False,
        }
        self.client.http.post(body, stream=False).close()
        return f"{self.base_url}/chat/completions answered for model {self.model!r}"

    # --- one completion ------------------------------------------------------------------------

    def _complete(
        self,
        state: ChatConversation,
        messages: list[dict[str, Any]],
        tool_fields: dict[str, Any],
        *,
        end_user_id: str | None,
        stream: bool,
    ) -> Iterator[Event]:
        body = self.client.body(messages, tool_fields, end_user_id=end_user_id, stream=stream)
        # A generator from here on: nothing is sent until the caller starts iterating.
        return self._run(state, messages, body, stream=stream)

    def _run(
        self,
        state: ChatConversation,
        messages: list[dict[str, Any]],
        body: dict[str, Any],
        *,
        stream: bool,
    ) -> Iterator[Event]:
        turn, request_id = yield from self.client.exchange(body, stream=stream)
        yield from self._finish(state, messages, turn, request_id)

    def _finish(
        self,
        state: ChatConversation,
        messages: list[dict[str, Any]],
        turn: Completion,
        request_id: str | None,
    ) -> Iterator[Event]:
        if turn.error is not None:
            code, message = turn.error
            yield RunFailed(code=code, message=message, request_id=request_id, raw=turn.raw)
            return
        text = "".join(turn.text)
        calls = _unique_ids(turn.calls.finish(), messages)
        if turn.finish_reason not in ("stop", "tool_calls"):
            # "length" cuts an answer (or a call's arguments) short; worth saying once.
            logger.warning(
                "%s ended the answer with finish_reason=%s", self._url, turn.finish_reason
            )
        state.turn_usage = add_usage(state.turn_usage, turn.usage)
        completion_id = turn.completion_id or f"chatcmpl-{uuid.uuid4().hex}"
        assistant: dict[str, Any] = {"role": "assistant", "content": text}
        # The history is committed before the last event is yielded: a consumer that stops
        # reading at the pause must still find the conversation in its new state.
        if calls:
            assistant["content"] = text or None
            assistant["tool_calls"] = [
                {
                    "id": call.call_id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.raw_arguments},
                }
                for call in calls
            ]
            batch = models.completion_batch(completion_id, calls, request_id)
            with self._lock:
                state.messages = [*messages, assistant]
                state.pending = batch
            yield ToolCallsRequested(batch=batch)
            return
        with self._lock:
            state.messages = [*messages, assistant]
            state.pending = None
        yield RunFinished(
            answer=text,
            usage=state.turn_usage,
            message_id=completion_id,
            request_id=request_id,
            raw=turn.raw,
        )

    # --- helpers -------------------------------------------------------------------------------


# --- saved state ------------------------------------------------


class _SavedTextTurn(BaseModel):
    """`_TextTurn` as JSON (the text tool protocol's turn, needed to answer its calls)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    names: list[str]
    prompt: str | None = None
    force: str | None = None
    notes: list[str] = Field(default_factory=list)

    @classmethod
    def of(cls, turn: _TextTurn) -> _SavedTextTurn:
        return cls(
            names=sorted(turn.names), prompt=turn.prompt, force=turn.force, notes=list(turn.notes)
        )

    def turn(self) -> _TextTurn:
        return _TextTurn(
            names=frozenset(self.names),
            prompt=self.prompt,
            force=self.force,
            notes=tuple(self.notes),
        )


class _SavedConversation(BaseModel):
    """What `export_state` writes: one conversation's history and pending round."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: Literal[1] = 1
    messages: list[dict[str, Any]]
    pending: ToolBatch | None = None
    turn_tools: dict[str, Any] = Field(default_factory=dict)
    turn_usage: dict[str, Any] | None = None
    text_turn: _SavedTextTurn | None = None


# --- pure helpers ------------------------------------------------------------------------------


def _unique_ids(calls: tuple[ToolCall, ...], history: list[dict[str, Any]]) -> tuple[ToolCall, ...]:
    """Give a fresh id to a call whose id is already used in the conversation.

    Some servers number calls per answer ("call_0" every round); the loop runs a call id at
    most once per conversation, so a reused id would get an old output instead of a new run.
    The server never sees the difference: the history sent back uses the new id throughout.
    """
    seen = {
        tool_call.get("id")
        for message in history
        for tool_call in message.get("tool_calls") or ()
        if isinstance(tool_call, dict)
    }
    return renamed_calls(calls, seen)[0]
