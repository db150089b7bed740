"""A tiny MCP server (stdio) for the tracing tests: `seen` answers with the `_meta` of the
request that called it and the trace context current in the server while it ran (what the
SDK extracted from that `_meta`), as JSON."""

from __future__ import annotations

import json
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from opentelemetry import trace

server = MCPServer("meta")


@server.tool(description="Say what trace context the call came with.")
def seen(ctx: Context[Any, Any]) -> str:
    meta = ctx.request_context.meta
    if meta is not None and not isinstance(meta, dict):
        meta = meta.model_dump(mode="json", by_alias=True, exclude_none=True)
    current = trace.get_current_span().get_span_context()
    return json.dumps(
        {
            "meta": meta,
            "trace_id": f"{current.trace_id:032x}" if current.is_valid else None,
            "span_id": f"{current.span_id:016x}" if current.is_valid else None,
        }
    )


if __name__ == "__main__":
    server.run()
