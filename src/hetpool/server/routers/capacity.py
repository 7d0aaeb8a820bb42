"""Capacity planning: what if devices were added or removed? (rules: services/capacity_whatif.py)"""

from __future__ import annotations

from fastapi import APIRouter, Depends
from pydantic import BaseModel, ConfigDict, Field

from hetpool.core.limits import MAX_QUOTA_AMOUNT, bounded
from hetpool.server.deps import get_ctx, get_principal
from hetpool.server.services import capacity_whatif
from hetpool.server.services.auth import Principal
from hetpool.server.services.context import ServiceContext

router = APIRouter(prefix="/api/v1/capacity", tags=["simulation"])


class ChangeIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    count: int = Field(ge=1, le=4096, description="devices")
    model: str = Field(min_length=1, max_length=100, description="device model id, display name or alias (GET /api/v1/objects/devicemodels)")


class WhatIfIn(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    days: float = Field(default=30, gt=0, le=3650, description="replay the finished tasks of this many days back")
    add: list[ChangeIn] = Field(default_factory=list, max_length=16, description="devices to add, e.g. {count: 16, model: ascend-910b2}")
    remove: list[ChangeIn] = Field(default_factory=list, max_length=16, description="devices to remove (whole nodes, at least count devices)")
    quotas: dict[str, bounded(0, le=MAX_QUOTA_AMOUNT)] | None = Field(
        default=None, max_length=64, description="team → devices; flags teams demanding more on average"
    )
    wait_target_hours: float = Field(default=1.0, gt=0, le=8760, description="a pool whose p90 wait exceeds it is saturated")
    idle_below: float = Field(default=0.3, ge=0, le=1, description="utilisation under which a pool is idle")


@router.post("/what-if", summary="Replay recent history on today's inventory and on a changed one; compare waits, JCT, utilisation, cost")
def what_if(body: WhatIfIn, ctx: ServiceContext = Depends(get_ctx), user: Principal = Depends(get_principal)) -> dict:
    """Needs `inventory.read` — the action that guards GET /api/v1/sim/history, whose data
    this replays; a user scoped to tenant subtrees replays only those subtrees' tasks.

    A plain (sync) endpoint on purpose: FastAPI runs it in its threadpool, so a simulation
    of a few seconds never blocks the event loop."""
    request = capacity_whatif.WhatIfRequest(
        days=body.days,
        add=tuple(capacity_whatif.Change(c.count, c.model) for c in body.add),
        remove=tuple(capacity_whatif.Change(c.count, c.model) for c in body.remove),
        quotas=body.quotas,
        wait_target_hours=body.wait_target_hours,
        idle_below=body.idle_below,
    )
    return capacity_whatif.what_if(ctx, user, request)
