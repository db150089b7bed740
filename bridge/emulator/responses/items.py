"""Responses requests read into what the planner needs: tools, the transcript, the run so far.

A request's context is the chain of stored responses named by ``previous_response_id`` (their
input and output items) followed by the request's own ``input``. From that transcript the
emulator takes the run: the last user message is its query, and the function calls after it,
each with its ``function_call_output``, are its completed rounds. So one code path serves a
client that chains with ``previous_response_id`` and one that resends every item (``store:
false``), as the real service sees both.

The checks are the real API's: every ``function_call`` needs a ``function_call_output`` with
its ``call_id`` (``No tool output found for function call call_…``), an output needs a call,
an output item carrying an ``id`` next to ``previous_response_id`` is refused the same way,
and resent reasoning items must carry their ``encrypted_content`` when nothing is stored.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from bridge.emulator.openai_wire import (
    OpenAIRequest,
    RequestError,
    completed_call,
    strict_problem,
    text_of,
)
from bridge.emulator.planner import CompletedCall

__all__ = [
    "IssuedCall",
    "ResponsesRequest",
    "RunSoFar",
    "check_chained_outputs",
    "check_reasoning",
    "check_tools",
    "decrypt_reasoning",
    "encrypt_reasoning",
    "normalise_input",
    "read_run",
]

_ITEM_TYPES = ("message", "function_call", "function_call_output", "reasoning")


class ResponsesRequest(OpenAIRequest):
    """The fields of ``POST /v1/responses`` the emulator acts on (others are accepted)."""

    input: str | list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    stream: bool | None = None
    store: bool | None = None
    previous_response_id: str | None = None
    instructions: str | None = None
    include: list[str] | None = None

    @property
    def stored(self) -> bool:
        """Whether the response is stored (``store`` defaults to true)."""
        return self.store is not False

    @classmethod
    def parse(cls, data: Mapping[str, Any]) -> ResponsesRequest:
        """Validate a request body, or raise `RequestError` naming the first bad field."""
        if "messages" in data and "input" not in data:
            raise RequestError(
                400,
                "Unknown parameter: 'messages'. The Responses API takes 'input' (a string or a "
                "list of items); 'messages' belongs to Chat Completions.",
                param="messages",
                code="unknown_parameter",
            )
        if data.get("background"):
            raise RequestError(
                400,
                "This emulator does not run background responses; send 'background': false "
                "(or leave it out) and read the stream or the body.",
                param="background",
            )
        if data.get("conversation") is not None:
            raise RequestError(
                400,
                "This emulator does not serve the Conversations API; chain responses with "
                "'previous_response_id', or resend the items with 'store': false.",
                param="conversation",
            )
        return cls.validated(data)


@dataclass(frozen=True)
class IssuedCall:
    """A function call the emulator made: what the planner meant by it, and its reasoning."""

    name: str
    output_name: str
    arguments: dict[str, Any]
    item_id: str
    reasoning_id: str | None


@dataclass
class RunSoFar:
    """The run a request continues: its query and completed tool rounds."""

    query: str
    rounds: list[list[CompletedCall]] = field(default_factory=list)
    call_ids: list[str] = field(default_factory=list)
    """Every call id answered in this request's transcript (for the accepted-outputs count)."""


