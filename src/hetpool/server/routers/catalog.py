"""The device catalog, the compatibility knowledge base and the built-in table of open
models, read-only. The compatibility check needs inventory.read (it names pools); the
open-model table is the same public data for everyone, so any signed-in caller may read it
(the dashboard's goal form offers its names)."""

from __future__ import annotations

from fastapi import APIRouter, Depends

from hetpool.catalog.models import builtin_models
from hetpool.core.errors import NotFoundError
from hetpool.server.deps import get_ctx, get_principal, requires
from hetpool.server.schemas.catalog import CompatQuery, CompatResponse, OpenModelResponse
from hetpool.server.schemas.common import ERROR_RESPONSES
from hetpool.server.services.auth import Principal
from hetpool.server.services.context import ServiceContext
from hetpool.server.services.inventory import load_inventory

router = APIRouter(prefix="/api/v1/catalog", tags=["catalog"], responses=ERROR_RESPONSES)


@router.post(
    "/compat-check",
    response_model=CompatResponse,
    dependencies=[Depends(requires("inventory.read"))],
    summary="Can this pool run framework F at version spec V?",
)
def compat_check(query: CompatQuery, ctx: ServiceContext = Depends(get_ctx), user: Principal = Depends(get_principal)) -> dict:
    with ctx.db.transaction() as session:
        inv = load_inventory(ctx, session)
    pool = inv.pools.get(query.pool)
    if pool is None:
        raise NotFoundError(f"pool {query.pool!r} not found")
    first = next((inv.nodes[n] for n in pool.nodes if n in inv.nodes), None)
    stack = (first.stack if first else None) or pool.stack  # a node's own stack wins over the pool default
    verdict = ctx.compat.check(inv.catalog.get(pool.model), stack, query.framework, has_image=query.has_image)
    return {
        "status": verdict.status,
        "ok": verdict.ok,
        "reason": verdict.reason,
        "detail": verdict.detail,
        "notes": list(verdict.notes),
        "rows": list(verdict.rows),
        "nearest": list(verdict.nearest),
        "kb_version": ctx.compat.version,
    }


@router.get(
    "/open-models",
    response_model=list[OpenModelResponse],
    dependencies=[Depends(requires("inventory.read"))],
    summary="The built-in table of open models a task's goal.model may name",
)
def open_models() -> list[dict]:
    cards = builtin_models().cards
    return [
        {"name": c.name, "display_name": c.display_name, "params_b": c.params_b, "architecture": c.architecture}
        for c in sorted(cards.values(), key=lambda c: c.name)
    ]
