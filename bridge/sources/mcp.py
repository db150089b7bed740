"""MCP servers as a tool source: their tools are registered and each call is forwarded.

    source = McpSource.stdio(["uvx", "mcp-server-time"])      # or --tools "mcp:uvx mcp-server-time"
    source = McpSource.http("http://127.0.0.1:8000/mcp")        # or --tools mcp+http://...
    toolbox.add_source(source)                                  # toolbox.close() stops the server

The official `mcp` SDK (2.x, extra ``toolbridge[mcp]``) talks to the server from a private event
loop thread, where one task holds the connection open for the source's lifetime (the SDK's
context managers must be entered and left by the same task). The server is started once; if it
dies, the call in flight gets a clear error output and the next call starts it again. Each
tool's `inputSchema` is made canonical (references inlined, every object with `properties`,
every array with `items`), so every dialect, AppBuilder's included, can describe it; an
`isError` result becomes a `tool_error` output.

Each call carries the trace it belongs to: the SDK writes the current OpenTelemetry context
into the request's ``_meta`` (``traceparent``, ``tracestate``), and the call runs on the
private loop under the context of the caller (the tool's execute_tool span), which
`asyncio.run_coroutine_threadsafe` hands over with the coroutine. A server started again
within a call is started in that call's trace (its initialization is part of the call's time).
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import json
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bridge.errors import UsageError, redact
from bridge.sources._arguments import SchemaArguments
from bridge.sources._schema import canonical_schema
from bridge.tools.runtime import LoopThread
from bridge.tools.spec import ToolError, ToolOptions, ToolSpec

if TYPE_CHECKING:
    from mcp import Client, StdioServerParameters
    from mcp.types import CallToolResult, Tool

__all__ = ["McpSource", "McpToolError"]

logger = logging.getLogger(__name__)

CONNECT_TIMEOUT = 60.0
"""Seconds to start (or reach) a server and list its tools."""
_NAME = re.compile(r"[^A-Za-z0-9_-]+")


class McpToolError(ToolError):
    """An MCP tool call failed; the message is what the model reads."""

    def __init__(self, message: str) -> None:
        super().__init__(redact(message))


def _sdk() -> Any:
    try:
        import mcp
    except ImportError:
        raise UsageError(
            "MCP support needs the official SDK: pip install 'toolbridge[mcp]'"
        ) from None
    return mcp


@dataclass
class _Connection:
    client: Client
    task: asyncio.Task[None]
    stop: asyncio.Event


class McpSource:
    """The tools of one MCP server, started (stdio) or reached (HTTP) once.

    Args:
        server: Stdio parameters (a command) or a streamable HTTP URL.
        label: How messages name the server.
        connect_timeout: Seconds to connect and list the tools.
        prefix: Prepended to every tool name as ``<prefix>_<name>`` (to avoid clashes).

    Raises:
        UsageError: The SDK is missing, or the server cannot be started or listed.
    """

    def __init__(
        self,
        server: StdioServerParameters | str,
        *,
        label: str,
        connect_timeout: float = CONNECT_TIMEOUT,
        prefix: str | None = None,
    ) -> None:
        _sdk()
        self.label = label
        self._server = server
        self._connect_timeout = connect_timeout
        self._thread: LoopThread | None = LoopThread(name="toolbridge-mcp")
        self._connection: _Connection | None = None
        self._lock: asyncio.Lock | None = None
        atexit.register(self.close)
        try:
            tools = self._wait(self._list_tools(), connect_timeout + 5)
            self._specs = self._build(tools, prefix)
        except BaseException:
            self.close()
            raise

    @classmethod
    def stdio(
        cls, command: Sequence[str], *, env: Mapping[str, str] | None = None, **options: Any
    ) -> McpSource:
        """A server started as ``command`` (its stdin/stdout carry the protocol).

        The server gets the SDK's minimal environment (PATH, HOME, USER...) plus `env`; on the
        command line, prefix the command with ``env NAME=value``.
        """
        if not command:
            raise UsageError("an MCP stdio server needs a command")
        mcp = _sdk()
        params = mcp.StdioServerParameters(
            command=command[0], args=list(command[1:]), env=dict(env) if env else None
        )
        return cls(params, label=f"mcp:{' '.join(command)}", **options)

    @classmethod
    def http(cls, url: str, **options: Any) -> McpSource:
        """A server reached over streamable HTTP at `url` (``http://host:port/mcp``)."""
        if not url.startswith(("http://", "https://")):
            raise UsageError(f"an MCP HTTP server URL must start with http:// or https://: {url!r}")
        return cls(url, label=f"mcp+{url}", **options)

    def __repr__(self) -> str:
        return f"McpSource({self.label!r}, tools={[s.name for s in self._specs]!r})"

    def specs(self) -> list[ToolSpec]:
        """One spec per tool the server listed."""
        return list(self._specs)

    def close(self) -> None:
        """Stop the server (stdio) or end the session (HTTP); safe to call more than once."""
        atexit.unregister(self.close)
        thread, self._thread = self._thread, None
        if thread is None:
            return
        try:
            future = asyncio.run_coroutine_threadsafe(self._disconnect(), thread.loop)
            future.result(timeout=15)
        except Exception as exc:  # a server that will not stop must not block the bridge
            logger.warning("stopping %s failed: %s", self.label, _reason(exc))
        finally:
            thread.close()

    # --- the connection ------------------------------------------------------------------------

    def _wait(self, coro: Any, timeout: float) -> Any:
        thread = self._thread
        if thread is None:
            coro.close()
            raise McpToolError(f"the MCP source {self.label} is closed")
        future = asyncio.run_coroutine_threadsafe(coro, thread.loop)
        try:
            return future.result(timeout=timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise UsageError(
                f"the MCP server {self.label} did not answer within {timeout:g} seconds"
            ) from None

    async def _client(self) -> Client:
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            live = self._connection
            if live is not None and not live.task.done():
                return live.client
            self._connection = None
            mcp = _sdk()
            loop = asyncio.get_running_loop()
            ready: asyncio.Future[Client] = loop.create_future()
            stop = asyncio.Event()
            task = loop.create_task(self._hold(mcp.Client(self._server), ready, stop))
            try:
                client = await asyncio.wait_for(asyncio.shield(ready), self._connect_timeout)
            except BaseException:
                stop.set()
                task.cancel()
                raise
            self._connection = _Connection(client, task, stop)
            return client

    async def _hold(
        self, client: Client, ready: asyncio.Future[Client], stop: asyncio.Event
    ) -> None:
        """Keep the connection open until `stop`; the same task enters and leaves it."""
        try:
            async with client:
                ready.set_result(client)
                await stop.wait()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception) else RuntimeError(str(exc)))
            elif not isinstance(exc, asyncio.CancelledError):
                logger.info("the connection to %s ended: %s", self.label, _reason(exc))
            if isinstance(exc, asyncio.CancelledError):
                raise

    async def _disconnect(self) -> None:
        live, self._connection = self._connection, None
        if live is None:
            return
        live.stop.set()
        try:
            await asyncio.wait_for(asyncio.shield(live.task), 10)
        except Exception:
            live.task.cancel()
            await asyncio.wait({live.task}, timeout=5)

    async def _list_tools(self) -> list[Tool]:
        try:
            client = await self._client()
            tools: list[Tool] = []
            cursor: str | None = None
            for _ in range(100):
                page = await client.list_tools(cursor=cursor)
                tools.extend(page.tools)
                cursor = page.next_cursor
                if not cursor:
                    break
            return tools
        except Exception as exc:
            raise UsageError(
                f"cannot start or list the MCP server {self.label}: {_reason(exc)}"
            ) from None

    # --- the tools ---------------------------------------------------------------------------

    def _build(self, tools: list[Tool], prefix: str | None) -> list[ToolSpec]:
        specs: list[ToolSpec] = []
        used: set[str] = set()
        for tool in tools:
            base = _NAME.sub("_", f"{prefix}_{tool.name}" if prefix else tool.name).strip("_")
            name = base[:64] or "tool"
            number = 2
            while name in used:
                name = f"{base[: 64 - len(str(number)) - 1]}_{number}"
                number += 1
            if name != tool.name:
                logger.info("%s: the tool %r is registered as %r", self.label, tool.name, name)
            used.add(name)
            notes: list[str] = []
            parameters = canonical_schema(dict(tool.input_schema or {}), notes=notes)
            if parameters.get("type") != "object":
                parameters = {"type": "object", "properties": {}}
            for note in notes:
                logger.info("%s: tool %r: %s", self.label, tool.name, note)
            extra = parameters.get("additionalProperties")
            specs.append(
                ToolSpec(
                    name=name,
                    description=tool.description or tool.title or tool.name,
                    parameters=parameters,
                    function=self._forwarder(tool.name),
                    validate=SchemaArguments(
                        parameters, allow_unknown=extra is True or isinstance(extra, dict)
                    ),
                    is_async=True,
                    options=ToolOptions(),
                    origin=f"{self.label}:{tool.name}",
                    title=tool.title,
                )
            )
        return specs

    def _forwarder(self, remote: str) -> Any:
        async def forward(**arguments: Any) -> str:
            thread = self._thread
            if thread is None:
                raise McpToolError(f"the MCP source {self.label} is closed")
            # The call's task starts in this context (the tool span's): the SDK puts its
            # traceparent in the request's _meta.
            future = asyncio.run_coroutine_threadsafe(self._call(remote, arguments), thread.loop)
            return await asyncio.wrap_future(future)

        forward.__name__ = remote
        return forward

    async def _call(self, remote: str, arguments: dict[str, Any]) -> str:
        try:
            client = await self._client()
        except Exception as exc:
            raise McpToolError(
                f"the MCP server {self.label} cannot be started again: {_reason(exc)}"
            ) from None
        try:
            result = await client.call_tool(remote, arguments)
        except Exception as exc:
            if _closed(exc) or (self._connection is not None and self._connection.task.done()):
                await self._disconnect()
                raise McpToolError(
                    f"the MCP server {self.label} closed the connection during the call to "
                    f"{remote!r} (it exited or crashed), so its outcome is unknown; the server "
                    "is started again on the next call"
                ) from None
            raise McpToolError(
                f"the MCP server {self.label} refused the call: {_reason(exc)}"
            ) from None
        text = _text(result)
        if result.is_error:
            raise McpToolError(text or f"the tool {remote!r} failed without a message")
        return text


