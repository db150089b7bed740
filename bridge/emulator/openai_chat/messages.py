"""Chat Completions requests read into what the planner needs: tools, the run so far.

Chat Completions keeps no state server-side: every request carries the whole conversation as
``messages``. The run a request continues is read from them: the last user message is its
query, and each assistant message after it that has ``tool_calls`` is a completed round, its
calls answered by the ``role: "tool"`` messages that follow (matched by ``tool_call_id``).

The checks are the real API's: a ``tool`` message must answer a call of the assistant message
before it, and an assistant message with ``tool_calls`` must be followed by a tool message for
each of its ids (``The following tool_call_ids did not have response messages: call_…``).

A request without ``tools`` whose system prompt describes tools in the text tool format (what
toolbridge's ``tool_protocol="text"`` writes for models without native tool calls) is read the
same way, from text: the tools come from the prompt's ``## name`` sections, a call is a
```` ```json {"tool": ..., "arguments": ...} ```` block the emulator wrote, and the results
come back in one user message starting with ``Tool results:``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from bridge.emulator.openai_wire import (
    OpenAIRequest,
    RequestError,
    completed_call,
    strict_problem,
    text_of,
)
from bridge.emulator.planner import CompletedCall, PlannedCall

__all__ = [
    "ROLES",
    "TOOLS_HEADER",
    "ChatRequest",
    "IssuedCall",
    "RequestError",
    "RunSoFar",
    "check_messages",
    "check_tools",
    "prompt_choice",
    "prompt_tools",
    "read_run",
    "read_text_run",
    "text_of",
]

ROLES = ("system", "developer", "user", "assistant", "tool")
TOOLS_HEADER = "# Tools\n\nYou can call the tools listed below."
"""How the text tool protocol's system prompt opens its tool list."""
RESULTS_HEADER = "Tool results:"
"""How the text tool protocol's user message with the results of a round opens."""


class ChatRequest(OpenAIRequest):
    """The fields of ``POST /v1/chat/completions`` the emulator acts on (others are accepted)."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    stream: bool | None = None
    stream_options: dict[str, Any] | None = None
    n: int | None = None
    user: str | None = None

    @property
    def include_usage(self) -> bool:
        """Whether a stream ends with a usage chunk (``stream_options.include_usage``)."""
        return bool(self.stream and (self.stream_options or {}).get("include_usage"))

    @classmethod
    def parse(cls, data: Mapping[str, Any]) -> ChatRequest:
        """Validate a request body, or raise `RequestError` naming the first bad field."""
        if "input" in data and "messages" not in data:
            raise RequestError(
                400,
                "Unknown parameter: 'input'. Chat Completions takes 'messages' (a list of "
                "role/content objects); 'input' belongs to the Responses API.",
                param="input",
                code="unknown_parameter",
            )
        request = cls.validated(data)
        if not request.messages:
            raise RequestError(
                400,
                "Invalid 'messages': empty array. Expected an array with minimum length 1, but "
                "got an empty array instead.",
                param="messages",
                code="empty_array",
            )
        if request.stream_options is not None and not request.stream:
            raise RequestError(
                400,
                "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
                param="stream_options",
            )
        if request.tool_choice is not None and not request.tools:
            raise RequestError(
                400,
                "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' "
                "are specified.",
                param="tool_choice",
            )
        if request.n not in (None, 1):
            raise RequestError(
                400,
                f"Invalid value for 'n': this emulator answers with one choice (n=1), got "
                f"{request.n}.",
                param="n",
            )
        return request


@dataclass(frozen=True)
class IssuedCall:
    """A tool call the emulator made: what the planner meant by it."""

    name: str
    output_name: str
    arguments: dict[str, Any]


@dataclass
class RunSoFar:
    """The run a request continues: its query and completed tool rounds."""

    query: str
    rounds: list[list[CompletedCall]] = field(default_factory=list)
    call_ids: list[str] = field(default_factory=list)
    """Every call id answered in the run."""
    links: list[str] = field(default_factory=list)
    """What ties the run to the emulator's earlier completions (to find the emulator
    conversation it belongs to): its call ids, or the text of its replies with text calls."""
    latest: list[str] = field(default_factory=list)
    """The call ids of the last round, whose outputs this request delivers."""


def check_messages(messages: Sequence[Any]) -> None:
    """Each message's shape as the real API wants it; 400 naming the first bad field."""
    for index, message in enumerate(messages):
        where = f"messages[{index}]"
        if not isinstance(message, Mapping):
            raise RequestError(400, f"Invalid type for '{where}': expected an object.", param=where)
        role = message.get("role")
        if role is None:
            raise RequestError(
                400, f"Missing required parameter: '{where}.role'.", param=f"{where}.role"
            )
        if role not in ROLES:
            raise RequestError(
                400,
                f"Invalid value: '{role}'. Supported values are: "
                f"{', '.join(repr(r) for r in ROLES)}.",
                param=f"{where}.role",
                code="invalid_value",
            )
        content = message.get("content")
        if role == "tool" and (
            not isinstance(message.get("tool_call_id"), str) or not message["tool_call_id"]
        ):
            raise RequestError(
                400,
                f"Missing required parameter: '{where}.tool_call_id'.",
                param=f"{where}.tool_call_id",
            )
        if role == "assistant" and message.get("tool_calls"):
            _check_tool_calls(message["tool_calls"], where)
        elif "content" not in message or (content is None and role != "assistant"):
            raise RequestError(
                400, f"Missing required parameter: '{where}.content'.", param=f"{where}.content"
            )
        if content is not None and not isinstance(content, str | list):
            raise RequestError(
                400,
                f"Invalid type for '{where}.content': expected one of a string or array of "
                "objects.",
                param=f"{where}.content",
            )


