"""Tool sources that are not Python functions: declarative HTTP tools, OpenAPI, MCP servers.

Each source builds ready `ToolSpec`s and holds what its tools share (an HTTP session, an MCP
server process); `Toolbox.add_source(source)` registers the tools and `Toolbox.close()`
releases the source. `open_source` turns a command line SPEC into a source:

    manifests/intranet.yaml                declarative HTTP tools (.yaml, .yml, .json)
    openapi:PATH_OR_URL [--include X]...   an OpenAPI 3.x document [--server-url URL]
    mcp:COMMAND ARGS...                    an MCP server over stdio (split like a shell)
    mcp+http://HOST:PORT/PATH              an MCP server over streamable HTTP
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable
from typing import TYPE_CHECKING

from bridge.errors import UsageError
from bridge.sources._document import DocumentError
from bridge.sources._outbound import (
    ALLOW_HOSTS_ENV,
    HostAllowlist,
    HostNotAllowedError,
    HttpToolError,
    Outbound,
    env_allow_hosts,
    host_of,
)
from bridge.sources.http_tools import HttpToolSource, load_http_manifest
from bridge.sources.openapi import open_openapi, openapi_manifest, read_openapi

if TYPE_CHECKING:
    from bridge.tools.toolbox import ToolSource

__all__ = [
    "ALLOW_HOSTS_ENV",
    "DocumentError",
    "HostAllowlist",
    "HostNotAllowedError",
    "HttpToolError",
    "HttpToolSource",
    "Outbound",
    "env_allow_hosts",
    "host_of",
    "is_source_spec",
    "load_http_manifest",
    "open_openapi",
    "open_source",
    "openapi_manifest",
    "read_openapi",
]

_MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")
_MCP_HTTP = ("mcp+http://", "mcp+https://")


def is_source_spec(spec: str) -> bool:
    """True for the SPECs a source serves (manifest files, ``openapi:``, ``mcp:``...)."""
    return spec.startswith(("openapi:", "mcp:", *_MCP_HTTP)) or spec.lower().endswith(
        _MANIFEST_SUFFIXES
    )


def open_source(spec: str, *, allow_hosts: Iterable[str] = ()) -> ToolSource:
    """The tool source a SPEC names (MCP servers are started here).

    Args:
        spec: A manifest path, ``openapi:...``, ``mcp:COMMAND ARGS...`` or ``mcp+http://...``.
        allow_hosts: Extra hosts HTTP and OpenAPI tools may reach.

    Raises:
        UsageError: An invalid manifest or document, a server that cannot be started, or a
            SPEC of no source kind.
    """
    if spec.startswith("openapi:"):
        return open_openapi(spec[len("openapi:") :], allow_hosts=allow_hosts)
    if spec.startswith("mcp:"):
        from bridge.sources.mcp import McpSource

        try:
            command = shlex.split(spec[len("mcp:") :])
        except ValueError as exc:
            raise UsageError(
                f"cannot split the SPEC {spec!r} like a command line ({exc})"
            ) from None
        if not command:
            raise UsageError(
                'mcp: needs a command, e.g. --tools "mcp:uvx mcp-server-time" (one argument)'
            )
        return McpSource.stdio(command)
    if spec.startswith(_MCP_HTTP):
        from bridge.sources.mcp import McpSource

        return McpSource.http(spec[len("mcp+") :])
    if spec.lower().endswith(_MANIFEST_SUFFIXES):
        return HttpToolSource.from_file(spec, allow_hosts=allow_hosts)
    raise UsageError(
        f"{spec!r} is not a tool source SPEC: expected a .yaml/.yml/.json manifest, "
        "openapi:PATH_OR_URL, mcp:COMMAND or mcp+http://HOST:PORT/PATH"
    )
