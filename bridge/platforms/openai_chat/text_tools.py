"""The text tool protocol: tool calls for chat models that have none of their own.

Plain chat models behind an OpenAI-compatible server (older vLLM or llama.cpp setups, company
gateways) cannot take Chat Completions' `tools` field. With
``OpenAIChatPlatform(..., tool_protocol="text")`` the platform talks to them like this:

- no `tools` field is sent; the tools (name, description, parameters as JSON Schema, examples)
  and the exact call format are described in the system prompt of every request;
- the reply is read for calls (`bridge.platforms.openai_chat.text_parse`: fenced or bare JSON,
  Langroid's ``request`` form, ``<tool_call>`` tags, ReAct, ``name(arguments)``). Calls of
  offered tools become one `ToolCallsRequested` batch with fresh call ids, the text around
  them a `TextDelta`; a reply without calls is the answer;
- a reply that tried to call but could not be used (unknown tool, JSON beyond repair) gets a
  corrective user message and the model answers again, at most `max_corrections` times in a
  row (2 by default) before the run ends with `RunFailed(code="unreadable_tool_call")`; the
  conversation's history is then left as it was before the query, so it stays usable;
- `submit` sends all results back in one user message starting with ``Tool results:``.

Because text only becomes a call once it is complete, the reply is buffered: its text arrives
as one `TextDelta` when the completion ends, not word by word. The history stays in memory, as
for native calls (corrections included, the tools prompt excluded: it is rebuilt for each
request from the turn's tools).
"""

from __future__ import annotations

import json
import logging
import threading
import uuid
from collections.abc import Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from bridge.platforms._openai import add_usage
from bridge.platforms.openai_chat.client import ChatClient
from bridge.platforms.openai_chat.models import (
    ChatConversation,
    completion_batch,
    delivering,
    tool_fields,
)
from bridge.platforms.openai_chat.text_parse import ParsedReply, parse_reply
from bridge.types import (
    Event,
    RunFailed,
    RunFinished,
    TextDelta,
    ToolBatch,
    ToolCall,
    ToolCallsRequested,
    ToolResult,
)

__all__ = [
    "MAX_CORRECTIONS",
    "TextToolProtocol",
    "correction_message",
    "results_message",
    "tools_prompt",
]

logger = logging.getLogger(__name__)

MAX_CORRECTIONS = 2
"""Corrective messages in a row before an unusable reply ends the run."""

RESULTS_HEADER = "Tool results:"

_FORMAT = """\
# Tools

You can call the tools listed below. To call a tool, reply with a JSON object in a ```json \
block, exactly like this:

```json
{"tool": "<tool name>", "arguments": {"<parameter>": <value>}}
```

Write one block per call; several blocks in one reply are run together. Use only the tool \
names and parameters listed here; the arguments must be valid JSON matching the tool's \
parameters. After your calls, stop: the results come back in the next message, which starts \
with "Tool results:". When you need no tool, answer in plain text, without a JSON block that \
names a tool."""

_R = TypeVar("_R")


@dataclass(frozen=True)
class _TextTurn:
    """What the protocol remembers of the current turn (one query and its rounds)."""

    names: frozenset[str]
    prompt: str | None
    """The tools prompt; None when the turn describes no tools (no tools, or choice none)."""
    force: str | None = None
    """`tool_choice` ``required`` or a tool name: said once, dropped after the first results."""
    notes: tuple[str, ...] = field(default=())
    """Problems of the reply whose calls are pending, told to the model with their results."""


