"""A plain `requests` client for the emulator tests, and the manifests they send.

The tests exercise the server, so they speak raw HTTP: bodies are built like the official SDK
builds them (all 13 run keys, unset ones null), and SSE is parsed strictly (every message must
be exactly one ``data: {json}`` line and a blank line).
"""

from __future__ import annotations

import json
from typing import Any

import requests

__all__ = [
    "CLOTHES",
    "SEARCH",
    "TIME",
    "TOKEN",
    "WEATHER",
    "WEATHER_ZH",
    "Api",
    "body_events",
    "interrupt_calls",
    "parse_sse",
    "statuses",
    "tool",
]

TOKEN = "emulator-token"
TIMEOUT = 30


def tool(
    name: str, description: str, properties: dict[str, Any], required: list[str]
) -> dict[str, Any]:
    """A function tool with a JSON Schema."""
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": properties, "required": required},
        },
    }


WEATHER = tool(
    "get_weather",
    "Get the current weather for a city",
    {
        "city": {"type": "string", "description": "City name"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
    },
    ["city"],
)
TIME = tool(
    "get_time",
    "Current local time in a time zone",
    {"timezone": {"type": "string", "description": "IANA zone such as Asia/Tokyo"}},
    ["timezone"],
)
SEARCH = tool(
    "search_docs",
    "Search the documentation",
    {"query": {"type": "string"}, "top_k": {"type": "integer", "default": 5}},
    ["query"],
)
CLOTHES = tool(
    "suggest_clothes",
    "Suggest clothes for a temperature",
    {"temperature": {"type": "integer", "description": "degrees celsius"}},
    ["temperature"],
)
WEATHER_ZH = tool(
    "get_weather",
    "查询指定城市的实时天气",
    {
        "city": {"type": "string", "description": "城市名"},
        "unit": {"type": "string", "enum": ["摄氏度", "华氏度"]},
    },
    ["city"],
)


def parse_sse(text: str) -> list[dict[str, Any]]:
    """Payloads of a stream, asserting the platform's exact framing."""
    assert text.endswith("\n\n"), f"stream does not end with a blank line: {text[-80:]!r}"
    payloads = []
    for block in text[:-2].split("\n\n"):
        assert block.startswith("data: "), f"not a data line: {block[:80]!r}"
        assert "\n" not in block, f"a message must be one line: {block[:80]!r}"
        payloads.append(json.loads(block[len("data: ") :]))
    return payloads


def body_events(chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every event of a list of chunks, in order."""
    return [event for chunk in chunks for event in chunk["content"]]


def statuses(chunks: list[dict[str, Any]]) -> list[str]:
    """`content_type/event_status` of every event."""
    return [f"{e['content_type']}/{e['event_status']}" for e in body_events(chunks)]


class Api:
    """Raw HTTP calls to one emulator."""

    def __init__(self, base_url: str, token: str = TOKEN, app_id: str = "emulator-app") -> None:
        self.base_url = base_url
        self.app_id = app_id
        self.session = requests.Session()
        self.headers = {"Authorization": f"Bearer {token}"}

    def post(
        self, path: str, *, headers: dict[str, str] | None = None, **kwargs: Any
    ) -> requests.Response:
        """POST to ``/v2/app/conversation{path}`` with the token."""
        merged = {**self.headers, **(headers or {})}
        return self.session.post(
            f"{self.base_url}/v2/app/conversation{path}", headers=merged, timeout=TIMEOUT, **kwargs
        )

    def create(self) -> str:
        """A new conversation id."""
        response = self.post("", json={"app_id": self.app_id})
        assert response.status_code == 200, response.text
        return str(response.json()["conversation_id"])

    def run_body(self, conversation_id: str, query: str = "", **fields: Any) -> dict[str, Any]:
        """The 13-key run body, unset keys null, as the official SDK sends it."""
        body: dict[str, Any] = {
            "query": query,
            "stream": False,
            "conversation_id": conversation_id,
            "file_ids": [],
            "app_id": self.app_id,
            "tools": [],
            "tool_outputs": None,
            "tool_choice": None,
            "end_user_id": None,
            "action": None,
            "mcp_authorization": None,
            "parameters": None,
            "custom_metadata": None,
        }
        body.update(fields)
        return body

    def run(
        self,
        conversation_id: str,
        query: str = "",
        *,
        headers: dict[str, str] | None = None,
        **fields: Any,
    ) -> requests.Response:
        """POST a run and return the raw response."""
        return self.post(
            "/runs", json=self.run_body(conversation_id, query, **fields), headers=headers
        )

    def chunks(
        self,
        conversation_id: str,
        query: str = "",
        *,
        stream: bool,
        headers: dict[str, str] | None = None,
        **fields: Any,
    ) -> list[dict[str, Any]]:
        """Run and return the chunks (one body for non-stream), asserting HTTP 200."""
        response = self.run(conversation_id, query, stream=stream, headers=headers, **fields)
        assert response.status_code == 200, response.text
        assert response.headers["X-Appbuilder-Request-Id"]
        if stream:
            assert response.headers["content-type"].startswith("text/event-stream")
            return parse_sse(response.content.decode("utf-8"))
        assert response.headers["content-type"].startswith("application/json")
        return [response.json()]

    def submit(
        self,
        conversation_id: str,
        outputs: dict[str, str],
        *,
        stream: bool = False,
        headers: dict[str, str] | None = None,
    ) -> list[dict[str, Any]]:
        """Submit tool outputs (`{call_id: output}`) as the SDK does; return the chunks."""
        tool_outputs = [{"tool_call_id": k, "output": v} for k, v in outputs.items()]
        return self.chunks(
            conversation_id, "", stream=stream, headers=headers, tool_outputs=tool_outputs
        )


def interrupt_calls(chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The `tool_calls` of the (last) interrupt event."""
    events = [e for e in body_events(chunks) if e["event_status"] == "interrupt"]
    assert events, f"no interrupt in {statuses(chunks)}"
    calls: list[dict[str, Any]] = events[-1]["tool_calls"]
    return calls
