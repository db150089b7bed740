"""Serve a toolbox as an MCP server, so MCP hosts use the same tools (`toolbridge mcp-serve`).

    server = mcp_server(toolbox)               # the official SDK's low-level Server
    await serve_stdio(toolbox)                 # a desktop host starts us as a subprocess
    app = mcp_http_app(toolbox)                # streamable HTTP: an ASGI app, path /mcp

Every call goes through a `Dispatcher`, exactly as calls from a cloud agent do: arguments are
validated, sync tools run in threads, timeouts apply, and a failure becomes an `isError`
result whose text says what went wrong.

A `confirm=True` tool runs only after the host's user approved that call through MCP
elicitation (`bridge.tools.approval` is the rule, `_mcp_confirm` carries the question); a host
that cannot ask gets a refusal the model can read, unless the server was made with `yes=True`.
Tools are listed with annotations: `destructiveHint` for confirm tools, `readOnlyHint` and
`idempotentHint` where the tool says so. A tool with a typed return (`ToolSpec.output_schema`)
is listed with an `outputSchema` and its results carry `structuredContent`.
"""

from __future__ import annotations

import json
import logging
import uuid
from typing import TYPE_CHECKING, Any

from bridge.errors import redact_data
from bridge.sources._mcp_confirm import HostApproval
from bridge.sources.mcp import _sdk
from bridge.tools.approval import needs_approval
from bridge.tools.dispatch import Dispatcher
from bridge.tools.returns import mcp_output_schema, structured_content
from bridge.tools.schema import to_dialect
from bridge.types import ToolCall

if TYPE_CHECKING:
    from collections.abc import Iterable

    from mcp import types
    from mcp.server import Server
    from starlette.applications import Starlette

    from bridge.tools.spec import ToolSpec
    from bridge.tools.toolbox import Toolbox
    from bridge.types import ToolRun

__all__ = ["mcp_http_app", "mcp_server", "serve_stdio"]

logger = logging.getLogger(__name__)