class TextToolProtocol:
    """Runs the turns of an `OpenAIChatPlatform` created with ``tool_protocol="text"``.

    The platform checks conversations, pending batches and results; this class builds the
    requests, reads the replies and keeps the history, through the platform's `client`;
    `lock` is the one that guards the platform's conversations (a history is committed
    under it).
    """

    def __init__(
        self,
        client: ChatClient,
        lock: threading.Lock,
        *,
        max_corrections: int = MAX_CORRECTIONS,
    ) -> None:
        self._client = client
        self._lock = lock
        self.max_corrections = max_corrections

    def start(
        self,
        state: ChatConversation,
        query: str,
        tools: Sequence[dict[str, Any]],
        tool_choice: str | None,
        *,
        end_user_id: str | None,
        stream: bool,
    ) -> Iterator[Event]:
        """Begin a turn: the user's query, with the tools described in the system prompt."""
        fields = tool_fields(tools, tool_choice)  # the same checks as native
        choice = _choice_of(fields.get("tool_choice"))
        names = frozenset(_tool_name(tool) for tool in tools)
        described = bool(tools) and choice != "none"
        turn = _TextTurn(
            names=names if described else frozenset(),
            prompt=tools_prompt(tools) if described else None,
            force=choice if choice not in (None, "auto", "none") else None,
        )
        state.turn_tools, state.turn_usage = {}, None
        messages = [*state.messages, {"role": "user", "content": query}]
        return self._converse(state, turn, messages, end_user_id=end_user_id, stream=stream)

    def submit(
        self,
        state: ChatConversation,
        batch: ToolBatch,
        results: Mapping[str, ToolResult],
        *,
        end_user_id: str | None,
        stream: bool,
    ) -> Iterator[Event]:
        """Send the results of `batch` (checked by the platform) in one user message."""
        turn = state.text_turn
        if not isinstance(turn, _TextTurn):
            turn = _TextTurn(names=frozenset(call.name for call in batch.calls), prompt=None)
        content = results_message(batch.calls, results, notes=turn.notes)
        messages = [*state.messages, {"role": "user", "content": content}]
        # A forced choice said again would force another call after every result.
        turn = replace(turn, force=None, notes=())
        events = self._converse(state, turn, messages, end_user_id=end_user_id, stream=stream)
        return delivering(state, messages, self._lock, events)

    # --- one reply, with its corrections ---------------------------------------------------------

    def _converse(
        self,
        state: ChatConversation,
        turn: _TextTurn,
        messages: list[dict[str, Any]],
        *,
        end_user_id: str | None,
        stream: bool,
    ) -> Iterator[Event]:
        client = self._client
        for attempt in range(self.max_corrections + 1):
            body = client.body(
                self._with_prompt(messages, turn), {}, end_user_id=end_user_id, stream=stream
            )
            completion, request_id = yield from _without_text(client.exchange(body, stream=stream))
            if completion.error is not None:
                code, message = completion.error
                yield RunFailed(
                    code=code, message=message, request_id=request_id, raw=completion.raw
                )
                return
            state.turn_usage = add_usage(state.turn_usage, completion.usage)
            text = "".join(completion.text)
            reply = parse_reply(text, turn.names) if turn.names else ParsedReply((), text, ())
            calls = _calls(reply, completion.calls.finish(), turn.names)
            completion_id = completion.completion_id or f"chatcmpl-{uuid.uuid4().hex}"
            assistant = {"role": "assistant", "content": text or _render_calls(calls)}
            if not calls and reply.problems:
                if attempt < self.max_corrections:
                    logger.info(
                        "the model's reply tried to call a tool but could not be used (%s); "
                        "asking again (%d of %d)",
                        "; ".join(reply.problems),
                        attempt + 1,
                        self.max_corrections,
                    )
                    fix = correction_message(reply.problems, turn.names)
                    messages = [*messages, assistant, {"role": "user", "content": fix}]
                    continue
                yield RunFailed(
                    code="unreadable_tool_call",
                    message=(
                        f"the model tried to call a tool but its reply could not be used, "
                        f"{self.max_corrections + 1} times in a row "
                        f"({self.max_corrections} corrections asked): "
                        f"{'; '.join(reply.problems)}"
                    ),
                    request_id=request_id,
                    raw=completion.raw,
                )
                return
            if completion.finish_reason not in ("stop", "tool_calls"):
                logger.warning(
                    "%s ended the answer with finish_reason=%s",
                    client.base_url,
                    completion.finish_reason,
                )
            # The history is committed before the last event is yielded: a consumer that stops
            # reading at the pause must still find the conversation in its new state.
            if calls:
                batch = completion_batch(completion_id, calls, request_id)
                with self._lock:
                    state.messages = [*messages, assistant]
                    state.pending = batch
                    state.text_turn = replace(turn, notes=reply.problems)
                if reply.text:
                    yield TextDelta(text=reply.text)
                yield ToolCallsRequested(batch=batch)
                return
            with self._lock:
                state.messages = [*messages, assistant]
                state.pending = None
                state.text_turn = turn
            if text:
                yield TextDelta(text=text)
            yield RunFinished(
                answer=text,
                usage=state.turn_usage,
                message_id=completion_id,
                request_id=request_id,
                raw=completion.raw,
            )
            return

    @staticmethod
    def _with_prompt(messages: list[dict[str, Any]], turn: _TextTurn) -> list[dict[str, Any]]:
        """The messages to send: the tools prompt joins the system prompt (or opens them)."""
        prompt = turn.prompt
        if prompt is None:
            return messages
        if turn.force == "required":
            prompt += "\n\nIn your next reply, call at least one tool."
        elif turn.force is not None:
            prompt += f"\n\nIn your next reply, call the tool {turn.force}."
        if messages and messages[0].get("role") == "system":
            first = {**messages[0], "content": f"{messages[0].get('content') or ''}\n\n{prompt}"}
            return [first, *messages[1:]]
        return [{"role": "system", "content": prompt}, *messages]