def _text(result: CallToolResult) -> str:
    """The result as text: text blocks as they are, other blocks described."""
    parts: list[str] = []
    for block in result.content:
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(str(getattr(block, "text", "")))
        elif kind in ("image", "audio"):
            mime = getattr(block, "mime_type", "?")
            size = len(str(getattr(block, "data", ""))) * 3 // 4
            parts.append(f"[{kind} {mime}, about {size} bytes, not shown]")
        elif kind == "resource":
            resource = getattr(block, "resource", None)
            text = getattr(resource, "text", None)
            parts.append(
                str(text) if text is not None else f"[resource {getattr(resource, 'uri', '?')}]"
            )
        elif kind == "resource_link":
            parts.append(f"[resource link {getattr(block, 'uri', '?')}]")
    if not parts and result.structured_content is not None:
        return json.dumps(result.structured_content, ensure_ascii=False)
    return "\n".join(parts)


def _closed(exc: BaseException) -> bool:
    code = getattr(getattr(exc, "error", None), "code", getattr(exc, "code", None))
    if code == -32000:  # CONNECTION_CLOSED
        return True
    try:
        import anyio
    except ImportError:  # pragma: no cover - anyio comes with the SDK
        return False
    return isinstance(exc, (anyio.ClosedResourceError, anyio.BrokenResourceError, EOFError))


def _reason(exc: BaseException) -> str:
    # An exception group (anyio task groups raise them) is told by its first leaf.
    while isinstance(inner := getattr(exc, "exceptions", None), tuple) and inner:
        exc = inner[0]
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
