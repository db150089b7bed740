"""A planner step as the Coze wire shows it: messages, the chat's new status, stream frames.

A tool round is one ``function_call`` message per call (its name plugin-prefixed, as Coze's
message list shows it) and ``conversation.chat.requires_action`` with the calls (arguments a
JSON string, ``""`` when there are none); a question is the question streamed as an answer and
a ``reply_message`` action; an answer is ``conversation.message.delta`` pieces, the completed
message, a ``verbose`` ``generate_answer_finish`` message and ``conversation.chat.completed``
with usage; a failed step is ``conversation.chat.failed`` with ``last_error``. Every stream
ends with ``done``.
"""

from __future__ import annotations

import json
import time
from typing import Any

from bridge.emulator.coze import wire
from bridge.emulator.coze.chats import ChatRecord, call_id, chat_usage, message_record, numeric_id
from bridge.emulator.planner import AnswerStep, AskStep, CallStep, Step
from bridge.emulator.state import Conversation, PendingCall, PendingInput

__all__ = ["chat_message", "render_step"]


def render_step(
    step: Step, conv: Conversation, chat: ChatRecord, *, plugin_name: str, chunk_chars: int
) -> list[bytes]:
    """Apply `step` to the chat (and its conversation); return its frames, ``done`` last."""
    run = chat.run
    frames: list[bytes] = []
    if isinstance(step, CallStep):
        run.pending = [
            PendingCall(call_id(), c.name, c.arguments, c.output_name) for c in step.calls
        ]
        for call in run.pending:
            content = {
                "name": f"{plugin_name}-{call.name}",
                "arguments": call.arguments,
                "plugin_id": f"plugin-{plugin_name}",
                "api_id": f"api-{call.name}",
                "api_name": call.name,
            }
            message = chat_message(chat, "function_call", json.dumps(content, ensure_ascii=False))
            chat.messages.append(message)
            frames.append(wire.sse_frame("conversation.message.completed", message))
        tool_calls = [
            {
                "id": call.call_id,
                "type": "function",
                "function": {
                    "name": call.name,
                    # A JSON string; empty (not "{}") when there is nothing, as Coze sends.
                    "arguments": json.dumps(call.arguments, ensure_ascii=False)
                    if call.arguments
                    else "",
                },
            }
            for call in run.pending
        ]
        _pause(chat, tool_calls)
        frames.append(wire.sse_frame("conversation.chat.requires_action", chat.to_wire()))
    elif isinstance(step, AskStep):
        question = PendingInput(call_id(), step.question, step.name)
        run.pending_input = question
        frames += _answer_frames(chat, step.question, chunk_chars)
        conv.messages.append(message_record(run, step.question, "human_input"))
        _pause(chat, [{"id": question.interrupt_id, "type": "reply_message"}])
        frames.append(wire.sse_frame("conversation.chat.requires_action", chat.to_wire()))
    elif isinstance(step, AnswerStep):
        frames += _answer_frames(chat, step.text, chunk_chars)
        chat.status, chat.completed_at = "completed", int(time.time())
        chat.usage = chat_usage(run.context, step.text)
        conv.messages.append(message_record(run, step.text, "success"))
        conv.active = None
        frames.append(wire.sse_frame("conversation.chat.completed", chat.to_wire()))
    else:
        chat.status, chat.failed_at = "failed", int(time.time())
        chat.last_error = {"code": wire.CODE_SERVER, "msg": f"{step.code}: {step.message}"}
        conv.messages.append(message_record(run, "", "error"))
        conv.active = None
        frames.append(wire.sse_frame("conversation.chat.failed", chat.to_wire()))
    frames.append(wire.sse_frame("done", wire.DONE_DATA))
    return frames


def _pause(chat: ChatRecord, tool_calls: list[dict[str, Any]]) -> None:
    chat.status = "requires_action"
    chat.required_action = {
        "type": "submit_tool_outputs",
        "submit_tool_outputs": {"tool_calls": tool_calls},
    }


def _answer_frames(chat: ChatRecord, text: str, size: int) -> list[bytes]:
    message_id = numeric_id()
    frames = [
        wire.sse_frame(
            "conversation.message.delta",
            chat_message(chat, "answer", text[i : i + size], message_id=message_id),
        )
        for i in range(0, len(text), size)
    ]
    message = chat_message(chat, "answer", text, message_id=message_id)
    chat.messages.append(message)
    frames.append(wire.sse_frame("conversation.message.completed", message))
    finish = chat_message(
        chat, "verbose", json.dumps({"msg_type": "generate_answer_finish", "data": ""})
    )
    chat.messages.append(finish)
    frames.append(wire.sse_frame("conversation.message.completed", finish))
    return frames


def chat_message(
    chat: ChatRecord, kind: str, content: str, *, message_id: str | None = None
) -> dict[str, Any]:
    """A Message object of the chat (its id fresh unless given: deltas share one)."""
    return {
        "id": message_id or numeric_id(),
        "conversation_id": chat.conversation_id,
        "bot_id": chat.bot_id,
        "chat_id": chat.chat_id,
        "role": "assistant",
        "type": kind,
        "content": content,
        "content_type": "text",
        "created_at": int(time.time()),
    }
