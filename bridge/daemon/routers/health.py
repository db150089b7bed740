"""/healthz (alive), /readyz (serving), /metrics (Prometheus)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import PlainTextResponse

from bridge.daemon.dependencies import ServiceDep
from bridge.daemon.errors import GATE_RESPONSES, ApiError
from bridge.daemon.metrics import CONTENT_TYPE
from bridge.daemon.models import ErrorBody, Health, Readiness
from bridge.daemon.readiness import PlatformWatch

__all__ = ["router"]

router = APIRouter(tags=["health"], responses=GATE_RESPONSES)


# HEAD answers like GET (same status and headers; the server drops the body), for load
# balancers and monitors that probe with HEAD. Left out of the schema: HEAD is implied by GET.
@router.head("/healthz", include_in_schema=False)
@router.get("/healthz", summary="Liveness")
async def healthz(service: ServiceDep) -> Health:
    """Always ok while the process serves HTTP; says which replica answered."""
    return Health(replica=service.replica_id)


@router.head("/readyz", include_in_schema=False)
@router.get(
    "/readyz",
    summary="Readiness",
    responses={
        503: {
            "model": ErrorBody,
            "description": "not ready (no tools, platform unreachable) or shutting down",
        }
    },
)
async def readyz(request: Request, service: ServiceDep) -> Readiness:
    """Ready to take messages: tools loaded and the platform reachable (503 with the reasons
    otherwise, and from the start of a shutdown, while runs drain).

    The platform's reachability is the cached outcome of its last check, renewed in the
    background at most every 5 minutes (15 s while it fails): probes never cost a platform
    call each (`bridge.daemon.readiness`).
    """
    if service.draining:
        raise ApiError(503, "shutting_down", "the daemon is shutting down")
    reasons = []
    if len(service.tools.toolbox) == 0:
        reasons.append(
            "no tools are loaded: start with --tools SPEC (or TOOLBRIDGE_TOOLS), or fix the "
            "specs and POST /v1/tools/reload"
        )
    reachable = await _watch(request, service).current()
    if reachable is None:
        reasons.append("the agent platform has not answered its first check yet")
    elif not reachable.ok:
        reasons.append(f"the agent platform is unreachable: {reachable.reason}")
    if reasons:
        raise ApiError(503, "not_ready", "; ".join(reasons))
    return Readiness(
        status="ready",
        tools=len(service.tools.toolbox),
        in_flight=service.in_flight,
        recovering=service.recovering,
    )


def _watch(request: Request, service: ServiceDep) -> PlatformWatch:
    """The app's platform watch, made on the first probe (no probe, no platform check)."""
    watch = getattr(request.app.state, "platform_watch", None)
    if not isinstance(watch, PlatformWatch) or watch.platform is not service.platform:
        watch = PlatformWatch(service.platform)
        request.app.state.platform_watch = watch
    return watch


@router.get(
    "/metrics",
    summary="Prometheus metrics",
    response_class=PlainTextResponse,
    responses={
        200: {"content": {CONTENT_TYPE.split(";")[0]: {"schema": {"type": "string"}}}},
        401: {"model": ErrorBody, "description": "missing or wrong API key"},
    },
)
def metrics(service: ServiceDep) -> PlainTextResponse:
    """Runs, tool calls, approvals, latencies, in-flight conversations, and `process_*`."""
    return PlainTextResponse(service.metrics.render(), media_type=CONTENT_TYPE)
