"""Quota usage: nominal, used, borrowed, lent and headroom per quota and resource.
Quotas themselves are applied like inventory (kind: Quota)."""

from __future__ import annotations

from fastapi import APIRouter, Depends

from hetpool.server.deps import get_ctx, get_principal
from hetpool.server.schemas.common import ERROR_RESPONSES
from hetpool.server.schemas.quotas import QuotaUsage
from hetpool.server.services import access
from hetpool.server.services import quota as quota_service
from hetpool.server.services.auth import Principal
from hetpool.server.services.context import ServiceContext
from hetpool.server.services.inventory import load_inventory

router = APIRouter(prefix="/api/v1", tags=["quotas"], responses=ERROR_RESPONSES)


@router.get(
    "/quotas/usage",
    response_model=list[QuotaUsage],
    summary="Per quota and resource: nominal, used, borrowed, lent, headroom (what the caller may see)",
)
def quota_usage(ctx: ServiceContext = Depends(get_ctx), user: Principal = Depends(get_principal)) -> list[dict]:
    with ctx.db.transaction() as session:
        inv = load_inventory(ctx, session)
        return quota_service.usage(ctx, session, inv, access.visible_tenants(user))