def mcp_server(
    toolbox: Toolbox,
    *,
    dispatcher: Dispatcher | None = None,
    name: str = "toolbridge",
    yes: bool = False,
    answer_timeout: float = 600.0,
) -> Server[Any]:
    """An MCP server (the SDK's low-level `Server`) listing and running the toolbox's tools.

    Args:
        toolbox: The tools; its enabled tools are listed at each `tools/list`.
        dispatcher: Runs the calls; default: a `Dispatcher(toolbox)` with its defaults.
        name: The server name reported to clients.
        yes: Run `confirm=True` tools without asking anyone (the operator decided for all).
        answer_timeout: Seconds the host's user has to answer an approval question.
    """
    _sdk()
    from importlib.metadata import version

    from mcp import types
    from mcp.server import Server

    runner = dispatcher if dispatcher is not None else Dispatcher(toolbox)
    approvals = HostApproval(answer_timeout=answer_timeout)

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        tools = []
        for spec in toolbox:
            described = to_dialect(spec, "mcp")
            tools.append(
                types.Tool(
                    name=described["name"],
                    title=spec.title,
                    description=described["description"] or None,
                    input_schema=described["inputSchema"],
                    output_schema=described.get("outputSchema"),
                    annotations=_annotations(spec),
                )
            )
        return types.ListToolsResult(tools=tools)

    async def call_tool(
        ctx: Any, params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        arguments = dict(params.arguments or {})
        call_id = f"mcp-{uuid.uuid4().hex[:12]}"
        if needs_approval(toolbox.get(params.name)) and not yes:
            asked = await approvals.ask(ctx, params.name, arguments, params)
            if isinstance(asked, types.InputRequiredResult):
                return asked  # the client asks its user and calls again with the answer
            call_id, verdict = asked
            if not verdict.run:
                call = ToolCall(call_id=call_id, name=params.name, arguments=arguments)
                logger.info("%s (call %s) not run: %s", params.name, call_id, verdict.reason)
                return _result(runner.reject(call, verdict.reason).output, is_error=True)
        call = ToolCall(call_id=call_id, name=params.name, arguments=arguments)
        [run] = await runner.arun([call])
        spec = toolbox.get(params.name)
        if run.error is None and spec is not None and spec.output_schema:
            return _structured(spec.name, spec.output_schema, run)
        return _result(run.output, is_error=run.error is not None)

    return Server(
        name,
        version=version("toolbridge"),
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


async def serve_stdio(
    toolbox: Toolbox, *, dispatcher: Dispatcher | None = None, yes: bool = False
) -> None:
    """Serve over this process's stdin/stdout until the client closes stdin.

    `yes` runs confirm tools without asking (see `mcp_server`).
    """
    _sdk()
    from mcp.server.stdio import stdio_server

    server = mcp_server(toolbox, dispatcher=dispatcher, yes=yes)
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


def mcp_http_app(
    toolbox: Toolbox,
    *,
    dispatcher: Dispatcher | None = None,
    path: str = "/mcp",
    host: str = "127.0.0.1",
    server_names: Iterable[str] = (),
    yes: bool = False,
) -> Starlette:
    """A streamable HTTP MCP endpoint at `path`, as an ASGI app (serve it with uvicorn).

    `host` is where it listens. Every request passes the daemon's Host/Origin gate
    (`bridge._hosts`) for that address, whatever its spelling: a Host other than the bound
    address, loopback names and `server_names` gets 421, a page of another origin 403 (DNS
    rebinding, cross-site requests). `yes` runs confirm tools without asking (see `mcp_server`).

    Raises:
        ValueError: a server name is not ``host`` or ``host:port``.
    """
    _sdk()
    from mcp.server.transport_security import (
        DEFAULT_MAX_REQUEST_BODY_SIZE,
        TransportSecuritySettings,
    )

    from bridge._hosts import HostGate
    from bridge.sources._http_gate import HostGateMiddleware

    gate = HostGate.for_server(host, server_names, server="MCP endpoint")
    server = mcp_server(toolbox, dispatcher=dispatcher, yes=yes)
    # The SDK's check is replaced, not doubled: it has other rules and turns itself on only
    # for three spellings of loopback.
    off = TransportSecuritySettings(enable_dns_rebinding_protection=False)
    app = server.streamable_http_app(streamable_http_path=path, host=host, transport_security=off)
    app.add_middleware(HostGateMiddleware, gate=gate, max_body_bytes=DEFAULT_MAX_REQUEST_BODY_SIZE)
    return app


def _result(text: str, *, is_error: bool) -> types.CallToolResult:
    from mcp import types

    # Registered secrets (HTTP tools' `${ENV}` credentials) never reach the client, which is
    # a model's host: one step, `redact_data`, as on the daemon's ways out.
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=redact_data(text))], is_error=is_error
    )


def _structured(name: str, schema: dict[str, Any], run: ToolRun) -> types.CallToolResult:
    """A typed tool's result: the text, and the raw value as `structuredContent`.

    The MCP spec binds a server to its `outputSchema`, and the official client refuses content
    that does not match: a tool that returned something else gets an error result saying so.
    """
    from jsonschema import Draft202012Validator
    from mcp import types

    # `value` is the raw return; a run that did not record it (set) has only its text.
    value = run.value if "value" in run.model_fields_set else _parsed(run.output)
    content = structured_content(schema, value)
    wanted = mcp_output_schema(schema)
    problem = next(iter(Draft202012Validator(wanted).iter_errors(content)), None)
    if problem is not None:
        logger.warning("%s returned a value that does not match its return type", name)
        return _result(
            f"The tool returned a value that does not match its declared return type "
            f"({problem.message}); its output was: {run.output}",
            is_error=True,
        )
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=redact_data(run.output))],
        structured_content=redact_data(content),
        is_error=False,
    )


def _parsed(output: str) -> Any:
    try:
        return json.loads(output)
    except ValueError:
        return output


def _annotations(spec: ToolSpec) -> types.ToolAnnotations | None:
    """Only what the tool is known to be: a hint left out is the protocol's cautious default."""
    from mcp import types

    hints: dict[str, Any] = {}
    if spec.title:
        hints["title"] = spec.title
    if spec.options.confirm:
        hints["destructive_hint"] = True
    elif spec.options.read_only:
        hints["read_only_hint"] = True
    if spec.options.idempotent:
        hints["idempotent_hint"] = True
    return types.ToolAnnotations(**hints) if hints else None
