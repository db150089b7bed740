"""Serve a toolbox as an MCP server, so MCP hosts use the same tools (`toolbridge mcp-serve`).

    server = mcp_server(toolbox)               # the official SDK's low-level Server
    await serve_stdio(toolbox)                 # a desktop host starts us as a subprocess
    app = mcp_http_app(toolbox)                # streamable HTTP: an ASGI app, path /mcp

Every call goes through a `Dispatcher`, exactly as calls from a cloud agent do: arguments are
validated, sync tools run in threads, timeouts apply, and a failure becomes an `isError`
result whose text says what went wrong.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from bridge.sources.mcp import _sdk
from bridge.tools.dispatch import Dispatcher
from bridge.tools.schema import to_dialect
from bridge.types import ToolCall

if TYPE_CHECKING:
    from mcp.server import Server
    from starlette.applications import Starlette

    from bridge.tools.toolbox import Toolbox

__all__ = ["mcp_http_app", "mcp_server", "serve_stdio"]


def mcp_server(
    toolbox: Toolbox, *, dispatcher: Dispatcher | None = None, name: str = "toolbridge"
) -> Server[Any]:
    """An MCP server (the SDK's low-level `Server`) listing and running the toolbox's tools.

    Args:
        toolbox: The tools; its enabled tools are listed at each `tools/list`.
        dispatcher: Runs the calls; default: a `Dispatcher(toolbox)` with its defaults.
        name: The server name reported to clients.
    """
    _sdk()
    from importlib.metadata import version

    from mcp import types
    from mcp.server import Server

    runner = dispatcher if dispatcher is not None else Dispatcher(toolbox)

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        tools = []
        for spec in toolbox:
            described = to_dialect(spec, "mcp")
            tools.append(
                types.Tool(
                    name=described["name"],
                    description=described["description"] or None,
                    input_schema=described["inputSchema"],
                )
            )
        return types.ListToolsResult(tools=tools)

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        call = ToolCall(
            call_id=f"mcp-{uuid.uuid4().hex[:12]}",
            name=params.name,
            arguments=dict(params.arguments or {}),
        )
        [run] = await runner.arun([call])
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=run.output)],
            is_error=run.error is not None,
        )

    return Server(
        name,
        version=version("toolbridge"),
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


async def serve_stdio(toolbox: Toolbox, *, dispatcher: Dispatcher | None = None) -> None:
    """Serve over this process's stdin/stdout until the client closes stdin."""
    _sdk()
    from mcp.server.stdio import stdio_server

    server = mcp_server(toolbox, dispatcher=dispatcher)
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


def mcp_http_app(
    toolbox: Toolbox,
    *,
    dispatcher: Dispatcher | None = None,
    path: str = "/mcp",
    host: str = "127.0.0.1",
) -> Starlette:
    """A streamable HTTP MCP endpoint at `path`, as an ASGI app (serve it with uvicorn).

    `host` is where it listens: on loopback, the SDK's DNS-rebinding protection only accepts
    loopback Host headers.
    """
    _sdk()
    server = mcp_server(toolbox, dispatcher=dispatcher)
    return server.streamable_http_app(streamable_http_path=path, host=host)
