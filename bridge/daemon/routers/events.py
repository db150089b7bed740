"""/v1/events (every conversation's events, live, as SSE) and /v1/info (what this daemon is)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated, Any
from urllib.parse import urlsplit

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import StreamingResponse

from bridge._version import __version__
from bridge.access import Permission, Principal
from bridge.daemon.dependencies import PrincipalDep, ServiceDep
from bridge.daemon.door import requires_credentials
from bridge.daemon.errors import ERROR_RESPONSES, ApiError
from bridge.daemon.hub import SseEvent
from bridge.daemon.models import DaemonInfo
from bridge.daemon.service import Service
from bridge.platforms.base import DescribesItself, PlatformDescription
from bridge.platforms.registry import PLATFORMS

__all__ = ["EMULATOR_APP_ID", "KEEPALIVE_SECONDS", "platform_info", "router"]

KEEPALIVE_SECONDS = 15.0
EMULATOR_APP_ID = "emulator-app"
"""The app id `bridge.emulator.Emulator` serves unless told otherwise."""

router = APIRouter(
    prefix="/v1",
    tags=["events"],
    responses=ERROR_RESPONSES,
)


@router.get(
    "/events",
    summary="Follow the daemon",
    responses={200: {"content": {"text/event-stream": {"schema": {"type": "string"}}}}},
)
async def follow_daemon(
    request: Request,
    service: ServiceDep,
    last_event_id: Annotated[
        str | None,
        Header(description="Resume after this event id (sent again by a reconnecting client)."),
    ] = None,
    after: Annotated[
        int | None,
        Query(ge=0, description="The same as the Last-Event-ID header, for clients without it."),
    ] = None,
    *,
    principal: PrincipalDep,
) -> StreamingResponse:
    """Every conversation's events as Server-Sent Events, for as long as the client listens.

    First `hello` (`last_id`: the newest event's id; nothing after it is missed), then:
    `conversation_created`; `run_started` (conversation, query, who sent it), the run's own
    events (`tool_calls`, `tool_call_started`, `tool_call_finished`, `text_delta`, `finished`,
    `failed`, `human_input`, `approval_requested`, `approval_decided`) with their
    `conversation_id` and `message_id`, and `run_ended` (status, answer or error);
    `tools_reloaded`, `tools_reload_failed`; `closing` when the daemon stops. Each has an `id`:
    reconnect with `Last-Event-ID` to get what was missed (text deltas are only sent live). A
    `reset` event means that what was missed is no longer kept: reload what you show. A comment
    line comes every 15 seconds of quiet.

    Replicas sharing a PostgreSQL journal send each other these events (not `closing` nor the
    tool reloads, which are each replica's own): another replica's come with its `replica` id,
    long texts and outputs possibly cut (the journal has them whole), and a `reset` follows
    anything this replica may have missed from the others.

    A caller without `read_all` gets the events of its own conversations only (and the
    approvals' with `approve`), and of the tools only those it may run.
    """
    resume = after
    if last_event_id is not None and last_event_id.strip():
        try:
            resume = int(last_event_id.strip())
        except ValueError:
            raise ApiError(
                422,
                "bad_last_event_id",
                f"Last-Event-ID must be an event id (a whole number), got {last_event_id[:40]!r}",
            ) from None
        if resume < 0:
            raise ApiError(422, "bad_last_event_id", "Last-Event-ID must be 0 or more")
    del request
    follow = service.hub.follow(resume, KEEPALIVE_SECONDS)  # following from now on
    everything = principal.can(Permission.READ_ALL)

    async def events() -> AsyncIterator[bytes]:
        yield b"retry: 2000\n\n"
        async for event in follow:
            if event is None:
                yield b": keepalive\n\n"
            elif everything:
                yield event.encode()
            else:
                shown = await _shown(service, principal, event)
                if shown is not None:
                    yield shown.encode()

    return StreamingResponse(
        events(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


@router.get("/info", summary="About this daemon")
def info(request: Request, service: ServiceDep) -> DaemonInfo:
    """The platform and app this daemon talks to (never its token), its tools and its state."""
    platform = platform_info(service)
    return DaemonInfo(
        version=__version__,
        tools=len(service.tools.toolbox),
        generation=service.tools.number,
        started_at=service.started_at,
        draining=service.draining,
        in_flight=service.in_flight,
        approvals_pending=service.approvals.pending(),
        auth=requires_credentials(request.app.state.door),
        **platform,
    )


async def _shown(service: Service, principal: Principal, event: SseEvent) -> SseEvent | None:
    """What a caller without ``read_all`` sees of a hub event (None: nothing)."""
    data = event.data
    if event.name.startswith("approval_") and principal.can(Permission.APPROVE):
        return event
    if event.name == "tools_reloaded":
        names = set(data.get("tools") or ())
        visible = [s.name for s in service.tools.visible(principal) if s.name in names]
        return SseEvent(event.id, event.name, {**data, "tools": visible})
    conversation_id = data.get("conversation_id")
    if not isinstance(conversation_id, str):
        return event  # hello, reset, closing, a failed reload: about the daemon, not a conversation
    _, owner = await service.owner_of(conversation_id)  # the journal's word, whatever the relay cut
    return event if owner is not None and owner == principal.name else None


def platform_info(service: Service) -> dict[str, Any]:
    """Name, URL, app id or model of the platform, and whether it is the emulator."""
    platform = service.platform
    described = (
        platform.describe() if isinstance(platform, DescribesItself) else PlatformDescription()
    )
    base_url = _text(described.base_url)
    # The agent's id: AppBuilder's app, Coze's bot; Responses and Chat Completions name a model.
    app_id = _text(described.app_id)
    model = _text(described.model)
    name = str(platform.name)
    # Every emulator protocol serves the agent id `EMULATOR_APP_ID` unless told otherwise
    # (Responses as its one model), so the id tells an emulated platform from a real one.
    return {
        "platform": name,
        "base_url": _without_credentials(base_url),
        "app_id": app_id,
        "model": model,
        "is_emulator": _emulated(name) and EMULATOR_APP_ID in (app_id, model),
    }


def _emulated(name: str) -> bool:
    """Whether the platform `name` has an emulator protocol (a registered one only)."""
    entry = PLATFORMS.get(name)
    return entry is not None and entry.emulator_protocol is not None


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _without_credentials(url: str | None) -> str | None:
    """A URL without a ``user:password@`` part (a gateway URL may carry one)."""
    if not url:
        return None
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = host + (f":{parts.port}" if parts.port else "")
    return parts._replace(netloc=netloc).geturl()
