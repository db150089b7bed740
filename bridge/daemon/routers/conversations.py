"""/v1/conversations: open, list, inspect, send messages (JSON or Server-Sent Events)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Body, Path, Query, Request
from fastapi.responses import Response, StreamingResponse

from bridge.access import ANONYMOUS, Permission, Principal
from bridge.daemon.dependencies import (
    Caller,
    GraceDep,
    PrincipalDep,
    RequestId,
    ServiceDep,
)
from bridge.daemon.errors import ERROR_RESPONSES, ApiError, error_response
from bridge.daemon.models import (
    CONVERSATION_ID_PATTERN,
    ConversationCreated,
    ConversationDetail,
    ConversationPage,
    ConversationSummary,
    CreateConversation,
    ErrorBody,
    MessageResult,
    SendMessage,
    title_of,
)
from bridge.daemon.outbound import MaskedJSONResponse, PublicJSONResponse, json_data
from bridge.daemon.relay import relay_of
from bridge.daemon.runs import RunHandle
from bridge.daemon.service import Service, may_read
from bridge.daemon.shutdown import SHUTTING_DOWN, GraceClock
from bridge.platforms.base import limits_of

__all__ = ["answer_message", "open_conversation", "router"]


def _owner(principal: Principal) -> str | None:
    """The owner a conversation opened by `principal` gets (nobody for the anonymous caller
    of a daemon without credentials)."""
    return None if principal.via == "anonymous" else principal.name


KEEPALIVE_SECONDS = 15.0

router = APIRouter(
    prefix="/v1/conversations",
    tags=["conversations"],
    responses=ERROR_RESPONSES,
)

ConversationId = Annotated[
    str, Path(pattern=CONVERSATION_ID_PATTERN, description="The conversation's id.")
]
_SSE: dict[str, Any] = {"text/event-stream": {"schema": {"type": "string"}}}
_NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorBody, "description": "unknown conversation"}
}


_LIMIT_ERROR: dict[str, Any] = {
    "model": ErrorBody,
    "description": "invalid, or beyond what the platform accepts (`platform_limit`)",
}


def _check_limits(service: Service, **inputs: str | None) -> None:
    """422 for an input the platform is known to refuse, before anything is sent to it."""
    violations = limits_of(service.platform).check(**inputs)
    if violations:
        first = violations[0]
        raise ApiError(
            422,
            "platform_limit",
            f"{first.field} has {first.actual} characters; the {service.platform.name} "
            f"platform accepts {first.limit}",
            details={"field": first.field, "limit": first.limit, "actual": first.actual},
        )


def _sse(handle: RunHandle, grace: GraceClock) -> StreamingResponse:
    async def events() -> AsyncIterator[bytes]:
        async for event in grace.follow(handle, KEEPALIVE_SECONDS):
            yield b": keepalive\n\n" if event is None else event.encode()

    return StreamingResponse(
        events(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


@router.post(
    "",
    status_code=201,
    response_model=ConversationCreated,
    summary="Open a conversation",
    responses={
        422: _LIMIT_ERROR,
        502: {"model": ErrorBody, "description": "the platform refused"},
        503: {"model": ErrorBody, "description": "shutting down"},
    },
)
async def create_conversation(
    service: ServiceDep,
    principal: PrincipalDep,
    body: Annotated[CreateConversation | None, Body()] = None,
) -> Response:
    """Open a conversation with the agent; send messages to it next. It is the caller's: only
    it sends to it, and only it (and callers with `read_all`) see it.

    An `end_user_id` the platform would refuse (AppBuilder: 6 to 64 characters) gets 422.
    """
    return await open_conversation(service, body, principal)


async def open_conversation(
    service: Service, body: CreateConversation | None, principal: Principal = ANONYMOUS
) -> Response:
    """What `create_conversation` answers (also `bridge.daemon.fastpath`'s); the body is
    serialised once, here, not validated again against the response model."""
    end_user_id = body.end_user_id if body else None
    _check_limits(service, end_user_id=end_user_id)
    record = await service.create_conversation(end_user_id, _owner(principal))
    created = ConversationCreated(
        conversation_id=record.conversation_id,
        end_user_id=record.end_user_id,
        created_at=record.created_at,
    )
    return PublicJSONResponse(created.model_dump(mode="json"), status_code=201)


@router.get("", summary="List conversations")
def list_conversations(
    service: ServiceDep,
    principal: PrincipalDep,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    offset: Annotated[int, Query(ge=0, le=1_000_000_000)] = 0,
) -> ConversationPage:
    """Conversations, most recently updated first, one page at a time: the caller's own, or
    every one for a caller with `read_all`."""
    records, total = service.journal.list_conversations(
        limit=limit,
        offset=offset,
        created_by=None if principal.can(Permission.READ_ALL) else principal.name,
    )
    items = [
        ConversationSummary(
            **record.model_dump(), title=title_of(service.journal.messages(record.conversation_id))
        )
        for record in records
    ]
    return ConversationPage(items=items, total=total, limit=limit, offset=offset)


@router.get("/{conversation_id}", summary="One conversation", responses=_NOT_FOUND)
def get_conversation(
    request: Request, service: ServiceDep, principal: PrincipalDep, conversation_id: ConversationId
) -> ConversationDetail:
    """A conversation with every message and tool call the journal holds (another caller's is
    404 without `read_all`)."""
    record = service.journal.get_conversation(conversation_id)
    if record is None or not may_read(principal, record.created_by):
        raise ApiError(404, "conversation_not_found", f"no conversation {conversation_id!r}")
    messages = service.journal.messages(conversation_id)
    relay = relay_of(request)
    return ConversationDetail(
        conversation=record,
        title=title_of(messages),
        busy=service.active(conversation_id) is not None
        or (relay is not None and relay.busy(conversation_id)),
        messages=messages,
        tool_calls=service.journal.calls(conversation_id),
        platform_conversations=service.journal.platform_conversations(conversation_id),
    )


@router.post(
    "/{conversation_id}/messages",
    summary="Send a message",
    response_model=MessageResult,
    responses={
        200: {"content": _SSE, "description": "The result, or with stream=true an SSE stream."},
        **_NOT_FOUND,
        409: {"model": ErrorBody, "description": "a run is in progress in this conversation"},
        422: _LIMIT_ERROR,
        502: {"model": ErrorBody, "description": "the agent run or the platform failed"},
        503: {
            "model": ErrorBody,
            "description": "overloaded, or shutting down (`shutting_down`: the message is kept "
            "and resumed by the next start)",
        },
        504: {"model": ErrorBody, "description": "the platform timed out"},
    },
)
async def send_message(
    request: Request,
    service: ServiceDep,
    grace: GraceDep,
    conversation_id: ConversationId,
    body: SendMessage,
    request_id: RequestId,
    caller: Caller,
    principal: PrincipalDep,
) -> Any:
    """Ask the agent; the tools it calls run here. One message at a time per conversation.

    With `stream: true` the answer is a Server-Sent Events stream: `tool_calls`,
    `tool_call_started`, `tool_call_finished`, `approval_requested` / `approval_decided` (a
    `confirm=True` call waiting for a person, see /v1/approvals), `text_delta`, `finished` /
    `failed` / `human_input`, and always a last `done` event with the result or the error.

    A query longer than the platform accepts (AppBuilder: 2,000 characters) gets 422. If the
    daemon is stopped and its grace period ends before the answer, the reply is 503
    `shutting_down` (or, streamed, `failed` then `done`): the message stays in the journal and
    the next start resumes it.
    """
    return await answer_message(
        request, service, grace, conversation_id, body, request_id, caller, principal
    )


async def answer_message(
    request: Request,
    service: Service,
    grace: GraceClock,
    conversation_id: str,
    body: SendMessage,
    request_id: str,
    caller: str | None,
    principal: Principal = ANONYMOUS,
) -> Response:
    """What `send_message` answers (also `bridge.daemon.fastpath`'s): only the
    conversation's owner sends to it (404 for a conversation the caller may not read), within
    its `messages` rate (429)."""
    _check_limits(service, query=body.query)
    request.app.state.door.limit(principal, "messages")
    handle = await service.start_message(
        conversation_id,
        body.query,
        body.tool_choice,
        request_id,
        sent_by=caller,
        principal=principal,
    )
    if body.stream:
        return _sse(handle, grace)
    outcome = await grace.wait_for(handle)
    if outcome is None:
        return error_response(request, 503, SHUTTING_DOWN, grace.message(conversation_id))
    if outcome.failure is not None:
        failure = outcome.failure
        return error_response(
            request,
            failure.status,
            failure.code,
            failure.message,
            platform_request_id=failure.platform_request_id,
        )
    assert outcome.result is not None
    if handle.result_data is not None:  # dumped and masked once, for the `done` event
        return MaskedJSONResponse(handle.result_data)
    return PublicJSONResponse(json_data(outcome.result))


@router.get(
    "/{conversation_id}/events",
    summary="Follow the run in progress",
    responses={200: {"content": _SSE, "description": "SSE stream"}, **_NOT_FOUND},
)
async def follow_conversation(
    request: Request,
    service: ServiceDep,
    grace: GraceDep,
    principal: PrincipalDep,
    conversation_id: ConversationId,
) -> Any:
    """The events of the conversation's run in progress (from its start), as SSE.

    With several replicas on one PostgreSQL journal, a run that another replica is doing is
    followed too: its events from when this replica heard of it (each with that `replica`),
    and a last `done` whose result is read from the journal. Without a run in progress the
    stream holds a single `idle` event. Another caller's conversation is 404 without
    `read_all`.
    """
    if not principal.can(Permission.READ_ALL):
        record = await asyncio.to_thread(service.journal.get_conversation, conversation_id)
        if record is None or not may_read(principal, record.created_by):
            raise ApiError(404, "conversation_not_found", f"no conversation {conversation_id!r}")
    handle = service.active(conversation_id)
    if handle is not None:
        return _sse(handle, grace)
    relay = relay_of(request)
    if relay is not None:
        remote = await relay.remote_run(conversation_id)
        if remote is not None:
            return _sse(remote, grace)
    if service.journal.get_conversation(conversation_id) is None:
        raise ApiError(404, "conversation_not_found", f"no conversation {conversation_id!r}")
    return StreamingResponse(
        iter([b'event: idle\ndata: {"busy":false}\n\n']), media_type="text/event-stream"
    )
