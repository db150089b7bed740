"""/v1/tools: what the agent can call, calling one directly, and reloading them from the specs."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query

from bridge.access import Permission
from bridge.daemon.dependencies import Caller, DoorDep, PrincipalDep, ServiceDep
from bridge.daemon.errors import ERROR_RESPONSES
from bridge.daemon.models import (
    CallTool,
    DirectCallPage,
    ErrorBody,
    ReloadResult,
    ToolInfo,
    ToolList,
    ToolSource,
)
from bridge.tools.spec import ToolSpec
from bridge.types import ToolRun

__all__ = ["router", "source_of"]

router = APIRouter(
    prefix="/v1/tools",
    tags=["tools"],
    responses=ERROR_RESPONSES,
)

_MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")


def source_of(spec: ToolSpec) -> ToolSource:
    """Where a tool comes from, read from its `origin` (each loader writes its own form:
    ``mcp:COMMAND:tool``, ``mcp+URL:tool``, ``openapi:DOC:tool``, ``FILE.yaml:tool``,
    ``module:function`` or ``file.py:function``)."""
    origin = spec.origin
    if origin.startswith(("mcp:", "mcp+")):
        return ToolSource(kind="mcp", location=_without_tool(origin, spec.name))
    if origin.startswith("openapi:"):
        return ToolSource(kind="openapi", location=_without_tool(origin[8:], spec.name))
    place = _without_tool(origin, spec.name)
    if place.lower().endswith(_MANIFEST_SUFFIXES):
        return ToolSource(kind="http", location=place)
    return ToolSource(kind="python", location=origin or spec.name)


def _without_tool(origin: str, name: str) -> str:
    head, sep, tail = origin.rpartition(":")
    return head if sep and tail == name else origin


def tool_info(spec: ToolSpec) -> ToolInfo:
    """The API's description of one tool."""
    return ToolInfo(
        name=spec.name,
        description=spec.description,
        parameters=spec.parameters,
        idempotent=spec.options.idempotent,
        confirm=spec.options.confirm,
        read_only=spec.options.read_only,
        timeout=spec.options.timeout,
        origin=spec.origin,
        source=source_of(spec),
        title=spec.title,
        toolkit=spec.toolkit,
        toolkit_description=spec.toolkit_description,
    )


@router.get("", summary="List the tools")
def list_tools(service: ServiceDep, principal: PrincipalDep) -> ToolList:
    """The tools of the current toolbox the caller may run (its callers-file list), with their
    JSON Schema, options and source."""
    loaded = service.tools
    return ToolList(
        tools=[tool_info(spec) for spec in loaded.visible(principal)],
        generation=loaded.number,
        loaded_at=loaded.loaded_at,
        specs=list(loaded.specs),
        last_reload_error=service.last_reload_error,
    )


@router.post(
    "/reload",
    summary="Reload the tools",
    responses={422: {"model": ErrorBody, "description": "a spec is broken; old tools kept"}},
)
async def reload_tools(service: ServiceDep) -> ReloadResult:
    """Load the tool specs again. A broken spec keeps the current toolbox and answers 422."""
    loaded = await service.reload()
    return ReloadResult(generation=loaded.number, tools=loaded.toolbox.names())


_CALL_ERRORS: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorBody, "description": "no such tool (tool_not_found)"},
    409: {
        "model": ErrorBody,
        "description": 'a confirm=True tool without "confirm": true (confirmation_required)',
    },
}


@router.get("/calls", summary="Direct tool calls")
def list_direct_calls(
    service: ServiceDep,
    principal: PrincipalDep,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    offset: Annotated[int, Query(ge=0, le=1_000_000_000)] = 0,
) -> DirectCallPage:
    """The tool calls made with `POST /v1/tools/{name}/call`, newest first: who called
    (`called_by`), the tool and its arguments (secrets masked), who approved a confirm=True
    tool's call (`approved_by`, the caller), when, and the outcome (`state` "started" means
    the tool may have acted but its outcome was never written). A caller without `read_all`
    sees its own calls only."""
    if principal.can(Permission.READ_ALL):
        items, total = service.journal.direct_calls(limit=limit, offset=offset)
    else:
        # The journal has no index by caller: a caller's own are read from the newest ones.
        every, _ = service.journal.direct_calls(limit=10_000, offset=0)
        own = [item for item in every if item.called_by == principal.name]
        items, total = own[offset : offset + limit], len(own)
    return DirectCallPage(items=items, total=total)


@router.post("/{name}/call", summary="Call a tool", responses=_CALL_ERRORS)
async def call_tool(
    service: ServiceDep,
    name: Annotated[str, Path(pattern=r"^[A-Za-z0-9_-]{1,64}$", description="The tool.")],
    body: CallTool,
    caller: Caller,
    principal: PrincipalDep,
    door: DoorDep,
) -> ToolRun:
    """Run one tool now, with these arguments, outside any conversation. Arguments are
    validated as for the agent: a bad one gives a `bad_arguments` output, not an HTTP error;
    a string that is not text (a lone surrogate) is refused with 422 before anything runs. A
    confirm=True tool needs `"confirm": true`, the caller's own decision. The call is
    journaled (GET /v1/tools/calls): who called, what, when, the outcome, and for a confirm
    tool that the caller approved it. Registered secrets in the output are masked.

    Only the caller's own tools (another is "no such tool", 404), within its `tool_calls`
    rate (429); a policy may refuse the call (403 `policy_refused`) or want a person's
    approval, which a direct call cannot wait for (409 `approval_required`)."""
    door.limit(principal, "tool_calls")
    return await service.call_tool(
        name, body.arguments, confirm=body.confirm, caller=caller, principal=principal
    )
