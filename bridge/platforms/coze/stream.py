"""One Coze chat's events (streamed, or read by polling) turned into neutral events.

`ChatReader` knows no HTTP: it is fed ``(event, data)`` pairs and says what they mean.

- ``conversation.message.delta`` of an ``answer`` -> `TextDelta`; a completed answer whose
  deltas never came (some channels send only the whole message) -> one `TextDelta`;
- ``conversation.chat.requires_action`` -> a pause: `ToolCallsRequested` (the calls' opaque ids
  kept byte for byte, `arguments` the JSON string as sent, ``""`` read as ``{}``) or, for a
  ``reply_message`` action, `HumanInputRequested` whose prompt is the answer text so far;
- ``conversation.chat.completed`` -> `RunFinished` (usage), ``conversation.chat.failed`` and an
  ``error`` event -> `RunFailed`;
- ``done`` ends the stream; everything else -> `Other`.

The pause and the end are held back (`outcome`) until the stream is over: after
``requires_action`` the platform still sends ``done``, and a consumer that stops reading at the
pause must not leave the connection half-read.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from bridge.errors import ProtocolError
from bridge.platforms._limits import RunBudget
from bridge.platforms.coze.models import Chat, ChatMessage, usage_dict
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
)

__all__ = ["CHAT_EVENTS", "ChatReader", "pause_of"]

logger = logging.getLogger(__name__)

CHAT_EVENTS = frozenset(
    {
        "conversation.chat.created",
        "conversation.chat.in_progress",
        "conversation.chat.requires_action",
        "conversation.chat.completed",
        "conversation.chat.failed",
    }
)
_MESSAGE_EVENTS = frozenset({"conversation.message.delta", "conversation.message.completed"})


class ChatReader:
    """The state of one chat's stream as it is read.

    Args:
        request_id: The ``x-tt-logid`` of the answer being read, put on the events.
        budget: Counts the answer text (reasoning included), the tool calls and their
            arguments against the stream's bounds; None counts nothing (a polled chat,
            whose answers are bounded bodies).
    """

    def __init__(self, request_id: str | None, budget: RunBudget | None = None) -> None:
        self.request_id = request_id
        self.budget = budget
        self.chat: Chat | None = None
        """The last Chat object seen (its id is the chat id to submit to or cancel)."""
        self.answer: list[str] = []
        self.done = False
        """True once the ``done`` event arrived."""
        self.outcome: ToolCallsRequested | HumanInputRequested | RunFinished | RunFailed | None = (
            None
        )
        """How the chat ended or paused, to be yielded once the stream is over."""
        self.said: set[str] = set()
        """Ids of the answer messages whose text was yielded (a later poll must not repeat it)."""

    def feed(self, name: str, data: str) -> list[Event]:
        """The events to yield now for one stream event (bad JSON raises pydantic/JSON errors,
        which the transport maps to `ProtocolError`)."""
        if name == "done":
            self.done = True
            return []
        if name == "error":
            try:
                payload: Any = json.loads(data)
            except ValueError:
                payload = data  # the event says the run failed, whatever its data looks like
            code = payload.get("code", "error") if isinstance(payload, dict) else "error"
            msg = payload.get("msg", data) if isinstance(payload, dict) else data
            self.outcome = RunFailed(
                code=str(code), message=str(msg), request_id=self.request_id, raw=payload
            )
            return []
        if name in CHAT_EVENTS:
            return self._chat(name, Chat.model_validate_json(data))
        if name in _MESSAGE_EVENTS:
            return self._message(name, ChatMessage.model_validate_json(data))
        return [Other(raw={"event": name, "data": data})]

    def _chat(self, name: str, chat: Chat) -> list[Event]:
        self.chat = chat
        raw = {"event": name, "chat": chat.model_dump(exclude_none=True)}
        if name == "conversation.chat.requires_action":
            if self.budget is not None:
                for call in chat.tool_calls:
                    self.budget.tool_call()
                    if call.function is not None:
                        self.budget.arguments(call.function.arguments or "")
            self.outcome = pause_of(chat, self.request_id, "".join(self.answer))
        elif name == "conversation.chat.completed":
            self.outcome = finished(chat, "".join(self.answer), self.request_id)
        elif name == "conversation.chat.failed":
            self.outcome = failed(chat, self.request_id)
        else:
            return [Other(raw=raw)]
        return []

    def _message(self, name: str, message: ChatMessage) -> list[Event]:
        delta = name == "conversation.message.delta"
        fresh = delta or message.id not in self.said
        if self.budget is not None and delta:
            # Every delta counts (answer or not): each is kept until the stream ends.
            self.budget.text(message.content)
        elif self.budget is not None and message.type == "answer" and fresh:
            self.budget.text(message.content)  # a whole answer whose deltas never came
        if message.type == "answer" and message.content and fresh:
            if message.id:
                self.said.add(message.id)
            self.answer.append(message.content)
            return [TextDelta(text=message.content)]
        return [Other(raw={"event": name, "message": message.model_dump(exclude_none=True)})]


def pause_of(
    chat: Chat, request_id: str | None, prompt: str
) -> ToolCallsRequested | HumanInputRequested:
    """The pause a ``requires_action`` chat asks for.

    Raises:
        ProtocolError: the chat requires action but names no tool call.
    """
    calls = chat.tool_calls
    raw = chat.model_dump(exclude_none=True)
    question = next((c for c in calls if c.type == "reply_message"), None)
    if question is not None:
        return HumanInputRequested(
            interrupt_id=question.id, prompt=prompt, request_id=request_id, raw=raw
        )
    functions = [c for c in calls if c.function is not None]
    nameless = next((c for c in functions if not c.id.strip()), None)
    if nameless is not None:
        # Outputs go back by id: a call without one could never be answered.
        raise ProtocolError(
            f"chat {chat.id} requires action with a tool call that has an empty id; expected "
            "every required_action.submit_tool_outputs.tool_calls entry to have the id its "
            "output is submitted under",
            request_id=request_id,
            body=json.dumps(raw, ensure_ascii=False)[:1000],
        )
    if not functions:
        raise ProtocolError(
            f"chat {chat.id} requires action but names no tool call: expected "
            "required_action.submit_tool_outputs.tool_calls with a function each",
            request_id=request_id,
            body=json.dumps(raw, ensure_ascii=False)[:1000],
        )
    batch = ToolBatch(
        batch_id=chat.id,
        calls=_distinct(
            [
                ToolCall(
                    call_id=c.id,
                    name=c.function.name,
                    arguments=_arguments(c.function.arguments),
                    raw_arguments=c.function.arguments,
                )
                for c in functions
                if c.function is not None
            ],
            chat,
            request_id,
        ),
        resume={
            "conversation_id": chat.conversation_id,
            "chat_id": chat.id,
            "request_id": request_id,
        },
    )
    return ToolCallsRequested(batch=batch)


def finished(chat: Chat, answer: str, request_id: str | None) -> RunFinished:
    """The end of a completed chat."""
    return RunFinished(
        answer=answer,
        usage=usage_dict(chat.usage),
        message_id=chat.id,
        request_id=request_id,
        raw=chat.model_dump(exclude_none=True),
    )


def failed(chat: Chat, request_id: str | None) -> RunFailed:
    """The end of a failed (or canceled) chat, with the platform's code and message."""
    error = chat.last_error
    code = str(error.code) if error is not None and error.code else chat.status or "failed"
    message = error.msg if error is not None and error.msg else f"the chat ended {chat.status}"
    return RunFailed(
        code=code, message=message, request_id=request_id, raw=chat.model_dump(exclude_none=True)
    )