# --- prompt and messages (pure) ------------------------------------------------------------------


def tools_prompt(tools: Sequence[Mapping[str, Any]]) -> str:
    """The system prompt part that describes `tools` (OpenAI function tools) and the format."""
    parts = [_FORMAT]
    for tool in tools:
        function = tool.get("function")
        function = function if isinstance(function, Mapping) else {}
        name = str(function.get("name") or "")
        parameters = function.get("parameters")
        parameters = dict(parameters) if isinstance(parameters, Mapping) else {}
        examples = parameters.pop("examples", None) or function.get("examples") or []
        lines = [f"## {name}"]
        description = function.get("description")
        if isinstance(description, str) and description.strip():
            lines.append(description.strip())
        instructions = function.get("instructions")
        if isinstance(instructions, str) and instructions.strip():
            lines.append(instructions.strip())
        schema = json.dumps(parameters or {"type": "object", "properties": {}}, ensure_ascii=False)
        lines.append(f"Parameters (JSON Schema): {schema}")
        for example in examples if isinstance(examples, list) else []:
            if isinstance(example, Mapping):
                call = {"tool": name, "arguments": dict(example)}
                lines.append(f"Example: {json.dumps(call, ensure_ascii=False)}")
        parts.append("\n".join(lines))
    return "\n\n".join(parts)


def results_message(
    calls: Sequence[ToolCall], results: Mapping[str, ToolResult], *, notes: Sequence[str] = ()
) -> str:
    """One user message with the result of every call, in the batch's order."""
    parts = [RESULTS_HEADER]
    for call in calls:
        result = results[call.call_id]
        arguments = call.arguments
        shown = (
            json.dumps(arguments, ensure_ascii=False) if isinstance(arguments, dict) else arguments
        )
        verb = "failed" if result.is_error else "returned"
        parts.append(f"[{call.call_id}] {call.name} {_clip(shown)} {verb}:\n{result.output}")
    for note in notes:
        parts.append(f"Not run: {note}")
    parts.append("Call more tools the same way if you need to; otherwise answer the user.")
    return "\n\n".join(parts)


def correction_message(problems: Sequence[str], names: frozenset[str]) -> str:
    """The user message that asks the model to write its call again."""
    listed = ", ".join(sorted(names))
    return (
        "Your last reply tried to call a tool but could not be used: "
        f"{'; '.join(problems)}.\n\n"
        "To call a tool, reply with a ```json block holding "
        '{"tool": "<tool name>", "arguments": {...}} as valid JSON, where the tool is one of: '
        f"{listed}. To answer without a tool, reply with plain text only."
    )


# --- helpers -------------------------------------------------------------------------------------


def _without_text(events: Generator[Event, None, _R]) -> Generator[Event, None, _R]:
    """Pass a completion's events on except its text, which is only known once it is whole."""
    while True:
        try:
            event = next(events)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        if not isinstance(event, TextDelta):
            yield event


def _calls(
    reply: ParsedReply, native: tuple[ToolCall, ...], names: frozenset[str]
) -> tuple[ToolCall, ...]:
    """The batch's calls, each with a fresh id (the model wrote none)."""
    calls = [
        ToolCall(
            call_id=_call_id(),
            name=parsed.name,
            arguments=parsed.arguments,
            raw_arguments=(
                json.dumps(parsed.arguments, ensure_ascii=False)
                if isinstance(parsed.arguments, dict)
                else parsed.arguments
            ),
        )
        for parsed in reply.calls
    ]
    # A server that parses calls itself (some do, whatever the request) still gets answered
    # in text; its ids are replaced so they never clash with earlier rounds.
    calls += [call.model_copy(update={"call_id": _call_id()}) for call in native]
    if native:
        logger.debug("the server returned %d native tool call(s) in text mode", len(native))
    return tuple(calls)


def _render_calls(calls: Sequence[ToolCall]) -> str:
    """Native calls written the way the prompt asks (the history holds text only)."""
    blocks = []
    for call in calls:
        arguments: Any = call.arguments
        blocks.append(
            "```json\n"
            + json.dumps({"tool": call.name, "arguments": arguments}, ensure_ascii=False)
            + "\n```"
        )
    return "\n".join(blocks)


def _call_id() -> str:
    return f"call_{uuid.uuid4().hex[:12]}"


def _tool_name(tool: Mapping[str, Any]) -> str:
    function = tool.get("function")
    return str(function.get("name")) if isinstance(function, Mapping) else ""


def _choice_of(value: Any) -> str | None:
    """`tool_choice` as the request field holds it: a mode, or the forced tool's name."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        function = value.get("function")
        name = function.get("name") if isinstance(function, Mapping) else value.get("name")
        return str(name) if name else None
    return None


def _clip(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
