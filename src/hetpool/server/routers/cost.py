"""Cost: chargeback reports, the usage ledger and budget status (all reads)."""

from __future__ import annotations

from enum import StrEnum

from fastapi import APIRouter, Depends, Query

from hetpool.governance.cost import DIMENSIONS
from hetpool.server.deps import get_ctx, get_principal
from hetpool.server.routers.params import Offset
from hetpool.server.schemas.common import ERROR_RESPONSES
from hetpool.server.schemas.cost import BudgetStatus, CostReport, Ledger
from hetpool.server.services import access
from hetpool.server.services import cost as cost_service
from hetpool.server.services.auth import Principal
from hetpool.server.services.context import ServiceContext
from hetpool.server.services.inventory import load_inventory

router = APIRouter(prefix="/api/v1", tags=["cost"], responses=ERROR_RESPONSES)

GroupBy = StrEnum("GroupBy", {name: name for name in DIMENSIONS})
PERIOD_HELP = "'2026-11' (month), '2026-W48' (ISO week), '2026-11-30' (day) or '2026' (year), UTC; default: the current month"


def _scopes(user: Principal, tenant: str | None) -> list[str] | None:
    """With a tenant: the caller must hold cost.read on it. Without: everything it may read
    (None: no restriction); nowhere at all is refused rather than answered with nothing."""
    if tenant:
        access.require(user, "cost.read", tenant)
        return None
    scopes = access.visible_tenants(user, "cost.read")
    if scopes == []:
        access.require(user, "cost.read")
    return scopes


@router.get("/cost/report", response_model=CostReport, summary="Chargeback: cost and usage per group for a period; the total equals the ledger's")
def report(
    by: GroupBy = Query(default=GroupBy["team"], description="tenant, org, team, project, env, type, pool, cluster, backend or model"),
    period: str | None = Query(default=None, max_length=16, description=PERIOD_HELP),
    tenant: str | None = Query(default=None, max_length=200, description="only this tenant's subtree"),
    ctx: ServiceContext = Depends(get_ctx),
    user: Principal = Depends(get_principal),
) -> dict:
    scopes = _scopes(user, tenant)
    with ctx.db.transaction() as session:
        return cost_service.report(session, by=by.value, period=cost_service.period_of(period, ctx.clock.now()), tenant=tenant, scopes=scopes)


@router.get("/cost/ledger", response_model=Ledger, summary="Usage ledger rows (one per worker, attempt and UTC day) for a period")
def ledger(
    period: str | None = Query(default=None, max_length=16, description=PERIOD_HELP),
    tenant: str | None = Query(default=None, max_length=200, description="only this tenant's subtree"),
    task: str | None = Query(default=None, max_length=32, description="only this task"),
    limit: int = Query(default=1000, ge=1, le=10000),
    offset: Offset = 0,
    ctx: ServiceContext = Depends(get_ctx),
    user: Principal = Depends(get_principal),
) -> dict:
    scopes = _scopes(user, tenant)
    with ctx.db.transaction() as session:
        return cost_service.ledger(
            session,
            period=cost_service.period_of(period, ctx.clock.now()),
            tenant=tenant,
            task_id=task,
            scopes=scopes,
            limit=limit,
            offset=offset,
        )


@router.get(
    "/budgets/status",
    response_model=list[BudgetStatus],
    response_model_exclude_unset=True,  # `invalid` only on a budget that no longer validates
    summary="Each budget: spent this period vs its amount, alerts raised",
)
def budget_status(
    tenant: str | None = Query(default=None, max_length=200, description="budgets of this subtree and of its ancestors"),
    ctx: ServiceContext = Depends(get_ctx),
    user: Principal = Depends(get_principal),
) -> list[dict]:
    scopes = _scopes(user, tenant)
    with ctx.db.transaction() as session:
        return cost_service.budget_status(session, load_inventory(ctx, session), ctx.clock.now(), tenant=tenant, scopes=scopes)
