"""/v1/tools: what the agent can call, and reloading it from the specs."""

from __future__ import annotations

from fastapi import APIRouter, Depends

from bridge.daemon.dependencies import ServiceDep, require_api_key
from bridge.daemon.errors import ERROR_RESPONSES
from bridge.daemon.models import ErrorBody, ReloadResult, ToolInfo, ToolList

__all__ = ["router"]

router = APIRouter(
    prefix="/v1/tools",
    tags=["tools"],
    dependencies=[Depends(require_api_key)],
    responses=ERROR_RESPONSES,
)


@router.get("", summary="List the tools")
def list_tools(service: ServiceDep) -> ToolList:
    """Every tool of the current toolbox, with its JSON Schema and options."""
    generation = service.generation
    tools = [
        ToolInfo(
            name=spec.name,
            description=spec.description,
            parameters=spec.parameters,
            idempotent=spec.options.idempotent,
            confirm=spec.options.confirm,
            timeout=spec.options.timeout,
            origin=spec.origin,
        )
        for spec in generation.toolbox
    ]
    return ToolList(
        tools=tools,
        generation=generation.number,
        loaded_at=generation.loaded_at,
        specs=list(generation.specs),
        last_reload_error=service.last_reload_error,
    )


@router.post(
    "/reload",
    summary="Reload the tools",
    responses={422: {"model": ErrorBody, "description": "a spec is broken; old tools kept"}},
)
async def reload_tools(service: ServiceDep) -> ReloadResult:
    """Load the tool specs again. A broken spec keeps the current toolbox and answers 422."""
    generation = await service.reload()
    return ReloadResult(generation=generation.number, tools=generation.toolbox.names())
