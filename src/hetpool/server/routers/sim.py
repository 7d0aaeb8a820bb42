"""Simulation inputs from the control plane: its own task history as a replayable trace."""

from __future__ import annotations

from datetime import timedelta

from fastapi import APIRouter, Depends, Query

from hetpool.server.deps import get_ctx, get_principal
from hetpool.server.schemas.common import ERROR_RESPONSES
from hetpool.server.schemas.sim import HistoryTrace
from hetpool.server.services import access
from hetpool.server.services.auth import Principal
from hetpool.server.services.context import ServiceContext
from hetpool.server.services.history import export_history
from hetpool.server.services.inventory import load_inventory

router = APIRouter(prefix="/api/v1/sim", tags=["simulation"], responses=ERROR_RESPONSES)


@router.get("/history", response_model=HistoryTrace, summary="Finished tasks of the last `days` days as a trace (hetpool plan-capacity --history)")
def history(
    days: float = Query(default=30, gt=0, le=3650, description="how far back, in days"),
    ctx: ServiceContext = Depends(get_ctx),
    user: Principal = Depends(get_principal),
) -> dict:
    access.require(user, "inventory.read")
    scopes = access.visible_tenants(user)
    since = ctx.clock.now() - timedelta(days=days)
    with ctx.db.transaction() as session:
        catalog = load_inventory(ctx, session).catalog  # built-in models plus applied overrides
        tasks = export_history(session, catalog, since=since)
    if scopes is not None:  # other teams' workloads are theirs: a scoped user replays its own subtrees
        tasks = [t for t in tasks if access.can_see(user, t.spec.tenant)]
    return {"since": since.isoformat(), "tasks": [t.to_json() for t in tasks]}
