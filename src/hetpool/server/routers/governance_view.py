"""Read-only governance views for the dashboard: the approval inbox with, per request, what
it asks for, what it would cost and whether the caller may decide it. Thin:
services/governance_view.py builds it on services/approvals.py's own visibility rules."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Depends, Query

from hetpool.server.deps import get_ctx, get_principal
from hetpool.server.schemas.approvals import ApprovalInbox
from hetpool.server.schemas.common import ERROR_RESPONSES
from hetpool.server.services import governance_view as view_service
from hetpool.server.services.auth import Principal
from hetpool.server.services.context import ServiceContext

router = APIRouter(prefix="/api/v1/governance", tags=["approvals"], responses=ERROR_RESPONSES)


@router.get(
    "/approval-inbox",
    response_model=ApprovalInbox,
    summary="Approval requests the caller may see (as GET /approvals), with age, may_decide, the requested resources and an estimated cost",
)
def approval_inbox(
    state: Literal["pending", "approved", "rejected", "expired", "withdrawn"] | None = Query(default=None),
    tenant: str | None = Query(default=None, max_length=200),
    limit: int = Query(default=200, ge=1, le=1000),
    ctx: ServiceContext = Depends(get_ctx),
    user: Principal = Depends(get_principal),
) -> dict:
    with ctx.db.transaction() as session:
        return view_service.approval_inbox(ctx, session, user, state=state, tenant=tenant, limit=limit)