def _distinct(calls: list[ToolCall], chat: Chat, request_id: str | None) -> tuple[ToolCall, ...]:
    """The calls with an id given twice for the same call kept once.

    Outputs go back one per id, and the loop answers each call of a batch once: a repeated
    entry (same name and arguments) is one call; an id naming two different calls cannot be
    answered (one output would have to serve both).

    Raises:
        ProtocolError: one id names two calls with different names or arguments.
    """
    by_id: dict[str, ToolCall] = {}
    for call in calls:
        first = by_id.get(call.call_id)
        if first is None:
            by_id[call.call_id] = call
        elif (first.name, first.raw_arguments) != (call.name, call.raw_arguments):
            raise ProtocolError(
                f"chat {chat.id} requires action with two different tool calls under one id "
                f"{call.call_id!r} ({first.name} and {call.name}); expected a distinct id for "
                "each call, since each output is submitted under its call's id",
                request_id=request_id,
            )
        else:
            logger.info(
                "Coze chat %s lists tool call %s twice; running it once", chat.id, call.call_id
            )
    return tuple(by_id.values())


def _arguments(text: str | None) -> dict[str, Any] | str:
    # Coze sends "" for a call without arguments; anything else goes to the dispatcher as
    # sent, which parses it and answers invalid JSON with an output the model can read.
    return {} if not text or not text.strip() else text