def _check_tool_calls(calls: Any, where: str) -> None:
    if not isinstance(calls, list):
        raise RequestError(
            400, f"Invalid type for '{where}.tool_calls': expected an array.", param=where
        )
    for index, call in enumerate(calls):
        at = f"{where}.tool_calls[{index}]"
        function = call.get("function") if isinstance(call, Mapping) else None
        if not isinstance(call, Mapping) or not isinstance(call.get("id"), str):
            raise RequestError(400, f"Missing required parameter: '{at}.id'.", param=f"{at}.id")
        if not isinstance(function, Mapping):
            raise RequestError(
                400, f"Missing required parameter: '{at}.function'.", param=f"{at}.function"
            )
        for key in ("name", "arguments"):
            if not isinstance(function.get(key), str):
                raise RequestError(
                    400,
                    f"Missing required parameter: '{at}.function.{key}'.",
                    param=f"{at}.function.{key}",
                )


def read_run(messages: Sequence[Mapping[str, Any]], issued: Mapping[str, IssuedCall]) -> RunSoFar:
    """The run the messages continue (native tool calls); 400 when a call or a result has no
    partner, as the real API answers."""
    waiting: dict[str, int] = {}
    """Call ids of the latest assistant message with tool_calls not answered yet."""
    opened_at = -1
    outputs: dict[str, str] = {}
    for index, message in enumerate(messages):
        role = message["role"]
        if role == "tool":
            call_id = str(message["tool_call_id"])
            if call_id not in waiting:
                raise RequestError(
                    400,
                    "Invalid parameter: messages with role 'tool' must be a response to a "
                    f"preceeding message with 'tool_calls' (no call {call_id} is waiting for "
                    "its result).",
                    param=f"messages.[{index}].role",
                )
            del waiting[call_id]
            outputs[call_id] = text_of(message.get("content"))
            continue
        if waiting:
            raise _unanswered(waiting, opened_at)
        if role == "assistant" and message.get("tool_calls"):
            waiting = {str(call["id"]): n for n, call in enumerate(message["tool_calls"])}
            opened_at = index
    if waiting:
        raise _unanswered(waiting, opened_at)
    start = _query_index(messages, lambda _message: True)
    run = RunSoFar(query=text_of(messages[start].get("content")))
    for message in messages[start + 1 :]:
        if message["role"] == "assistant" and message.get("tool_calls"):
            run.rounds.append([])
            run.latest = []
            for call in message["tool_calls"]:
                call_id = str(call["id"])
                function = call["function"]
                run.rounds[-1].append(
                    _completed(
                        call_id,
                        str(function["name"]),
                        str(function["arguments"]),
                        outputs[call_id],
                        issued.get(call_id),
                    )
                )
                run.call_ids.append(call_id)
                run.links.append(call_id)
                run.latest.append(call_id)
        elif message["role"] == "assistant":
            run.latest = []
    return run


