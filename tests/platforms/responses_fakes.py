"""A scripted Responses server for the adapter's quirk tests, and builders of its answers.

`ResponsesServer` is `openai_fakes.ScriptedServer` answering ``POST /v1/responses`` (and
``GET /v1/models``); `response`, `call_item`, `message_item` and `events` build what real
servers send, so each test changes only the part it is about.
"""

from __future__ import annotations

import json
from typing import Any

from openai_fakes import Reply, ScriptedServer
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

__all__ = [
    "Reply",
    "ResponsesServer",
    "call_item",
    "events",
    "frame",
    "message_item",
    "response",
    "stream_reply",
]


class ResponsesServer(ScriptedServer):
    """Replays scripted replies on POST /v1/responses; lists model "m" on GET /v1/models
    (unless `models` is False: a server without that endpoint)."""

    def __init__(self, *, models: bool = True) -> None:
        super().__init__()
        self.app.router.routes.append(Route("/v1/responses", self._handle, methods=["POST"]))
        if models:
            self.app.router.routes.append(Route("/v1/models", self._models, methods=["GET"]))

    async def _models(self, request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": "m", "object": "model"}]})


def call_item(
    n: int, name: str = "get_weather", arguments: str = '{"city": "Paris"}'
) -> dict[str, Any]:
    """A completed function_call output item: id ``fc_N``, call_id ``call_N``."""
    return {
        "type": "function_call",
        "id": f"fc_{n}",
        "call_id": f"call_{n}",
        "name": name,
        "arguments": arguments,
        "status": "completed",
    }


def message_item(text: str, n: int = 1) -> dict[str, Any]:
    """A completed assistant message output item."""
    return {
        "type": "message",
        "id": f"msg_{n}",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def response(
    *output: dict[str, Any], id: str = "resp_1", status: str = "completed", **extra: Any
) -> dict[str, Any]:
    """A Response object."""
    body: dict[str, Any] = {
        "id": id,
        "object": "response",
        "status": status,
        "model": "m",
        "output": list(output),
        "usage": {"input_tokens": 5, "output_tokens": 3, "total_tokens": 8},
    }
    body.update(extra)
    return body


def events(final: dict[str, Any], *, pieces: int = 3) -> list[dict[str, Any]]:
    """The stream of `final`, as OpenAI sends it, numbered from 0."""
    start = {**final, "status": "in_progress", "output": []}
    out: list[dict[str, Any]] = [
        {"type": "response.created", "response": start},
        {"type": "response.in_progress", "response": start},
    ]
    for index, item in enumerate(final["output"]):
        where = {"output_index": index, "item_id": item.get("id")}
        if item["type"] == "function_call":
            out.append(
                {
                    "type": "response.output_item.added",
                    "output_index": index,
                    "item": {**item, "arguments": "", "status": "in_progress"},
                }
            )
            text = item["arguments"]
            size = max(1, -(-len(text) // pieces))
            for start_at in range(0, len(text), size):
                out.append(
                    {
                        "type": "response.function_call_arguments.delta",
                        **where,
                        "delta": text[start_at : start_at + size],
                    }
                )
            out.append(
                {"type": "response.function_call_arguments.done", **where, "arguments": text}
            )
        elif item["type"] == "message":
            out.append(
                {
                    "type": "response.output_item.added",
                    "output_index": index,
                    "item": {**item, "content": [], "status": "in_progress"},
                }
            )
            text = item["content"][0]["text"]
            for word in text.split(" "):
                out.append(
                    {
                        "type": "response.output_text.delta",
                        **where,
                        "content_index": 0,
                        "delta": word + " " if word != text.split(" ")[-1] else word,
                    }
                )
        else:
            out.append({"type": "response.output_item.added", "output_index": index, "item": item})
        out.append({"type": "response.output_item.done", "output_index": index, "item": item})
    kind = {"completed": "response.completed", "failed": "response.failed"}.get(
        final["status"], "response.incomplete"
    )
    out.append({"type": kind, "response": final})
    return [{**event, "sequence_number": n} for n, event in enumerate(out)]


def frame(event: dict[str, Any]) -> str:
    """An ``event:`` + ``data:`` SSE message."""
    return f"event: {event['type']}\ndata: {json.dumps(event)}\n\n"


def stream_reply(stream: list[Any], **kwargs: Any) -> Reply:
    """A streamed reply: dict events framed as OpenAI frames them, other items as `Reply`."""
    return Reply(stream=[frame(e) if isinstance(e, dict) else e for e in stream], **kwargs)
