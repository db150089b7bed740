"""A tiny MCP server (stdio) for the tests: `echo` works, `fail` is an error result, `crash`
kills the whole process in the middle of the call, and `plan` takes nested models (so its
inputSchema holds $defs and $refs)."""

from __future__ import annotations

import os

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel

server = MCPServer("crashy")


class Person(BaseModel):
    name: str
    email: str | None = None


class Meeting(BaseModel):
    title: str
    people: list[Person]


@server.tool(description="Echo the text back, with the id of this server process.")
def echo(text: str) -> str:
    return f"{text} (pid {os.getpid()})"


@server.tool(description="Always fails with an error result.")
def fail(reason: str = "no reason") -> str:
    raise ToolError(f"failed on purpose: {reason}")


@server.tool(description="Exit the server process in the middle of the call.")
def crash() -> str:
    os._exit(3)


@server.tool(description="Plan a meeting.")
def plan(meeting: Meeting) -> str:
    return f"{meeting.title}: {', '.join(p.name for p in meeting.people)}"


if __name__ == "__main__":
    server.run()