def _unanswered(waiting: Mapping[str, int], index: int) -> RequestError:
    return RequestError(
        400,
        "An assistant message with 'tool_calls' must be followed by tool messages responding "
        "to each 'tool_call_id'. The following tool_call_ids did not have response messages: "
        + ", ".join(waiting),
        param=f"messages.[{index}].role",
    )


def _query_index(messages: Sequence[Mapping[str, Any]], counts: Any) -> int:
    start = max(
        (i for i, message in enumerate(messages) if message["role"] == "user" and counts(message)),
        default=-1,
    )
    if start < 0:
        raise RequestError(
            400,
            "The messages have no user message to answer; send at least one message with role "
            "'user'.",
            param="messages",
        )
    return start


def _completed(
    call_id: str, name: str, raw_arguments: str, output: str, issued: IssuedCall | None
) -> CompletedCall:
    output_name = issued.output_name if issued is not None and issued.name == name else None
    return completed_call(call_id, name, raw_arguments, output, output_name)


def check_tools(tools: Sequence[Mapping[str, Any]]) -> list[tuple[str, str, dict[str, Any]]]:
    """(name, description, parameters) of each function tool; 400 for malformed ones.

    The Responses API's flat shape (``name`` at the top level) is refused as the real API
    refuses it (no ``function``), and a ``strict`` tool's schema must follow the strict rules.
    """
    found = []
    for index, tool in enumerate(tools):
        where = f"tools[{index}]"
        if tool.get("type") != "function":
            raise RequestError(
                400,
                f"Invalid value for '{where}.type': {tool.get('type')!r}; this emulator serves "
                "function tools only.",
                param=f"{where}.type",
            )
        function = tool.get("function")
        if not isinstance(function, Mapping):
            hint = (
                " (Chat Completions takes {type, function: {name, description, parameters}}, "
                "not the Responses API's flat shape)"
                if "name" in tool
                else ""
            )
            raise RequestError(
                400,
                f"Missing required parameter: '{where}.function'.{hint}",
                param=f"{where}.function",
            )
        name = function.get("name")
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", name):
            raise RequestError(
                400,
                f"Invalid 'tools[{index}].function.name': string does not match pattern. "
                "Expected a string that matches the pattern '^[a-zA-Z0-9_-]+$' (at most 64 "
                "characters).",
                param=f"{where}.function.name",
                code="invalid_value",
            )
        parameters = function.get("parameters")
        if parameters is None:
            parameters = {"type": "object", "properties": {}}
        if not isinstance(parameters, dict):
            raise RequestError(
                400,
                f"Invalid type for '{where}.function.parameters': expected an object.",
                param=f"{where}.function.parameters",
            )
        if function.get("strict"):
            problem = strict_problem(parameters, "")
            if problem is not None:
                raise RequestError(
                    400,
                    f"Invalid schema for function '{name}': {problem}",
                    param=f"{where}.function.parameters",
                    code="invalid_function_parameters",
                )
        description = function.get("description")
        found.append((name, description if isinstance(description, str) else "", parameters))
    return found


# --- the text tool protocol ---------------------------------------------------------------------

_SECTION = re.compile(r"^## (?P<name>[A-Za-z0-9_-]{1,64})\n(?P<body>.*?)(?=^## |\Z)", re.M | re.S)
_SCHEMA = re.compile(r"^Parameters \(JSON Schema\): (?P<schema>.*)$", re.M)
_RESULT = re.compile(
    r"^\[(?P<id>[^\]\n]+)\] (?P<name>[A-Za-z0-9_-]+) .*? (?:returned|failed):\n", re.M
)


