"""/v1/approvals: the confirm=True calls waiting for a person, and their decisions."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Query

from bridge.access import AuditEvent, ForbiddenError
from bridge.daemon.dependencies import Caller, ServiceDep
from bridge.daemon.errors import ERROR_RESPONSES
from bridge.daemon.models import (
    APPROVAL_ID_PATTERN,
    CONVERSATION_ID_PATTERN,
    ApprovalPage,
    DecideApproval,
    ErrorBody,
)
from bridge.journal.records import ApprovalRecord

__all__ = ["router"]

router = APIRouter(
    prefix="/v1/approvals",
    tags=["approvals"],
    responses=ERROR_RESPONSES,
)

ApprovalId = Annotated[str, Path(pattern=APPROVAL_ID_PATTERN, description="The approval's id.")]
_NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorBody, "description": "unknown approval (approval_not_found)"}
}


@router.get("", summary="List approvals")
def list_approvals(
    service: ServiceDep,
    status: Annotated[
        Literal["pending", "approved", "rejected", "expired", "all"],
        Query(description="Which ones: pending (the default), a decision, or all."),
    ] = "pending",
    conversation_id: Annotated[
        str | None,
        Query(pattern=CONVERSATION_ID_PATTERN, description="Only this conversation's."),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
    offset: Annotated[int, Query(ge=0, le=1_000_000_000)] = 0,
) -> ApprovalPage:
    """Approval requests, newest first: by default the pending ones, which wait for a person."""
    items, total = service.journal.list_approvals(
        status=None if status == "all" else status,
        conversation_id=conversation_id,
        limit=limit,
        offset=offset,
    )
    return ApprovalPage(items=items, total=total)


@router.get("/{approval_id}", summary="One approval", responses=_NOT_FOUND)
def get_approval(service: ServiceDep, approval_id: ApprovalId) -> ApprovalRecord:
    """One approval request: the call, its arguments, who asked, and the decision if any."""
    return service.approvals.get(approval_id)


@router.post(
    "/{approval_id}",
    summary="Approve or reject",
    responses={
        **_NOT_FOUND,
        409: {
            "model": ErrorBody,
            "description": "decided already, or expired (approval_decided)",
        },
    },
)
def decide_approval(
    service: ServiceDep,
    approval_id: ApprovalId,
    body: DecideApproval,
    caller: Caller,
) -> ApprovalRecord:
    """Decide a pending approval, once. Approve: the call runs and the run goes on. Reject:
    the model reads the rejection with your note. The decision is journaled with the name of
    the caller it came from ("anonymous" without credentials). With `--four-eyes` the caller
    whose message asked for the call cannot decide it (403): another approver must."""
    if service.settings.four_eyes:
        asked = service.approvals.get(approval_id)
        if asked.requested_by is not None and asked.requested_by == caller:
            raise ForbiddenError(
                f"four eyes: the caller {caller!r} sent the message that asked for this call, "
                "so another approver must decide it"
            )
    record = service.approvals.decide(approval_id, body.decision, note=body.note, decided_by=caller)
    service.record(
        AuditEvent(
            kind="approval",
            outcome=record.status,
            caller=caller,
            conversation_id=record.conversation_id,
            call_id=record.call_id,
            tool=record.tool,
            detail={"approval_id": record.approval_id, "note": record.note},
        )
    )
    return record
