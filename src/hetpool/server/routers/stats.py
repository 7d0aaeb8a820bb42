"""Aggregates for dashboards (all reads): capacity for inventory readers, workload
narrowed to the tenants the caller may read. services/stats.py defines the numbers."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Depends, Query

from hetpool.server.deps import get_ctx, get_principal
from hetpool.server.schemas.common import ERROR_RESPONSES
from hetpool.server.schemas.stats import CapacityStats, WorkloadStats
from hetpool.server.services import access
from hetpool.server.services import stats as stats_service
from hetpool.server.services.auth import Principal
from hetpool.server.services.context import ServiceContext

router = APIRouter(prefix="/api/v1/stats", tags=["stats"], responses=ERROR_RESPONSES)


@router.get(
    "/capacity",
    response_model=CapacityStats,
    summary="Devices per pool and device class (total, busy, idle, abnormal, offline), nodes needing attention, backend health",
)
def capacity(ctx: ServiceContext = Depends(get_ctx), user: Principal = Depends(get_principal)) -> dict:
    # Like the inventory and /nodes/status: the same for every user who may read the inventory.
    access.require(user, "inventory.read")
    with ctx.db.transaction() as session:
        return stats_service.capacity(ctx, session)


@router.get(
    "/workload", response_model=WorkloadStats, summary="Queue lengths, p50/p90 waits, utilisation and task counts of the tasks the caller may read"
)
def workload(
    window: Literal["24h", "7d"] = Query(default="24h", description="the window for waits of admitted tasks (utilisation has both)"),
    ctx: ServiceContext = Depends(get_ctx),
    user: Principal = Depends(get_principal),
) -> dict:
    access.require(user, "task.read")
    scopes = access.visible_tenants(user)  # other teams' tasks are neither listed nor counted
    with ctx.db.transaction() as session:
        return stats_service.workload(ctx, session, scopes, window)
