"""/healthz (alive), /readyz (serving), /metrics (Prometheus)."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from fastapi.responses import PlainTextResponse

from bridge.daemon.dependencies import ServiceDep, require_api_key
from bridge.daemon.errors import GATE_RESPONSES, ApiError
from bridge.daemon.metrics import CONTENT_TYPE
from bridge.daemon.models import ErrorBody, Health, Readiness

__all__ = ["router"]

router = APIRouter(tags=["health"], responses=GATE_RESPONSES)


# HEAD answers like GET (same status and headers; the server drops the body), for load
# balancers and monitors that probe with HEAD. Left out of the schema: HEAD is implied by GET.
@router.head("/healthz", include_in_schema=False)
@router.get("/healthz", summary="Liveness")
async def healthz() -> Health:
    """Always ok while the process serves HTTP."""
    return Health()


@router.head("/readyz", include_in_schema=False)
@router.get(
    "/readyz",
    summary="Readiness",
    responses={503: {"model": ErrorBody, "description": "shutting down"}},
)
async def readyz(service: ServiceDep) -> Readiness:
    """Ready to take messages (503 from the start of a shutdown, while runs drain)."""
    if service.draining:
        raise ApiError(503, "shutting_down", "the daemon is shutting down")
    return Readiness(
        status="ready",
        tools=len(service.generation.toolbox),
        in_flight=service.in_flight,
        recovering=service.recovering,
    )


@router.get(
    "/metrics",
    summary="Prometheus metrics",
    dependencies=[Depends(require_api_key)],
    response_class=PlainTextResponse,
    responses={
        200: {"content": {CONTENT_TYPE.split(";")[0]: {"schema": {"type": "string"}}}},
        401: {"model": ErrorBody, "description": "missing or wrong API key"},
    },
)
def metrics(service: ServiceDep) -> PlainTextResponse:
    """Runs, tool calls, approvals, latencies, in-flight conversations, and `process_*`."""
    return PlainTextResponse(service.metrics.render(), media_type=CONTENT_TYPE)
