"""Readiness and leadership: GET /readyz (for load balancers and Kubernetes) and
GET /api/v1/leader (which replica runs each group of background loops)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse

from hetpool.server import leader
from hetpool.server.deps import get_ctx, get_principal
from hetpool.server.schemas.common import ERROR_RESPONSES
from hetpool.server.schemas.meta import LeaderResponse, ReadyResponse
from hetpool.server.services.auth import Principal
from hetpool.server.services.context import ServiceContext

router = APIRouter(tags=["meta"])


def _this_replica(request: Request) -> dict[str, dict]:
    """The lease groups this process takes part in: its holder id and whether it leads."""
    loops = getattr(request.app.state, "worker_loops", None) or []
    return {lp.elector.group: {"holder": lp.elector.holder, "leader": lp.elector.is_leader()} for lp in loops if lp.elector is not None}


@router.get(
    "/readyz",
    response_model=ReadyResponse,
    responses={503: {"model": ReadyResponse, "description": "not ready: `reason` says why"}},
    summary="Readiness: the database answers and its schema is at the newest migration (503 with the reason if not)",
)
def readyz(request: Request, ctx: ServiceContext = Depends(get_ctx)) -> JSONResponse:
    ready, reason, revisions = leader.database_readiness(ctx.db)
    mine = _this_replica(request)
    body = {"ready": ready, "leader": bool(mine.get(leader.WORKERS, {}).get("leader")), "database": ctx.db.dialect, "revisions": revisions}
    if not ready:
        body["reason"] = reason
    return JSONResponse(status_code=200 if ready else 503, content=body)


@router.get(
    "/api/v1/leader",
    response_model=LeaderResponse,
    responses=ERROR_RESPONSES,
    summary="Which replica leads each group of background loops, since when, with which fencing token",
)
def leaders(request: Request, ctx: ServiceContext = Depends(get_ctx), _user: Principal = Depends(get_principal)) -> dict:
    # Any signed-in user: holder ids name hosts and process ids, nothing secret.
    return {"groups": leader.leases(ctx), "this_replica": _this_replica(request)}