def normalise_input(raw: str | list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The request's input as items (a bare string is one user message); bad items refused."""
    if isinstance(raw, str):
        return [{"type": "message", "role": "user", "content": raw}]
    items = []
    for index, item in enumerate(raw):
        kind = item.get("type", "message" if "role" in item else None)
        if kind not in _ITEM_TYPES:
            raise RequestError(
                400,
                f"Invalid value for 'input[{index}].type': {kind!r}; this emulator accepts "
                f"{', '.join(_ITEM_TYPES)} items.",
                param=f"input[{index}].type",
            )
        if kind == "function_call_output":
            if not isinstance(item.get("call_id"), str) or not item["call_id"]:
                raise RequestError(
                    400,
                    f"Missing required parameter: 'input[{index}].call_id'.",
                    param=f"input[{index}].call_id",
                )
            if "output" not in item:
                raise RequestError(
                    400,
                    f"Missing required parameter: 'input[{index}].output'.",
                    param=f"input[{index}].output",
                )
        if kind == "function_call":
            for key in ("call_id", "name", "arguments"):
                if not isinstance(item.get(key), str):
                    raise RequestError(
                        400,
                        f"Missing required parameter: 'input[{index}].{key}'.",
                        param=f"input[{index}].{key}",
                    )
        items.append({**item, "type": kind})
    return items


def check_chained_outputs(items: Sequence[Mapping[str, Any]]) -> None:
    """With ``previous_response_id``, an output item may not carry an ``id`` (real servers
    then fail to pair it with its call and answer as if the output were missing)."""
    for item in items:
        if item.get("type") == "function_call_output" and item.get("id"):
            raise RequestError(
                400,
                f"No tool output found for function call {item['call_id']}.",
                param="input",
            )


def read_run(transcript: Sequence[Mapping[str, Any]], issued: Mapping[str, IssuedCall]) -> RunSoFar:
    """The run that the transcript continues; 400 when a call or an output has no partner."""
    calls: dict[str, Mapping[str, Any]] = {}
    outputs: dict[str, str] = {}
    for item in transcript:
        if item["type"] == "function_call":
            calls[str(item["call_id"])] = item
        elif item["type"] == "function_call_output":
            call_id = str(item["call_id"])
            if call_id not in calls:
                raise RequestError(
                    400,
                    f"No tool call found for function call output with call_id {call_id}.",
                    param="input",
                )
            outputs[call_id] = _output_text(item.get("output"))
    for call_id in calls:
        if call_id not in outputs:
            raise RequestError(
                400, f"No tool output found for function call {call_id}.", param="input"
            )
    start = max(
        (
            i
            for i, item in enumerate(transcript)
            if item["type"] == "message" and item.get("role", "user") == "user"
        ),
        default=-1,
    )
    if start < 0:
        raise RequestError(
            400,
            "The input has no user message to answer; send a string or a message item with "
            "role 'user'.",
            param="input",
        )
    run = RunSoFar(query=text_of(transcript[start].get("content")))
    previous = ""
    for item in transcript[start + 1 :]:
        if item["type"] == "function_call":
            if previous != "function_call":
                run.rounds.append([])
            call_id = str(item["call_id"])
            run.rounds[-1].append(_completed(item, outputs[call_id], issued.get(call_id)))
            run.call_ids.append(call_id)
        if item["type"] != "reasoning":
            previous = str(item["type"])
    return run


def _completed(item: Mapping[str, Any], output: str, issued: IssuedCall | None) -> CompletedCall:
    name = str(item["name"])
    output_name = issued.output_name if issued is not None and issued.name == name else None
    return completed_call(str(item["call_id"]), name, item["arguments"], output, output_name)


def _output_text(output: Any) -> str:
    if isinstance(output, str):
        return output
    return text_of(output) if isinstance(output, list) else json.dumps(output)


def check_reasoning(
    given: Sequence[Mapping[str, Any]],
    transcript: Sequence[Mapping[str, Any]],
    issued: Mapping[str, IssuedCall],
    stored_reasoning: Iterable[str],
    *,
    store: bool,
) -> None:
    """Reasoning items in the request's own input (`given`) as the real API wants them.

    A function call resent with its ``fc_`` id needs the reasoning item that preceded it in
    the `transcript`; a resent reasoning item that is not stored server-side (or any, when the
    request has ``store: false``) needs its ``encrypted_content``.
    """
    present = {str(i.get("id")) for i in transcript if i["type"] == "reasoning"}
    known = set(stored_reasoning)
    for item in given:
        if item["type"] == "reasoning":
            rid = str(item.get("id", ""))
            encrypted = item.get("encrypted_content")
            if encrypted:
                if decrypt_reasoning(str(encrypted)) is None:
                    raise RequestError(
                        400,
                        f"The encrypted content for item {rid} could not be verified.",
                        param="input",
                        code="invalid_encrypted_content",
                    )
            elif rid not in known or not store:
                raise RequestError(
                    400,
                    f"Item with id '{rid}' not found. Items are not persisted when `store` is "
                    "set to false. Try again with `store` set to true, or remove this item "
                    "from your input.",
                    param="input",
                )
        elif item["type"] == "function_call" and item.get("id"):
            call = issued.get(str(item["call_id"]))
            if call is not None and call.reasoning_id and call.reasoning_id not in present:
                raise RequestError(
                    400,
                    f"Item '{item['id']}' of type 'function_call' was provided without its "
                    f"required 'reasoning' item: '{call.reasoning_id}'.",
                    param="input",
                )


def encrypt_reasoning(reasoning_id: str, summary: str) -> str:
    """The emulator's opaque `encrypted_content` (base64 JSON; only this emulator reads it)."""
    raw = json.dumps({"id": reasoning_id, "summary": summary}, ensure_ascii=False)
    return "emu:" + base64.b64encode(raw.encode()).decode()


def decrypt_reasoning(blob: str) -> dict[str, Any] | None:
    """What `encrypt_reasoning` wrapped, or None for content it did not make."""
    if not blob.startswith("emu:"):
        return None
    try:
        data = json.loads(base64.b64decode(blob[4:], validate=True))
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def check_tools(tools: Sequence[Mapping[str, Any]]) -> list[tuple[str, str, dict[str, Any]]]:
    """(name, description, parameters) of each function tool; 400 for malformed ones.

    Chat Completions' nested shape is refused as the real API refuses it (no top-level
    ``name``), and a ``strict`` tool's schema must follow the strict rules.
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
        name = tool.get("name")
        if not isinstance(name, str) or not name:
            hint = (
                " (Responses takes {type, name, description, parameters} at the top level, "
                "not Chat Completions' nested 'function')"
                if "function" in tool
                else ""
            )
            raise RequestError(
                400, f"Missing required parameter: '{where}.name'.{hint}", param=f"{where}.name"
            )
        parameters = tool.get("parameters")
        if parameters is None:
            parameters = {"type": "object", "properties": {}}
        if not isinstance(parameters, dict):
            raise RequestError(
                400, f"Invalid type for '{where}.parameters': expected an object.", param=where
            )
        if tool.get("strict"):
            problem = strict_problem(parameters, "")
            if problem is not None:
                raise RequestError(
                    400,
                    f"Invalid schema for function '{name}': {problem}",
                    param=f"{where}.parameters",
                    code="invalid_function_parameters",
                )
        found.append((name, str(tool.get("description") or ""), parameters))
    return found
