"""Capacity planning: what if devices were added or removed? (rules: services/capacity_whatif.py)"""

from __future__ import annotations

from fastapi import APIRouter, Depends

from hetpool.server.deps import get_ctx, get_principal
from hetpool.server.schemas.capacity import WhatIfIn, WhatIfResponse
from hetpool.server.schemas.common import ERROR_RESPONSES
from hetpool.server.services import capacity_whatif
from hetpool.server.services.auth import Principal
from hetpool.server.services.context import ServiceContext

router = APIRouter(prefix="/api/v1/capacity", tags=["simulation"], responses=ERROR_RESPONSES)


@router.post(
    "/what-if",
    response_model=WhatIfResponse,
    summary="Replay recent history on today's inventory and on a changed one; compare waits, JCT, utilisation, cost",
)
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
