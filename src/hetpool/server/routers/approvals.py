"""Approval requests: list, read, approve, reject. Thin: services/approvals.py decides."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Depends, Query

from hetpool.server.deps import get_ctx, get_principal
from hetpool.server.schemas.approvals import ApprovalResponse, ApproveRequest, RejectRequest
from hetpool.server.schemas.common import ERROR_RESPONSES
from hetpool.server.services import approvals as approval_service
from hetpool.server.services import duties
from hetpool.server.services.auth import Principal
from hetpool.server.services.context import ServiceContext

router = APIRouter(prefix="/api/v1", tags=["approvals"], responses=ERROR_RESPONSES)


@router.get(
    "/approvals",
    response_model=list[ApprovalResponse],
    summary="Approval requests the caller may see (approvers: their subtrees; submitters: their own), newest first",
)
def list_approvals(
    state: Literal["pending", "approved", "rejected", "expired", "withdrawn"] | None = Query(default=None),
    tenant: str | None = Query(default=None, max_length=200),
    limit: int = Query(default=200, ge=1, le=1000),
    ctx: ServiceContext = Depends(get_ctx),
    user: Principal = Depends(get_principal),
) -> list[dict]:
    with ctx.db.transaction() as session:
        rows = approval_service.list_requests(session, user, state=state, tenant=tenant, limit=limit)
        return [approval_service.approval_dict(r) for r in rows]


@router.get("/approvals/{approval_id}", response_model=ApprovalResponse, summary="One approval request")
def get_approval(approval_id: str, ctx: ServiceContext = Depends(get_ctx), user: Principal = Depends(get_principal)) -> dict:
    with ctx.db.transaction() as session:
        return approval_service.approval_dict(approval_service.get_row(session, approval_id, user))


def _decide(ctx: ServiceContext, approval_id: str, user: Principal, *, approve: bool, comment: str) -> dict:
    try:
        with ctx.db.transaction() as session:
            return approval_service.approval_dict(approval_service.decide(ctx, session, approval_id, user, approve=approve, comment=comment))
    except duties.SeparationOfDutiesError as refused:
        with ctx.db.transaction() as session:  # the decision's transaction rolled back; the attempt stays on record
            duties.audit_refusal(ctx, session, user, refused)
        raise


@router.post(
    "/approvals/{approval_id}/approve",
    response_model=ApprovalResponse,
    summary="Approve: the task enters the queue, or the held change or delete takes effect (403 separation_of_duties: not a second person)",
)
def approve(
    approval_id: str, body: ApproveRequest | None = None, ctx: ServiceContext = Depends(get_ctx), user: Principal = Depends(get_principal)
) -> dict:
    return _decide(ctx, approval_id, user, approve=True, comment=body.comment if body else "")


@router.post(
    "/approvals/{approval_id}/reject",
    response_model=ApprovalResponse,
    summary="Reject with a comment: the task is cancelled, the held change or delete dropped",
)
def reject(approval_id: str, body: RejectRequest, ctx: ServiceContext = Depends(get_ctx), user: Principal = Depends(get_principal)) -> dict:
    return _decide(ctx, approval_id, user, approve=False, comment=body.comment)