def prompt_tools(messages: Sequence[Mapping[str, Any]]) -> list[tuple[str, str, dict[str, Any]]]:
    """The tools a text tool prompt in the system messages describes; [] when there is none."""
    prompt = "\n\n".join(
        text_of(m.get("content")) for m in messages if m["role"] in ("system", "developer")
    )
    at = prompt.find(TOOLS_HEADER)
    if at < 0:
        return []
    found = []
    for section in _SECTION.finditer(prompt[at:]):
        body = section["body"]
        schema_line = _SCHEMA.search(body)
        try:
            parameters = json.loads(schema_line["schema"]) if schema_line else {}
        except ValueError:
            parameters = {}
        if not isinstance(parameters, dict):
            parameters = {}
        lines = body[: schema_line.start()] if schema_line else body
        found.append((section["name"], lines.strip(), parameters))
    return found


_FORCE = re.compile(
    r"In your next reply, call (?:the tool (?P<name>[A-Za-z0-9_-]+)|at least one tool)\."
)


def prompt_choice(messages: Sequence[Mapping[str, Any]]) -> str | dict[str, Any] | None:
    """The ``tool_choice`` a text tool prompt asks for: ``required``, a forced function, or
    None (the model decides)."""
    prompt = "\n\n".join(
        text_of(m.get("content")) for m in messages if m["role"] in ("system", "developer")
    )
    found = _FORCE.search(prompt[prompt.find(TOOLS_HEADER) :])
    if found is None:
        return None
    if found["name"] is None:
        return "required"
    return {"type": "function", "function": {"name": found["name"]}}


def _is_results(message: Mapping[str, Any]) -> bool:
    return message["role"] == "user" and text_of(message.get("content")).startswith(RESULTS_HEADER)


def read_text_run(
    messages: Sequence[Mapping[str, Any]], issued: Mapping[str, tuple[PlannedCall, ...]]
) -> RunSoFar:
    """The run the messages continue, with tool calls written as text: each assistant reply
    the emulator wrote with calls (`issued`, keyed by the reply's text) and the
    ``Tool results:`` message after it make one round. A user message that is neither results
    nor a reply to the emulator's calls starts a new run."""
    start = _query_index(messages, lambda m: not _is_results(m) and not _correction(m))
    run = RunSoFar(query=text_of(messages[start].get("content")))
    calls: tuple[PlannedCall, ...] = ()
    for message in messages[start + 1 :]:
        if message["role"] == "assistant":
            reply = text_of(message.get("content"))
            calls = issued.get(reply, ())
            if calls:
                run.links.append(reply)
        elif _is_results(message) and calls:
            outputs = _results(text_of(message.get("content")))
            round_ = []
            for n, call in enumerate(calls):
                call_id, output = outputs[n] if n < len(outputs) else (f"text_{n}", "")
                round_.append(
                    CompletedCall(call_id, call.name, call.output_name, call.arguments, output)
                )
            run.rounds.append(round_)
            run.call_ids += [c.call_id for c in round_]
            run.latest = [c.call_id for c in round_]
            calls = ()
    return run


def _correction(message: Mapping[str, Any]) -> bool:
    return message["role"] == "user" and text_of(message.get("content")).startswith(
        "Your last reply tried to call a tool but could not be used"
    )


def _results(text: str) -> list[tuple[str, str]]:
    """(call id, output) of each result of a ``Tool results:`` message, in order."""
    heads = list(_RESULT.finditer(text))
    found = []
    for n, head in enumerate(heads):
        end = heads[n + 1].start() if n + 1 < len(heads) else len(text)
        body = text[head.end() : end]
        body = re.split(r"\n\n(?:Not run: |Call more tools the same way)", body)[0]
        found.append((head["id"], body.rstrip("\n")))
    return found
